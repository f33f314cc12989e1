"""Teams share Gaudi nodes through a real Kueue on the local cluster (`wf cluster up --queues`).

Its own cluster (the session cluster runs without queues): 2 Gaudi nodes (16 cards) shared by four teams of 4
cards each. alpha and beta neither borrow nor lend, so their quotas are hard; gamma may borrow delta's idle
quota, which delta takes back. omega runs multi-node steps on both nodes. Pods run under kwok for
`sim.wf.dev/duration`.
"""

from __future__ import annotations

import copy
import os
import threading
import time
import uuid
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml

from wf.cluster.kueue import MUTATING, VALIDATING
from wf.cluster.runtime import LocalCluster
from wf.compile.workflow import compile_job
from wf.controller.client import Kube
from wf.controller.queue import Workload, parse_workload
from wf.core.constants import KUEUE_QUEUE_LABEL as QUEUE_LABEL
from wf.core.constants import SIM_DURATION, WORKFLOW_NAME_LABEL
from wf.jobspec.job import TrainingJob
from wf.model.catalog import Catalog, load_catalog

from .conftest import ClusterHandle, become_subreaper, build_with_progress, connected, stop_cluster

pytestmark = [pytest.mark.cluster, pytest.mark.components("kueue")]

GAUDI = "habana.ai/gaudi"
HARD = {"borrowingLimit": {"accelerators": 0}, "lendingLimit": {"accelerators": 0}}
CATALOG = {
    "apiVersion": "wf/v1",
    "kind": "Catalog",
    "cluster": {"name": "kq", "region": "us-east-1", "version": "1.33", "availabilityZones": ["us-east-1a"]},
    "computeClasses": [
        {"name": "cpu", "instanceTypes": ["r5.4xlarge"]},
        {"name": "gaudi", "instanceTypes": ["dl1.24xlarge"], "accelerator": {"resource": GAUDI, "count": 8},
         "taints": [{"key": GAUDI, "value": "true", "effect": "NoSchedule"}], "efa": True},
    ],
    "queues": {"teams": [
        {"name": "alpha", "namespaces": ["alpha"], "quotas": [{"compute": "gaudi", "accelerators": 4, **HARD}]},
        {"name": "beta", "namespaces": ["beta"], "quotas": [{"compute": "gaudi", "accelerators": 4, **HARD}]},
        {"name": "gamma", "namespaces": ["gamma"], "quotas": [{"compute": "gaudi", "accelerators": 4}]},
        {"name": "delta", "namespaces": ["delta"], "quotas": [{"compute": "gaudi", "accelerators": 4}]},
        # Multi-node steps: both Gaudi nodes, never lent, and CPU for the MPI launcher and Argo's resource pod.
        {"name": "omega", "namespaces": ["omega"], "quotas": [{"compute": "gaudi", "accelerators": 16, **HARD},
                                                               {"compute": "cpu", "cpu": 8, "memory": "32Gi"}]},
    ]},
}
TEAMS = ("alpha", "beta", "gamma", "delta")


@pytest.fixture(scope="module")
def queued_cluster(tmp_path_factory: pytest.TempPathFactory,
                   pytestconfig: pytest.Config) -> Iterator[tuple[ClusterHandle, Catalog]]:
    become_subreaper()
    build_with_progress(pytestconfig)
    root = tmp_path_factory.mktemp("wf-kueue")
    catalog_file = root / "catalog.yaml"
    catalog_file.write_text(yaml.safe_dump(CATALOG, sort_keys=False))
    cluster = LocalCluster(f"kq{os.getpid()}", root=root / "clusters")
    kubeconfig = root / "kubeconfig"
    started = time.monotonic()
    try:
        state = cluster.up(nodes_per_group=2, catalog_path=catalog_file, merge_into=kubeconfig, queues=True)
    except BaseException:
        cluster.down()
        raise
    handle = ClusterHandle(name=cluster.name, context=state.context, kubeconfig=kubeconfig, namespace="alpha",
                           cluster=cluster, state=state, up_seconds=time.monotonic() - started)
    try:
        yield handle, load_catalog(catalog_file)
    finally:
        stop_cluster(handle)


def _job(team: str, cards: int, seconds: int, priority: str | None = None) -> TrainingJob:
    spec: dict[str, Any] = {"image": "x", "compute": "gaudi", "team": team, "steps": [
        {"name": "train", "command": ["python", "train.py"], "accelerators": cards, "timeout": "10m",
         "annotations": {SIM_DURATION: f"{seconds}s"}}]}
    if priority:
        spec["priority"] = priority
    return TrainingJob.model_validate({"apiVersion": "wf/v1", "kind": "TrainingJob",
                                       "metadata": {"name": f"{team}-{uuid.uuid4().hex[:5]}"}, "spec": spec})


class Cluster:
    def __init__(self, handle: ClusterHandle, catalog: Catalog, kube: Kube) -> None:
        self.catalog = catalog
        self.handle = handle
        self.custom = kube.custom
        self.core = kube.core

    def submit(self, job: TrainingJob) -> tuple[str, str]:
        manifest = compile_job(job, self.catalog)
        namespace = manifest["metadata"]["namespace"]
        created = self.custom.create_namespaced_custom_object("argoproj.io", "v1alpha1", namespace, "workflows",
                                                              manifest)
        return namespace, created["metadata"]["name"]

    def workflow(self, namespace: str, name: str) -> dict[str, Any]:
        return self.custom.get_namespaced_custom_object("argoproj.io", "v1alpha1", namespace, "workflows", name)

    def phase(self, namespace: str, name: str) -> str | None:
        return (self.workflow(namespace, name).get("status") or {}).get("phase")

    def wait_all(self, runs: list[tuple[str, str]], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        left = list(runs)
        while left:
            left = [r for r in left if self.phase(*r) not in ("Succeeded", "Failed", "Error")]
            assert time.monotonic() < deadline, f"still running after {timeout}s: {left}"
            time.sleep(0.5)
        assert {r: self.phase(*r) for r in runs} == dict.fromkeys(runs, "Succeeded")

    def workloads(self, namespace: str) -> list[Workload]:
        items = self.custom.list_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", namespace, "workloads")["items"]
        return [parse_workload(w) for w in items]

    def cards_in_use(self) -> dict[str, Decimal]:
        """Cards each team holds right now: admitted, unfinished workloads."""
        return {team: sum((w.usage.get(GAUDI, Decimal(0)) for w in self.workloads(team)
                           if w.reserved and not w.finished),
                          Decimal(0)) for team in TEAMS}

    def admitted_at(self, namespace: str, name: str) -> float | None:
        """When the workflow's pod was admitted: the pod's scheduling gate removed, i.e. it got a node."""
        pods = self.core.list_namespaced_pod(namespace, label_selector=f"workflows.argoproj.io/workflow={name}").items
        started = [p.status.start_time.timestamp() for p in pods if p.status.start_time]
        return min(started) if started else None


class Sampler:
    """Cards per team every 0.3 s on a thread, until stopped."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.samples: list[tuple[float, dict[str, Decimal]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.monotonic(), self.cluster.cards_in_use()))
            time.sleep(0.3)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def most(self, team: str) -> Decimal:
        return max(s[team] for _, s in self.samples)


@pytest.fixture
def kq(queued_cluster: tuple[ClusterHandle, Catalog]) -> Iterator[Cluster]:
    handle, catalog = queued_cluster
    with connected(handle) as kube:
        yield Cluster(handle, catalog, kube)


def test_kueue_runs_with_webhooks_on_loopback(queued_cluster: tuple[ClusterHandle, Catalog]) -> None:
    from kubernetes import client

    handle, _ = queued_cluster
    status = {c.name: c for c in handle.cluster.status()}
    assert status["kueue"].running
    with connected(handle) as kube:
        admission = client.AdmissionregistrationV1Api(kube.api_client)
        mutating = admission.read_mutating_webhook_configuration(MUTATING)
        validating = admission.read_validating_webhook_configuration(VALIDATING)
    urls = [h.client_config.url for h in [*mutating.webhooks, *validating.webhooks]]
    assert urls and all(u.startswith("https://127.0.0.1:") for u in urls)
    print(f"\ncluster with Kueue up in {handle.up_seconds:.1f}s")


def test_two_teams_contend_and_neither_exceeds_its_quota(kq: Cluster) -> None:
    runs = [kq.submit(_job(team, 4, 6)) for _ in range(3) for team in ("alpha", "beta")]
    with Sampler(kq) as sampler:
        kq.wait_all(runs, timeout=240)
    assert sampler.samples
    for team in ("alpha", "beta"):
        assert sampler.most(team) == 4, f"{team} peaked at {sampler.most(team)} cards (quota 4)"
    # The queue was real: both teams held their whole quota at the same moment, with work still waiting.
    assert any(s["alpha"] == 4 and s["beta"] == 4 for _, s in sampler.samples)


def test_idle_quota_is_borrowed_and_given_back(kq: Cluster) -> None:
    gamma = [kq.submit(_job("gamma", 4, 40)) for _ in range(2)]
    with Sampler(kq) as sampler:
        deadline = time.monotonic() + 60
        while kq.cards_in_use()["gamma"] < 8:  # delta is idle: gamma borrows its 4 cards
            assert time.monotonic() < deadline, f"gamma never borrowed: {kq.cards_in_use()}"
            time.sleep(0.3)
        asked = time.time()
        delta = kq.submit(_job("delta", 4, 5))
        deadline = time.monotonic() + 60
        while (admitted := kq.admitted_at(*delta)) is None:
            assert time.monotonic() < deadline, "delta's own quota was not given back"
            time.sleep(0.3)
        kq.wait_all([delta, *gamma], timeout=300)
    # Delta got its quota back long before gamma's 40 s steps would have ended, and in Kueue's books the two
    # never held more than their 8 cards together.
    assert admitted - asked < 30, f"delta waited {admitted - asked:.0f}s for its own quota"
    assert all(s["gamma"] + s["delta"] <= 8 for _, s in sampler.samples)
    assert sampler.most("gamma") == 8
    # Given back, not just freed: delta held its 4 cards while one of gamma's 40 s steps still held 4.
    assert any(s["delta"] == 4 and s["gamma"] == 4 for _, s in sampler.samples)
    # Kueue evicts the borrowing step by deleting its pod; once the pod's grace period ends Argo retries it
    # as an interruption ("pod deleted"), unless the step finished within that grace period.
    attempts = [n for run in gamma for n in (kq.workflow(*run)["status"].get("nodes") or {}).values()
                if n.get("type") == "Pod"]
    print("\ngamma's attempts:", [(n.get("phase"), n.get("message")) for n in attempts])


def test_high_priority_is_admitted_ahead_of_waiting_normal_work(kq: Cluster) -> None:
    blocker = kq.submit(_job("alpha", 4, 8, priority="high"))
    deadline = time.monotonic() + 60
    while kq.admitted_at(*blocker) is None:
        assert time.monotonic() < deadline, "the first job was never admitted"
        time.sleep(0.3)
    normal = [kq.submit(_job("alpha", 4, 4)) for _ in range(2)]
    time.sleep(1)  # the normal ones are queued first
    high = kq.submit(_job("alpha", 4, 4, priority="high"))
    kq.wait_all([blocker, *normal, high], timeout=240)
    times = {run: kq.admitted_at(*run) for run in [*normal, high]}
    assert all(times.values()), times
    assert times[high] < min(times[n] for n in normal), times  # type: ignore[type-var]


def test_a_workflow_deleted_while_queued_leaves_no_workload(kq: Cluster) -> None:
    blocker = kq.submit(_job("beta", 4, 15))
    deadline = time.monotonic() + 60
    while kq.admitted_at(*blocker) is None:  # admitted first, so the next one must queue behind it
        assert time.monotonic() < deadline, "the first job was never admitted"
        time.sleep(0.3)
    queued = kq.submit(_job("beta", 4, 5))
    deadline = time.monotonic() + 60
    while not any(not w.reserved and w.pod and w.pod.startswith(queued[1]) for w in kq.workloads("beta")):
        assert time.monotonic() < deadline, f"the second job never queued: {kq.workloads('beta')}"
        time.sleep(0.3)
    # Said in team terms by `wf get`, and counted by `wf queue`, while it waits.
    shown = _wf(kq, "get", queued[1], "-n", "beta")
    assert "waiting for quota: beta uses 4 of 4 gaudi cards; 0 workloads ahead" in shown, shown
    table = [line for line in _wf(kq, "queue", "--team", "beta").splitlines() if "gaudi" in line]
    assert [cell.strip() for cell in table[0].split("│")[1:-1]] == ["beta", "gaudi", "spot", "accelerators", "4",
                                                                    "4", "0 of 0", "1"], table
    kq.custom.delete_namespaced_custom_object("argoproj.io", "v1alpha1", queued[0], "workflows", queued[1],
                                              propagation_policy="Background")
    deadline = time.monotonic() + 60
    while left := [w.name for w in kq.workloads("beta") if w.pod and w.pod.startswith(queued[1])]:
        assert time.monotonic() < deadline, f"workloads left behind: {left}"
        time.sleep(0.5)
    kq.wait_all([blocker], timeout=120)


def test_a_multi_node_step_is_admitted_as_one_workload_and_runs(kq: Cluster) -> None:
    """Kueue's MPIJob integration: the MPIJob is created suspended, admitted with launcher and workers as the
    podsets of one workload, resumed, and the mpi-operator runs it; no pod of it queues on its own."""
    from wf.compile.kinds.mpijob import JOB_NAME_LABEL

    job = TrainingJob.model_validate({
        "apiVersion": "wf/v1", "kind": "TrainingJob", "metadata": {"name": f"omega-{uuid.uuid4().hex[:5]}"},
        "spec": {"image": "x", "compute": "gaudi", "team": "omega", "steps": [{
            "name": "train", "nodes": 2, "command": ["mpirun", "python", "train.py"], "timeout": "10m",
            "annotations": {SIM_DURATION: "15s"}}]}})
    namespace, name = run = kq.submit(job)

    def mpijob() -> dict[str, Any] | None:
        items = kq.custom.list_namespaced_custom_object("kubeflow.org", "v2beta1", namespace, "mpijobs",
                                                        label_selector=f"{WORKFLOW_NAME_LABEL}={name}")["items"]
        return items[0] if items else None

    deadline = time.monotonic() + 90
    while (created := mpijob()) is None:
        assert time.monotonic() < deadline, "the MPIJob was never created"
        time.sleep(0.5)
    job_name = created["metadata"]["name"]

    def workloads() -> list[dict[str, Any]]:
        items = kq.custom.list_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", namespace, "workloads")["items"]
        return [w for w in items if any(r["kind"] == "MPIJob" and r["name"] == job_name
                                        for r in w["metadata"].get("ownerReferences") or [])]

    deadline = time.monotonic() + 90
    while not ((found := workloads()) and (found[0].get("status") or {}).get("admission")):
        assert time.monotonic() < deadline, f"the MPIJob's workload was never admitted: {found}"
        time.sleep(0.5)
    (workload,) = found
    podsets = {p["name"].lower(): p["count"] for p in workload["spec"]["podSets"]}
    assert podsets == {"launcher": 1, "worker": 2}, podsets
    assert parse_workload(workload).usage[GAUDI] == 16  # both whole nodes, in one admission
    deadline = time.monotonic() + 90
    while len(pods := kq.core.list_namespaced_pod(namespace, label_selector=f"{JOB_NAME_LABEL}={job_name}").items) < 3:
        assert time.monotonic() < deadline, f"launcher and workers never all created: {len(pods)}"
        time.sleep(0.5)
    for pod in pods:  # the gang's pods are the MPIJob's workload, not plain-pod workloads of their own
        assert QUEUE_LABEL not in (pod.metadata.labels or {}), pod.metadata.labels
        assert not [w for w in kq.workloads(namespace) if w.pod == pod.metadata.name]
    kq.wait_all([run], timeout=180)
    finished = kq.custom.get_namespaced_custom_object("kubeflow.org", "v2beta1", namespace, "mpijobs", job_name)
    assert {c["type"]: c["status"] for c in finished["status"]["conditions"]}["Succeeded"] == "True"
    assert finished["spec"]["runPolicy"].get("suspend") is False  # resumed by Kueue on admission
    # Kueue's webhook creates every queued MPIJob suspended: the same manifest, created again (dry run).
    again = {k: v for k, v in finished.items() if k != "status"}
    again["metadata"] = {"generateName": f"{job_name}-", "labels": finished["metadata"]["labels"]}
    again["spec"] = {**finished["spec"], "runPolicy": {k: v for k, v in finished["spec"]["runPolicy"].items()
                                                       if k != "suspend"}}
    dry = kq.custom.create_namespaced_custom_object("kubeflow.org", "v2beta1", namespace, "mpijobs", again,
                                                    dry_run="All")
    assert dry["spec"]["runPolicy"]["suspend"] is True


def _wf(kq: Cluster, *args: str) -> str:
    import subprocess
    import sys

    env = {**os.environ, "WF_CATALOG": kq.catalog.source, "KUBECONFIG": str(kq.handle.kubeconfig), "COLUMNS": "200"}
    result = subprocess.run([sys.executable, "-m", "wf", *args, "--context", kq.handle.context], env=env,
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_team_role_allows_its_work_and_nothing_elsewhere(queued_cluster: tuple[ClusterHandle, Catalog]) -> None:
    from kubernetes.client.exceptions import ApiException

    handle, catalog = queued_cluster
    job = _job("alpha", 4, 2)
    manifest = compile_job(job, catalog)
    with connected(handle) as kube:
        kube.api_client.set_default_header("Impersonate-User", "alice@example.com")
        kube.api_client.set_default_header("Impersonate-Group", "wf-team:alpha")
        custom, core = kube.custom, kube.core
        made = custom.create_namespaced_custom_object("argoproj.io", "v1alpha1", "alpha", "workflows", manifest)
        name = made["metadata"]["name"]
        custom.patch_namespaced_custom_object("argoproj.io", "v1alpha1", "alpha", "workflows", name,
                                              {"spec": {"shutdown": "Stop"}})  # wf stop
        custom.delete_collection_namespaced_custom_object("kubeflow.org", "v2beta1", "alpha", "mpijobs",
                                                          label_selector=f"{WORKFLOW_NAME_LABEL}={name}")
        current = custom.get_namespaced_custom_object("argoproj.io", "v1alpha1", "alpha", "workflows", name)
        # wf retry. Argo may change the workflow between our read and our write (it is stopping it): a 409
        # then comes from the storage's version check, which runs after the authorizer let the update through.
        try:
            custom.replace_namespaced_custom_object("argoproj.io", "v1alpha1", "alpha", "workflows", name, current)
        except ApiException as exc:
            if exc.status != 409:
                raise
        core.list_namespaced_pod("alpha")
        core.list_namespaced_event("alpha")
        custom.list_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", "alpha", "workloads")
        custom.delete_namespaced_custom_object("argoproj.io", "v1alpha1", "alpha", "workflows", name)

        forbidden = [
            lambda: custom.create_namespaced_custom_object("argoproj.io", "v1alpha1", "beta", "workflows",
                                                           {**manifest, "metadata": {**manifest["metadata"],
                                                                                     "namespace": "beta"}}),
            lambda: custom.list_namespaced_custom_object("argoproj.io", "v1alpha1", "beta", "workflows"),
            lambda: core.list_namespaced_secret("alpha"),
            lambda: core.create_namespaced_pod("alpha", {"metadata": {"name": "direct"},
                                                         "spec": {"containers": [{"name": "c", "image": "x"}]}}),
            lambda: custom.list_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "clusterqueues"),
            lambda: custom.delete_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", "alpha", "localqueues",
                                                           "default"),
            lambda: core.list_namespaced_pod("beta"),
        ]
        for attempt in forbidden:
            with pytest.raises(ApiException) as exc:
                attempt()
            assert exc.value.status == 403


def test_up_with_a_new_team_restarts_kueue_for_it(queued_cluster: tuple[ClusterHandle, Catalog],
                                                  tmp_path: Path) -> None:
    """Kueue reads its configuration (the managed namespaces) once: a new team must restart it. Runs last."""
    from wf.cluster.kueue import GATE

    handle, _ = queued_cluster
    before = {c.name: c for c in handle.cluster.status()}["kueue"].pid
    data = copy.deepcopy(CATALOG)
    data["queues"]["teams"].append({"name": "epsilon", "namespaces": ["epsilon"],
                                    "quotas": [{"compute": "gaudi", "accelerators": 0}]})
    changed = tmp_path / "catalog.yaml"
    changed.write_text(yaml.safe_dump(data, sort_keys=False))
    handle.cluster.up(catalog_path=changed, merge_into=handle.kubeconfig)  # --queues is kept
    after = {c.name: c for c in handle.cluster.status()}["kueue"]
    assert after.running and after.pid != before
    probe = {"metadata": {"generateName": "p-"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
    gates: list[str] = []
    deadline = time.monotonic() + 20  # Kueue learns of epsilon's LocalQueue from its watch, a moment after up
    with connected(handle) as kube:
        while GATE not in gates and time.monotonic() < deadline:
            pod = kube.core.create_namespaced_pod("epsilon", probe, dry_run="All")
            gates = [g.name for g in pod.spec.scheduling_gates or []]
            time.sleep(0.3)
    assert GATE in gates, gates  # unlabelled, yet queued: epsilon's LocalQueue is named `default`
