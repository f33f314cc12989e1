"""A multi-node step's worker lost while its launcher runs (wf.controller.gangs): when it is a loss, once per
launcher, and the mark it leaves on the MPIJob. The e2e test (tests/e2e/test_mpijob.py) meets the real operator."""

from __future__ import annotations

import json
import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from wf.controller.gangs import Gangs, LostWorker, mark_worker_lost
from wf.core.constants import (
    ARGO_NODE_ID_ANNOTATION,
    ARGO_WORKFLOW_LABEL,
    CAPACITY_LABEL,
    INSTANCE_TYPE_LABEL,
    NODE_FACTS_ANNOTATION,
    NODE_RECORD_KEY,
    STEP_LABEL,
    ZONE_LABEL,
)


def replica(name: str, role: str, phase: str = "Running", node: str = "n-1", job: str = "bert-train-1",
            **meta: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "wf", "uid": f"uid-{name}", **meta,
                         "labels": {"training.kubeflow.org/job-name": job, "training.kubeflow.org/job-role": role}},
            "spec": {"nodeName": node}, "status": {"phase": phase}}


def running_gang(gangs: Gangs) -> None:
    for pod in (replica("w-0", "worker", node="dl1-0"), replica("w-1", "worker", node="dl1-1"),
                replica("l", "launcher", node="cpu-0")):
        assert gangs.observe(pod) == []


@pytest.mark.parametrize(("event", "deleted", "reason"), [
    (replica("w-1", "worker", node="dl1-1"), True, "its pod was deleted"),
    (replica("w-1", "worker", node="dl1-1", deletionTimestamp="2026-03-01T12:00:00Z"), False,
     "its pod is being deleted"),
    ({**replica("w-1", "worker", "Failed", node="dl1-1"), "status": {"phase": "Failed", "reason": "Terminated"}},
     False, "its pod Failed (Terminated)"),
])
def test_a_worker_that_stops_while_its_launcher_runs_is_lost_once(event: dict[str, Any], deleted: bool,
                                                                  reason: str) -> None:
    gangs = Gangs()
    running_gang(gangs)
    assert gangs.observe(event, deleted) == [LostWorker("wf", "bert-train-1", "w-1", "l", reason)]
    # mpirun fails once: the other worker's end, the operator's cleanup after the launcher failed, is no new loss.
    assert gangs.observe(replica("w-0", "worker", node="dl1-0"), deleted=True) == []


def test_a_node_deletion_loses_the_workers_on_it_before_the_pod_gc_deletes_their_pods() -> None:
    gangs = Gangs()
    running_gang(gangs)
    assert gangs.node_gone("dl1-7") == []
    assert gangs.node_gone("dl1-0") == [LostWorker("wf", "bert-train-1", "w-0", "l", "its node dl1-0 was deleted")]
    assert gangs.observe(replica("w-0", "worker", node="dl1-0"), deleted=True) == []  # the pod GC, later


def test_no_loss_before_the_launcher_runs_nor_after_it_ended_and_each_launcher_has_its_own() -> None:
    gangs = Gangs()
    # The operator creates a worker lost before mpirun started again; the launcher waits for it.
    assert gangs.observe(replica("w-0", "worker")) == []
    assert gangs.observe(replica("w-0", "worker"), deleted=True) == []
    assert gangs.observe(replica("w-0", "worker", "Pending")) == []
    assert gangs.observe(replica("w-0", "worker", "Pending"), deleted=True) == []  # never ran: nothing lost
    running_gang(gangs)
    # The launcher succeeded: its workers' removal by the operator (cleanPodPolicy Running) loses nothing.
    assert gangs.observe(replica("l", "launcher", "Succeeded")) == []
    assert gangs.observe(replica("w-0", "worker"), deleted=True) == []
    assert gangs.node_gone("dl1-1") == []
    assert not gangs.workers and not gangs.launchers  # nothing kept of ended gangs
    # The next attempt's gang (the same MPIJob name, a new launcher) reports its own loss.
    running_gang(gangs)
    assert gangs.observe(replica("l", "launcher", "Failed")) == []
    running_gang(gangs)
    assert [loss.worker for loss in gangs.node_gone("dl1-1")] == ["w-1"]
    # Another MPIJob's pods, and pods no operator made, are none of this one's.
    assert gangs.observe(replica("x", "worker", job="other"), deleted=True) == []
    assert gangs.observe({"metadata": {"name": "p", "labels": {}}}, deleted=True) == []


def test_the_mark_is_a_merge_patch_of_the_mpijobs_annotation_and_a_gone_mpijob_is_no_error() -> None:
    calls: list[tuple[Any, ...]] = []

    class Custom:
        status = 200

        def patch_namespaced_custom_object(self, *args: Any) -> None:
            calls.append(args)
            if self.status != 200:
                raise ApiException(status=self.status)

    loss = LostWorker("wf", "bert-train-1", "w-1", "l", "its node dl1-1 was deleted")
    custom = Custom()
    assert mark_worker_lost(custom, loss) is True
    assert calls == [("kubeflow.org", "v2beta1", "wf", "mpijobs", "bert-train-1", {"metadata": {"annotations": {
        "wf-worker-lost": "w-1: its node dl1-1 was deleted"}}})]
    custom.status = 404
    assert mark_worker_lost(custom, loss) is False
    custom.status = 500
    with pytest.raises(ApiException):
        mark_worker_lost(custom, loss)


class Objects:
    """A CustomObjectsApi's merge patch of MPIJobs: each call's (MPIJob, body), answering `statuses` in turn."""

    def __init__(self, *statuses: int) -> None:
        self.statuses = list(statuses)
        self.patches: list[tuple[str, dict[str, Any]]] = []

    def patch_namespaced_custom_object(self, group: str, version: str, namespace: str, plural: str, name: str,
                                       body: dict[str, Any], **_: Any) -> None:
        self.patches.append((f"{group}/{plural}/{namespace}/{name}", body))
        if self.statuses and (status := self.statuses.pop(0)) != 200:
            raise ApiException(status=status, reason="refused")


def recorder(objects: Objects) -> Any:
    from kubernetes.client import ApiClient

    from wf.controller.node_recorder import NodeRecorder

    made = NodeRecorder(kube=None, api=ApiClient())
    made.custom = objects
    return made


def test_the_node_recorder_marks_a_lost_worker_from_the_pod_stream_and_from_the_node_stream() -> None:
    """The mark is the node recorder's, on EKS and on the local cluster alike: it feeds `Gangs` the pods of its one
    pod stream and the deletions of its node stream, and marks the MPIJob once per launcher."""
    objects = Objects()
    made = recorder(objects)
    for pod in (replica("w-0", "worker", node="dl1-0"), replica("w-1", "worker", node="dl1-1"),
                replica("l", "launcher", node="cpu-0")):
        made.pod_event("ADDED", pod)
    made.node_event("MODIFIED", {"metadata": {"name": "dl1-1"}})  # a node's update loses nothing
    assert objects.patches == []
    made.node_event("DELETED", {"metadata": {"name": "dl1-1"}})
    made.pod_event("DELETED", replica("w-1", "worker", node="dl1-1"))  # the pod GC, later: the same loss
    assert objects.patches == [("kubeflow.org/mpijobs/wf/bert-train-1", {"metadata": {"annotations": {
        "wf-worker-lost": "w-1: its node dl1-1 was deleted"}}})]
    # The retry's gang, its worker evicted (a drain): marked again, from the pod stream alone.
    made.pod_event("MODIFIED", replica("l", "launcher", "Failed", node="cpu-0"))
    for pod in (replica("w-0", "worker", node="dl1-0"), replica("w-1", "worker", node="dl1-2"),
                replica("l2", "launcher", node="cpu-0")):
        made.pod_event("ADDED", pod)
    made.pod_event("MODIFIED", replica("w-0", "worker", node="dl1-0", deletionTimestamp="2026-03-01T12:00:00Z"))
    assert objects.patches[1][1]["metadata"]["annotations"] == {"wf-worker-lost": "w-0: its pod is being deleted"}


MARKED = "marked MPIJob wf/bert-train-1 (worker w-1: its node dl1-1 was deleted) lost while launcher l"


@pytest.mark.parametrize(("statuses", "patience", "patches", "logged"), [
    ([503, 200], 30.0, 2, MARKED),
    ([403, 200], 30.0, 2, MARKED),  # a restarted API server's authorizer, not yet reading RBAC
    ([404], 30.0, 1, ""),  # the MPIJob is gone with its workflow: nothing reads a mark
    ([403], 0.0, 1, "the recorder needs patch on mpijobs.kubeflow.org"),
    ([422], 30.0, 1, "422"),
])
def test_a_mark_waits_out_the_api_servers_trouble_and_says_what_right_it_lacks(
        statuses: list[int], patience: float, patches: int, logged: str, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    import logging

    monkeypatch.setattr("wf.controller.stream.FORBIDDEN_PATIENCE", patience)
    objects = Objects(*statuses)
    made = recorder(objects)
    caplog.set_level(logging.INFO, logger="wf.node-recorder")
    made.mark(LostWorker("wf", "bert-train-1", "w-1", "l", "its node dl1-1 was deleted"))
    assert len(objects.patches) == patches
    assert logged in caplog.text
    if not logged:
        assert "MPIJob" not in caplog.text


class Ledgers:
    """The workflows' ledgers as the recorder reads, creates and merge-patches them (a CoreV1Api), their Nodes (all
    gone: 404) and each workflow's metadata (`call_api`, for the ledger's owner; `gone`: workflows deleted); with
    `hold`, the first read of a ledger waits for it, as a loaded API server answers late."""

    def __init__(self, hold: threading.Event | None = None, gone: tuple[str, ...] = ()) -> None:
        self.data: dict[str, dict[str, str]] = {}  # by ConfigMap name
        self.writes: list[tuple[str, dict[str, Any]]] = []  # (ConfigMap, body), creations included
        self.lock = threading.Lock()
        self.hold, self.read, self.gone = hold, threading.Event(), gone
        self.at: list[float] = []  # when each write came

    def read_namespaced_config_map(self, name: str, namespace: str, **_: Any) -> SimpleNamespace:
        if not self.read.is_set():
            self.read.set()
            if self.hold is not None:
                self.hold.wait(10)
        with self.lock:
            if name not in self.data:
                raise ApiException(status=404)
            return SimpleNamespace(data=json.dumps({"data": dict(self.data[name])}))

    def patch_namespaced_config_map(self, name: str, namespace: str, body: dict[str, Any]) -> None:
        with self.lock:
            if name not in self.data:
                raise ApiException(status=404)
            self.data[name].update(body["data"])
            self.writes.append((name, body))
            self.at.append(time.monotonic())

    def create_namespaced_config_map(self, namespace: str, body: dict[str, Any]) -> None:
        with self.lock:
            name = body["metadata"]["name"]
            if name in self.data:
                raise ApiException(status=409)
            self.data[name] = dict(body["data"])
            self.writes.append((name, body))
            self.at.append(time.monotonic())

    def call_api(self, path: str, method: str, **_: Any) -> SimpleNamespace:
        name = path.rsplit("/", 1)[1]
        if name in self.gone:
            raise ApiException(status=404)
        return SimpleNamespace(data=json.dumps({"metadata": {"name": name, "uid": f"uid-{name}"}}))

    def read_node(self, name: str, **_: Any) -> None:
        raise ApiException(status=404)

    def nodes(self, workflow: str = "day-1") -> dict[str, list[str]]:
        text = self.data.get(f"{workflow}-checkpoints", {}).get(NODE_RECORD_KEY, "{}")
        return dict(json.loads(text).get("nodes", {}))


def recording(ledgers: Ledgers, lanes: int = 0, interval: float = 0.0, nodes: int = 0, counting: Any = None) -> Any:
    """A recorder on `ledgers`, whose node stream has seen `nodes` nodes r5-0, r5-1...; its patches of workflows
    in `.custom.patches`."""
    from kubernetes.client import ApiClient

    from wf.controller.node_recorder import NodeRecorder

    made = NodeRecorder(kube=None, api=ApiClient(), lanes=lanes, interval=interval, counting=counting)
    made.api = made.core = ledgers
    made.custom = Objects()
    for k in range(nodes):
        made.node_event("ADDED", node(f"r5-{k}"))
    return made


def node(name: str, instance_type: str = "r5.4xlarge") -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {INSTANCE_TYPE_LABEL: instance_type, ZONE_LABEL: "us-east-1a",
                                                  CAPACITY_LABEL: "spot"}}}


def bound(workflow: str, k: int, node_name: str) -> dict[str, Any]:
    """Argo's pod of a workflow's shard k, bound to `node_name`."""
    return {"metadata": {"name": f"{workflow}-shard-{k}", "namespace": "wf", "uid": f"{workflow}-u{k}",
                         "creationTimestamp": "2026-03-01T12:00:00Z",
                         "labels": {ARGO_WORKFLOW_LABEL: workflow, STEP_LABEL: "shard"},
                         "annotations": {ARGO_NODE_ID_ANNOTATION: f"{workflow}-{k}"}}, "spec": {"nodeName": node_name}}


def test_the_node_recorder_prices_a_binding_whose_node_was_deleted_before_it_was_written() -> None:
    """A binding written late (the API server busy, or the storm's deletions faster than the writes) still gets its
    node's facts: the node stream kept them, so the deleted Node's 404 costs nothing."""
    ledgers = Ledgers()
    made = recording(ledgers)
    made.node_event("ADDED", node("r5-spot-3"))
    made.node_event("DELETED", node("r5-spot-3"))
    made.pod_event("MODIFIED", bound("day-1", 2, "r5-spot-3"))
    assert ledgers.nodes() == {"r5-spot-3": ["r5.4xlarge", "spot", "us-east-1a"]}
    # A node the stream never saw, gone when read: not recorded (cost falls back to the live Node, as before).
    made.pod_event("MODIFIED", bound("day-2", 2, "r5-spot-9"))
    assert len(ledgers.writes) == 1


def test_the_record_is_kept_in_the_workflows_ledger_which_it_owns_never_on_the_running_workflow() -> None:
    """Argo's controller rewrites a running Workflow whole and reconciles it on every change: a write of the record
    there cost it a conflict and a reconciliation each. The record goes to the ledger, made owned by the workflow (so
    it goes with it) beside the attempts' records another writer keeps there, whose keys it leaves alone."""
    ledgers = Ledgers(gone=("day-9",))
    ledgers.data["day-2-checkpoints"] = {"day-2-shard-0": "{}"}  # the simulated executor's, made first
    made = recording(ledgers, nodes=3)
    workflows = made.custom
    made.pod_event("MODIFIED", bound("day-1", 0, "r5-0"))
    made.pod_event("MODIFIED", bound("day-2", 1, "r5-1"))
    made.pod_event("MODIFIED", bound("day-9", 0, "r5-2"))  # deleted before its record was written: none made
    (created, body), (patched, merged) = ledgers.writes
    assert created == "day-1-checkpoints" and body["metadata"]["ownerReferences"] == [
        {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "name": "day-1", "uid": "uid-day-1"}]
    assert patched == "day-2-checkpoints" and set(merged["data"]) == {NODE_RECORD_KEY}
    assert ledgers.data["day-2-checkpoints"]["day-2-shard-0"] == "{}" and ledgers.nodes("day-2")
    assert "day-9-checkpoints" not in ledgers.data and workflows.patches == []
    # A restarted recorder reads what the ledger holds before it adds to it.
    again = recording(ledgers, nodes=4)
    again.pod_event("MODIFIED", bound("day-1", 0, "r5-0"))  # held already: no write
    again.pod_event("MODIFIED", bound("day-1", 1, "r5-3"))
    assert len(ledgers.writes) == 3 and set(ledgers.nodes()) == {"r5-0", "r5-3"}


def ended(workflow: str, archiving: str | None = "Pending", record: str | None = None) -> dict[str, Any]:
    labels = {"workflows.argoproj.io/completed": "true",
              **({"workflows.argoproj.io/workflow-archiving-status": archiving} if archiving else {})}
    return {"metadata": {"name": workflow, "namespace": "wf", "labels": labels,
                         "annotations": {NODE_FACTS_ANNOTATION: record} if record else {}}}


def test_an_ended_workflows_record_is_copied_onto_it_once_and_archived_again_when_argo_archived_it_before() -> None:
    """The ledger goes with the live workflow; Argo's archive keeps the Workflow alone, copied once when its archive
    worker runs while the archiving label says Pending. So once a workflow has ended its record is copied onto it,
    with that label set back to Pending when Argo archives runs, and copied again if a binding comes after."""
    ledgers = Ledgers()
    made = recording(ledgers, nodes=3)
    workflows = made.custom
    made.pod_event("MODIFIED", bound("day-1", 0, "r5-0"))
    made.workflow_event("ADDED", ended("day-1", archiving="Archived"))
    ((path, body),) = workflows.patches
    text = body["metadata"]["annotations"][NODE_FACTS_ANNOTATION]
    assert path == "argoproj.io/workflows/wf/day-1" and text == ledgers.data["day-1-checkpoints"][NODE_RECORD_KEY]
    assert body["metadata"]["labels"] == {"workflows.argoproj.io/workflow-archiving-status": "Pending"}
    # Its own change, and Argo's archiving it again, come back holding that record: nothing more to copy.
    made.workflow_event("MODIFIED", ended("day-1", archiving="Pending", record=text))
    made.workflow_event("MODIFIED", ended("day-1", archiving="Archived", record=text))
    assert len(workflows.patches) == 1
    # A binding the recorder saw late, after the end: written, then copied again.
    made.pod_event("MODIFIED", bound("day-1", 1, "r5-1"))
    assert len(workflows.patches) == 2 and set(json.loads(
        workflows.patches[1][1]["metadata"]["annotations"][NODE_FACTS_ANNOTATION])["nodes"]) == {"r5-0", "r5-1"}
    # Without Argo's archive (no archiving label) the record alone; a workflow nothing was recorded of gets the
    # empty record, once: it says the workflow was counted (wf.controller.metrics).
    made.pod_event("MODIFIED", bound("day-2", 0, "r5-2"))
    made.workflow_event("ADDED", ended("day-2", archiving=None))
    made.workflow_event("ADDED", ended("day-3"))
    assert [p for p, _ in workflows.patches[2:]] == ["argoproj.io/workflows/wf/day-2", "argoproj.io/workflows/wf/day-3"]
    assert "labels" not in workflows.patches[2][1]["metadata"]
    empty = workflows.patches[3][1]["metadata"]["annotations"][NODE_FACTS_ANNOTATION]
    assert json.loads(empty) == {"nodes": {}, "gangs": {}}
    made.workflow_event("MODIFIED", ended("day-3", record=empty))
    # Taken up again (`wf retry`: no longer ended), then deleted: forgotten, nothing copied.
    made.workflow_event("MODIFIED", {"metadata": {"name": "day-2", "namespace": "wf", "labels": {}}})
    made.pod_event("MODIFIED", bound("day-2", 1, "r5-1"))
    made.workflow_event("DELETED", ended("day-1"))
    made.pod_event("MODIFIED", bound("day-1", 2, "r5-2"))
    assert len(workflows.patches) == 4


def test_each_ended_workflow_is_counted_once_into_wfs_metrics_with_its_first_copy() -> None:
    """wf's metrics count a workflow when its record is first copied onto it: a copy again (a late binding), its
    own change coming back, or a recorder restarted after the copy count nothing more; one retried and ended again
    holds the copy, so it is not counted twice either."""
    from controller_fakes import fallback_run
    from wf.controller.metrics import Exporter
    from wf.controller.node_recorder import Counting
    from wf.model.catalog import load_catalog

    def finished() -> dict[str, Any]:
        run = fallback_run()  # cpu step `shard` on Spot: two interruptions, then On-Demand; prep before it
        run["metadata"]["labels"]["workflows.argoproj.io/completed"] = "true"
        return run

    def counted(exporter: Exporter, line: str) -> float | None:
        return next((float(text.rsplit(" ", 1)[1]) for text in exporter.text().splitlines()
                     if text.startswith(line)), None)

    exporter, ledgers = Exporter(), Ledgers()
    made = recording(ledgers, nodes=2, counting=Counting(exporter, load_catalog))
    made.pod_event("MODIFIED", bound("prep-q8z", 0, "r5-0"))
    made.workflow_event("ADDED", finished())
    shard = 'wf_step_attempts_total{capacity="spot",compute_class="cpu",job_name="bert",step="shard",team="-"}'
    assert counted(exporter, shard) == 3
    assert counted(exporter, 'wf_step_interruptions_total{capacity="spot",compute_class="cpu",job_name="bert",'
                             'step="shard",team="-"}') == 2
    assert counted(exporter, 'wf_step_spot_fallbacks_total{capacity="spot"') == 1
    assert counted(exporter, 'wf_workflow_completions_total{job_name="bert",status="Succeeded",team="-"}') == 1
    ((_, body),) = made.custom.patches
    made.workflow_event("MODIFIED", finished())  # Argo's change from before the copy, arriving after it
    assert counted(exporter, shard) == 3 and len(made.custom.patches) == 1  # neither counted nor copied again
    again = finished()
    again["metadata"]["annotations"] = dict(body["metadata"]["annotations"])
    made.workflow_event("MODIFIED", again)
    made.pod_event("MODIFIED", bound("prep-q8z", 1, "r5-1"))  # late: copied again, not counted again
    assert counted(exporter, shard) == 3 and len(made.custom.patches) == 2
    restarted = Exporter()
    recording(ledgers, nodes=2, counting=Counting(restarted, load_catalog)).workflow_event("ADDED", again)
    assert counted(restarted, "wf_workflow_completions_total{") is None
    # A workflow wf did not compile (no job label) gets its record, and no series named after it.
    foreign = finished()
    foreign["metadata"]["name"] = "argo-own"
    del foreign["metadata"]["labels"]["wf.dev/job"]
    made.workflow_event("ADDED", foreign)
    assert made.custom.patches[-1][0].endswith("/argo-own") and "argo-own" not in exporter.text()
    assert counted(exporter, "wf_workflow_completions_total{") == 1


def test_bindings_that_arrive_while_a_workflows_record_is_written_go_out_together_in_its_next_write() -> None:
    """On the full-size day one thread wrote every binding, a GET and a PATCH each on a loaded API server (likely
    why 83 of 250 workflows kept an attempt no record priced). The writes now run in lanes, and what queues behind
    a workflow's write is merged into one more, so the pod stream never waits on the API server."""
    release = threading.Event()
    ledgers = Ledgers(hold=release)
    made = recording(ledgers, lanes=2, nodes=6)
    made.pod_event("MODIFIED", bound("day-1", 0, "r5-0"))
    assert ledgers.read.wait(10)
    for k in range(1, 6):  # the stream goes on while the first write waits: nothing here blocks on the server
        made.pod_event("MODIFIED", bound("day-1", k, f"r5-{k}"))
    release.set()
    deadline = time.monotonic() + 10
    while len(ledgers.nodes()) < 6:
        assert time.monotonic() < deadline, ledgers.writes
        time.sleep(0.01)
    assert len(ledgers.writes) == 2  # the first binding's write, then the five queued behind it in one
    made.pod_event("MODIFIED", bound("day-1", 3, "r5-3"))  # a relist's replay: the record holds it, no request
    time.sleep(0.1)
    assert len(ledgers.writes) == 2


def test_a_workflows_record_is_written_at_most_once_an_interval() -> None:
    """Bindings that come within the interval of a workflow's last write wait for it to pass and go out together;
    another workflow's write does not wait."""
    interval = 1.0
    ledgers = Ledgers()
    made = recording(ledgers, lanes=2, interval=interval, nodes=4)

    def written(count: int) -> None:
        deadline = time.monotonic() + 10
        while len(ledgers.writes) < count:
            assert time.monotonic() < deadline, ledgers.writes
            time.sleep(0.01)

    made.pod_event("MODIFIED", bound("day-1", 0, "r5-0"))
    written(1)
    began = made._written[("wf", "day-1")]  # when that write began: the next may begin an interval later
    made.pod_event("MODIFIED", bound("day-1", 1, "r5-1"))
    made.pod_event("MODIFIED", bound("day-1", 2, "r5-2"))
    made.pod_event("MODIFIED", bound("day-2", 0, "r5-3"))
    written(3)
    # day-2's at once, day-1's two together once the interval has passed.
    assert [name for name, _ in ledgers.writes] == ["day-1-checkpoints", "day-2-checkpoints", "day-1-checkpoints"]
    assert ledgers.at[2] >= began + interval and len(ledgers.nodes()) == 3
    time.sleep(0.2)
    assert len(ledgers.writes) == 3
