"""`wf cluster ...` through the real command line, and the built binaries' versions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from wf.cluster import build
from wf.cluster.supervise import OWN_PROCESSES, SIM_EXECUTOR

from .conftest import ClusterHandle

pytestmark = pytest.mark.cluster

SRC = Path(__file__).resolve().parents[2] / "src"


def _wf(args: list[str], handle: ClusterHandle) -> subprocess.CompletedProcess[str]:
    # The fixture's clusters live under <root>/clusters; WF_DATA_HOME=<root> makes the CLI find them.
    env = {
        **os.environ,
        "WF_DATA_HOME": str(handle.cluster.workdir.parent.parent),
        "KUBECONFIG": str(handle.kubeconfig),
        "PYTHONPATH": str(SRC),
    }
    return subprocess.run([sys.executable, "-m", "wf", *args], capture_output=True, text=True, env=env, timeout=300)


def test_status_json_lists_each_component(local_cluster: ClusterHandle) -> None:
    result = _wf(["cluster", "status", "--name", local_cluster.name, "-o", "json"], local_cluster)
    assert result.returncode == 0, result.stderr
    status = json.loads(result.stdout)
    assert status["context"] == local_cluster.context
    state = local_cluster.cluster.state()
    assert state is not None
    assert (status["nodesPerGroup"], status["autoscaler"], status["realNodes"], status["registry"]) == \
        (state.nodes_per_group, state.autoscaler, state.real_nodes, state.registry)
    assert status["nodesPerGroup"] >= 1 and (status["artifactStore"] is None) == (state.real_nodes == 0)
    names = [c["name"] for c in status["components"]]
    assert names[:2] == ["etcd", "kube-apiserver"]
    assert names[-7:] == ["workflow-controller", *OWN_PROCESSES, "mpi-operator", "postgres", "argo-server",
                          "prometheus"]
    for comp in status["components"]:
        assert comp["running"] is True and comp["pid"] > 0, comp
        assert (comp["port"] or 0) > 0 or comp["name"] == SIM_EXECUTOR, comp  # it serves nothing
        assert Path(comp["log"]).is_file()


def test_up_through_the_cli_on_a_running_cluster_changes_nothing(local_cluster: ClusterHandle) -> None:
    before = {c.name: c.pid for c in local_cluster.cluster.status()}
    result = _wf(["cluster", "up", "--name", local_cluster.name], local_cluster)
    assert result.returncode == 0, result.stderr
    assert f"context {local_cluster.context}" in result.stderr
    assert {c.name: c.pid for c in local_cluster.cluster.status()} == before


def test_status_of_a_missing_cluster_is_a_cluster_error(local_cluster: ClusterHandle) -> None:
    result = _wf(["cluster", "status", "--name", "does-not-exist"], local_cluster)
    assert result.returncode == 3
    assert "does not exist" in result.stderr


@pytest.mark.parametrize(
    ("binary", "argv", "expected"),
    [
        ("kube-apiserver", ["--version"], f"Kubernetes v{build.KUBERNETES_RELEASE}"),
        ("kube-controller-manager", ["--version"], f"Kubernetes v{build.KUBERNETES_RELEASE}"),
        ("kube-scheduler", ["--version"], f"Kubernetes v{build.KUBERNETES_RELEASE}"),
        ("kubectl", ["version", "--client"], f"Client Version: v{build.KUBERNETES_RELEASE}"),
        ("etcd", ["--version"], f"etcd Version: {build.ETCD_RELEASE}"),
        ("kwok", ["--version"], f"kwok version v{build.KWOK_RELEASE}"),
        ("kwokctl", ["--version"], f"kwokctl version v{build.KWOK_RELEASE}"),
        ("workflow-controller", ["version"], f"workflow-controller: v{build.ARGO_RELEASE}+"),
        ("argo", ["version"], f"argo: v{build.ARGO_RELEASE}+"),
        ("mpi-operator", ["--version"], f"Version: v{build.MPI_OPERATOR_RELEASE}"),
        ("prometheus", ["--version"], f"prometheus, version {build.PROMETHEUS_RELEASE}"),
    ],
)
def test_built_binaries_report_their_pinned_versions(
    local_cluster: ClusterHandle, binary: str, argv: list[str], expected: str
) -> None:
    result = subprocess.run([str(build.binary_path(binary)), *argv], capture_output=True, text=True, timeout=30)
    assert expected in result.stdout, result.stdout + result.stderr
