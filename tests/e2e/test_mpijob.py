"""Multi-node steps on the local cluster, end to end: a job spec with `nodes: 2` is compiled and submitted through
wf; Argo's workflow-controller runs the resource template; the simulated executor (wf/cluster/executor.py) plays
its init container (kubectl deleting the MPIJob an earlier attempt left, and waiting until it is gone), then creates
the MPIJob with the Workflow's owner reference and judges it with the compiled success and failure conditions, as
`argoexec resource` does; the real mpi-operator (v0.6.0) creates launcher and workers, which the real
kube-scheduler places on simulated DL1 and CPU nodes; the real garbage collector deletes an MPIJob's pods before it.

That the conditions mean what Argo means by them is tests/test_resource_conditions.py (the evaluator against
Argo v4's and apimachinery's semantics); here they meet the status the real operator writes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from wf.cluster.nodes import node_manifest, node_name
from wf.compile.interruptions import MPI_WORKER_FAILED, is_interruption
from wf.compile.kinds.mpijob import JOB_NAME_LABEL, JOB_ROLE_LABEL, WORKER_LOST_MESSAGE
from wf.controller.client import pod_log
from wf.controller.ops import replicas
from wf.core.constants import (
    CAPACITY_LABEL,
    CLASS_LABEL,
    MPIJOB_LABEL,
    SIM_DURATION,
    SIM_EXIT_CODE,
    WORKFLOW_NAME_LABEL,
    ZONE_LABEL,
)
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


def _until(check: Any, timeout: float, what: str, explain: Any = None) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := check():
            return found
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}" + (f"\n{explain()}" if explain else ""))


def _explain(local_cluster: ClusterHandle, kube: Any, workflow: str) -> Callable[[], str]:
    """What a timed-out wait shows: the workflow's nodes, its pods (phase, node, sim annotations, containers) and
    the ends of the simulated executor's, the node recorder's and the mpi-operator's logs."""

    def explain() -> str:
        lines = [_node_tree(kube.custom.get_namespaced_custom_object(
            "argoproj.io", "v1alpha1", local_cluster.namespace, "workflows", workflow))]
        for selector in (f"workflows.argoproj.io/workflow={workflow}", f"{WORKFLOW_NAME_LABEL}={workflow}"):
            for pod in kube.core.list_namespaced_pod(local_cluster.namespace, label_selector=selector).items:
                containers = [*(pod.status.init_container_statuses or []), *(pod.status.container_statuses or [])]
                states = [(c.name, {k: v for k, v in c.state.to_dict().items() if v}) for c in containers]
                sim = {k: v for k, v in (pod.metadata.annotations or {}).items() if k.startswith("sim.")}
                lines.append(f"pod {pod.metadata.name} {pod.status.phase} on {pod.spec.node_name} {sim} {states}")
        for log in ("sim-executor", "node-recorder", "mpi-operator"):
            path = local_cluster.cluster.workdir / "logs" / f"{log}.log"
            if path.is_file():
                lines += [f"--- {path}", *path.read_text(errors="replace").splitlines()[-40:]]
        return "\n".join(lines)

    return explain


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
    (mpijob,) = _until(lambda: _mpijobs(kube, ns, name), 60, "the sim executor to create the MPIJob",
                       _explain(local_cluster, kube, name))
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


class GangSampler(threading.Thread):
    """Samples a workflow's MPIJobs and their pods while it runs: which MPIJobs (by UID) have live pods (not
    Succeeded or Failed, Terminating included: they still hold their nodes) at each moment. A launcher pod's MPIJob
    is its Job's: the pods are listed before the Jobs (a pod's Job exists before it), and every Job seen is kept (a
    Job deleted before its pod). Listed the other way, a launcher created between the two lists had an unknown Job,
    counted as a second gang beside its own MPIJob's workers: one sampled "overlap" of issue 32's flake."""

    def __init__(self, kube: Any, namespace: str, workflow: str) -> None:
        super().__init__(daemon=True)
        self.kube, self.namespace, self.workflow = kube, namespace, workflow
        self.done = threading.Event()
        self.samples: list[tuple[int, frozenset[str]]] = []  # (MPIJob objects listed, UIDs owning live pods)
        self.errors: list[str] = []

    def run(self) -> None:
        from kubernetes import client as kclient

        batch = kclient.BatchV1Api(self.kube.api_client)
        selector = f"{WORKFLOW_NAME_LABEL}={self.workflow}"
        launchers: dict[str, str | None] = {}  # launcher Job UID -> its MPIJob's UID
        while not self.done.wait(0.25):
            try:
                jobs = self.kube.custom.list_namespaced_custom_object(
                    GROUP, VERSION, self.namespace, PLURAL, label_selector=selector)["items"]
                pods = self.kube.core.list_namespaced_pod(self.namespace, label_selector=selector).items
                launchers.update({j.metadata.uid: next((o.uid for o in j.metadata.owner_references or []
                                                        if o.kind == "MPIJob"), None)
                                  for j in batch.list_namespaced_job(self.namespace).items})
            except Exception as exc:  # one lost sample, not the test
                self.errors.append(str(exc))
                continue
            owners = set()
            for pod in pods:
                if pod.status.phase in ("Succeeded", "Failed"):
                    continue
                for ref in pod.metadata.owner_references or []:
                    owners.add(ref.uid if ref.kind == "MPIJob" else launchers.get(ref.uid) or f"job {ref.uid}")
            self.samples.append((len(jobs), frozenset(owners)))


def _gang(kube: Any, ns: str, workflow: str, not_uids: set[str]) -> tuple[dict[str, Any], list[Any], Any, Any]:
    """The step's next MPIJob (a UID not in `not_uids`) once its 2 workers run and its launcher is scheduled: the
    MPIJob, its workers, its launcher and the Argo resource pod that created it."""

    def found() -> tuple[dict[str, Any], list[Any], Any, Any] | None:
        jobs = [j for j in _mpijobs(kube, ns, workflow) if j["metadata"]["uid"] not in not_uids]
        if not jobs:
            return None
        name, uid = jobs[0]["metadata"]["name"], jobs[0]["metadata"]["uid"]
        owned = [p for p in _replicas(kube, ns, name, "worker", "Running")
                 if any(o.uid == uid for o in p.metadata.owner_references or [])]
        launchers = [p for p in _replicas(kube, ns, name, "launcher") if p.spec.node_name
                     and not p.metadata.deletion_timestamp and p.status.phase in ("Pending", "Running")]
        argo = [p for p in kube.core.list_namespaced_pod(ns, label_selector=f"{MPIJOB_LABEL}={name}").items
                if p.status.phase == "Running"]
        return (jobs[0], owned, launchers[0], argo[0]) if len(owned) == 2 and launchers and argo else None

    return _until(found, 240, f"a new MPIJob of {workflow} with 2 running workers and a launcher")


def _restore(kube: Any, catalog: Catalog, names: list[str]) -> None:
    """Put back the nodes a test deleted (other tests expect the fixture's nodes)."""
    from kubernetes import client as kclient

    for name in names:
        try:
            kube.core.read_node(name)
        except kclient.ApiException:
            group, index = next((g, i) for g in node_groups(catalog) for i in range(GAUDI_NODES)
                                if node_name(g, i) == name)
            kube.core.create_node(node_manifest(group, index))


def test_one_gang_at_a_time_through_a_lost_worker_and_a_lost_launcher_both_interruptions(
        local_cluster: ClusterHandle, catalog: Catalog, kube: Any, gaudi_nodes: list[str], tmp_path: Path) -> None:
    """A worker's node goes, then, in the retry, the launcher's: each is an interruption, the third attempt
    succeeds, and no two MPIJobs of the step ever have live pods at once (each attempt's init container deletes the
    previous MPIJob in foreground and waits until it is gone)."""
    import wf

    ns = local_cluster.namespace
    name = _submit(kube, tmp_path, "bert-gang", {SIM_DURATION: "90s"})
    sampler = GangSampler(kube, ns, name)
    sampler.start()
    lost: list[str] = []
    try:
        first, workers, launcher, argo = _gang(kube, ns, name, set())
        # The launcher shares the node of Argo's pod that created its MPIJob: that node's loss is Argo's own.
        assert launcher.spec.node_name == argo.spec.node_name
        worker = workers[0]
        lost.append(worker.spec.node_name)
        # What the kubelet reports on a Spot reclaim (graceful node shutdown); then the node is gone.
        kube.core.patch_namespaced_pod_status(worker.metadata.name, ns, {"status": {
            "phase": "Failed", "reason": "Terminated",
            "message": "Pod was terminated in response to imminent node shutdown."}})
        kube.core.delete_node(worker.spec.node_name)

        second, workers, launcher, argo = _gang(kube, ns, name, {first["metadata"]["uid"]})
        assert second["metadata"]["name"] == first["metadata"]["name"]  # one name per run of the step
        assert lost[0] not in {w.spec.node_name for w in workers}
        assert launcher.spec.node_name == argo.spec.node_name
        _until(lambda: kube.core.read_namespaced_pod(launcher.metadata.name, ns).status.phase == "Running", 60,
               "the retry's launcher running")
        # `wf get` lists the launcher and the workers with their nodes and capacity.
        shown = wf_cli(local_cluster, "get", name)
        assert shown.returncode == 0, shown.stderr
        rows = shown.stdout.splitlines()  # whole rows, however wide (wf.cli.output.print_table)
        for pod, role, capacity in ((launcher, "launcher", "on-demand"), *((w, "worker", "spot") for w in workers)):
            assert any(all(cell in row.split() for cell in (pod.metadata.name, role, pod.spec.node_name, capacity))
                       for row in rows), (pod.metadata.name, shown.stdout)
        listed = {(r.role, r.node, r.capacity) for r in replicas(kube, name, ns)}
        assert {("launcher", launcher.spec.node_name, "on-demand")} | {
            ("worker", w.spec.node_name, "spot") for w in workers} <= listed, listed

        # The launcher's node goes, and Argo's resource pod with it.
        lost.append(launcher.spec.node_name)
        kube.core.delete_node(launcher.spec.node_name)
        third, _, launcher, argo = _gang(kube, ns, name, {first["metadata"]["uid"], second["metadata"]["uid"]})
        workflow = _wait_final(kube, name, timeout=300)
    finally:
        sampler.done.set()
        sampler.join(10)
        _restore(kube, catalog, lost)
    tree = _node_tree(workflow)
    print(f"\n{name}:\n{tree}\n{len(sampler.samples)} samples, {len(sampler.errors)} lost")
    assert workflow["status"]["phase"] == "Succeeded", tree

    # Never two gangs: at most one MPIJob object, and the live pods of at most one, in every sample.
    assert sampler.samples and all(count <= 1 for count, _ in sampler.samples), sampler.samples
    overlaps = [owners for _, owners in sampler.samples if len(owners) > 1]
    assert not overlaps, overlaps
    seen = {uid for _, owners in sampler.samples for uid in owners}
    assert {first["metadata"]["uid"], second["metadata"]["uid"], third["metadata"]["uid"]} <= seen

    worker_lost, launcher_lost, succeeded = sorted(_pod_nodes(workflow), key=lambda n: n["startedAt"])
    # The worker's failed pod (read as Worker.failed) or the MPIJob's mark (the node recorder saw the pod fail),
    # whichever Argo's read found first: both name the worker.
    assert any(sign in worker_lost["message"] for sign in (WORKER_LOST_MESSAGE, MPI_WORKER_FAILED)), tree
    assert is_interruption(worker_lost["message"]), tree
    # Argo's resource pod went with the launcher's node: Argo's own words for a pod lost with its node.
    assert is_interruption(launcher_lost["message"]), tree
    assert succeeded["phase"] == "Succeeded", tree
    outcome = wf.watch([name], namespace=ns, kube=kube).outcome
    (view,) = outcome.views.values()
    (step,) = view.steps
    assert (step.interruptions, step.retries) == (2, 0), step
    assert [a.outcome for a in step.attempts] == ["interrupted", "interrupted", "succeeded"], step
    # Priced per replica: DL1 workers on Spot and the On-Demand launcher, for every attempt; the interrupted
    # attempts' runs (no checkpoint) are redone work.
    (cost,) = outcome.costs.values()
    (priced,) = cost.steps
    assert priced.unpriced_attempts == 0 and set(priced.instance_types) >= {"dl1.24xlarge"}, priced
    assert 0 < priced.redone_node_hours < priced.node_hours, priced
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
    per_pod = len(pod_log(kube.core, launcher.metadata.name, ns, container="main").splitlines())
    assert per_pod and len(lines) == 4 * per_pod  # Argo's own pod, the launcher and the 2 workers

    stopped = wf_cli(local_cluster, "stop", name)
    assert stopped.returncode == 0, stopped.stderr
    _until(lambda: not _mpijobs(kube, ns, name), 60, "the MPIJob removed")
    gone = f"{WORKFLOW_NAME_LABEL}={name}"
    _until(lambda: not kube.core.list_namespaced_pod(ns, label_selector=gone).items, 90,
           "the launcher and workers removed")
    _delete(local_cluster, name)


def test_a_checkpointed_gang_with_spot_fallback_resumes_on_demand(
        local_cluster: ClusterHandle, catalog: Catalog, kube: Any, gaudi_nodes: list[str], tmp_path: Path) -> None:
    """Issue 32's job: a checkpointed 2-node step on Spot, its class falling back On-Demand after one interruption.
    Argo evaluates every expression of the MPIJob's manifest (its name's hash, the checkpoint's location, WF_RESUME
    over the application attempt's input, the workers' capacity over `retries`): the first gang runs on Spot, the
    node of Argo's pod that created it goes (an interruption Argo reads itself), and the second gang runs On-Demand
    and is told to resume."""
    import wf

    ns = local_cluster.namespace
    data = catalog.model_dump(by_alias=True, exclude_none=True)
    gaudi = next(c for c in data["computeClasses"] if c["name"] == "gaudi")
    gaudi.update(capacity=["spot", "on-demand"], spotFallbackAfter=1)
    fallback = Catalog.model_validate(data)
    catalog_file = tmp_path / "catalog.yaml"
    catalog_file.write_text(fallback.to_yaml())
    on_demand = next(g for g in node_groups(fallback) if g.compute_class == "gaudi" and g.capacity == "on-demand")
    added = [node_manifest(on_demand, i) for i in range(2)]
    job = tmp_path / "mn-ckpt.yaml"
    job.write_text(yaml.safe_dump({
        "apiVersion": "wf/v1", "kind": "TrainingJob", "metadata": {"name": "mn-ckpt", "namespace": ns},
        "spec": {"image": "habana/pytorch:1.21.0", "compute": "gaudi", "capacity": "spot", "checkpoint": {},
                 "steps": [{"name": "train", "nodes": 2, "processesPerNode": 8, "command": COMMAND,
                            "annotations": {SIM_DURATION: "40s"}}]},
    }))
    lost: list[str] = []
    try:
        for node in added:
            kube.core.create_node(node)
        (submitted,) = wf.submit(str(job), catalog=str(catalog_file), kube=kube)
        name = str(submitted.name)
        explain = _explain(local_cluster, kube, name)
        first, workers, launcher, argo = _gang(kube, ns, name, set())
        job_name = first["metadata"]["name"]
        assert "{{" not in job_name and job_name.startswith("mn-ckpt-train-"), job_name
        assert {w.spec.node_selector[CAPACITY_LABEL] for w in workers} == {"spot"}
        env = {e.name: e.value for e in launcher.spec.containers[0].env or []}
        assert env["WF_RESUME"] == "false" and env["WF_ATTEMPT"] == "0", env
        assert env["WF_CHECKPOINT_URI"].endswith(f"/{ns}/{name}/train"), env
        lost.append(argo.spec.node_name)
        kube.core.delete_node(argo.spec.node_name)

        second, workers, launcher, _ = _gang(kube, ns, name, {first["metadata"]["uid"]})
        assert second["metadata"]["name"] == job_name
        assert {w.spec.node_selector[CAPACITY_LABEL] for w in workers} == {"on-demand"}
        assert {kube.core.read_node(w.spec.node_name).metadata.labels[CAPACITY_LABEL] for w in workers} == {
            "on-demand"}
        env = {e.name: e.value for e in launcher.spec.containers[0].env or []}
        assert env["WF_RESUME"] == "true" and env["WF_ATTEMPT"] == "1", env
        workflow = _wait_final(kube, name, timeout=240)
    finally:
        _restore(kube, catalog, lost)
        for node in added:
            kube.core.delete_node(node["metadata"]["name"])
    tree = _node_tree(workflow)
    print(f"\n{name}:\n{tree}")
    assert workflow["status"]["phase"] == "Succeeded", f"{tree}\n{explain()}"
    interrupted, succeeded = sorted(_pod_nodes(workflow), key=lambda n: n["startedAt"])
    assert is_interruption(interrupted["message"]), tree
    (view,) = wf.watch([name], namespace=ns, kube=kube, with_cost=False,
                       catalog=str(catalog_file)).outcome.views.values()
    (step,) = view.steps
    assert (step.interruptions, step.retries) == (1, 0), step
    assert [(a.capacity, a.outcome) for a in step.attempts] == [("spot", "interrupted"), ("on-demand", "succeeded")]
    # Each attempt's capacity per role, in `wf get` too.
    assert [a.roles for a in step.attempts] == [(("launcher", "on-demand"), ("worker", "spot")),
                                                (("launcher", "on-demand"), ("worker", "on-demand"))]
    shown = wf_cli(local_cluster, "get", name, "--catalog", str(catalog_file))
    assert shown.returncode == 0, shown.stderr
    assert "launcher on-demand, worker spot" in shown.stdout and "launcher on-demand, worker on-demand" in \
        shown.stdout, shown.stdout
    _delete(local_cluster, name)


def _launcher_phase(kube: Any, ns: str, name: str) -> tuple[str, str]:
    """A launcher pod's phase and its main container's termination message ("" while none)."""
    pod = kube.core.read_namespaced_pod(name, ns)
    message = next((c.state.terminated.message or "" for c in pod.status.container_statuses or []
                    if c.name == "main" and c.state and c.state.terminated), "")
    return pod.status.phase, message


@pytest.mark.parametrize("how", ["node deleted", "pod evicted"])
def test_a_lost_worker_fails_mpirun_within_seconds_and_the_retry_resumes_from_the_checkpoint(
        local_cluster: ClusterHandle, catalog: Catalog, kube: Any, gaudi_nodes: list[str], tmp_path: Path,
        how: str) -> None:
    """Issue 32: a checkpointed 2-node step on Spot loses a worker mid-run, its node deleted (the pod GC deletes the
    pod 40-60 s later) or its pod evicted as a drain does (the operator makes it again at once). The launcher's
    mpirun fails within seconds as Open MPI's does; the attempt is an interruption (the interruption budget is
    charged, the application retry is not); the retry resumes from the step's last checkpoint and `wf get` shows
    what was redone; and a sampler finds at most one MPIJob of the step, with the live pods of at most one, every
    quarter second."""
    import wf
    from wf.core.constants import MPI_WORKER_LOST_ANNOTATION, SIM_CHECKPOINTS

    ns = local_cluster.namespace
    job = tmp_path / "mn-lost.yaml"
    job.write_text(yaml.safe_dump({
        "apiVersion": "wf/v1", "kind": "TrainingJob",
        "metadata": {"name": "mn-lost" if how == "node deleted" else "mn-evict", "namespace": ns},
        "spec": {"image": "habana/pytorch:1.21.0", "compute": "gaudi", "capacity": "spot", "checkpoint": {},
                 "retries": 1,
                 "steps": [{"name": "train", "nodes": 2, "processesPerNode": 8, "command": COMMAND,
                            "annotations": {SIM_DURATION: "60s", SIM_CHECKPOINTS: "10"}}]},
    }))
    (submitted,) = wf.submit(str(job), kube=kube)
    name = str(submitted.name)
    explain = _explain(local_cluster, kube, name)
    sampler = GangSampler(kube, ns, name)
    sampler.start()
    lost: list[str] = []
    try:
        first, workers, launcher, _ = _gang(kube, ns, name, set())
        _until(lambda: _launcher_phase(kube, ns, launcher.metadata.name)[0] == "Running", 60,
               "the first launcher running", explain)
        time.sleep(25)  # mpirun's program passes some of its 10 checkpoints (one each 6 s)
        worker = workers[1]
        if how == "node deleted":
            lost.append(worker.spec.node_name)
            kube.core.delete_node(worker.spec.node_name)
        else:
            from kubernetes import client as kclient

            kube.core.create_namespaced_pod_eviction(worker.metadata.name, ns, kclient.V1Eviction(
                metadata=kclient.V1ObjectMeta(name=worker.metadata.name, namespace=ns)))
        gone = time.monotonic()
        phase, message = _until(lambda: (p := _launcher_phase(kube, ns, launcher.metadata.name))[0] == "Failed"
                                and p, 30, "the launcher failed", explain)
        failed_after = time.monotonic() - gone
        marked = kube.custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, first["metadata"]["name"])
        second, workers, launcher, _ = _gang(kube, ns, name, {first["metadata"]["uid"]})
        assert not set(lost) & {w.spec.node_name for w in workers}
        env = {e.name: e.value for e in launcher.spec.containers[0].env or []}
        assert env["WF_RESUME"] == "true" and env["WF_ATTEMPT"] == "1", env
        workflow = _wait_final(kube, name, timeout=300)
    finally:
        sampler.done.set()
        sampler.join(10)
        _restore(kube, catalog, lost)
    tree = _node_tree(workflow)
    shown = wf_cli(local_cluster, "get", name)
    print(f"\n{name}:\n{tree}\nlauncher failed {failed_after:.1f}s after the worker's {how}:\n{message}\n"
          f"{len(sampler.samples)} samples, {len(sampler.errors)} lost\n$ wf get {name}\n{shown.stdout}")
    assert workflow["status"]["phase"] == "Succeeded", f"{tree}\n{explain()}"

    # mpirun's failure, within seconds, in Open MPI's words, naming the lost worker's host; the MPIJob marked.
    assert failed_after < 10, failed_after
    assert message.startswith("ORTE has lost communication with its daemon") and worker.metadata.name in message
    assert marked["metadata"]["annotations"][MPI_WORKER_LOST_ANNOTATION] in (
        [f"{worker.metadata.name}: its node {lost[0]} was deleted"] if lost else
        [f"{worker.metadata.name}: its pod {state} deleted" for state in ("was", "is being")])
    # The mark is the node recorder's (as on EKS), and the simulated mpirun failed only once it was there.
    logs = local_cluster.cluster.workdir / "logs"
    mpijob = f"MPIJob {ns}/{first['metadata']['name']}"
    assert f"marked {mpijob} (worker {worker.metadata.name}" in (logs / "node-recorder.log").read_text(), explain()
    executor_log = (logs / "sim-executor.log").read_text()
    assert f"{mpijob} lost worker {worker.metadata.name} (" in executor_log, explain()
    assert f"{mpijob} lost worker {worker.metadata.name}, not marked" not in executor_log, explain()
    # An interruption: Argo names the mark, retried on the interruption budget inside the one application attempt.
    interrupted, succeeded = sorted(_pod_nodes(workflow), key=lambda n: n["startedAt"])
    assert WORKER_LOST_MESSAGE in interrupted["message"] and is_interruption(interrupted["message"]), tree
    assert succeeded["phase"] == "Succeeded", tree
    outcome = wf.watch([name], namespace=ns, kube=kube).outcome
    (view,) = outcome.views.values()
    (step,) = view.steps
    assert (step.interruptions, step.retries) == (1, 0), step
    first_attempt, retry = step.attempts
    assert (first_attempt.outcome, retry.outcome) == ("interrupted", "succeeded"), step
    # The retry resumed from the last checkpoint the first attempt passed (25 s of 60 s: checkpoint 4, give or
    # take the moments it took to start and to fail), and only what that checkpoint did not keep was redone.
    assert first_attempt.resumed is not None and first_attempt.resumed.checkpoint == 0, first_attempt
    assert retry.resumed is not None and 3 <= retry.resumed.checkpoint <= 6, retry
    assert first_attempt.ran_seconds is not None and 0 < first_attempt.kept_seconds < first_attempt.ran_seconds
    (cost,) = outcome.costs.values()
    (priced,) = cost.steps
    assert 0 < priced.redone_node_hours < priced.node_hours and priced.redone_usd > 0, priced
    assert shown.returncode == 0, shown.stderr
    assert f"at {retry.resumed.progress:.0%} from checkpoint {retry.resumed.checkpoint}" in shown.stdout, shown.stdout

    # Never two gangs: at most one MPIJob object, and the live pods of at most one, in every sample.
    assert sampler.samples and all(count <= 1 for count, _ in sampler.samples), sampler.samples
    overlaps = [owners for _, owners in sampler.samples if len(owners) > 1]
    assert not overlaps, overlaps
    assert {first["metadata"]["uid"], second["metadata"]["uid"]} <= {u for _, owners in sampler.samples
                                                                       for u in owners}
    _delete(local_cluster, name)
