"""The kind config for `wf cluster up --runtime kind` (kind itself is not run here: no Docker)."""

from __future__ import annotations

import yaml

from wf.cluster.kind import kind_config
from wf.core.constants import CAPACITY_LABEL, CLASS_LABEL
from wf.model.catalog import load_catalog
from wf.model.nodegroups import node_groups


def test_one_labelled_tainted_worker_per_group_and_index() -> None:
    catalog = load_catalog()
    groups = node_groups(catalog)
    config = kind_config(catalog, 2, "local")
    assert config["apiVersion"] == "kind.x-k8s.io/v1alpha4"
    assert config["networking"]["apiServerAddress"] == "127.0.0.1"
    roles = [n["role"] for n in config["nodes"]]
    assert roles == ["control-plane"] + ["worker"] * (2 * len(groups))
    workers = config["nodes"][1:]
    for i, group in enumerate(groups):
        for node in workers[2 * i : 2 * i + 2]:
            assert node["labels"][CLASS_LABEL] == group.compute_class
            assert node["labels"][CAPACITY_LABEL] == group.capacity
            assert node["labels"]["eks.amazonaws.com/nodegroup"] == group.name
            # kubelet (NodeRestriction) owns these; setting them would make the node fail to register.
            assert "kubernetes.io/arch" not in node["labels"]
            if group.taints:
                patch = yaml.safe_load(node["kubeadmConfigPatches"][0])
                assert patch["kind"] == "JoinConfiguration"
                assert patch["nodeRegistration"]["taints"] == [
                    {"key": t.key, "value": t.value, "effect": t.effect} for t in group.taints
                ]
            else:
                assert "kubeadmConfigPatches" not in node
