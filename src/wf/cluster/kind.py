"""`wf cluster up --runtime kind`: the same node groups as kind worker nodes, for machines with Docker.

Only the config generation is tested here (no Docker in CI); the kwok runtime is the one exercised.
kind nodes are real kubelets, so two things differ from the kwok runtime:
- kubelet may only set labels it is allowed to (NodeRestriction): kubernetes.io/arch|os|hostname are its
  own, so they are not passed; EKS and wf labels are allowed.
- extended resources (habana.ai/gaudi, nvidia.com/gpu, EFA) need a device plugin; without one those
  pods stay Pending on kind, which is the honest answer.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from wf.core.constants import ARCH_LABEL, OS_LABEL
from wf.core.errors import ClusterError
from wf.model.catalog import Catalog
from wf.model.nodegroups import node_groups

# The 1.36 image kind v0.33.0 publishes (its release notes), pinned by digest as kind asks; nearest to
# the kwok runtime's 1.36.3.
KIND_NODE_IMAGE = "kindest/node:v1.36.4@sha256:099e049362a1526b2db71494e1947aae99bd16290d7c895f2b7ea312e3cbfaed"
_KUBELET_OWNED = {ARCH_LABEL, OS_LABEL, "kubernetes.io/hostname"}


def kind_config(catalog: Catalog, nodes_per_group: int, name: str) -> dict[str, Any]:
    """A kind Cluster config: one control plane, `nodes_per_group` labelled, tainted workers per group."""
    nodes: list[dict[str, Any]] = [{"role": "control-plane", "image": KIND_NODE_IMAGE}]
    for group in node_groups(catalog):
        labels = {k: v for k, v in group.node_labels(group.instance_types[0]).items() if k not in _KUBELET_OWNED}
        taints = group.kubernetes_taints
        join_patch = yaml.safe_dump(
            {
                "kind": "JoinConfiguration",
                "nodeRegistration": {"taints": taints},
            },
            sort_keys=False,
        )
        for _ in range(nodes_per_group):
            node: dict[str, Any] = {"role": "worker", "image": KIND_NODE_IMAGE, "labels": labels}
            if taints:
                node["kubeadmConfigPatches"] = [join_patch]
            nodes.append(node)
    return {
        "kind": "Cluster",
        "apiVersion": "kind.x-k8s.io/v1alpha4",
        "name": f"wf-{name}",
        "networking": {"apiServerAddress": "127.0.0.1"},
        "nodes": nodes,
    }


def up_with_kind(catalog: Catalog, nodes_per_group: int, name: str, workdir: Path) -> Path:
    """Write the config and run `kind create cluster`; returns the config path."""
    kind = shutil.which("kind")
    if not kind:
        raise ClusterError("`--runtime kind` needs the kind binary on PATH (and Docker); use the default runtime here")
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "kind-config.yaml"
    config.write_text(yaml.safe_dump(kind_config(catalog, nodes_per_group, name), sort_keys=False))
    proc = subprocess.run([kind, "create", "cluster", "--name", f"wf-{name}", "--config", str(config)])
    if proc.returncode != 0:
        raise ClusterError(f"kind create cluster failed (exit {proc.returncode}); config: {config}")
    return config
