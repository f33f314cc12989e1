"""Why a step is Pending, in catalog terms: waiting for capacity, or never going to schedule.

Inputs are what the API already says: the scheduler's FailedScheduling message (Argo copies it into the
node's message), the cluster-autoscaler's TriggeredScaleUp/NotTriggerScaleUp events when it runs, the pod's
constraints (from its template) and the catalog's node groups. "Never" is decided from the catalog, not the
scheduler: a node group scaled to zero looks the same to the scheduler as one that does not exist.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Literal

from wf.labels import CAPACITY_LABEL, CLASS_LABEL
from wf.units import parse_quantity

if TYPE_CHECKING:
    from wf.catalog import Catalog
    from wf.nodegroups import NodeGroup

_INSUFFICIENT = re.compile(r"Insufficient ([A-Za-z0-9./_-]+)")
_IGNORED_REQUESTS = ("ephemeral-storage",)


@dataclass(frozen=True)
class Explanation:
    kind: Literal["capacity", "never", "unknown"]
    text: str


def pod_requests(template: dict[str, Any]) -> dict[str, Decimal]:
    """A template's container requests (limits stand in for absent requests, as Kubernetes defaults them)."""
    resources = (template.get("container") or {}).get("resources") or {}
    merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    out: dict[str, Decimal] = {}
    for key, value in merged.items():
        if key in _IGNORED_REQUESTS:
            continue
        try:
            out[key] = parse_quantity(value)
        except ValueError:
            continue
    return out


def _shortfall(requests: dict[str, Decimal], allocatable: dict[str, str]) -> list[str]:
    missing = []
    for resource, wanted in requests.items():
        have = parse_quantity(allocatable.get(resource, "0"))
        if wanted > have:
            missing.append(f"{resource} {_fmt(wanted, resource)} (a node has {_fmt(have, resource)})")
    return missing


def _fmt(value: Decimal, resource: str) -> str:
    if resource == "memory" or resource.startswith("hugepages-"):
        return f"{value / 2**30:.0f}Gi" if value >= 2**30 else f"{value / 2**20:.0f}Mi"
    return f"{value.normalize():f}"


def _tolerated(group: NodeGroup, template: dict[str, Any]) -> list[str]:
    """Taints of the group the pod does not tolerate."""
    tolerations = template.get("tolerations") or []
    untolerated = []
    for taint in group.taints:
        ok = any(
            (t.get("operator") == "Exists" and (not t.get("key") or t.get("key") == taint.key))
            or (t.get("key") == taint.key and t.get("value", "") == taint.value)
            for t in tolerations
            if not t.get("effect") or t.get("effect") == taint.effect
        )
        if not ok:
            untolerated.append(f"{taint.key}={taint.value}:{taint.effect}")
    return untolerated


def _autoscaler_verdict(events: list[tuple[str, str]]) -> tuple[str, str] | None:
    for reason, message in reversed(events):  # the newest event decides
        if reason in ("TriggeredScaleUp", "NotTriggerScaleUp"):
            return reason, message
    return None


def explain(
    template: dict[str, Any],
    scheduler_message: str,
    catalog: Catalog | None,
    *,
    nodes_per_group: dict[str, int] | None = None,
    events: list[tuple[str, str]] | None = None,
) -> Explanation:
    """Explain a Pending pod. nodes_per_group: current node count by node group name when readable."""
    from wf.nodegroups import node_groups

    selector = template.get("nodeSelector") or {}
    cls_name, capacity = selector.get(CLASS_LABEL), selector.get(CAPACITY_LABEL)
    if catalog is None or not cls_name:
        return Explanation("unknown", scheduler_message or "waiting to be scheduled")
    if cls_name not in catalog.class_names:
        return Explanation("never", f"compute class {cls_name!r} is not in the cluster's catalog "
                                    f"(known: {', '.join(catalog.class_names)})")
    groups = [g for g in node_groups(catalog) if g.compute_class == cls_name and (not capacity or g.capacity == capacity)]
    if not groups:
        offered = ", ".join(catalog.compute_class(cls_name).capacity)
        return Explanation("never", f"compute class {cls_name!r} has no {capacity} node groups (capacity: {offered})")

    requests = pod_requests(template)
    fitting: list[NodeGroup] = []
    reasons: list[str] = []
    for group in groups:
        untolerated = _tolerated(group, template)
        if untolerated:
            reasons.append(f"{group.name}: taint {', '.join(untolerated)} not tolerated")
            continue
        shortfalls = [(it, _shortfall(requests, group.allocatable(it))) for it in group.instance_types]
        if any(not missing for _, missing in shortfalls):
            fitting.append(group)
        else:
            reasons.extend(f"{it}: needs {'; '.join(missing)}" for it, missing in shortfalls)
    where = f"a {cls_name}{f' ({capacity})' if capacity else ''} node"
    if not fitting:
        return Explanation("never", f"can never schedule on {where}: {'; '.join(dict.fromkeys(reasons))}")

    verdict = _autoscaler_verdict(events or [])
    if verdict and verdict[0] == "NotTriggerScaleUp" and "max node group size reached" not in verdict[1]:
        return Explanation("never", f"the cluster autoscaler will not add {where}: {verdict[1]}")

    types = sorted({it for g in fitting for it in g.instance_types})
    zones = sorted({g.zone for g in fitting})
    short = list(dict.fromkeys(_INSUFFICIENT.findall(scheduler_message or "")))
    up = sum(nodes_per_group.get(g.name, 0) for g in fitting) if nodes_per_group is not None else None
    if up == 0:
        in_use = f"no {'/'.join(types)} node is up in {', '.join(zones)}"
    elif short:
        in_use = f"all {', '.join(short)} on {'/'.join(types)} nodes in {', '.join(zones)} are in use"
    else:
        in_use = f"no {'/'.join(types)} node in {', '.join(zones)} has room"
    text = f"waiting for {where}: {in_use}"
    if verdict and verdict[0] == "TriggeredScaleUp":
        return Explanation("capacity", f"{text}; the cluster autoscaler is adding a node ({verdict[1]})")
    if up is not None:
        have = up
        most = sum(g.max_size for g in fitting)
        if have >= most:
            return Explanation("capacity", f"{text}; its node groups are at their maximum ({have} of {most} nodes), "
                                           "so it starts when a running step frees room")
        return Explanation("capacity", f"{text}; the node groups can grow ({have} of {most} nodes), "
                                       "so the cluster autoscaler can add one")
    return Explanation("capacity", text)
