"""Placement: a step's compute class and capacity become node selection, tolerations, resources and retries.

Pods select on the labels every node group of the class carries (`wf.dev/compute-class`, `wf.dev/capacity`,
`kubernetes.io/arch`), never on instance types, so eksctl and Karpenter node groups both satisfy them.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from wf.accelerators import EFA_RESOURCE, HUGEPAGES_2MI, profile
from wf.catalog import Catalog, ComputeClass
from wf.labels import ARCH_LABEL
from wf.loader import PathKey
from wf.nodegroups import class_node_labels
from wf.spec import Step, TrainingJob
from wf.units import format_cpu, format_mib, parse_quantity

ProblemList = list[tuple[tuple[PathKey, ...], str]]

# A pod asking for a whole node's allocatable never fits beside the node's DaemonSets (CNI, kube-proxy,
# device plugins), so defaults derived from a node take this share of it.
_NODE_SHARE = Decimal("0.9")
_DEFAULT_CPU_MILLIS = 1000
_DEFAULT_MEMORY_MIB = 2048
_MIB = Decimal(2**20)

INTERRUPTION_RETRIES = {"spot": 5, "on-demand": 2}
# How Spot reclaims, drains and evictions reach Argo: "pod deleted" (Error), graceful node shutdown
# ("Pod was terminated in response to imminent node shutdown.", Failed), node-pressure eviction
# ("The node was low on resource: ..."), admission refused on a node under pressure ("The node had condition:
# [DiskPressure]") and drains. An OOM kill also exits 137, so it is excluded by name:
# it is the application's failure and spends the application's retries.
_INTERRUPTION = (
    '(lastRetry.status == "Error" || lastRetry.message matches '
    '"pod deleted|imminent node shutdown|node is draining|node was low on resource|node had condition|[Ee]vict")'
    ' && !(lastRetry.message contains "OOMKilled")'
)
INTERRUPTION_EXPRESSION = _INTERRUPTION
APPLICATION_EXPRESSION = f'lastRetry.status == "Failed" && !({_INTERRUPTION})'


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


def tolerations_for(cls: ComputeClass) -> list[dict[str, str]]:
    return [
        {"key": t.key, "operator": "Equal", "value": t.value, "effect": t.effect} if t.value
        else {"key": t.key, "operator": "Exists", "effect": t.effect}
        for t in cls.taints
    ]


def node_selector_for(cls: ComputeClass, capacity: str) -> dict[str, str]:
    selector = {k: v for k, v in class_node_labels(cls, capacity).items() if k not in cls.labels}
    selector[ARCH_LABEL] = cls.resolved_arch
    return selector


def place_step(job: TrainingJob, index: int, catalog: Catalog, section: str = "steps"
               ) -> tuple[Placement | None, ProblemList]:
    """The placement of spec[section][index], or the problems that make it impossible, in the developer's terms."""
    step: Step = (job.spec.on_exit if section == "onExit" else job.spec.steps)[index]
    at: tuple[PathKey, ...] = ("spec", section, index)
    class_name = step.compute or job.spec.compute or catalog.default_class
    class_at = (*at, "compute") if step.compute else ("spec", "compute")
    if class_name is None:
        return None, [((*at, "compute"), "no compute class: name one here or in spec.compute "
                       f"(the catalog has no defaultClass); the catalog has: {', '.join(catalog.class_names)}")]
    try:
        cls = catalog.compute_class(class_name)
    except KeyError:
        known = ", ".join(catalog.class_names)
        return None, [(class_at, f"unknown compute class {class_name!r}; the catalog has: {known}")]
    problems: ProblemList = []
    capacity = step.capacity or job.spec.capacity or cls.default_capacity
    if capacity not in cls.capacity:
        where = (*at, "capacity") if step.capacity else ("spec", "capacity")
        problems.append((where, f"compute class {cls.name!r} offers {' and '.join(cls.capacity)}, not {capacity}"))
    largest = cls.largest
    device = cls.accelerator.resource if cls.accelerator else None
    devices = step.accelerators
    per_node = cls.accelerator.count if cls.accelerator else 0
    if devices and not cls.accelerator:
        problems.append(((*at, "accelerators"), f"compute class {cls.name!r} has no accelerators"))
    elif devices > per_node:
        problems.append(((*at, "accelerators"),
                         f"no {cls.name} node offers {devices} {device}; {largest.name} has {per_node}"))
    prof = profile(device)
    # Defaults follow the cards a node can hold, so too many cards is one error, not three about fields never written.
    sized = min(devices, per_node)
    share = Decimal(sized) / per_node if devices and per_node else None

    cpu_millis = _millis(step.resources.cpu) if step.resources.cpu is not None else (
        int(largest.allocatable_cpu_millis * _NODE_SHARE * share) // 1000 * 1000 if share else _DEFAULT_CPU_MILLIS)
    hugepages = prof.hugepages_2mi_mib_per_device * devices
    if step.resources.memory is not None:
        memory_mib = int(parse_quantity(step.resources.memory) / _MIB)
    elif share and prof.memory_mib_per_device:
        memory_mib = prof.memory_mib_per_device * sized
    elif share:
        memory_mib = int(largest.allocatable_memory_mib * _NODE_SHARE * share) // 1024 * 1024
    else:
        memory_mib = _DEFAULT_MEMORY_MIB
    node_memory = largest.allocatable_memory_mib - (prof.hugepages_2mi_mib_per_device * per_node)
    if cpu_millis > largest.allocatable_cpu_millis:
        problems.append(((*at, "resources", "cpu"),
                         f"no {cls.name} node offers {format_cpu(cpu_millis)} cpu; {largest.name} has "
                         f"{format_cpu(largest.allocatable_cpu_millis)} allocatable"))
    if memory_mib > node_memory:
        problems.append(((*at, "resources", "memory"),
                         f"no {cls.name} node offers {memory_mib}Mi memory; {largest.name} has {node_memory}Mi "
                         "allocatable"))
    if problems:
        return None, problems

    requests = {"cpu": format_cpu(cpu_millis), "memory": format_mib(memory_mib)}
    limits = {"memory": format_mib(memory_mib)}
    if step.resources.ephemeral_storage is not None:
        requests["ephemeral-storage"] = str(step.resources.ephemeral_storage)
    if devices and device:
        exact = {device: str(devices)}
        if hugepages:
            exact[HUGEPAGES_2MI] = format_mib(hugepages)
        if cls.efa and largest.efa:
            exact[EFA_RESOURCE] = str(max(1, largest.efa * devices // per_node))
        requests |= exact
        limits |= exact
    return Placement(
        compute_class=cls.name,
        capacity=capacity,
        node_selector=node_selector_for(cls, capacity),
        tolerations=tolerations_for(cls),
        requests=requests,
        limits=limits,
        host_ipc=prof.host_ipc and devices > 0,
        capabilities=prof.capabilities if devices else (),
        interruption_retries=cls.interruption_retries if cls.interruption_retries is not None
        else INTERRUPTION_RETRIES[capacity],
    ), []


def _millis(value: int | float | str) -> int:
    return int(parse_quantity(value) * 1000)
