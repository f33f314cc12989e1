"""Team queues as a developer sees them: who uses how much of which class, and why a step waits for quota.

Read from Kueue's Workloads (one per pod of a queued step) in the team's namespaces, which the team's role may
list, and from the catalog, which holds the quotas; ClusterQueues are cluster-scoped and not the team's to read.
The arithmetic is pure (`usage`, `quota_wait`) and tested on Workload objects; `QueueReader` does the I/O.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from wf.compile.readback import read_placement
from wf.core.constants import KUEUE_QUEUE_LABEL as QUEUE_LABEL
from wf.core.constants import WORKLOAD
from wf.core.units import parse_quantity
from wf.model.quotas import flavor_quotas
from wf.model.teams import RESOURCES, Team
from wf.render.kueue import flavor_name, resource_name, show_amount

if TYPE_CHECKING:
    from wf.controller.client import Kube
    from wf.model.catalog import Catalog, ComputeClass

_SHORT = re.compile(r"insufficient unused quota for ([A-Za-z0-9./_-]+) in flavor")
_READ_EVERY_SECONDS = 2.0


@dataclass(frozen=True)
class Workload:
    name: str
    namespace: str
    pod: str | None
    priority: int
    created: str
    reserved: bool
    finished: bool
    flavors: dict[str, str]  # resource -> flavor, once admitted
    usage: dict[str, Decimal]  # admitted resources
    waiting: str  # Kueue's reason while not admitted
    reserved_at: str = ""  # when Kueue reserved its quota (QuotaReserved turned True): the end of its queue wait


def parse_workload(obj: dict[str, Any]) -> Workload:
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    owner = next((o.get("name") for o in meta.get("ownerReferences") or [] if o.get("kind") == "Pod"), None)
    flavors: dict[str, str] = {}
    usage: dict[str, Decimal] = {}
    for assignment in (status.get("admission") or {}).get("podSetAssignments") or []:
        flavors.update(assignment.get("flavors") or {})
        for resource, value in (assignment.get("resourceUsage") or {}).items():
            usage[resource] = usage.get(resource, Decimal(0)) + parse_quantity(value)
    return Workload(
        name=meta.get("name", ""),
        namespace=meta.get("namespace", ""),
        pod=owner,
        priority=int(spec.get("priority") or 0),
        created=str(meta.get("creationTimestamp") or ""),
        reserved=(conditions.get("QuotaReserved") or {}).get("status") == "True",
        finished=(conditions.get("Finished") or {}).get("status") == "True",
        flavors=flavors,
        usage=usage,
        waiting=str((conditions.get("QuotaReserved") or {}).get("message") or ""),
        reserved_at=str((conditions.get("QuotaReserved") or {}).get("lastTransitionTime") or "")
        if (conditions.get("QuotaReserved") or {}).get("status") == "True" else "",
    )


@dataclass(frozen=True)
class FlavorUsage:
    """One team's standing on one compute class x capacity, for one resource."""

    team: str
    compute_class: str
    capacity: str
    resource: str  # catalog terms: cpu, memory, accelerators
    used: Decimal
    quota: Decimal
    borrowing_limit: Decimal | None
    pending: int

    @property
    def borrowed(self) -> Decimal:
        return max(Decimal(0), self.used - self.quota)


def _unit(cls: ComputeClass, resource: str) -> str:
    return f"{cls.name} cards" if resource == "accelerators" else f"{resource} on {cls.name}"


def _holding(workloads: list[Workload]) -> list[Workload]:
    return [w for w in workloads if w.reserved and not w.finished]


def _waiting(workloads: list[Workload]) -> list[Workload]:
    return [w for w in workloads if not w.reserved and not w.finished]


def usage(catalog: Catalog, team: Team, workloads: list[Workload], pending_flavor: dict[str, str]) -> list[FlavorUsage]:
    """Per class x capacity the team has quota on or uses: used, quota and pending, for the resource that
    matters there (the accelerator on an accelerator class, else cpu and memory). pending_flavor maps a
    waiting workload's name to the flavor its pod selects."""
    quotas = {(q.compute_class, q.capacity): q for q in flavor_quotas(catalog, team)}
    out = []
    for cls in catalog.compute_classes:
        for capacity in cls.capacity:
            flavor = flavor_name(cls.name, capacity)
            quota = quotas.get((cls.name, capacity))
            holding = [w for w in _holding(workloads) if flavor in w.flavors.values()]
            pending = sum(1 for w in _waiting(workloads) if pending_flavor.get(w.name) == flavor)
            if quota is None and not holding and not pending:
                continue
            for resource in (["accelerators"] if cls.accelerator else ["cpu", "memory"]):
                name = resource_name(cls, resource)
                used = sum((w.usage.get(name, Decimal(0)) for w in holding), Decimal(0))
                out.append(FlavorUsage(team.name, cls.name, capacity, resource, used,
                                       quota.nominal[resource] if quota else Decimal(0),
                                       quota.borrowing[resource] if quota else None, pending))
    return out


def quota_wait(
    catalog: Catalog, team: Team, workloads: list[Workload], pod: str, template: dict[str, Any]
) -> str | None:
    """'waiting for quota: perception uses 64 of 64 gaudi cards; 3 workloads ahead', or None when the pod's
    workload is admitted, not yet evaluated, or missing (the step does not queue)."""
    mine = next((w for w in workloads if w.pod == pod), None)
    # No reason yet: Kueue has not tried to admit it (a second at most), so there is nothing to explain.
    if mine is None or mine.reserved or mine.finished or not mine.waiting:
        return None
    placed = read_placement(template)
    try:
        cls = catalog.compute_class(placed.compute_class or "")
    except KeyError:
        return f"waiting for quota: {mine.waiting or 'not admitted yet'}"
    capacity = placed.capacity or cls.default_capacity
    short = _SHORT.findall(mine.waiting)
    resource = "accelerators" if cls.accelerator else next(
        (r for r in RESOURCES if r != "accelerators" and r in short), "cpu")
    line = next((u for u in usage(catalog, team, workloads, {}) if (u.compute_class, u.capacity, u.resource)
                 == (cls.name, capacity, resource)), None)
    used = line.used if line else Decimal(0)
    quota = line.quota if line else Decimal(0)
    text = (f"waiting for quota: {team.name} uses {show_amount(resource, used)} of {show_amount(resource, quota)} "
            f"{_unit(cls, resource)}")
    if used > quota:
        text += f" ({show_amount(resource, used - quota)} borrowed from other teams)"
    rank = (-mine.priority, mine.created, mine.name)
    ahead = sum(1 for w in _waiting(workloads) if w is not mine and (-w.priority, w.created, w.name) < rank)
    return f"{text}; {ahead} workload{'s' if ahead != 1 else ''} ahead"


class QueueReader:
    """Workloads of a team's namespaces, read at most every 2 s (a watch explains many steps at once)."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self._read: dict[str, tuple[float, list[Workload] | None]] = {}

    def workloads(self, team: Team) -> list[Workload] | None:
        """None when they can't be read: a namespace outside this user's role, no Kueue, or the API server out of
        reach for the moment (a watch then shows its steps without the queue's reason, and asks again later)."""
        from wf.controller.client import lookup_errors

        cached = self._read.get(team.name)
        if cached and time.monotonic() - cached[0] < _READ_EVERY_SECONDS:
            return cached[1]
        found: list[Workload] | None = []
        try:
            for namespace in team.namespaces:
                items = self.kube.custom.list_namespaced_custom_object(WORKLOAD.group, WORKLOAD.version, namespace,
                                                                       WORKLOAD.plural)
                found += [parse_workload(w) for w in items.get("items") or []]  # type: ignore[operator]
        except lookup_errors():
            found = None
        self._read[team.name] = (time.monotonic(), found)
        return found

    def pending_flavors(self, team: Team) -> dict[str, str]:
        """Waiting workload name -> the flavor its pod selects (its class and capacity)."""
        from wf.controller.client import lookup_errors

        out: dict[str, str] = {}
        waiting = {w.pod: w.name for w in self.workloads(team) or [] if not w.reserved and not w.finished}
        if not waiting:
            return out
        try:
            for namespace in team.namespaces:
                for pod in self.kube.core.list_namespaced_pod(namespace, label_selector=QUEUE_LABEL).items:
                    placed = read_placement({"metadata": {"labels": pod.metadata.labels or {}},
                                             "spec": {"nodeSelector": pod.spec.node_selector or {}}})
                    if pod.metadata.name in waiting and placed.compute_class:
                        out[waiting[pod.metadata.name]] = flavor_name(placed.compute_class, placed.capacity or "")
        except lookup_errors():
            return out
        return out

    def explain(
        self, catalog: Catalog | None, workflow: dict[str, Any], template: dict[str, Any], pod: str
    ) -> str | None:
        """Why a queued step's pod waits, in team terms; None if it does not queue or is admitted."""
        namespace = (workflow.get("metadata") or {}).get("namespace")
        if catalog is None or catalog.queues is None or read_placement(template).queue is None or not namespace:
            return None
        team = catalog.queues.team_of_namespace(namespace)
        workloads = self.workloads(team) if team else None
        if team is None or workloads is None:
            return None
        return quota_wait(catalog, team, workloads, pod, template)


def team_table(catalog: Catalog, reader: QueueReader, teams: list[Team]) -> list[list[str]]:
    """Rows of `wf queue`: team, class, capacity, resource, used, quota, borrowed of the limit, pending."""
    rows = []
    for team in teams:
        workloads = reader.workloads(team)
        if workloads is None:
            rows.append([team.name, "-", "-", "-", "not readable", "-", "-", "-"])
            continue
        # A waiting workload's flavor is the one its pod selects; its pod carries the class labels Kueue copies.
        for line in usage(catalog, team, workloads, reader.pending_flavors(team)):
            limit = "any" if line.borrowing_limit is None else show_amount(line.resource, line.borrowing_limit)
            rows.append([team.name, line.compute_class, line.capacity, line.resource,
                         show_amount(line.resource, line.used), show_amount(line.resource, line.quota),
                         f"{show_amount(line.resource, line.borrowed)} of {limit}", str(line.pending)])
    return rows
