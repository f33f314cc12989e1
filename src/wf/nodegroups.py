"""Node groups: one per compute class x capacity x zone, derived from the catalog.

eksctl configs, Karpenter NodePools, the local cluster's simulated nodes and lint's schedulability check all
read these, so what lints clean is what gets provisioned.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from wf.accelerators import EFA_RESOURCE, HUGEPAGES_2MI, profile
from wf.catalog import Accelerator, Catalog, ComputeClass, Taint
from wf.constants import (
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
from wf.instances import InstanceType, instance_type
from wf.units import format_cpu, format_mib

# Root volume of the simulated node; the real one is the node group's volumeSize.
_EPHEMERAL_STORAGE_GIB = 100


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

    def allocatable(self, instance: str) -> dict[str, str]:
        """Node allocatable as Kubernetes quantities, hugepages carved out of memory as kubelet does."""
        facts: InstanceType = instance_type(instance)
        out = {
            "cpu": format_cpu(facts.allocatable_cpu_millis),
            "memory": format_mib(facts.allocatable_memory_mib - self.hugepages_2mi_mib),
            "pods": str(facts.max_pods),
            "ephemeral-storage": f"{_EPHEMERAL_STORAGE_GIB}Gi",
            HUGEPAGES_2MI: format_mib(self.hugepages_2mi_mib),
        }
        for resource, count in facts.accelerators.items():
            out[resource] = str(count)
        if self.efa and facts.efa:
            out[EFA_RESOURCE] = str(facts.efa)
        return out

    def largest(self) -> InstanceType:
        return max((instance_type(n) for n in self.instance_types),
                   key=lambda i: (i.allocatable_cpu_millis, i.allocatable_memory_mib))


def group_name(cls: str, capacity: str, zone: str) -> str:
    return f"{cls}-{capacity}-{zone}"


def class_node_labels(cls: ComputeClass, capacity: str) -> dict[str, str]:
    """The labels of ours every node group of the class carries: what placement selects on."""
    return {CLASS_LABEL: cls.name, CAPACITY_LABEL: capacity, **cls.labels}


def node_groups_of(cls: ComputeClass, catalog: Catalog) -> list[NodeGroup]:
    devices = cls.accelerator.count if cls.accelerator else 0
    hugepages = profile(cls.accelerator.resource if cls.accelerator else None).hugepages_2mi_mib_per_device * devices
    return [
        NodeGroup(
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
        for capacity in cls.capacity
        for zone in cls.zones(catalog.cluster)
    ]


def node_groups(catalog: Catalog) -> list[NodeGroup]:
    return [group for cls in catalog.compute_classes for group in node_groups_of(cls, catalog)]
