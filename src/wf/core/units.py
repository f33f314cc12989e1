"""Kubernetes quantities, Go-style durations and the API's times, parsed and shown without importing the
Kubernetes client or wf's models.

`kubernetes.utils.parse_quantity` would pull the whole client (0.4 s) onto the `wf compile` path, and `wf list`
needs a workflow's times without the step views (and the catalog's models they import).
"""

from __future__ import annotations

import re
from datetime import datetime
from decimal import Decimal, InvalidOperation
from functools import lru_cache

from wf.core.constants import QUANTITY

_FACTORS: dict[str, int | str] = {
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
    "n": "1e-9", "u": "1e-6", "m": "1e-3", "": 1,
    "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
}
_SUFFIX = {suffix: Decimal(factor) for suffix, factor in _FACTORS.items()}


# A big DAG repeats the same few requests thousands of times; typed, so True does not hit 1's entry.
@lru_cache(maxsize=4096, typed=True)
def parse_quantity(value: str | int | float) -> Decimal:
    """A Kubernetes quantity ("500m", "32Gi", 8) as a number of base units; ValueError if malformed."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a quantity")
    if isinstance(value, (int, float)):
        return Decimal(str(value))
    match = QUANTITY.match(value.strip())
    if not match:
        raise ValueError(f"{value!r} is not a Kubernetes quantity (examples: 8, 500m, 32Gi)")
    number, suffix = match["number"], match["suffix"] or ""
    if len(suffix) > 1 and suffix[0] in "eE":  # a decimal exponent, not the E (exa) suffix
        number, suffix = number + suffix, ""
    try:
        return Decimal(number) * _SUFFIX[suffix]
    except InvalidOperation as exc:
        raise ValueError(f"{value!r} is not a Kubernetes quantity") from exc


def format_mib(mib: int) -> str:
    return f"{mib // 1024}Gi" if mib and mib % 1024 == 0 else f"{mib}Mi"


def format_cpu(millis: int) -> str:
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_DURATION_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(value: str | int) -> int:
    """A duration ("24h", "1h30m", "90s", or seconds as a number) in whole seconds; ValueError if malformed."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a duration")
    if isinstance(value, int):
        if value <= 0:
            raise ValueError("a duration must be positive")
        return value
    text = value.strip()
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"{value!r} is not a duration (examples: 90s, 30m, 12h, 1h30m, 2d)")
    seconds = sum(float(n) * _DURATION_SECONDS[u] for n, u in parts)
    if seconds < 1:
        raise ValueError(f"{value!r} is shorter than a second")
    return int(seconds)


def parse_time(value: str | None) -> datetime | None:
    """An API time (RFC 3339, as `creationTimestamp` or Argo's `startedAt`); None when not (yet) set."""
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def duration(seconds: float) -> str:
    """A time span as the tables show it: 42s, 3m07s, 2h05m."""
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
