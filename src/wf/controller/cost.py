"""What a run cost: node-hours per step and a price estimate from the instance facts.

A step is charged for the share of its node it reserved (the largest of its cpu, memory and accelerator
requests over the node's allocatable) for as long as each attempt ran, at the price of the capacity it ran on,
interrupted attempts included: that time was paid for. What an interruption lost, the work done twice (an
interrupted attempt's run time less what its last checkpoint kept), is reported apart.
On-Demand prices are list prices; the Spot estimate applies the Spot advisor's average savings for the type and
is only indicative (real Spot prices move by zone and hour).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from functools import lru_cache
from typing import Any

from wf.compile.kinds.mpijob import replica_templates
from wf.compile.readback import read_placement
from wf.compile.schedulability import pod_requests, template_requests
from wf.controller.steps import Attempt, WorkflowView, templates_by_name
from wf.model.catalog import Catalog
from wf.model.nodegroups import instance_allocatable, node_share


@dataclass(frozen=True)
class NodeFacts:
    instance_type: str
    capacity: str | None  # "spot" | "on-demand" | None when the node carries no capacity label
    draining: bool = False  # cordoned, or tainted by what takes nodes away (wf.controller.watch.DRAIN_TAINTS)


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


def _replica_costs(attempt: Attempt, template: dict[str, Any], catalog: Catalog, now: datetime) -> list[_Piece]:
    """A multi-node attempt's launcher and workers, each replica on a node of its class for the attempt's whole
    run (the MPIJob's lifetime), at its own capacity's price: the workers' capacity is the attempt's (after any
    Spot fallback), the launcher's its own."""
    pieces: list[_Piece] = []
    for count, pod in replica_templates(template):
        placed = read_placement(pod)
        if placed.compute_class not in catalog.class_names:
            pieces.append((0.0, 0.0, 0.0, False, None))
            continue
        instance = catalog.compute_class(placed.compute_class).instances[0]
        capacity = attempt.capacity if placed.fallback_after is not None else placed.capacity
        spec = pod.get("spec") or {}
        requests, _ = pod_requests(list(spec.get("containers") or []), list(spec.get("initContainers") or []))
        h, od, est, spot, name = _attempt_cost(attempt, requests, NodeFacts(instance.name, capacity), now)
        pieces.append((h * count, od * count, est * count, spot, name))
    return pieces


def job_cost(view: WorkflowView, workflow: dict[str, Any], nodes: dict[str, NodeFacts], now: datetime,
             catalog: Catalog | None = None) -> JobCost:
    """Cost per step of a workflow whose attempts ran on the given nodes (name -> facts); multi-node steps need
    the catalog (their replicas are not Argo's pods, so their nodes are not known: their class's are)."""
    from wf.model.instances import AS_OF

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
                any_multi_node = any_multi_node or catalog is not None
                pieces = _replica_costs(attempt, template, catalog, now) if catalog is not None \
                    else [(0.0, 0.0, 0.0, False, None)]
            else:
                if attempt.template not in requests:
                    requests[attempt.template] = template_requests(template)
                pieces = [_attempt_cost(attempt, requests[attempt.template], nodes.get(attempt.host or ""), now)]
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
        assumptions.append("attempts whose node is gone or of an unknown type are not priced")
    if any_multi_node:
        assumptions.append("a multi-node step's launcher and workers are each priced at its class's instance type "
                           "and its own capacity for the attempt's whole run (the MPIJob's lifetime)")
    return JobCost(tuple(steps), tuple(assumptions))
