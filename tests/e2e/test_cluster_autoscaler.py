"""The local cluster with Karpenter's kwok provider: wf's NodePools provision nodes from zero and replace a
reclaimed Spot node."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from wf.core.constants import CAPACITY_LABEL, CLASS_LABEL

from .conftest import ClusterHandle, become_subreaper, connected, start_cluster, stop_cluster
from .test_cluster_lifecycle import _listening_addresses

pytestmark = [pytest.mark.cluster, pytest.mark.components("karpenter")]


@pytest.fixture(scope="module")
def autoscaled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterHandle]:
    become_subreaper()
    handle = start_cluster(tmp_path_factory.mktemp("wf-karpenter"), f"e2ek{os.getpid()}", nodes_per_group=0,
                           autoscaler="karpenter")
    try:
        yield handle
    finally:
        stop_cluster(handle)


def _deployment(name: str) -> dict[str, Any]:
    """One cpu Spot replica: what a workflow step asks of the cluster, kept alive by the controller-manager."""
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": {CLASS_LABEL: "cpu", CAPACITY_LABEL: "spot"},
                    "containers": [{"name": "main", "image": "registry.example/x:1",
                                    "resources": {"requests": {"cpu": "2", "memory": "4Gi"}}}],
                },
            },
        },
    }


def _wait(what: str, check: Callable[[], Any], timeout: float = 150) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(1)
    raise AssertionError(f"not within {timeout:.0f}s: {what}")


def test_pending_pod_gets_a_node_from_zero_and_a_reclaimed_spot_node_is_replaced(autoscaled: ClusterHandle) -> None:
    from kubernetes import client

    assert {c.name: c.running for c in autoscaled.cluster.status()}["karpenter"]
    with connected(autoscaled) as kube:
        core, apps = kube.core, client.AppsV1Api(kube.api_client)
        assert core.list_node().items == []  # from zero
        apps.create_namespaced_deployment(autoscaled.namespace, _deployment("spot-work"))

        def running_on() -> str | None:
            pods = core.list_namespaced_pod(autoscaled.namespace, label_selector="app=spot-work").items
            return next((p.spec.node_name for p in pods if p.status.phase == "Running" and p.spec.node_name), None)

        first = _wait("the pod running on a provisioned node", running_on)
        node = core.read_node(first)
        assert node.metadata.labels[CLASS_LABEL] == "cpu" and node.metadata.labels[CAPACITY_LABEL] == "spot"
        assert node.metadata.labels["karpenter.sh/nodepool"] == "cpu-spot"
        assert node.metadata.labels["node.kubernetes.io/instance-type"] in ("r5.4xlarge", "r6i.4xlarge")

        # A Spot reclaim without a drain: the node goes away; its pod is garbage-collected and recreated.
        core.delete_node(first)
        second = _wait("the pod running on a replacement node", lambda: (n := running_on()) and n != first and n)
        assert core.read_node(second).metadata.labels["karpenter.sh/capacity-type"] == "spot"


def test_karpenter_listens_on_loopback_only(autoscaled: ClusterHandle) -> None:
    """Upstream binds its metrics and health servers to every interface; the build's patch binds them to
    127.0.0.1 (wf.cluster.build), like every other component of the cluster."""
    listeners = {c.name: _listening_addresses(c.pid) for c in autoscaled.cluster.status() if c.pid}
    assert len(listeners["karpenter"]) >= 2, listeners  # metrics and health probes
    for name, addresses in listeners.items():
        assert all(a.startswith("127.0.0.1:") for a in addresses), (name, addresses)
