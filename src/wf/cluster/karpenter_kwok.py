"""Karpenter's kwok provider beside the local cluster: nodes that come and go as on the real cluster.

Karpenter's own provisioning and disruption controllers run as a process against the local API server; its
kwok cloud provider "launches" an instance by creating a Node object, which kwok then keeps alive. It runs
the NodePools `wf karpenter generate` writes for EKS, with one change: their EC2NodeClass reference points at a
KWOKNodeClass. The instance types it may choose are the catalog's (its --instance-types-file-path JSON), so a
pending pod gets the node the catalog would give it on EKS, and a reclaimed Spot node is replaced.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

from wf.cluster import build, processes
from wf.core.constants import ZONE_LABEL
from wf.model.catalog import Catalog
from wf.model.instances import instance_type
from wf.model.nodegroups import node_groups
from wf.render.karpenter import CAPACITY_TYPE_LABEL, manifests

NAME = "karpenter"
BINARY = "karpenter-kwok"
NODECLASS = {"apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass", "metadata": {"name": "wf"}}
NODECLASS_REF = {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "wf"}
# The Spot savings of a type the instance facts have none for (every offering needs a price): the usual EC2
# Spot discount.
_UNKNOWN_SPOT_SAVINGS = 0.6


def crd_files() -> list[Path]:
    comp = next(c for c in build.components() if c.name == NAME)
    return [comp.asset(build.cache_dir(), asset) for asset in comp.assets]


def objects(catalog: Catalog) -> list[dict[str, Any]]:
    """What the provider needs in the cluster: its CRDs, the KWOKNodeClass and the NodePools."""
    import yaml

    crds = [d for path in crd_files() for d in yaml.safe_load_all(path.read_text()) if d]
    return [*crds, copy.deepcopy(NODECLASS), *node_pools(catalog)]


def node_pools(catalog: Catalog) -> list[dict[str, Any]]:
    """wf's NodePools for EKS with the node class swapped for the KWOKNodeClass; nothing else changes."""
    pools = []
    for doc in manifests(catalog):
        if doc["kind"] != "NodePool":
            continue
        pool = copy.deepcopy(doc)
        pool["spec"]["template"]["spec"]["nodeClassRef"] = dict(NODECLASS_REF)
        pools.append(pool)
    return pools


def instance_types(catalog: Catalog) -> list[dict[str, Any]]:
    """The catalog's instance types in the kwok provider's JSON shape: one offering per capacity and zone a
    node group offers, the resources a node of that group has (accelerators, hugepages, EFA)."""
    by_name: dict[str, dict[str, Any]] = {}
    for group in node_groups(catalog):
        for name in group.instance_types:
            facts = instance_type(name)
            entry = by_name.setdefault(name, {
                "name": name,
                "offerings": [],
                "architecture": facts.arch,
                "operatingSystems": ["linux"],
                "resources": group.allocatable(name),
            })
            price = facts.spot_price(_UNKNOWN_SPOT_SAVINGS) if group.capacity == "spot" else facts.price_on_demand
            entry["offerings"].append({
                "Price": price,
                "Available": True,
                "Requirements": [
                    {"key": CAPACITY_TYPE_LABEL, "operator": "In", "values": [group.capacity]},
                    {"key": ZONE_LABEL, "operator": "In", "values": [group.zone]},
                ],
            })
    return list(by_name.values())


def start(workdir: Path, kubeconfig: Path, catalog: Catalog) -> int:
    """Start the provider (its pid goes to workdir/pids/karpenter.pid); returns its health port."""
    types_file = workdir / "karpenter-instance-types.json"
    types_file.write_text(json.dumps(instance_types(catalog), indent=1))
    health = processes.free_port()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(workdir),
        "KUBECONFIG": str(kubeconfig),
        # One replica on loopback: nothing to elect.
        "DISABLE_LEADER_ELECTION": "true",
        # Its cluster-state metrics re-read every node and pod on a timer (3,200 nodes and 8,000 pods: 200,000
        # reconciles in eight minutes of the scale benchmark, a fifth of a core) for dashboards nobody scrapes.
        "DISABLE_CLUSTER_STATE_OBSERVABILITY": "true",
        "INSTANCE_TYPES_FILE_PATH": str(types_file),
        # Fixed defaults (8080/8081) would collide between two clusters on one machine.
        "METRICS_PORT": str(processes.free_port()),
        "HEALTH_PROBE_PORT": str(health),
    }
    processes.start(
        [str(build.binary_path(BINARY))], env=env, log_file=log_file(workdir), pid_file=pid_file(workdir), cwd=workdir
    )
    return health


def pid_file(workdir: Path) -> Path:
    return workdir / "pids" / f"{NAME}.pid"


def log_file(workdir: Path) -> Path:
    return workdir / "logs" / f"{NAME}.log"
