"""Multi-node steps on the local cluster, end to end: a job spec with `nodes: 2` is compiled and submitted through
wf; Argo's workflow-controller runs the resource template; the simulated executor (wf/sim_executor.py) creates the
MPIJob with the Workflow's owner reference and judges it with the compiled success and failure conditions, as
`argoexec resource` does; the real mpi-operator (v0.6.0) creates launcher and workers, which the real
kube-scheduler places on simulated DL1 and CPU nodes.

That the conditions mean what Argo means by them is tests/test_resource_conditions.py (the evaluator against
Argo v4's and apimachinery's semantics); here they meet the status the real operator writes.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from wf.cluster.nodes import node_manifest
from wf.compile.interruptions import is_interruption
from wf.compile.kinds.mpijob import JOB_NAME_LABEL, JOB_ROLE_LABEL, WORKER_LOST_MESSAGE
from wf.controller.ops import replicas
from wf.core.constants import CAPACITY_LABEL, CLASS_LABEL, SIM_DURATION, SIM_EXIT_CODE, WORKFLOW_NAME_LABEL, ZONE_LABEL
from wf.model.catalog import Catalog
from wf.model.nodegroups import node_groups

from .conftest import ClusterHandle
from .test_controller_e2e import wf_cli
from .test_retries import _node_tree, _pod_nodes, _wait_final

pytestmark = pytest.mark.cluster

GROUP, VERSION, PLURAL = "kubeflow.org", "v2beta1", "mpijobs"
GAUDI_NODES = 4  # two for a job, a third to replace a lost one, one spare
COMMAND = ["mpirun", "-n", "16", "python3", "run_pretraining.py", "--do_train"]


@pytest.fixture(scope="module")
def catalog(local_cluster: ClusterHandle) -> Catalog:
    return Catalog.from_yaml_text(local_cluster.cluster.catalog_file.read_text(), "cluster catalog")


@pytest.fixture(scope="module")
def gaudi_nodes(local_cluster: ClusterHandle, catalog: Catalog, kube: Any) -> Iterator[list[str]]:
    """More simulated DL1 nodes in the class's zone, removed afterwards (other tests expect the fixture's count)."""
    from kubernetes import client as kclient

    group = next(g for g in node_groups(catalog) if g.compute_class == "gaudi")
    have = local_cluster.state.nodes_per_group
    added = [node_manifest(group, i) for i in range(have, GAUDI_NODES)]
    try:
        for node in added:
            kube.core.create_node(node)
        _until(lambda: all(_ready(kube.core.read_node(n["metadata"]["name"])) for n in added), 60, "DL1 nodes ready")
        yield [f"{group.name}-{i}" for i in range(GAUDI_NODES)]
    finally:
        for node in added:
            try:
                kube.core.delete_node(node["metadata"]["name"])
            except kclient.ApiException as exc:
                if exc.status != 404:
                    raise


def _ready(node: Any) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])


def _until(check: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := check():
            return found
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def _submit(kube: Any, tmp_path: Path, name: str, annotations: dict[str, str]) -> str:
    """Submit a 2-node BERT-Large-like job through wf; the workflow's name."""
    import wf

    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({
        "apiVersion": "wf/v1", "kind": "TrainingJob", "metadata": {"name": name, "namespace": "wf"},
        "spec": {"image": "habana/pytorch:1.21.0", "compute": "gaudi", "retries": 0, "steps": [{
            "name": "pretrain", "nodes": 2, "annotations": annotations, "command": COMMAND}]},
    }))
    (submitted,) = wf.submit(str(path), kube=kube)
    return str(submitted.name)


def _mpijobs(kube: Any, namespace: str, workflow: str) -> list[dict[str, Any]]:
    items = kube.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL,
                                                      label_selector=f"{WORKFLOW_NAME_LABEL}={workflow}")["items"]
    return sorted(items, key=lambda j: j["metadata"]["creationTimestamp"])


def _replicas(kube: Any, namespace: str, mpijob: str, role: str, phase: str | None = None) -> list[Any]:
    pods = kube.core.list_namespaced_pod(namespace, label_selector=f"{JOB_NAME_LABEL}={mpijob},{JOB_ROLE_LABEL}={role}")
    return [p for p in pods.items if phase is None or (p.status.phase == phase and not p.metadata.deletion_timestamp)]


def _delete(local_cluster: ClusterHandle, workflow: str) -> None:
    assert wf_cli(local_cluster, "delete", workflow).returncode == 0


def test_a_submitted_two_node_step_runs_on_two_dl1_nodes_with_a_cpu_launcher(
        local_cluster: ClusterHandle, kube: Any, gaudi_nodes: list[str], tmp_path: Path) -> None:
    ns = local_cluster.namespace
    name = _submit(kube, tmp_path, "bert-2n", {SIM_DURATION: "8s"})
    (mpijob,) = _until(lambda: _mpijobs(kube, ns, name), 60, "the sim executor to create the MPIJob")
    job = mpijob["metadata"]["name"]
    workers = _until(lambda: (w := _replicas(kube, ns, job, "worker", "Running")) and len(w) == 2 and w, 90,
                     "2 running workers")
    launcher = _until(lambda: [p for p in _replicas(kube, ns, job, "launcher") if p.spec.node_name], 90,
                      "the launcher scheduled")[0]
    workflow = _wait_final(kube, name, timeout=180)
    tree = _node_tree(workflow)
    print(f"\n{name}:\n{tree}")
    assert workflow["status"]["phase"] == "Succeeded", tree

    # Created as Argo's executor creates it: owned by the Workflow, so deleting the workflow removes it.
    (owner,) = mpijob["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "Workflow", name, workflow["metadata"]["uid"], True)
    worker_nodes = [kube.core.read_node(w.spec.node_name) for w in workers]
    launcher_node = kube.core.read_node(launcher.spec.node_name)
    assert len({n.metadata.name for n in worker_nodes}) == 2, "workers share a node"
    assert {n.metadata.labels[CLASS_LABEL] for n in worker_nodes} == {"gaudi"}
    assert {n.metadata.labels[ZONE_LABEL] for n in worker_nodes} == {"us-east-1a"}
    assert launcher_node.metadata.labels[CLASS_LABEL] == "cpu"
    # The launcher's loss would read as mpirun failing: it runs On-Demand, which the cpu class offers.
    assert launcher_node.metadata.labels[CAPACITY_LABEL] == "on-demand"
    # `wf get` lists launcher and workers with their nodes and capacity (while their MPIJob keeps them).
    listed = {(r.role, r.node, r.capacity) for r in replicas(kube, name, ns)}
    assert {("launcher", launcher.spec.node_name, "on-demand")} <= listed, listed
    # Each worker holds the whole node: all 8 cards, the hugepage pool and the 4 EFA interfaces.
    limits = workers[0].spec.containers[0].resources.limits
    assert limits["habana.ai/gaudi"] == "8" and limits["vpc.amazonaws.com/efa"] == "4", limits
    assert limits["hugepages-2Mi"] == worker_nodes[0].status.allocatable["hugepages-2Mi"]
    assert launcher.metadata.labels[WORKFLOW_NAME_LABEL] == name
    status = kube.custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, job)["status"]
    assert status["replicaStatuses"]["Launcher"]["succeeded"] == 1
    assert any(c["type"] == "Succeeded" and c["status"] == "True" for c in status["conditions"])

    _delete(local_cluster, name)
    _until(lambda: not _mpijobs(kube, ns, name), 60, "the MPIJob garbage-collected with its workflow")


def test_a_launcher_exiting_non_zero_fails_the_workflow_as_the_applications_failure(
        local_cluster: ClusterHandle, kube: Any, gaudi_nodes: list[str], tmp_path: Path) -> None:
    name = _submit(kube, tmp_path, "bert-exit", {SIM_DURATION: "3s", SIM_EXIT_CODE: "3"})
    workflow = _wait_final(kube, name, timeout=180)
    tree = _node_tree(workflow)
    print(f"\n{name}:\n{tree}")
    assert workflow["status"]["phase"] == "Failed", tree
    (attempt,) = _pod_nodes(workflow)  # no interruption retry
    # Argo's message: the main container's exit and argoexec's error, naming the requirement that matched.
    assert attempt["message"] == ("main: Error (exit code 1): failure condition "
                                  "'{status.replicaStatuses.Launcher.failed gt [0]}' evaluated true"), tree
    assert not is_interruption(attempt["message"])
    _delete(local_cluster, name)


def test_a_lost_worker_is_an_interruption_and_the_retried_step_succeeds(
        local_cluster: ClusterHandle, catalog: Catalog, kube: Any, gaudi_nodes: list[str], tmp_path: Path) -> None:
    import wf

    ns = local_cluster.namespace
    name = _submit(kube, tmp_path, "bert-lost", {SIM_DURATION: "30s"})
    (first,) = _until(lambda: _mpijobs(kube, ns, name), 60, "the first MPIJob")
    workers = _until(lambda: (w := _replicas(kube, ns, first["metadata"]["name"], "worker", "Running"))
                     and len(w) == 2 and w, 90, "2 running workers")
    lost = workers[0]
    lost_node = lost.spec.node_name
    try:
        # What the kubelet reports on a Spot reclaim (graceful node shutdown); then the node is gone.
        kube.core.patch_namespaced_pod_status(lost.metadata.name, ns, {"status": {
            "phase": "Failed", "reason": "Terminated",
            "message": "Pod was terminated in response to imminent node shutdown."}})
        kube.core.delete_node(lost_node)
        # The interruption retry runs the template again: a new MPIJob, on DL1 nodes that are still there.
        second = _until(lambda: (jobs := _mpijobs(kube, ns, name)) and len(jobs) == 2 and jobs[1], 120,
                        "the retry's MPIJob")
        retry_workers = _until(lambda: (w := _replicas(kube, ns, second["metadata"]["name"], "worker", "Running"))
                               and len(w) == 2 and w, 90, "2 running workers of the retry")
        retry_nodes = {w.spec.node_name for w in retry_workers}
        assert len(retry_nodes) == 2 and lost_node not in retry_nodes
        workflow = _wait_final(kube, name, timeout=240)
        tree = _node_tree(workflow)
        print(f"\n{name}:\n{tree}")
        assert workflow["status"]["phase"] == "Succeeded", tree
        interrupted, retried = sorted(_pod_nodes(workflow), key=lambda n: n["startedAt"])
        assert WORKER_LOST_MESSAGE in interrupted["message"], tree
        assert is_interruption(interrupted["message"])
        assert retried["phase"] == "Succeeded", tree
        assert len(_mpijobs(kube, ns, name)) == 2
        outcome = wf.watch([name], namespace=ns, kube=kube).outcome
        (view,) = outcome.views.values()
        (step,) = view.steps
        assert (step.interruptions, step.retries) == (1, 0), step
        assert [a.outcome for a in step.attempts] == ["interrupted", "succeeded"], step
        # Priced per replica: two DL1 workers on Spot and the On-Demand launcher, for both attempts; the
        # interrupted attempt's run (no checkpoint) is redone work.
        (cost,) = outcome.costs.values()
        (priced,) = cost.steps
        assert priced.unpriced_attempts == 0 and set(priced.instance_types) >= {"dl1.24xlarge"}, priced
        assert 0 < priced.redone_node_hours < priced.node_hours, priced
    finally:
        group = next(g for g in node_groups(catalog) if g.compute_class == "gaudi")
        try:
            kube.core.read_node(lost_node)
        except Exception:  # put the node back for the other tests
            kube.core.create_node(node_manifest(group, int(lost_node.rsplit("-", 1)[1])))
    _delete(local_cluster, name)


def test_wf_logs_reads_the_mpijob_pods_and_wf_stop_removes_them(
        local_cluster: ClusterHandle, kube: Any, gaudi_nodes: list[str], tmp_path: Path) -> None:
    ns = local_cluster.namespace
    name = _submit(kube, tmp_path, "bert-stop", {SIM_DURATION: "5m"})
    (mpijob,) = _until(lambda: _mpijobs(kube, ns, name), 60, "the MPIJob")
    selector = f"{JOB_NAME_LABEL}={mpijob['metadata']['name']}"
    _until(lambda: len([p for p in kube.core.list_namespaced_pod(ns, label_selector=selector).items
                        if p.status.phase == "Running"]) == 3, 90, "launcher and 2 workers running")

    logs = wf_cli(local_cluster, "logs", name, "--step", "pretrain")
    assert logs.returncode == 0, logs.stderr
    lines = logs.stdout.splitlines()
    assert lines and all(line.startswith("[pretrain] ") for line in lines), logs.stdout
    assert "no log from pod" not in logs.stdout
    launcher = kube.core.list_namespaced_pod(ns, label_selector=f"{selector},{JOB_ROLE_LABEL}=launcher").items[0]
    per_pod = len(kube.core.read_namespaced_pod_log(launcher.metadata.name, ns, container="main").splitlines())
    assert per_pod and len(lines) == 4 * per_pod  # Argo's own pod, the launcher and the 2 workers

    stopped = wf_cli(local_cluster, "stop", name)
    assert stopped.returncode == 0, stopped.stderr
    _until(lambda: not _mpijobs(kube, ns, name), 60, "the MPIJob removed")
    gone = f"{WORKFLOW_NAME_LABEL}={name}"
    _until(lambda: not kube.core.list_namespaced_pod(ns, label_selector=gone).items, 90,
           "the launcher and workers removed")
    _delete(local_cluster, name)
