"""Errors that the CLI turns into exit codes (README, Commands: 1 work failed, 2 bad input, 3 cluster)."""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

PathKey = str | int
FieldPath = tuple[PathKey, ...]
UNKNOWN_FILE = "<input>"


def format_path(path: Sequence[PathKey]) -> str:
    """`spec.steps[0].resources` for ("spec", "steps", 0, "resources")."""
    out = ""
    for key in path:
        out += f"[{key}]" if isinstance(key, int) else (f".{key}" if out else str(key))
    return out


def listing(values: Iterable[object]) -> str:
    """`prep, train` for a message listing choices, not Python's `['prep', 'train']`."""
    return ", ".join(str(v) for v in values) or "none"


def did_you_mean(word: object, choices: Iterable[object], shared: str = "", cutoff: float = 0.6) -> str:
    """" (did you mean 'train'?)" when a choice is close to the misspelt `word`, else "". A prefix `shared` by
    word and choices is left out of the comparison: after "workflow." every global would look close."""
    text = str(word).removeprefix(shared)
    shown = {str(c).removeprefix(shared): str(c) for c in choices}
    close = difflib.get_close_matches(text, list(shown), n=1, cutoff=cutoff)
    return f" (did you mean {shown[close[0]]!r}?)" if close else ""


@dataclass(frozen=True)
class Problem:
    """One finding about an input: where it is and what is wrong, in the developer's terms.

    The one finding type from the YAML loader to the CLI. Pure validators, which see data but not the file it
    came from, make it with `Problem.at(path, message)`; `Document.locate` then adds the file and line.
    """

    file: str
    line: int | None
    field: str | None
    message: str
    severity: str = "error"  # "warning": reported, but the work is not failed
    # Where in the document, as keys and list indices (for the line lookup); `field` is its text.
    path: FieldPath = dataclasses.field(default=(), compare=False, repr=False)

    @classmethod
    def at(cls, path: Sequence[PathKey], message: str, severity: str = "error") -> Problem:
        """A finding about the value at `path` of a document whose file and line are not known here."""
        path = tuple(path)
        return cls(UNKNOWN_FILE, None, format_path(path) or None, message, severity, path)

    def in_file(self, file: str, line: int | None = None) -> Problem:
        return replace(self, file=file, line=line)

    def to_json(self) -> dict[str, Any]:
        """The `wf lint -o json` form of a finding (a contract: CI parses it)."""
        return {"file": self.file, "line": self.line, "field": self.field, "message": self.message,
                "severity": self.severity}

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        if self.severity != "error":
            where += f": {self.severity}"
        return f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"


class WfError(Exception):
    exit_code = 1


class InputError(WfError):
    """Bad input or usage: nothing was changed (exit 2)."""

    exit_code = 2

    def __init__(self, problems: list[Problem] | str, file: str | Path | None = None) -> None:
        if isinstance(problems, str):
            problems = [Problem(str(file or UNKNOWN_FILE), None, None, problems)]
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


class ClusterError(WfError):
    """The cluster is unreachable or forbids the request (exit 3)."""

    exit_code = 3


class WorkFailed(WfError):
    """The work itself failed: lint findings, a workflow that ended Failed or Error (exit 1)."""

    exit_code = 1
