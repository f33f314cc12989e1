"""Accelerators: the resource names of the devices and of what comes with them (EFA, hugepages), what a pod
needs besides the device itself, per accelerator resource, and what a node must offer for it.

Gaudi: Habana's EKS guide runs an 8-card dl1.24xlarge job with `habana.ai/gaudi: 8`, `hugepages-2Mi: 42000Mi`,
`memory: 690Gi`, `vpc.amazonaws.com/efa: 4`, capability SYS_NICE and hostIPC
(docs.habana.ai, AWS_User_Guides/Getting_Started_Guide_EKS/Running_Job_on_Cluster, read 2026-11).
We scale those per card. Kubernetes requires a memory or cpu request with hugepages and never overcommits them
(kubernetes.io, "Manage HugePages"), so the node group must pre-allocate the same pool.
"""

from __future__ import annotations

from dataclasses import dataclass

# As device plugins and the kubelet advertise them. Here rather than in wf.core.constants: only the model and
# the layers above it (instance facts, node groups, placement, the renderers) name a device, and the names
# belong beside what each device needs.
NVIDIA_GPU_RESOURCE = "nvidia.com/gpu"
GAUDI_RESOURCE = "habana.ai/gaudi"
NEURON_RESOURCE = "aws.amazon.com/neuron"
ACCELERATOR_RESOURCES = (NVIDIA_GPU_RESOURCE, GAUDI_RESOURCE, NEURON_RESOURCE)
EFA_RESOURCE = "vpc.amazonaws.com/efa"
HUGEPAGES_PREFIX = "hugepages-"
HUGEPAGES_2MI = f"{HUGEPAGES_PREFIX}2Mi"


@dataclass(frozen=True)
class DeviceProfile:
    hugepages_2mi_mib_per_device: int = 0
    memory_mib_per_device: int = 0  # default memory request when the step gives none
    host_ipc: bool = False
    capabilities: tuple[str, ...] = ()


_PROFILES = {
    GAUDI_RESOURCE: DeviceProfile(
        hugepages_2mi_mib_per_device=42000 // 8,
        # 690Gi for 8 cards in Habana's guide does not fit beside the hugepage pool on a real dl1 node
        # (allocatable 718987Mi minus 42000Mi); 80Gi a card leaves room for the node's daemons.
        memory_mib_per_device=80 * 1024,
        host_ipc=True,
        capabilities=("SYS_NICE",),
    ),
}
_NONE = DeviceProfile()


def profile(resource: str | None) -> DeviceProfile:
    return _PROFILES.get(resource or "", _NONE)
