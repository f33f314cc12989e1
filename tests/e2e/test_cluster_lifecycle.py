"""The local cluster's lifecycle: idempotent `up`, repair of a dead component, clean `down`, two clusters
side by side, loopback-only listeners."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from wf.cluster import processes
from wf.cluster.install import FIELD_MANAGER
from wf.cluster.supervise import CONTROLLER, OWN_PROCESSES, SIM_EXECUTOR, ComponentStatus
from wf.controller.client import Kube
from wf.core.constants import CATALOG_CONFIGMAP, CATALOG_NAMESPACE

from .conftest import ClusterHandle, start_cluster, stop_cluster

pytestmark = pytest.mark.cluster


def _by_name(handle: ClusterHandle) -> dict[str, ComponentStatus]:
    return {c.name: c for c in handle.cluster.status()}


def test_status_lists_every_component_running_with_pid_port_and_log(local_cluster: ClusterHandle) -> None:
    components = _by_name(local_cluster)
    assert set(components) == {
        "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok-controller", CONTROLLER,
        *OWN_PROCESSES,
        "mpi-operator", "postgres", "argo-server", "prometheus",
    }
    for comp in components.values():
        assert comp.running, comp
        assert comp.pid and (comp.port or comp.name == SIM_EXECUTOR), comp  # the recorder serves wf's metrics
        assert Path(comp.log).is_file(), comp


def test_up_twice_is_harmless(local_cluster: ClusterHandle, kube: Kube) -> None:
    before = {c.name: c.pid for c in local_cluster.cluster.status()}
    applied_before = _our_apply_times(kube)
    state_before = local_cluster.cluster.state()
    # No options: an existing cluster keeps its node count, namespaces and catalog.
    local_cluster.cluster.up(merge_into=local_cluster.kubeconfig)
    assert {c.name: c.pid for c in local_cluster.cluster.status()} == before
    assert local_cluster.cluster.state() == state_before
    # Re-applying unchanged objects is a no-op: server-side apply did not touch our fields on any node.
    assert _our_apply_times(kube) == applied_before


def test_up_repairs_a_killed_api_server_and_leaves_the_rest_alone(local_cluster: ClusterHandle, kube: Kube) -> None:
    before = {c.name: c.pid for c in local_cluster.cluster.status()}
    os.kill(before["kube-apiserver"], signal.SIGKILL)
    deadline = time.monotonic() + 10
    while _by_name(local_cluster)["kube-apiserver"].running and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _by_name(local_cluster)["kube-apiserver"].running

    local_cluster.cluster.up(merge_into=local_cluster.kubeconfig)
    after = _by_name(local_cluster)
    assert after["kube-apiserver"].running
    assert after["kube-apiserver"].pid != before["kube-apiserver"]
    # The mpi-operator exits when it cannot renew its leader lease for 5 s (upstream has no switch to run
    # without one); `up` restarts it like any dead component.
    assert after["mpi-operator"].running
    assert {n: c.pid for n, c in after.items() if n not in ("kube-apiserver", "mpi-operator")} == {
        n: p for n, p in before.items() if n not in ("kube-apiserver", "mpi-operator")
    }
    assert kube.core.list_node().items


def test_up_repairs_an_api_server_that_is_still_shutting_down(local_cluster: ClusterHandle, kube: Kube) -> None:
    # A plain `kill` starts kube-apiserver's graceful stop (seconds: it closes its watches within the grace
    # period wf.cluster.tuning gives it); `up` in that window must wait for it to exit and start it again, not
    # take it for running.
    before = _by_name(local_cluster)["kube-apiserver"]
    assert before.pid
    os.kill(before.pid, signal.SIGTERM)
    assert processes.is_running(before.pid)  # the window this test is about
    started = time.monotonic()
    local_cluster.cluster.up(merge_into=local_cluster.kubeconfig)
    after = _by_name(local_cluster)["kube-apiserver"]
    assert after.running and after.pid != before.pid
    assert not processes.is_running(before.pid)
    assert time.monotonic() - started < 150
    assert kube.core.list_node().items


def test_up_restarts_a_dead_workflow_controller(local_cluster: ClusterHandle) -> None:
    before = _by_name(local_cluster)
    os.kill(before[CONTROLLER].pid, signal.SIGKILL)
    local_cluster.cluster.up(merge_into=local_cluster.kubeconfig)
    after = _by_name(local_cluster)
    assert after[CONTROLLER].running and after[CONTROLLER].pid != before[CONTROLLER].pid
    assert {n: c.pid for n, c in after.items() if n != CONTROLLER} == {
        n: c.pid for n, c in before.items() if n != CONTROLLER
    }


def test_every_listener_is_on_loopback(local_cluster: ClusterHandle) -> None:
    listeners = {
        comp.name: _listening_addresses(comp.pid) for comp in local_cluster.cluster.status() if comp.pid
    }
    # every component serves something, but the simulated executor, which only calls the API server (the recorder
    # serves wf's metrics)
    assert all(v for n, v in listeners.items() if n != SIM_EXECUTOR), listeners
    for name, addresses in listeners.items():
        assert all(addr.startswith("127.0.0.1:") for addr in addresses), (name, addresses)


def _listening_addresses(pid: int) -> list[str]:
    """The pid's TCP listening sockets as "ip:port", read from /proc (no ss/netstat needed)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = []
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and inode in inodes:  # 0A = LISTEN
                ip_hex, port_hex = local.split(":")
                found.append(f"{_ip(ip_hex, width)}:{int(port_hex, 16)}")
    return found


def _ip(hex_ip: str, width: int) -> str:
    if width == 8:  # IPv4, little-endian
        return ".".join(str(int(hex_ip[i : i + 2], 16)) for i in (6, 4, 2, 0))
    return "[" + hex_ip + "]"  # any IPv6 listener fails the loopback check, which is the point


def test_second_cluster_runs_beside_the_first_and_down_leaves_nothing(
    local_cluster: ClusterHandle, tmp_path_factory: pytest.TempPathFactory
) -> None:
    root = tmp_path_factory.mktemp("wf-cluster-2")
    second = start_cluster(root, f"e2eb{os.getpid()}", nodes_per_group=0)
    try:
        ports = {c.port for c in second.cluster.status()} - {None}  # the simulated executor has none
        assert not ports & {c.port for c in local_cluster.cluster.status()}
        assert all(c.running for c in second.cluster.status())
    finally:
        pids = [c.pid for c in second.cluster.status() if c.pid]
        stop_cluster(second)
    assert pids and not any(processes.is_running(pid) for pid in pids)
    assert not second.cluster.workdir.exists()
    import yaml

    merged = yaml.safe_load((root / "kubeconfig").read_text())
    assert second.context not in [c["name"] for c in merged.get("contexts") or []]
    # The first cluster is untouched.
    assert all(c.running for c in local_cluster.cluster.status())


def _our_apply_times(kube: Kube) -> dict[str, list[str]]:
    """When wf last wrote each node and the catalog ConfigMap (managedFields of our field manager)."""
    objects = [*kube.core.list_node().items, kube.core.read_namespaced_config_map(CATALOG_CONFIGMAP, CATALOG_NAMESPACE)]
    times = {
        o.metadata.name: [str(m.time) for m in o.metadata.managed_fields or [] if m.manager == FIELD_MANAGER]
        for o in objects
    }
    assert all(times.values()), f"objects not written by {FIELD_MANAGER}: {[n for n, t in times.items() if not t]}"
    return times
