"""Node groups: one per compute class x capacity x zone, and the one renderer of a class in Kubernetes terms.

A `NodeGroup` owns everything that must agree between what workflows ask for and what the cluster provides:
node labels and the pod nodeSelector, taints (as `wf.model.catalog.Taint`) and tolerations, cluster-autoscaler
node-template tags, and node allocatable net of system reserve and hugepages. eksctl configs, Karpenter
NodePools, the local cluster's nodes, placement, lint, consistency checks, cost and the Pending explanations
all read it; none re-derives these terms.

Mixed-size instance types: cluster-autoscaler builds the node it simulates for a scale-up from zero from ONE
instance type of the Auto Scaling group, the first of a MixedInstancesPolicy's overrides
(kubernetes/autoscaler cluster-autoscaler/cloudprovider/aws/aws_wrapper.go, getInstanceTypesForAsgs:
`results[name] = asg.MixedInstancesPolicy.instanceTypesOverrides[0]`), and once the group has nodes it uses a
running node, of whichever type the ASG launched. Its FAQ says so plainly: "the instance types should have the
same amount of RAM and number of CPU cores, since this is fundamental to CA's scaling calculations"
(cluster-autoscaler/cloudprovider/aws/README.md, "Using Mixed Instances Policies and Spot Instances"). So wf
only accepts a request that fits EVERY instance type of the class (`least_allocatable`), and names classes
whose types differ in size (`mixed_sizes`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from functools import lru_cache
from types import MappingProxyType

from wf.core.constants import (
    ARCH_LABEL,
    CAPACITY_LABEL,
    CLASS_LABEL,
    EKS_CAPACITY_LABEL,
    EKS_CAPACITY_VALUES,
    EKS_NODEGROUP_LABEL,
    INSTANCE_TYPE_LABEL,
    OS_LABEL,
    REGION_LABEL,
    ZONE_LABEL,
)
from wf.core.errors import Problem
from wf.core.units import format_cpu, format_mib, parse_quantity
from wf.model.accelerators import ACCELERATOR_RESOURCES, EFA_RESOURCE, HUGEPAGES_2MI, profile
from wf.model.catalog import Accelerator, Catalog, ComputeClass, Taint
from wf.model.instances import InstanceType, instance_type

# Root volume of the simulated node; the real one is the node group's volumeSize.
_EPHEMERAL_STORAGE_GIB = 100
AUTOSCALER_TAG_PREFIX = "k8s.io/cluster-autoscaler/node-template"


@dataclass(frozen=True)
class NodeGroup:
    name: str
    compute_class: str
    capacity: str
    zone: str
    region: str
    instance_types: tuple[str, ...]
    arch: str
    labels: dict[str, str] = field(hash=False)
    taints: tuple[Taint, ...]
    accelerator: Accelerator | None
    efa: bool
    min_size: int
    max_size: int
    volume_size: int
    hugepages_2mi_mib: int

    def node_labels(self, instance: str) -> dict[str, str]:
        """The labels a real EKS node of this group carries (well-known, EKS-managed and ours)."""
        return {
            INSTANCE_TYPE_LABEL: instance,
            ZONE_LABEL: self.zone,
            REGION_LABEL: self.region,
            ARCH_LABEL: self.arch,
            OS_LABEL: "linux",
            EKS_CAPACITY_LABEL: EKS_CAPACITY_VALUES[self.capacity],
            EKS_NODEGROUP_LABEL: self.name,
            **self.labels,
        }

    @property
    def node_selector(self) -> dict[str, str]:
        """What a pod of the class selects on: labels every group of the class x capacity carries, whether
        eksctl or Karpenter made the node, never instance types or zones."""
        return {CLASS_LABEL: self.compute_class, CAPACITY_LABEL: self.capacity, ARCH_LABEL: self.arch}

    @property
    def tolerations(self) -> list[dict[str, str]]:
        return [t.toleration() for t in self.taints]

    @property
    def kubernetes_taints(self) -> list[dict[str, str]]:
        """The taints as core/v1 objects: eksctl managed groups, Karpenter NodePools, kind and kwok nodes."""
        return [t.to_kubernetes() for t in self.taints]

    def autoscaler_tags(self) -> dict[str, str]:
        """Scale-from-zero hints for cluster-autoscaler (ASG tags).

        eksctl's propagateASGTags writes taint tags without the `:Effect` cluster-autoscaler requires (it then
        drops them), and cluster-autoscaler sizes template nodes from instance CPU, memory and NVIDIA data only.
        """
        tags = {f"{AUTOSCALER_TAG_PREFIX}/label/{key}": value for key, value in self.labels.items()}
        tags |= {f"{AUTOSCALER_TAG_PREFIX}/taint/{t.key}": t.autoscaler_tag_value for t in self.taints}
        for resource, quantity in self.template_resources().items():
            tags[f"{AUTOSCALER_TAG_PREFIX}/resources/{resource}"] = quantity
        return tags

    def template_resources(self) -> dict[str, str]:
        """Extended resources every node of the group offers (the least across its instance types)."""
        out: dict[str, str] = {}
        if self.accelerator:
            out[self.accelerator.resource] = str(self.accelerator.count)
        if self.hugepages_2mi_mib:
            out[HUGEPAGES_2MI] = format_mib(self.hugepages_2mi_mib)
        if self.efa:
            out[EFA_RESOURCE] = str(int(self.least_allocatable().get(EFA_RESOURCE, 0)))
        return out

    def allocatable(self, instance: str) -> dict[str, str]:
        """Node allocatable of `instance` in this group, as Kubernetes quantities."""
        return dict(_allocatable(instance, self.hugepages_2mi_mib, self.efa))

    def allocatable_amounts(self, instance: str) -> Mapping[str, Decimal]:
        return _amounts(instance, self.hugepages_2mi_mib, self.efa)

    def least_allocatable(self) -> Mapping[str, Decimal]:
        """Per resource, what EVERY node of the group offers: the bound a request must fit (see the module doc)."""
        return _least(self.instance_types, self.hugepages_2mi_mib, self.efa)

    def by_size(self) -> tuple[str, ...]:
        """The instance types, largest allocatable (cpu, then memory) first."""
        return _by_size(self.instance_types)


# Cached: placement asks for every step of a DAG, and a catalog has a handful of distinct answers.
@lru_cache(maxsize=256)
def _least(instance_types: tuple[str, ...], hugepages_2mi_mib: int, efa: bool) -> Mapping[str, Decimal]:
    each = [_amounts(i, hugepages_2mi_mib, efa) for i in instance_types]
    return MappingProxyType({r: min(a.get(r, Decimal(0)) for a in each) for r in each[0]})


@lru_cache(maxsize=256)
def _by_size(instance_types: tuple[str, ...]) -> tuple[str, ...]:
    def size(name: str) -> tuple[int, int]:
        facts = instance_type(name)
        return facts.allocatable_cpu_millis, facts.allocatable_memory_mib

    return tuple(sorted(instance_types, key=size, reverse=True))


@lru_cache(maxsize=256)
def _allocatable(instance: str, hugepages_2mi_mib: int, efa: bool) -> tuple[tuple[str, str], ...]:
    """Node allocatable as Kubernetes quantities: the instance's after system reserve and eviction threshold
    (wf.model.instances), with the hugepage pool carved out of memory as kubelet does."""
    facts: InstanceType = instance_type(instance)
    out = {
        "cpu": format_cpu(facts.allocatable_cpu_millis),
        "memory": format_mib(facts.allocatable_memory_mib - hugepages_2mi_mib),
        "pods": str(facts.max_pods),
        "ephemeral-storage": f"{_EPHEMERAL_STORAGE_GIB}Gi",
        HUGEPAGES_2MI: format_mib(hugepages_2mi_mib),
    }
    for resource, count in facts.accelerators.items():
        out[resource] = str(count)
    if efa and facts.efa:
        out[EFA_RESOURCE] = str(facts.efa)
    return tuple(out.items())


@lru_cache(maxsize=256)
def _amounts(instance: str, hugepages_2mi_mib: int, efa: bool) -> Mapping[str, Decimal]:
    return MappingProxyType({k: parse_quantity(v) for k, v in _allocatable(instance, hugepages_2mi_mib, efa)})


def instance_allocatable(instance: str) -> dict[str, Decimal]:
    """Allocatable of a node of `instance` whose devices all have their hugepage pool: for callers that know
    the node's instance type but not its compute class (cost)."""
    facts = instance_type(instance)
    hugepages = sum(hugepages_for(resource, count) for resource, count in facts.accelerators.items())
    return dict(_amounts(instance, hugepages, False))


_SHARED = ("cpu", "memory")  # resources pods share on a node; a device resource counts whole devices


def node_share(requests: Mapping[str, Decimal], allocatable: Mapping[str, Decimal]) -> float:
    """The fraction of a node a pod reserves: its dominant resource (cpu, memory, devices) over the node's
    allocatable (net of system reserve and the hugepage pool). What wf charges a pod for: the cost table
    (wf.controller.cost), and so wf's cost metrics (wf.controller.metrics)."""
    shares = [float(wanted / allocatable[resource]) for resource, wanted in requests.items()
              if resource in _SHARED and allocatable.get(resource)]
    shares += [float(requests[resource] / count) for resource, count in allocatable.items()
               if resource in ACCELERATOR_RESOURCES and count and resource in requests]
    return min(1.0, max(shares)) if shares else 1.0  # nothing requested: it could use the whole node


def hugepages_for(resource: str | None, devices: int) -> int:
    """MiB of 2 MiB hugepages `devices` of `resource` need (per pod, and pre-allocated per node)."""
    return profile(resource).hugepages_2mi_mib_per_device * devices


def group_name(cls: str, capacity: str, zone: str) -> str:
    return f"{cls}-{capacity}-{zone}"


def class_node_labels(cls: ComputeClass, capacity: str) -> dict[str, str]:
    """The labels of ours every node group of the class carries: what placement selects on."""
    return {CLASS_LABEL: cls.name, CAPACITY_LABEL: capacity, **cls.labels}


def node_groups_of(cls: ComputeClass, catalog: Catalog) -> list[NodeGroup]:
    zones = cls.zones(catalog.cluster)
    return [node_group(cls, catalog, capacity, zone) for capacity in cls.capacity for zone in zones]


def node_group(cls: ComputeClass, catalog: Catalog, capacity: str, zone: str | None = None) -> NodeGroup:
    """The class's group in `zone` (default: its first); the groups of a class x capacity differ in zone only."""
    zone = zone or cls.zones(catalog.cluster)[0]
    hugepages = hugepages_for(cls.accelerator.resource, cls.accelerator.count) if cls.accelerator else 0
    return NodeGroup(
        name=group_name(cls.name, capacity, zone),
        compute_class=cls.name,
        capacity=capacity,
        zone=zone,
        region=catalog.cluster.region,
        instance_types=tuple(cls.instance_types),
        arch=cls.resolved_arch,
        labels=class_node_labels(cls, capacity),
        taints=tuple(cls.taints),
        accelerator=cls.accelerator,
        efa=cls.efa,
        min_size=cls.min_size,
        max_size=cls.max_size,
        volume_size=cls.volume_size,
        hugepages_2mi_mib=hugepages,
    )


def node_groups(catalog: Catalog) -> list[NodeGroup]:
    return [group for cls in catalog.compute_classes for group in node_groups_of(cls, catalog)]


def mixed_sizes(catalog: Catalog) -> list[Problem]:
    """Classes whose instance types differ in vCPUs, memory or devices, which cluster-autoscaler's scaling
    calculations assume equal (module doc): the finding names the class, the types and their sizes."""
    out: list[Problem] = []
    for c, cls in enumerate(catalog.compute_classes):
        try:
            facts = [instance_type(name) for name in cls.instance_types]
        except ValueError:
            continue  # the catalog's own checks name the unknown type
        if len({(f.vcpu, f.memory_mib, tuple(sorted(f.accelerators.items()))) for f in facts}) < 2:
            continue
        group = node_group(cls, catalog, cls.default_capacity)
        least = group.least_allocatable()
        sizes = ", ".join(f"{f.name} ({f.vcpu} vCPU, {format_mib(f.memory_mib)})" for f in facts)
        out.append(Problem.at(("computeClasses", c, "instanceTypes"), (
                    f"compute class {cls.name} mixes instance sizes: {sizes}; cluster-autoscaler sizes a scale-up "
                    f"from zero from the first type ({facts[0].name}) and the group may launch any of them, so "
                    f"wf accepts only requests that fit every type (at most {format_cpu(int(least['cpu'] * 1000))} "
                    f"cpu and {format_mib(int(least['memory'] / 2**20))} memory); list types of one size, or split "
                    "the class"), severity="warning"))
    return out
