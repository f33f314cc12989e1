"""What a run cost: node-hours per step and a price estimate from the instance facts.

A step is charged for the share of its node it reserved (the largest of its cpu, memory and accelerator
requests over the node's allocatable) for as long as each attempt ran, at the price of the capacity it ran on,
interrupted attempts included: that time was paid for. What an interruption lost, the work done twice (an
interrupted attempt's run time less what its last checkpoint kept), is reported apart.
On-Demand prices are list prices; the Spot estimate applies the Spot advisor's average savings for the type and
is only indicative (real Spot prices move by zone and hour).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from functools import lru_cache
from typing import Any

from wf.compile.kinds.mpijob import replica_templates
from wf.compile.node_facts import Gang, NodeFacts, NodeRecord, read_record
from wf.compile.readback import read_placement
from wf.compile.schedulability import pod_requests, template_requests
from wf.controller.steps import Attempt, WorkflowView, templates_by_name
from wf.model.catalog import Catalog
from wf.model.nodegroups import instance_allocatable, node_share


@dataclass(frozen=True)
class StepCost:
    step: str
    node_hours: float
    on_demand_usd: float
    estimate_usd: float  # Spot estimate for attempts on Spot nodes, On-Demand otherwise
    on_spot: bool
    instance_types: tuple[str, ...]
    unpriced_attempts: int  # attempts whose node (and so its type) is no longer known
    # The share of the above that interruptions made the step run again: paid for twice.
    redone_node_hours: float = 0.0
    redone_usd: float = 0.0  # at each interrupted attempt's own capacity's price, like estimate_usd


@dataclass(frozen=True)
class JobCost:
    steps: tuple[StepCost, ...]
    assumptions: tuple[str, ...]

    @property
    def node_hours(self) -> float:
        return sum(s.node_hours for s in self.steps)

    @property
    def on_demand_usd(self) -> float:
        return sum(s.on_demand_usd for s in self.steps)

    @property
    def estimate_usd(self) -> float:
        return sum(s.estimate_usd for s in self.steps)

    @property
    def unpriced_attempts(self) -> int:
        return sum(s.unpriced_attempts for s in self.steps)

    @property
    def redone_node_hours(self) -> float:
        return sum(s.redone_node_hours for s in self.steps)

    @property
    def redone_usd(self) -> float:
        return sum(s.redone_usd for s in self.steps)


def _attempt_cost(
    attempt: Attempt, requests: dict[str, Decimal], facts: NodeFacts | None, now: datetime
) -> tuple[float, float, float, bool, str | None]:
    from wf.model.instances import instance_type

    if facts is None:
        return 0.0, 0.0, 0.0, False, None
    try:
        instance = instance_type(facts.instance_type)
    except ValueError:
        return 0.0, 0.0, 0.0, False, None
    node_hours = attempt.seconds(now) / 3600 * _share(tuple(sorted(requests.items())), instance.name)
    on_demand = node_hours * instance.price_on_demand
    # Each attempt at its own capacity's price: a Spot fallback's On-Demand attempt is charged On-Demand.
    capacity = facts.capacity or attempt.capacity
    spot = capacity == "spot" and instance.spot_price() is not None
    estimate = node_hours * instance.price(capacity)
    return node_hours, on_demand, estimate, spot, instance.name


@lru_cache(maxsize=1024)
def _share(requests: tuple[tuple[str, Decimal], ...], instance: str) -> float:
    """The share of a node of `instance` a pod with `requests` reserves, once per pair (a fan-out's 10,000 items
    ask the same of the same few types)."""
    return node_share(dict(requests), instance_allocatable(instance))


_Piece = tuple[float, float, float, bool, str | None]


def _replica_costs(attempt: Attempt, template: dict[str, Any], catalog: Catalog | None, gang: Gang,
                   nodes: Mapping[str, NodeFacts], now: datetime) -> list[_Piece]:
    """A multi-node attempt's launcher and workers, each replica for the attempt's whole run (the MPIJob's
    lifetime) at its own node's type and capacity where the record says which node it was bound to, else at its
    class's first instance type and its own capacity: the workers' is the attempt's (after any Spot fallback),
    the launcher's its own."""
    pieces: list[_Piece] = []
    for role, count, pod in replica_templates(template):
        placed = read_placement(pod)
        spec = pod.get("spec") or {}
        requests, _ = pod_requests(list(spec.get("containers") or []), list(spec.get("initContainers") or []))
        bound = [nodes[n] for n in gang.get(role, ()) if n in nodes][:count]
        facts: list[NodeFacts | None] = list(bound)
        if len(bound) < count:
            if catalog is None or placed.compute_class not in catalog.class_names:
                facts.append(None)
            else:
                capacity = attempt.capacity if placed.fallback_after is not None else placed.capacity
                instance = catalog.compute_class(placed.compute_class).instances[0]
                facts += [NodeFacts(instance.name, capacity)] * (count - len(bound))
        pieces += [_attempt_cost(attempt, requests, f, now) for f in facts]
    return pieces


def job_cost(view: WorkflowView, workflow: dict[str, Any], nodes: Mapping[str, NodeFacts], now: datetime,
             catalog: Catalog | None = None, *, record: NodeRecord | None = None) -> JobCost:
    """Cost per step of a workflow whose attempts ran on the given nodes (name -> facts, as read live): the
    workflow's own record of its nodes comes first (wf.compile.node_facts: what the recorder kept as each pod was
    bound, so attempts on nodes since gone are priced; `record`, its ledger's as `Ledger.record` reads it, else the
    copy on the ended workflow), the live nodes second. A multi-node step's replicas not in the record are priced at
    their class's instance type, which needs the catalog. An attempt Argo left without an end in a workflow that
    has ended is priced up to the workflow's end, not up to `now`: whenever it is asked, an ended run costs the same
    (the full-size day of 2026-12-08: `wf get` after `wf report` after the metrics, each a few seconds more)."""
    from wf.model.instances import AS_OF

    if view.done and view.finished is not None:
        now = min(now, view.finished)
    record = read_record(workflow) if record is None else record
    known: Mapping[str, NodeFacts] = {**nodes, **record.nodes} if record.nodes else nodes
    templates = templates_by_name(workflow)  # a workflow from a WorkflowTemplate: the ones Argo stored
    requests: dict[str, dict[str, Decimal]] = {}  # by template: read once, not once per attempt
    steps: list[StepCost] = []
    any_spot = any_unpriced = any_multi_node = False
    for row in view.steps:
        hours = on_demand = estimate = lost_hours = lost_usd = 0.0
        on_spot, types, unpriced = False, [], 0
        for attempt in row.attempts:
            if attempt.started is None:
                continue
            template = templates.get(attempt.template) or {}
            if "resource" in template:
                # Argo's resource pod only waits: the MPIJob's launcher and workers are what the attempt ran.
                gang = record.gangs.get(attempt.node_id) or {}
                pieces = _replica_costs(attempt, template, catalog, gang, known, now)
                any_multi_node = any_multi_node or catalog is not None and any(len(gang.get(role, ())) < count
                                                       for role, count, _ in replica_templates(template))
            else:
                if attempt.template not in requests:
                    requests[attempt.template] = template_requests(template)
                pieces = [_attempt_cost(attempt, requests[attempt.template], known.get(attempt.host or ""), now)]
            if any(name is None for *_, name in pieces):
                unpriced += 1
                continue
            redone = attempt.redone_seconds(now)
            for h, od, est, spot, name in pieces:
                hours, on_demand, estimate = hours + h, on_demand + od, estimate + est
                if redone:
                    share = min(1.0, redone / attempt.seconds(now))
                    lost_hours, lost_usd = lost_hours + h * share, lost_usd + est * share
                on_spot = on_spot or spot
                if name not in types:
                    types.append(str(name))
        any_spot, any_unpriced = any_spot or on_spot, any_unpriced or bool(unpriced)
        steps.append(StepCost(row.name, hours, on_demand, estimate, on_spot, tuple(types), unpriced, lost_hours,
                              lost_usd))
    assumptions = [
        "node-hours = attempt run time x the share of the node the step reserved (largest of cpu, memory, "
        "accelerators over allocatable); interrupted attempts count",
        f"On-Demand list prices, us-east-1, as of {AS_OF} (sources: wf instances list)",
    ]
    if any_spot:
        assumptions.append("Spot estimate = On-Demand x (1 - the Spot advisor's average savings for the type); "
                           "real Spot prices vary by zone and hour")
    if any_unpriced:
        assumptions.append("attempts on a node that is gone and that the workflow's record (wf.dev/nodes, the node "
                           "facts recorder's) lacks, or of an unknown type, are not priced")
    if any_multi_node:
        assumptions.append("a multi-node step's launcher and workers whose nodes were not recorded are each priced "
                           "at its class's instance type and its own capacity for the attempt's whole run (the "
                           "MPIJob's lifetime)")
    return JobCost(tuple(steps), tuple(assumptions))
