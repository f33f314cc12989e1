"""Multi-node steps on the local cluster: the compiled MPIJob, run by the real mpi-operator (v0.6.0, built from
Go modules and started by `wf cluster up`), scheduled by the real kube-scheduler on simulated DL1 and CPU nodes,
and judged by Argo v4's own resource wait (workflow/executor WaitResource, built from the same module as the
workflow-controller into a small command, tests/e2e/argo_wait) with the compiled success and failure conditions.

What kwok cannot do is run Argo's executor, which in a real cluster creates the MPIJob from the resource
template: the tests create the compiled manifest themselves, with the variables Argo substitutes filled in.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from wf.catalog import Catalog
from wf.cluster.nodes import node_manifest
from wf.compile import compile_job
from wf.constants import CLASS_LABEL, SIM_DURATION, SIM_EXIT_CODE, WORKFLOW_NAME_LABEL, ZONE_LABEL
from wf.mpijob import JOB_NAME_LABEL, JOB_ROLE_LABEL, WORKER_LOST_MESSAGE
from wf.nodegroups import node_groups
from wf.spec import load_job

from .conftest import ClusterHandle

pytestmark = pytest.mark.cluster

ARGO_WAIT = Path(__file__).with_name("argo_wait")
GROUP, VERSION, PLURAL = "kubeflow.org", "v2beta1", "mpijobs"
EXTRA_GAUDI_NODES = 3  # with the cluster's one: two for a job, a third to replace a lost one, one spare


@pytest.fixture(scope="module")
def argo_wait(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Argo's resource wait as a command, built from argo-workflows v4.0.7 (the cluster's controller version)."""
    out = tmp_path_factory.mktemp("argo-wait") / "argo-wait"
    env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local"}
    result = subprocess.run(["go", "build", "-o", str(out), "."], cwd=ARGO_WAIT, env=env, capture_output=True,
                            text=True, check=False, timeout=1800)
    assert result.returncode == 0, result.stderr
    return out


@pytest.fixture(scope="module")
def catalog(local_cluster: ClusterHandle) -> Catalog:
    return Catalog.from_yaml_text(local_cluster.cluster.catalog_file.read_text(), "cluster catalog")


@pytest.fixture(scope="module")
def gaudi_nodes(local_cluster: ClusterHandle, catalog: Catalog) -> Iterator[list[str]]:
    """More simulated DL1 nodes in the class's zone, removed afterwards (other tests expect one per group)."""
    from kubernetes import client as kclient

    group = next(g for g in node_groups(catalog) if g.compute_class == "gaudi")
    api = local_cluster.api_client()
    core = kclient.CoreV1Api(api)
    added = [node_manifest(group, i) for i in range(1, 1 + EXTRA_GAUDI_NODES)]
    try:
        for node in added:
            core.create_node(node)
        _until(lambda: all(_ready(core.read_node(n["metadata"]["name"])) for n in added), 60, "DL1 nodes ready")
        yield [f"{group.name}-{i}" for i in range(1 + EXTRA_GAUDI_NODES)]
    finally:
        for node in added:
            try:
                core.delete_node(node["metadata"]["name"])
            except kclient.ApiException as exc:
                if exc.status != 404:
                    raise
        api.close()


def _ready(node: Any) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])


def _until(check: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := check():
            return found
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def _compiled(tmp_path: Path, catalog: Catalog, name: str, annotations: dict[str, str]) -> dict[str, Any]:
    """The resource template of a 2-node BERT-Large-like step, as `wf compile` emits it."""
    doc = {
        "apiVersion": "wf/v1", "kind": "TrainingJob", "metadata": {"name": name, "namespace": "wf"},
        "spec": {"image": "habana/pytorch:1.21.0", "compute": "gaudi", "steps": [{
            "name": "pretrain", "nodes": 2, "annotations": annotations,
            "command": ["mpirun", "-n", "16", "python3", "run_pretraining.py", "--do_train"],
        }]},
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    workflow = compile_job(load_job(path), catalog, submission="e2e")
    return next(t for t in workflow["spec"]["templates"] if "resource" in t)


class Attempt:
    """One attempt of the step: the MPIJob Argo's executor would create, and Argo's wait on it."""

    def __init__(self, cluster: ClusterHandle, template: dict[str, Any], argo_wait: Path, tmp_path: Path,
                 workflow: str) -> None:
        from kubernetes import client as kclient

        self.api = cluster.api_client()
        self.custom = kclient.CustomObjectsApi(self.api)
        self.core = kclient.CoreV1Api(self.api)
        self.namespace = cluster.namespace
        manifest = yaml.safe_load(template["resource"]["manifest"].replace("{{workflow.name}}", workflow))
        created = self.custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, manifest)
        self.name = created["metadata"]["name"]
        template_file = tmp_path / f"{self.name}.json"
        template_file.write_text(json.dumps(template))
        self_link = f"/apis/{GROUP}/{VERSION}/namespaces/{self.namespace}/{PLURAL}/{self.name}"
        self.wait = subprocess.Popen(
            [str(argo_wait), str(cluster.kubeconfig), str(template_file), self.namespace, self.name, self_link],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def pods(self, role: str) -> list[Any]:
        selector = f"{JOB_NAME_LABEL}={self.name},{JOB_ROLE_LABEL}={role}"
        return self.core.list_namespaced_pod(self.namespace, label_selector=selector).items

    def running_workers(self, count: int) -> list[Any] | None:
        workers = [p for p in self.pods("worker") if p.status.phase == "Running"]
        return workers if len(workers) == count else None

    def outcome(self, timeout: float = 180) -> tuple[int, str]:
        try:
            out, err = self.wait.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.wait.kill()
            out, err = self.wait.communicate()
            raise AssertionError(f"Argo's wait on {self.name} did not end in {timeout:.0f}s:\n{err[-3000:]}") from None
        print(f"\nArgo's wait on {self.name}: exit {self.wait.returncode}: {out.strip()}")
        return self.wait.returncode, out.strip()

    def close(self) -> None:
        if self.wait.poll() is None:
            self.wait.kill()
            self.wait.communicate()
        self.api.close()


def _node(core: Any, name: str) -> Any:
    return core.read_node(name)


def test_two_dl1_workers_and_a_cpu_launcher_succeed(local_cluster: ClusterHandle, catalog: Catalog,
                                                     gaudi_nodes: list[str], argo_wait: Path, tmp_path: Path) -> None:
    template = _compiled(tmp_path, catalog, "bert-2n", {SIM_DURATION: "8s"})
    attempt = Attempt(local_cluster, template, argo_wait, tmp_path, f"bert-2n-{uuid.uuid4().hex[:5]}")
    try:
        workers = _until(lambda: attempt.running_workers(2), 90, "2 running workers")
        launcher = _until(lambda: attempt.pods("launcher"), 60, "the launcher pod")[0]
        worker_nodes = [_node(attempt.core, w.spec.node_name) for w in workers]
        launcher_node = _node(attempt.core, _until(lambda: attempt.pods("launcher")[0].spec.node_name, 60,
                                                   "the launcher scheduled"))
        code, message = attempt.outcome()
        assert code == 0 and message == "succeeded", message
        assert len({n.metadata.name for n in worker_nodes}) == 2, "workers share a node"
        assert {n.metadata.labels[CLASS_LABEL] for n in worker_nodes} == {"gaudi"}
        assert {n.metadata.labels[ZONE_LABEL] for n in worker_nodes} == {"us-east-1a"}
        assert launcher_node.metadata.labels[CLASS_LABEL] == "cpu"
        # Each worker holds the whole node: all 8 cards, the hugepage pool and the 4 EFA interfaces.
        limits = workers[0].spec.containers[0].resources.limits
        assert limits["habana.ai/gaudi"] == "8" and limits["vpc.amazonaws.com/efa"] == "4", limits
        assert limits["hugepages-2Mi"] == worker_nodes[0].status.allocatable["hugepages-2Mi"]
        assert launcher.metadata.labels[WORKFLOW_NAME_LABEL].startswith("bert-2n-")
        status = attempt.custom.get_namespaced_custom_object(GROUP, VERSION, attempt.namespace, PLURAL, attempt.name)
        assert any(c["type"] == "Succeeded" and c["status"] == "True" for c in status["status"]["conditions"])
    finally:
        attempt.close()


def test_a_lost_worker_ends_the_attempt_as_an_interruption_and_the_retry_succeeds(
        local_cluster: ClusterHandle, catalog: Catalog, gaudi_nodes: list[str], argo_wait: Path,
        tmp_path: Path) -> None:
    from kubernetes import client as kclient

    template = _compiled(tmp_path, catalog, "bert-lost", {SIM_DURATION: "10m"})
    workflow = f"bert-lost-{uuid.uuid4().hex[:5]}"
    first = Attempt(local_cluster, template, argo_wait, tmp_path, workflow)
    lost_node = ""
    try:
        workers = _until(lambda: first.running_workers(2), 90, "2 running workers")
        lost = workers[0]
        lost_node = lost.spec.node_name
        # What the kubelet reports on a Spot reclaim (graceful node shutdown); then the node is gone.
        first.core.patch_namespaced_pod_status(lost.metadata.name, first.namespace, {"status": {
            "phase": "Failed", "reason": "Terminated",
            "message": "Pod was terminated in response to imminent node shutdown."}})
        first.core.delete_node(lost_node)
        code, message = first.outcome()
        assert code == 1 and WORKER_LOST_MESSAGE in message, message
        # mpirun fails once a peer is gone; its MPIJob then ends and frees the other workers' nodes for the retry.
        launcher = first.pods("launcher")[0]
        first.core.patch_namespaced_pod_status(launcher.metadata.name, first.namespace, {"status": {
            "phase": "Failed", "containerStatuses": [{
                "name": "main", "image": launcher.spec.containers[0].image, "ready": False, "restartCount": 0,
                "imageID": "", "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}]}})
        _until(lambda: not [p for p in first.pods("worker") if p.status.phase in ("Running", "Pending")
                            and not p.metadata.deletion_timestamp], 90, "the failed attempt's workers removed")
    finally:
        first.close()
    # Argo's interruption retry runs the template again: a new MPIJob on the remaining DL1 nodes.
    template = _compiled(tmp_path, catalog, "bert-lost", {SIM_DURATION: "5s"})
    retry = Attempt(local_cluster, template, argo_wait, tmp_path, workflow)
    try:
        workers = _until(lambda: retry.running_workers(2), 90, "2 running workers of the retry")
        assert lost_node not in {w.spec.node_name for w in workers}
        assert len({w.spec.node_name for w in workers}) == 2
        code, message = retry.outcome()
        assert code == 0 and message == "succeeded", message
    finally:
        retry.close()
        group = next(g for g in node_groups(catalog) if g.compute_class == "gaudi")
        core = kclient.CoreV1Api(local_cluster.api_client())
        index = int(lost_node.rsplit("-", 1)[1]) if lost_node else None
        if index is not None:  # put the node back for the other tests
            core.create_node(node_manifest(group, index))
        core.api_client.close()


def test_a_launcher_exiting_non_zero_is_the_applications_failure(
        local_cluster: ClusterHandle, catalog: Catalog, gaudi_nodes: list[str], argo_wait: Path,
        tmp_path: Path) -> None:
    template = _compiled(tmp_path, catalog, "bert-exit", {SIM_DURATION: "3s", SIM_EXIT_CODE: "3"})
    attempt = Attempt(local_cluster, template, argo_wait, tmp_path, f"bert-exit-{uuid.uuid4().hex[:5]}")
    try:
        code, message = attempt.outcome()
        assert code == 1 and "replicaStatuses.Launcher.failed" in message, message
        assert WORKER_LOST_MESSAGE not in message
    finally:
        attempt.close()


def test_wf_logs_reads_the_mpijob_pods_and_wf_stop_removes_them(
        local_cluster: ClusterHandle, catalog: Catalog, gaudi_nodes: list[str], tmp_path: Path) -> None:
    from kubernetes import client as kclient

    import wf
    from wf.controller.client import connect

    from .test_controller_e2e import wf_cli

    kube = connect(kubeconfig=str(local_cluster.kubeconfig), context=local_cluster.context)
    path = tmp_path / "bert-stop.yaml"
    path.write_text(yaml.safe_dump({
        "apiVersion": "wf/v1", "kind": "TrainingJob", "metadata": {"name": "bert-stop", "namespace": "wf"},
        "spec": {"image": "habana/pytorch:1.21.0", "compute": "gaudi", "steps": [{
            "name": "pretrain", "nodes": 2, "annotations": {SIM_DURATION: "5m"},
            "command": ["mpirun", "-n", "16", "python3", "run_pretraining.py"]}]},
    }))
    (submitted,) = wf.submit(str(path), kube=kube)
    workflow = wf.get(submitted.name, kube=kube)
    template = next(t for t in workflow["spec"]["templates"] if "resource" in t)
    manifest = yaml.safe_load(template["resource"]["manifest"].replace("{{workflow.name}}", submitted.name))
    # What Argo's executor adds for setOwnerReference: true.
    manifest["metadata"]["ownerReferences"] = [{"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
                                                "name": submitted.name, "uid": workflow["metadata"]["uid"]}]
    with local_cluster.api_client() as api:
        custom, core = kclient.CustomObjectsApi(api), kclient.CoreV1Api(api)
        created = custom.create_namespaced_custom_object(GROUP, VERSION, local_cluster.namespace, PLURAL, manifest)
        selector = f"{JOB_NAME_LABEL}={created['metadata']['name']}"
        _until(lambda: len([p for p in core.list_namespaced_pod(local_cluster.namespace, label_selector=selector).items
                            if p.status.phase == "Running"]) == 3, 90, "launcher and 2 workers running")

        logs = wf_cli(local_cluster, "logs", submitted.name, "--step", "pretrain")
        assert logs.returncode == 0, logs.stderr
        lines = logs.stdout.splitlines()
        assert lines and all(line.startswith("[pretrain] ") for line in lines), logs.stdout
        assert "no log from pod" not in logs.stdout
        launcher = core.list_namespaced_pod(local_cluster.namespace,
                                            label_selector=f"{selector},{JOB_ROLE_LABEL}=launcher").items[0]
        per_pod = len(core.read_namespaced_pod_log(launcher.metadata.name, local_cluster.namespace,
                                                   container="main").splitlines())
        assert per_pod and len(lines) == 4 * per_pod  # Argo's own pod, the launcher and the 2 workers

        stopped = wf_cli(local_cluster, "stop", submitted.name)
        assert stopped.returncode == 0, stopped.stderr
        gone = f"{WORKFLOW_NAME_LABEL}={submitted.name}"
        _until(lambda: not custom.list_namespaced_custom_object(
            GROUP, VERSION, local_cluster.namespace, PLURAL, label_selector=gone)["items"], 60, "the MPIJob removed")
        _until(lambda: not core.list_namespaced_pod(local_cluster.namespace, label_selector=gone).items, 90,
               "the launcher and workers removed")
    assert wf_cli(local_cluster, "delete", submitted.name).returncode == 0
