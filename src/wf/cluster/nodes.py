"""Simulated nodes mirroring the catalog's node groups, as Node objects for kwok to keep alive.

Each node carries what a real EKS node of its group carries (labels, taints, capacity and allocatable from
the instance facts), so the real kube-scheduler places pods exactly as it would on EKS.
"""

from __future__ import annotations

from typing import Any

from wf.core.units import format_mib
from wf.model.catalog import Catalog
from wf.model.instances import instance_type
from wf.model.nodegroups import NodeGroup, node_groups

SIMULATED_ANNOTATION = "wf.dev/simulated"
HOSTNAME_LABEL = "kubernetes.io/hostname"


def node_name(group: NodeGroup, index: int) -> str:
    return f"{group.name}-{index}"


def node_manifest(group: NodeGroup, index: int, name: str | None = None) -> dict[str, Any]:
    """Node `index` of `group` (named `name`, default `node_name`); instance types rotate so mixed groups show
    each of their types. A real node takes its labels and taints from here too."""
    itype = group.instance_types[index % len(group.instance_types)]
    name = name or node_name(group, index)
    allocatable = group.allocatable(itype)
    facts = instance_type(itype)
    # Capacity is the machine; allocatable is what remains after kube/system reservations.
    capacity = {**allocatable, "cpu": str(facts.vcpu), "memory": format_mib(facts.memory_mib)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {**group.node_labels(itype), HOSTNAME_LABEL: name},
            "annotations": {SIMULATED_ANNOTATION: "true"},
        },
        "spec": {"taints": group.kubernetes_taints},
        "status": {
            "allocatable": allocatable,
            "capacity": capacity,
            "nodeInfo": {"architecture": group.arch, "operatingSystem": "linux"},
        },
    }


def node_manifests(catalog: Catalog, nodes_per_group: int) -> list[dict[str, Any]]:
    return [node_manifest(g, i) for g in node_groups(catalog) for i in range(nodes_per_group)]
