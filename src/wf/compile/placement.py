"""Placement: a step's compute class and capacity become node selection, tolerations, resources and retries.

Pods select on the labels every node group of the class carries (`wf.dev/compute-class`, `wf.dev/capacity`,
`kubernetes.io/arch`), never on instance types, so eksctl and Karpenter node groups both satisfy them.
`place_step` resolves a step's class and capacity; `place_pod` sizes a pod on them (a step's pod, or a multi-node
step's replicas, wf.compile.kinds.mpijob); `on_real_nodes` keeps a compiled workflow's pods whose image only the
local cluster's real nodes hold on those. What a compiled template says back: wf.compile.readback.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from decimal import Decimal
from functools import lru_cache
from typing import Any

from wf.compile.schedulability import PodConstraints, Shortfall, Verdict, judge
from wf.core.constants import REAL_NODE_LABEL, REAL_NODE_TAINT
from wf.core.errors import PathKey, Problem
from wf.core.units import format_cpu, format_mib, parse_quantity
from wf.jobspec.images import normalized
from wf.jobspec.job import TrainingJob
from wf.jobspec.steps import Resources, Step
from wf.model.accelerators import EFA_RESOURCE, HUGEPAGES_2MI, profile
from wf.model.catalog import Catalog, ComputeClass, PodSecurity
from wf.model.nodegroups import NodeGroup, hugepages_for, node_group

# A pod asking for a whole node's allocatable never fits beside the node's DaemonSets (CNI, kube-proxy,
# device plugins), so defaults derived from a node take this share of it.
_NODE_SHARE = Decimal("0.9")
_DEFAULT_CPU_MILLIS = 1000
_DEFAULT_MEMORY_MIB = 2048
_MIB = Decimal(2**20)

INTERRUPTION_RETRIES = {"spot": 5, "on-demand": 2}


@dataclass(frozen=True)
class Placement:
    compute_class: str
    capacity: str
    node_selector: dict[str, str]
    tolerations: list[dict[str, str]]
    requests: dict[str, str]
    limits: dict[str, str]
    host_ipc: bool
    capabilities: tuple[str, ...]
    interruption_retries: int
    # Interruptions after which the step's next attempt runs On-Demand (None: stay on the chosen capacity).
    on_demand_after: int | None = None


def place_step(job: TrainingJob, index: int, catalog: Catalog, section: str = "steps"
               ) -> tuple[Placement | None, list[Problem]]:
    """The placement of spec[section][index], or the problems that make it impossible, in the developer's terms."""
    step: Step = (job.spec.on_exit if section == "onExit" else job.spec.steps)[index]
    at: tuple[PathKey, ...] = ("spec", section, index)
    class_name = step.compute or job.spec.compute or catalog.default_class
    class_at = (*at, "compute") if step.compute else ("spec", "compute")
    if class_name is None:
        return None, [Problem.at((*at, "compute"), "no compute class: name one here or in spec.compute "
                       f"(the catalog has no defaultClass); the catalog has: {', '.join(catalog.class_names)}")]
    try:
        cls = catalog.compute_class(class_name)
    except KeyError:
        return None, [Problem.at(class_at, catalog.unknown_class(class_name))]
    problems: list[Problem] = []
    capacity = step.capacity or job.spec.capacity or cls.default_capacity
    if capacity not in cls.capacity:
        where = (*at, "capacity") if step.capacity else ("spec", "capacity")
        problems.append(Problem.at(where, f"compute class {cls.name!r} offers {' and '.join(cls.capacity)}, "
                                          f"not {capacity}"))
        capacity = cls.default_capacity
    placement, found = place_pod(catalog, cls, capacity, step.resources, step.accelerators, at)
    problems += found
    return (None, problems) if problems else (placement, [])


def place_pod(catalog: Catalog, cls: ComputeClass, capacity: str, resources: Resources | None = None,
              devices: int = 0, at: tuple[PathKey, ...] = ()) -> tuple[Placement | None, list[Problem]]:
    """The placement of a pod asking for `resources` and `devices` accelerators on `cls` x `capacity` (defaults
    where it asks for none), or the problems, at `at` + the field: a step's, or a multi-node step's replica.
    Each placement is a new object: the compiled templates share nothing (YAML would write what they share as
    anchors)."""
    placement, found = _placed(_Same(catalog), _Same(cls), capacity, _Asked(resources or Resources()), devices)
    if placement is None:
        return None, [Problem.at((*at, *field), message) for field, message in found]
    return replace(placement, node_selector=dict(placement.node_selector),
                   tolerations=[dict(t) for t in placement.tolerations], requests=dict(placement.requests),
                   limits=dict(placement.limits)), []


class _Same:
    """A catalog or class as a cache key: by identity (the cache holds it, so its id is not reused meanwhile)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __hash__(self) -> int:
        return id(self.value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Same) and other.value is self.value


class _Asked:
    """A step's resources as a cache key: by their values (pydantic models of the job spec are not hashable)."""

    __slots__ = ("resources", "values")

    def __init__(self, resources: Resources) -> None:
        self.resources = resources
        self.values = tuple(vars(resources).items())

    def __hash__(self) -> int:
        return hash(self.values)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Asked) and other.values == self.values


# A big DAG asks a catalog the same few (class, capacity, size) questions thousands of times. Small: the entries
# hold their catalogs (a process that loads one per job keeps at most this many).
@lru_cache(maxsize=64)
def _placed(catalog_key: _Same, cls_key: _Same, capacity: str, asked: _Asked, devices: int
            ) -> tuple[Placement | None, tuple[tuple[tuple[PathKey, ...], str], ...]]:
    """place_pod's answer, its problems at paths relative to the pod's (never changed by a caller: copied out)."""
    catalog: Catalog = catalog_key.value
    cls: ComputeClass = cls_key.value
    resources = asked.resources
    group = node_group(cls, catalog, capacity)
    # What every node of the class offers: a request sized from it fits whichever type the autoscaler models.
    least = group.least_allocatable()
    device = cls.accelerator.resource if cls.accelerator else None
    per_node = cls.accelerator.count if cls.accelerator else 0
    problems: list[tuple[tuple[PathKey, ...], str]] = []
    if devices and not cls.accelerator:
        problems.append((("accelerators",), f"compute class {cls.name!r} has no accelerators"))
    elif devices > per_node:
        problems.append((("accelerators",),
                         f"no {cls.name} node offers {devices} {device}; {group.by_size()[0]} has {per_node}"))
    prof = profile(device)
    # Defaults follow the cards a node can hold, so too many cards is one error, not three about fields never written.
    sized = min(devices, per_node)
    share = Decimal(sized) / per_node if devices and per_node else None

    cpu_millis = _millis(resources.cpu) if resources.cpu is not None else (
        int(least["cpu"] * 1000 * _NODE_SHARE * share) // 1000 * 1000 if share else _DEFAULT_CPU_MILLIS)
    hugepages = hugepages_for(device, devices)
    if resources.memory is not None:
        memory_mib = int(parse_quantity(resources.memory) / _MIB)
    elif share and prof.memory_mib_per_device:
        memory_mib = prof.memory_mib_per_device * sized
    elif share:
        memory_mib = int(least["memory"] / _MIB * _NODE_SHARE * share) // 1024 * 1024
    else:
        memory_mib = _DEFAULT_MEMORY_MIB
    wanted = {"cpu": Decimal(cpu_millis) / 1000, "memory": memory_mib * _MIB}
    verdict = judge(PodConstraints(group.node_selector, [], group.tolerations, wanted), group)
    problems += [(("resources", s.resource), _too_big(cls, group, s, verdict)) for s in verdict.shortfalls]
    if problems:
        return None, tuple(problems)

    # The accelerator's own needs go to the pods holding its devices; a class's explicit ones to all its pods.
    relaxed = cls.relaxations if devices or cls.pod_security is not None else PodSecurity()
    requests = {"cpu": format_cpu(cpu_millis), "memory": format_mib(memory_mib)}
    limits = {"memory": format_mib(memory_mib)}
    if resources.ephemeral_storage is not None:
        requests["ephemeral-storage"] = str(resources.ephemeral_storage)
    if devices and device:
        exact = {device: str(devices)}
        if hugepages:
            exact[HUGEPAGES_2MI] = format_mib(hugepages)
        efa = int(least.get(EFA_RESOURCE, 0))
        if cls.efa and efa:
            exact[EFA_RESOURCE] = str(max(1, efa * devices // per_node))
        requests |= exact
        limits |= exact
    return Placement(
        compute_class=cls.name,
        capacity=capacity,
        node_selector=group.node_selector,
        tolerations=group.tolerations,
        requests=requests,
        limits=limits,
        host_ipc=relaxed.host_ipc,
        capabilities=tuple(relaxed.capabilities),
        interruption_retries=cls.interruption_retries if cls.interruption_retries is not None
        else INTERRUPTION_RETRIES[capacity],
        on_demand_after=cls.spot_fallback_after if capacity == "spot" and "on-demand" in cls.capacity else None,
    ), ()


def on_real_nodes(manifest: dict[str, Any], images: frozenset[str]) -> list[str]:
    """Select the local cluster's real nodes (REAL_NODE_LABEL) for the pods of a compiled workflow whose image is
    one of `images`, the names (as the kubelet gives them) of images that only those nodes hold: built there or
    imported, from no registry, so a simulated node of the same class could only pretend to run them; they
    tolerate the real nodes' taint, which keeps every other pod off. Keeps the class's own selector and
    tolerations (a real node is one of its node group's). The names of the templates placed."""
    spec = manifest.get("spec") or {}
    default = ((spec.get("templateDefaults") or {}).get("container") or {}).get("image")
    placed = []
    for template in spec.get("templates") or []:
        pod = template.get("container") or template.get("script")
        image = (pod or {}).get("image") or default
        if pod is not None and isinstance(image, str) and normalized(image) in images:
            template["nodeSelector"] = {**(template.get("nodeSelector") or {}), REAL_NODE_LABEL: "true"}
            template["tolerations"] = [*(template.get("tolerations") or []), {"operator": "Equal", **REAL_NODE_TAINT}]
            placed.append(template["name"])
    return placed


def _too_big(cls: ComputeClass, group: NodeGroup, short: Shortfall, verdict: Verdict) -> str:
    """A request no node offers, or one only some of the class's instance types offer (wf.model.nodegroups)."""
    wanted, have = _amount(short.resource, short.wanted), _amount(short.resource, short.have)
    if not verdict.fits:
        return f"no {cls.name} node offers {wanted} {short.resource}; {short.instance} has {have} allocatable"
    bigger = [i for i in group.instance_types if i not in {s.instance for s in verdict.shortfalls}]
    return (f"compute class {cls.name} mixes instance sizes: {wanted} {short.resource} fits {', '.join(bigger)} but "
            f"not {short.instance} ({have} allocatable); cluster-autoscaler may model or launch {short.instance} "
            f"for a scale-up, so request at most {have} or use a class whose types are one size")


def _amount(resource: str, amount: Decimal) -> str:
    return format_cpu(int(amount * 1000)) if resource == "cpu" else f"{int(amount / _MIB)}Mi"


def _millis(value: int | float | str) -> int:
    return int(parse_quantity(value) * 1000)
