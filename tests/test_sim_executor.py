"""The simulated executor: the WorkflowTaskResult Argo's wait container would create for a pod, and what
`argoexec resource` would do in a resource template's pod."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from wf.cluster.executor import (
    CHECK_INTERVAL_ENV,
    OUTPUTS_ANNOTATION,
    RESOURCE_ANNOTATION,
    LostPods,
    collection_path,
    executor_account,
    release_action,
    resource_action,
    task_result,
    verdict_annotations,
)
from wf.cluster.resource_conditions import ConditionError, Conditions, Verdict
from wf.compile.interruptions import INTERRUPTION_EXPRESSION, is_interruption
from wf.core.constants import (
    ARGO_REPORT_OUTPUTS_COMPLETED_LABEL,
    ARGO_WORKFLOW_LABEL,
    SIM_DURATION,
    SIM_EXIT_CODE,
    SIM_INIT,
    SIM_MESSAGE,
)

TEMPLATE = {"name": "list", "outputs": {
    "parameters": [{"name": "shards", "valueFrom": {"path": "/tmp/s"}},
                   {"name": "score", "valueFrom": {"path": "/tmp/score", "default": "0.1"}},
                   {"name": "empty", "valueFrom": {"path": "/tmp/e"}}],
    "artifacts": [{"name": "model", "path": "/out/model"}]}}


def pod(phase: str = "Succeeded", template: dict[str, Any] | None = TEMPLATE, **annotations: str) -> dict[str, Any]:
    env = [{"name": "ARGO_TEMPLATE", "value": json.dumps(template)}] if template else []
    return {"metadata": {"name": "wf-abc-list-123", "namespace": "ml", "uid": "u1",
                         "labels": {ARGO_WORKFLOW_LABEL: "wf-abc"},
                         "annotations": {"workflows.argoproj.io/node-id": "wf-abc-123", **annotations},
                         "ownerReferences": [{"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
                                              "name": "wf-abc", "uid": "w1"}]},
            "spec": {"initContainers": [{"name": "init", "env": env}], "containers": [{"name": "main"}]},
            "status": {"phase": phase}}


def test_values_from_the_annotation_then_defaults() -> None:
    result = task_result(pod(**{OUTPUTS_ANNOTATION: json.dumps({"shards": [1, 2]})}))
    assert result is not None
    assert result["metadata"]["name"] == "wf-abc-123"
    assert result["metadata"]["labels"] == {ARGO_WORKFLOW_LABEL: "wf-abc", ARGO_REPORT_OUTPUTS_COMPLETED_LABEL: "true"}
    assert result["metadata"]["ownerReferences"][0]["uid"] == "w1"
    assert result["outputs"]["parameters"] == [{"name": "shards", "value": "[1, 2]"},
                                               {"name": "score", "value": "0.1"}, {"name": "empty", "value": ""}]
    assert result["outputs"]["artifacts"] == [
        {"name": "model", "path": "/out/model", "s3": {"key": "ml/wf-abc/wf-abc-list-123/model.tgz"}}]


def test_only_succeeded_pods_with_outputs_are_reported() -> None:
    assert task_result(pod(phase="Running")) is None
    assert task_result(pod(phase="Failed")) is None
    assert task_result(pod(template={"name": "x"})) is None
    assert task_result(pod(template=None)) is None


def test_a_bad_annotation_falls_back_to_defaults() -> None:
    result = task_result(pod(**{OUTPUTS_ANNOTATION: "not json"}))
    assert result is not None and result["outputs"]["parameters"][0] == {"name": "shards", "value": ""}


# --- resource templates: what `argoexec resource` does -------------------------------------------------------

MANIFEST = """apiVersion: kubeflow.org/v2beta1
kind: MPIJob
metadata:
  generateName: bert-train-
  ownerReferences:
  - {apiVersion: argoproj.io/v1alpha1, kind: Workflow, name: wf-abc, uid: w1, controller: true}
spec: {}
"""
RESOURCE = {"name": "train", "resource": {"action": "create", "setOwnerReference": True, "manifest": MANIFEST,
                                          "successCondition": "status.replicaStatuses.Launcher.succeeded > 0",
                                          "failureCondition": "status.replicaStatuses.Worker.failed > 0"}}


def resource_pod(phase: str = "Running", template: dict[str, Any] = RESOURCE, env: list[dict[str, str]] | None = None,
                 **annotations: str) -> dict[str, Any]:
    out = pod(phase, template, **annotations)
    out["spec"]["containers"] = [{"name": "main", "command": ["argoexec", "resource", "create"], "env": env or []}]
    return out


def test_a_running_resource_pod_creates_its_manifest_in_its_namespace_and_waits() -> None:
    action = resource_action(resource_pod())
    assert action is not None and action.action == "create" and action.created is None
    assert action.collection == "/apis/kubeflow.org/v2beta1/namespaces/ml/mpijobs"
    assert action.manifest["metadata"]["ownerReferences"][0]["uid"] == "w1"  # the controller's, passed on
    assert isinstance(action.conditions, Conditions) and action.conditions.waits
    assert action.interval == 5.0  # Argo's RESOURCE_STATE_CHECK_INTERVAL default


def test_only_running_resource_pods_without_a_verdict_act() -> None:
    assert resource_action(resource_pod(phase="Pending")) is None
    assert resource_action(resource_pod(phase="Succeeded")) is None
    assert resource_action(resource_pod(**{SIM_EXIT_CODE: "0"})) is None  # the verdict is given
    assert resource_action(pod(phase="Running")) is None  # an ordinary pod
    created = "/apis/kubeflow.org/v2beta1/namespaces/ml/mpijobs/x"
    resumed = resource_action(resource_pod(**{RESOURCE_ANNOTATION: created}))
    assert resumed is not None and resumed.created == created


def test_the_check_interval_and_a_condition_argo_cannot_parse() -> None:
    env = [{"name": CHECK_INTERVAL_ENV, "value": "1m30s"}]
    action = resource_action(resource_pod(env=env))
    assert action is not None and action.interval == 90.0
    broken = {"name": "t", "resource": {**RESOURCE["resource"], "successCondition": "status.x[0] > 0"}}
    action = resource_action(resource_pod(template=broken))
    assert action is not None and isinstance(action.conditions, ConditionError)
    assert str(action.conditions).startswith("success condition 'status.x[0] > 0' failed to parse")


@pytest.mark.parametrize(("api_version", "kind", "namespace", "path"), [
    ("kubeflow.org/v2beta1", "MPIJob", "ml", "/apis/kubeflow.org/v2beta1/namespaces/ml/mpijobs"),
    ("v1", "ConfigMap", "ml", "/api/v1/namespaces/ml/configmaps"),
    ("batch/v1", "Job", "ml", "/apis/batch/v1/namespaces/ml/jobs"),
    ("networking.k8s.io/v1", "Ingress", "ml", "/apis/networking.k8s.io/v1/namespaces/ml/ingresses"),
    ("v1", "Namespace", None, "/api/v1/namespaces"),
    ("x/v1", "Policy", "a", "/apis/x/v1/namespaces/a/policies"),
    ("x/v1", "Gateway", "a", "/apis/x/v1/namespaces/a/gateways"),
    ("x/v1", "Batch", "a", "/apis/x/v1/namespaces/a/batches"),
])
def test_api_paths_as_argo_infers_them(api_version: str, kind: str, namespace: str | None, path: str) -> None:
    assert collection_path(api_version, kind, namespace) == path


NAME = "bert-train-0a1b2c3d4e"
MPIJOB_PATH = f"/apis/kubeflow.org/v2beta1/namespaces/ml/mpijobs/{NAME}"


def releasing_pod(phase: str = "Pending", args: list[str] | None = None, **annotations: str) -> dict[str, Any]:
    from wf.compile.kinds.mpijob import release_container

    out = resource_pod(phase, **annotations)
    init = release_container(NAME, "1.33")
    init["args"] = [a.replace("{{workflow.namespace}}", "ml") for a in args or init["args"]]
    out["spec"].update(initContainers=[*out["spec"]["initContainers"], init], nodeName="cpu-0")
    return out


def test_a_scheduled_pending_pod_with_the_release_init_container_is_released_once() -> None:
    release = release_action(releasing_pod())
    assert release is not None and not release.refused
    assert (release.path, release.propagation, release.timeout) == (MPIJOB_PATH, "Foreground", 1800.0)
    assert release_action(releasing_pod(**{SIM_INIT: "done"})) is None  # played already
    assert release_action(releasing_pod(phase="Running")) is None
    unscheduled = releasing_pod()
    del unscheduled["spec"]["nodeName"]
    assert release_action(unscheduled) is None
    assert release_action(resource_pod(phase="Pending")) is None  # no release init container
    # kubectl arguments other than what wf compiles fail the container rather than being half-played.
    odd = release_action(releasing_pod(args=["delete", "mpijobs.v2beta1.kubeflow.org", NAME, "--wait=false"]))
    assert odd is not None and odd.refused.startswith("sim executor: kubectl delete")


class FakeApi:
    """The API server as the simulated `kubectl delete --wait` meets it: the MPIJob an earlier attempt left (uid
    "old"), gone after `deleting` more reads; each call recorded."""

    def __init__(self, deleting: int, exists: bool = True) -> None:
        self.calls: list[tuple[str, str, Any]] = []
        self.exists, self.deleting = exists, deleting

    def __call__(self, pod: Any, method: str, path: str, body: Any) -> str:
        from wf.cluster.executor import _ApiError

        self.calls.append((method, path, body))
        if not self.exists:
            raise _ApiError(404, "NotFound", f'mpijobs.kubeflow.org "{NAME}" not found')
        if method == "GET" and self.deleting <= 0:
            self.exists = False
            raise _ApiError(404, "NotFound", "gone")
        self.deleting -= method == "GET"
        return json.dumps({"metadata": {"name": NAME, "uid": "old", "deletionTimestamp": "now"}})


def _released(api: FakeApi, monkeypatch: pytest.MonkeyPatch, gone_node: bool = False) -> tuple[dict[str, str], Any]:
    import threading

    from wf.cluster.executor import ResourceExecutor

    executor = ResourceExecutor(api=None, executors=None)  # type: ignore[arg-type]
    annotated: dict[str, str] = {}
    monkeypatch.setattr(executor, "_call", api)
    monkeypatch.setattr(executor, "_node_gone", lambda work: gone_node)
    monkeypatch.setattr(executor, "_annotate", lambda namespace, pod, annotations: annotated.update(annotations))
    monkeypatch.setattr(threading.Event, "wait", lambda self, timeout=None: self.is_set())
    release = release_action(releasing_pod())
    assert release is not None
    executor._release(release, threading.Event())
    return annotated, api.calls


def test_the_release_deletes_the_earlier_attempts_mpijob_in_foreground_and_waits_until_it_is_gone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    annotated, calls = _released(FakeApi(deleting=3), monkeypatch)
    assert calls[0] == ("DELETE", MPIJOB_PATH, {"propagationPolicy": "Foreground"})
    assert [c[0] for c in calls] == ["DELETE", "GET", "GET", "GET", "GET"]
    assert annotated == {SIM_INIT: "done"}  # only now may the pod run, and argoexec create the next one
    # The first attempt finds nothing to delete: NotFound is no error.
    annotated, calls = _released(FakeApi(deleting=0, exists=False), monkeypatch)
    assert [c[0] for c in calls] == ["DELETE"] and annotated == {SIM_INIT: "done"}


def test_a_release_that_outlasts_its_timeout_fails_the_init_container_with_kubectls_words(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from wf.cluster import executor as module

    clock = iter(range(0, 10_000, 600))
    monkeypatch.setattr(module.time, "monotonic", lambda: float(next(clock)))
    annotated, _ = _released(FakeApi(deleting=100), monkeypatch)
    assert annotated == {SIM_INIT: "failed", SIM_EXIT_CODE: "1", SIM_MESSAGE: (
        f'mpijob.kubeflow.org "{NAME}" deleted\n'
        f"error: timed out waiting for the condition on mpijobs/{NAME}")}


def test_a_pod_whose_node_is_gone_is_played_no_further(monkeypatch: pytest.MonkeyPatch) -> None:
    annotated, calls = _released(FakeApi(deleting=3), monkeypatch, gone_node=True)
    assert annotated == {} and [c[0] for c in calls] == ["DELETE", "GET"]  # kubectl went with its node


def test_the_verdict_is_the_simulated_kubelets_exit_code_message_and_no_delay() -> None:
    assert verdict_annotations(Verdict(True, "")) == {SIM_EXIT_CODE: "0", SIM_DURATION: "0s", SIM_MESSAGE: ""}
    failed = verdict_annotations(Verdict(False, "failure condition '{a gt [0]}' evaluated true"))
    assert failed[SIM_EXIT_CODE] == "1" and failed[SIM_MESSAGE] == "failure condition '{a gt [0]}' evaluated true"


# --- checkpointing programs ------------------------------------------------------------------------------------

def checkpointing_pod(location: str | None = "s3://b/checkpoints/wf/w-1/train", resume: str = "true",
                      **annotations: str) -> dict[str, Any]:
    from wf.core.constants import SIM_CHECKPOINTS, SIM_DURATION

    env = [{"name": "WF_CHECKPOINT_URI", "value": location}, {"name": "WF_RESUME", "value": resume}] if location \
        else []
    return {
        "metadata": {"name": "w-1-train-1", "namespace": "wf", "uid": "u1",
                     "labels": {"workflows.argoproj.io/workflow": "w-1"},
                     "annotations": {SIM_DURATION: "100s", SIM_CHECKPOINTS: "10", **annotations},
                     "ownerReferences": [{"kind": "Workflow", "name": "w-1", "uid": "w"}]},
        "spec": {"containers": [{"name": "main", "env": env}, {"name": "wait"}]},
        "status": {"phase": "Running", "startTime": "2026-03-01T12:00:00Z",
                   "containerStatuses": [{"name": "main", "state": {"running": {
                       "startedAt": "2026-03-01T12:00:05Z"}}}]},
    }


class LedgerCore:
    """The API calls the checkpoint player makes: an empty ledger to read, the ledger writes and the pods it ended
    kept in order."""

    def __init__(self) -> None:
        self.writes: list[dict[str, str]] = []
        self.ended: list[str] = []

    def read_namespaced_config_map(self, name: str, namespace: str) -> Any:
        from types import SimpleNamespace

        return SimpleNamespace(data={})

    def patch_namespaced_config_map(self, name: str, namespace: str, body: dict[str, Any]) -> None:
        self.writes.append(body["data"])

    def patch_namespaced_pod(self, name: str, namespace: str, body: dict[str, Any]) -> None:
        self.ended.append(name)


def test_a_checkpointing_program_runs_the_work_left_after_its_checkpoint() -> None:
    from dataclasses import replace

    from wf.cluster.executor import checkpointed_run
    from wf.controller.checkpoints import Saved

    run = checkpointed_run(checkpointing_pod())
    assert run is not None and run.workflow == "w-1" and run.owners[0]["name"] == "w-1"
    assert (run.work_seconds, run.checkpoints, run.resumed) == (100.0, 10, Saved())
    assert run.ends == run.started + 100
    resumed = replace(run, resumed=Saved(6, 0.6))
    assert resumed.ends == run.started + 40  # the remainder


def test_an_interrupted_attempt_leaves_the_last_checkpoint_it_passed() -> None:
    from dataclasses import replace

    from wf.cluster.executor import checkpointed_run
    from wf.controller.checkpoints import Saved

    run = checkpointed_run(checkpointing_pod())
    assert run is not None
    record = run.ended_at(run.started + 63)  # 63% done: checkpoint 6 at 60% is the last one written
    assert record is not None and record.saved == Saved(6, 0.6) and record.kept_seconds == pytest.approx(60)
    # Resumed at 60%, lost 5 s later: nothing new kept, the same checkpoint stays for the next attempt.
    again = replace(run, resumed=Saved(6, 0.6)).ended_at(run.started + 5)
    assert again is not None and again.saved == Saved(6, 0.6) and again.kept_seconds == 0
    done = replace(run, resumed=Saved(6, 0.6)).ended_at(run.started + 40)
    assert done is not None and done.saved == Saved(10, 1.0) and done.kept_seconds == pytest.approx(40)


def test_without_a_location_nothing_survives_and_other_pods_are_not_played() -> None:
    from wf.cluster.executor import checkpointed_run
    from wf.controller.checkpoints import AttemptRecord, Saved
    from wf.core.constants import SIM_EXIT_CODE

    run = checkpointed_run(checkpointing_pod(location=None))
    assert run is not None and run.location is None and run.ended_at(run.started + 63) is None
    # Cut short, it says how long it ran (all of it redone), under no location: it resumes nothing.
    assert run.ended_at(run.started + 63, cut_short=True) == AttemptRecord("", Saved(), Saved(), 0.0, 63.0)
    assert checkpointed_run(checkpointing_pod(**{SIM_EXIT_CODE: "3"})) is None  # fails on its own schedule
    pending = checkpointing_pod()
    pending["status"]["phase"] = "Pending"
    assert checkpointed_run(pending) is None


def test_the_ledger_resumes_from_the_furthest_checkpoint_of_the_location() -> None:
    from wf.compile.node_facts import NodeFacts, NodeRecord
    from wf.controller.checkpoints import AttemptRecord, Saved, last_checkpoint, parse_ledger
    from wf.core.constants import NODE_RECORD_KEY

    here, there = "s3://b/x/train", "s3://b/x/eval"
    records = {"p1": AttemptRecord(here, Saved(), Saved(3, 0.3), 30.0), "p2": AttemptRecord(here, Saved(3, 0.3),
                                                                                               Saved(7, 0.7), 40.0),
               "p3": AttemptRecord(there, Saved(), Saved(9, 0.9), 90.0), "p4": AttemptRecord(here, Saved(7, 0.7))}
    nodes = NodeRecord({"cpu-1": NodeFacts("r5.4xlarge", "spot")})
    read = parse_ledger({pod: r.encode() for pod, r in records.items()}
                        | {"junk": "{", NODE_RECORD_KEY: nodes.encode()})
    ledger = read.attempts  # the node recorder's key is no attempt's
    assert ledger == records and read.nodes == nodes
    assert last_checkpoint(ledger, here) == Saved(7, 0.7) and last_checkpoint(ledger, "elsewhere") == Saved()
    assert str(Saved(5, 0.63)) == "at 63% from checkpoint 5" and str(Saved()) == "from the start"


def test_a_pod_stopped_running_when_deleted_or_disrupted_not_when_seen() -> None:
    from wf.cluster.executor import ended_at

    pod = checkpointing_pod()
    assert ended_at(pod, 99.0) == 99.0
    pod["status"]["conditions"] = [{"type": "DisruptionTarget", "lastTransitionTime": "2026-03-01T12:01:00Z"}]
    assert ended_at(pod, 99.0) == 1772366460.0
    pod["metadata"]["deletionTimestamp"] = "2026-03-01T12:00:30Z"
    assert ended_at(pod, 99.0) == 1772366430.0
    # Its node vanished 20 s before the pod GC deleted the pod: the program stopped with the node.
    assert ended_at(pod, 99.0, node_gone=1772366410.0) == 1772366410.0


def test_the_player_resumes_from_the_ledger_and_records_what_an_interruption_left() -> None:
    from types import SimpleNamespace

    from wf.cluster.executor import CheckpointPlayer
    from wf.controller.checkpoints import AttemptRecord, Saved, parse_ledger

    location = "s3://b/checkpoints/wf/w-1/train"
    ledger = {"w-1-train-0": AttemptRecord(location, Saved(), Saved(6, 0.6), 60.0).encode()}
    writes: list[dict[str, str]] = []

    class Core:
        def read_namespaced_config_map(self, name: str, namespace: str) -> Any:
            assert (name, namespace) == ("w-1-checkpoints", "wf")
            return SimpleNamespace(data=dict(ledger))

        def patch_namespaced_config_map(self, name: str, namespace: str, body: dict[str, Any]) -> None:
            writes.append(body["data"])

    player = CheckpointPlayer(None)
    player.core = Core()  # type: ignore[assignment]
    pod = checkpointing_pod()
    player.handle(pod)
    (run,) = player.runs.values()
    assert run.resumed == Saved(6, 0.6) and run.ends == run.started + 40
    assert parse_ledger(writes[-1]).attempts == {"w-1-train-1": AttemptRecord(location, Saved(6, 0.6))}
    # Its node is lost 13 s in (73% done): checkpoint 7 at 70% is what it leaves.
    pod["status"]["phase"] = "Failed"
    pod["status"]["conditions"] = [{"type": "DisruptionTarget", "lastTransitionTime": "2026-03-01T12:00:18Z"}]
    player.handle(pod)
    assert not player.runs
    (record,) = parse_ledger(writes[-1]).attempts.values()
    assert record.saved == Saved(7, 0.7) and record.kept_seconds == pytest.approx(10)


def test_a_program_told_not_to_resume_starts_over_whatever_its_location_holds() -> None:
    # The contract's program: WF_RESUME "false" (a step's first attempt; before the fix, a `wf retry`'s) means no
    # checkpoint is looked for, though an earlier attempt's checkpoint 6 is in the location.
    from types import SimpleNamespace

    from wf.cluster.executor import CheckpointPlayer
    from wf.controller.checkpoints import AttemptRecord, Saved, parse_ledger

    location = "s3://b/checkpoints/wf/w-1/train"
    core = LedgerCore()
    core.read_namespaced_config_map = lambda name, namespace: SimpleNamespace(  # type: ignore[method-assign]
        data={"w-1-train-0": AttemptRecord(location, Saved(), Saved(6, 0.6), 60.0).encode()})
    player = CheckpointPlayer(None)
    player.core = core
    player.handle(checkpointing_pod(resume="false"))
    (run,) = player.runs.values()
    assert not run.resume and run.resumed == Saved() and run.ends == run.started + 100
    # "from the start"
    assert parse_ledger(core.writes[-1]).attempts == {"w-1-train-1": AttemptRecord(location, Saved())}


def test_a_retried_attempt_under_its_predecessors_pod_name_resumes_from_what_that_one_left() -> None:
    # `wf retry` runs the failed step again in a pod of the same name (Argo's name of the same node): the ended
    # record under that name is the earlier attempt's, not this program's own (a restart reads an unended one).
    from types import SimpleNamespace

    from wf.cluster.executor import CheckpointPlayer
    from wf.controller.checkpoints import AttemptRecord, Saved, parse_ledger

    location = "s3://b/checkpoints/wf/w-1/train"
    ledger = {"w-1-train-1": AttemptRecord(location, Saved(), Saved(6, 0.6), 60.0, 65.0).encode()}
    core = LedgerCore()
    core.read_namespaced_config_map = lambda name, namespace: SimpleNamespace(  # type: ignore[method-assign]
        data=ledger)
    player = CheckpointPlayer(None)
    player.core = core
    player.handle(checkpointing_pod())
    (run,) = player.runs.values()
    assert run.resumed == Saved(6, 0.6) and run.ends == run.started + 40
    assert parse_ledger(core.writes[-1]).attempts == {"w-1-train-1": AttemptRecord(location, Saved(6, 0.6))}
    # The same program seen again after a restart of this process: its own unended record, not read afresh.
    ledger.update(core.writes[-1])
    restarted = CheckpointPlayer(None)
    restarted.core = core
    core.writes.clear()
    restarted.handle(checkpointing_pod(resume="false"))  # would start over if the record were not its own
    (again,) = restarted.runs.values()
    assert again.resumed == Saved(6, 0.6) and not core.writes


@pytest.mark.parametrize("due_first", [False, True])
def test_a_pod_gone_before_its_work_was_done_is_recorded_cut_short_whatever_the_timer_saw(due_first: bool) -> None:
    # The storm day: a node vanishes 60 s into a 100 s program, but its deletion is still queued when the timer
    # finds the work due. Whichever the ledger's thread plays first, the attempt left checkpoint 6, not 10: the
    # retry that follows reads that (issue 20's rehearsal found 15 retries that started over).

    from wf.cluster.executor import CheckpointPlayer
    from wf.controller.checkpoints import Saved, parse_ledger

    core = LedgerCore()
    writes = core.writes
    player = CheckpointPlayer(None)
    player.core = core  # type: ignore[assignment]
    pod = checkpointing_pod()
    player.handle(pod)
    gone = {**pod, "metadata": {**pod["metadata"], "deletionTimestamp": "2026-03-01T12:01:05Z"}}
    if due_first:
        player.finish("u1")
        assert parse_ledger(writes[-1]).attempts["w-1-train-1"].saved == Saved(10, 1.0)
        player.handle(gone, deleted=True)
    else:
        player.handle(gone, deleted=True)
        player.finish("u1")
    assert not player.runs
    assert parse_ledger(writes[-1]).attempts["w-1-train-1"].saved == Saved(6, 0.6)


def test_a_program_whose_node_vanished_stops_there_though_its_pod_is_deleted_later_and_its_timer_came_first() -> None:
    # Wave 1 of the storm: the Node is deleted 30 s into a 100 s program; the pod GC deletes the pod 50 s later,
    # after the timer found the work due. Checkpoint 3 is what it left, and it ran 30 s, not 80 or 100.

    from wf.cluster.executor import CheckpointPlayer, checkpointed_run
    from wf.controller.checkpoints import Saved, parse_ledger

    core = LedgerCore()
    writes, ended = core.writes, core.ended
    player = CheckpointPlayer(None, clock=lambda: 0.0)
    player.core = core  # type: ignore[assignment]
    pod = checkpointing_pod()
    pod["spec"]["nodeName"] = "cpu-spot-7"
    run = checkpointed_run(pod)
    assert run is not None and run.node == "cpu-spot-7"
    player.handle(pod)
    player.node_gone("cpu-spot-7", run.started + 30)
    player.finish("u1")
    assert not ended, "a program on a vanished node is not ended as done"
    gone = {**pod, "metadata": {**pod["metadata"], "deletionTimestamp": "2026-03-01T12:01:25Z"}}
    player.handle(gone, deleted=True)
    record = parse_ledger(writes[-1]).attempts["w-1-train-1"]
    assert record.saved == Saved(3, 0.3) and record.ran_seconds == pytest.approx(30)
    assert not player.runs


def test_a_node_recreated_under_the_name_of_one_that_vanished_ends_its_new_programs_as_done() -> None:
    # `--replace recreate` brings a reclaimed node back under its name: the old deletion is not the new program's.
    from wf.cluster.executor import CheckpointPlayer, checkpointed_run
    from wf.controller.checkpoints import Saved, parse_ledger

    core = LedgerCore()
    player = CheckpointPlayer(None, clock=lambda: 0.0)
    player.core = core  # type: ignore[assignment]
    pod = checkpointing_pod()
    pod["spec"]["nodeName"] = "cpu-spot-7"
    run = checkpointed_run(pod)
    assert run is not None
    player.node_gone("cpu-spot-7", run.started - 60)
    player.handle(pod)
    player.finish("u1")
    assert core.ended == ["w-1-train-1"]
    assert parse_ledger(core.writes[-1]).attempts["w-1-train-1"].saved == Saved(10, 1.0)


def test_one_workflow_s_slow_ledger_holds_up_no_other_workflow_and_its_own_events_stay_in_order() -> None:
    # The full-size storm day: 8,000 programs in one thread waited minutes behind each other's API calls. Each
    # workflow's pods have a lane of their own; within it, events keep their order.
    import threading
    from types import SimpleNamespace

    from wf.cluster.executor import CheckpointPlayer

    slow_read, handled = threading.Event(), threading.Event()
    calls: list[tuple[str, str]] = []

    class Core:
        def read_namespaced_config_map(self, name: str, namespace: str) -> Any:
            if name == "w-1-checkpoints":
                assert slow_read.wait(10), "w-1's lane was never released"
            return SimpleNamespace(data={})

        def patch_namespaced_config_map(self, name: str, namespace: str, body: dict[str, Any]) -> None:
            calls.append((name, *body["data"]))
            if name == "w-2-checkpoints":
                handled.set()

    player = CheckpointPlayer(None, clock=lambda: 0.0)  # before the programs started: none ends here
    player.core = Core()  # type: ignore[assignment]
    assert player.lanes.of("wf", "w-1") is not player.lanes.of("wf", "w-2")
    first = checkpointing_pod()
    second = checkpointing_pod()
    second["metadata"] = {**second["metadata"], "name": "w-1-train-2", "uid": "u2"}
    other = checkpointing_pod("s3://b/checkpoints/wf/w-2/train")
    other["metadata"] = {**other["metadata"], "name": "w-2-train-1", "uid": "u3",
                         "labels": {"workflows.argoproj.io/workflow": "w-2"}}
    for pod in (first, second, other):
        player.observe(pod)
    assert handled.wait(10), "w-2 waited behind w-1's slow read"
    assert calls == [("w-2-checkpoints", "w-2-train-1")]
    slow_read.set()
    for _ in range(200):
        if len(calls) == 3:
            break
        threading.Event().wait(0.05)
    assert calls[1:] == [("w-1-checkpoints", "w-1-train-1"), ("w-1-checkpoints", "w-1-train-2")]


def test_the_executor_acts_as_the_account_argo_mounts_for_its_containers() -> None:
    # Argo mounts the executor account's token Secret as `exec-sa-token` (workflowpod.go); the Secret names its
    # account. Without one, Argo's containers use the pod's own (automounted) account.
    secrets = {("wf", "wf-mpijob-executor.service-account-token"): "wf-mpijob-executor"}
    with_executor = {"metadata": {"namespace": "wf"}, "spec": {"serviceAccountName": "wf-workflow", "volumes": [
        {"name": "var-run-argo", "emptyDir": {}},
        {"name": "exec-sa-token", "secret": {"secretName": "wf-mpijob-executor.service-account-token"}}]}}
    assert executor_account(with_executor, lambda ns, name: secrets[(ns, name)]) == "wf-mpijob-executor"
    plain = {"metadata": {"namespace": "wf"}, "spec": {"serviceAccountName": "wf-workflow"}}
    assert executor_account(plain, lambda ns, name: pytest.fail("no token volume: nothing to read")) == "wf-workflow"
    assert executor_account({"metadata": {}, "spec": {}}, lambda ns, name: "") == "default"


def _running(uid: str, node: str, phase: str = "Running") -> dict[str, Any]:
    return {"metadata": {"uid": uid, "namespace": "wf", "name": f"pod-{uid}"}, "spec": {"nodeName": node},
            "status": {"phase": phase}}


def test_pods_running_on_a_deleted_node_are_named_when_a_node_of_that_name_comes_back() -> None:
    lost = LostPods()
    for pod in (_running("a", "n1"), _running("b", "n1"), _running("c", "n1"), _running("d", "n2")):
        lost.observe(pod)
    lost.observe(_running("b", "n1", phase="Succeeded"))  # ended before its node went: nothing to end
    assert lost.node_back("n1") == []  # a node seen again that was never deleted
    lost.node_gone("n1")
    lost.observe(_running("c", "n1"), deleted=True)  # the pod GC deleted it: nothing to end
    lost.observe(_running("a", "n1"))  # an orphan's own later event keeps it an orphan
    assert lost.node_back("n1") == [("wf", "pod-a")]
    assert lost.node_back("n1") == []  # once
    lost.observe(_running("e", "n1"))  # a pod of the new machine is its own
    lost.node_gone("n2")
    assert lost.node_back("n2") == [("wf", "pod-d")]


def test_a_container_the_kubelet_lost_is_an_interruption() -> None:
    message = "main: ContainerStatusUnknown (exit code 137): The container could not be located when the pod was " \
              "terminated"
    assert is_interruption(message)
    assert re.search(INTERRUPTION_EXPRESSION.split('"')[1], message)


# --- an MPIJob's launcher ---------------------------------------------------------------------------------------

def launcher_pod(**annotations: str) -> dict[str, Any]:
    """A checkpointed multi-node step's launcher, as the mpi-operator makes it: owned by its Job, labelled by wf with
    the workflow and by the operator with its MPIJob."""
    pod = checkpointing_pod(**annotations)
    pod["metadata"] = {**pod["metadata"], "name": "bert-train-1-launcher-x7", "uid": "l1",
                       "ownerReferences": [{"kind": "Job", "name": "bert-train-1-launcher", "uid": "j"}],
                       "labels": {"wf.dev/workflow": "w-1", "training.kubeflow.org/job-name": "bert-train-1",
                                  "training.kubeflow.org/job-role": "launcher"}}
    return pod


def test_a_launchers_program_is_recorded_under_the_attempt_argo_knows_its_pod_by() -> None:
    # `wf get` reads the ledger by Argo's pod of the attempt: for a multi-node step, the resource pod that created the
    # MPIJob (labelled with its name), which the workflow owns. The launcher is played, and fails as mpirun does.
    from types import SimpleNamespace

    from wf.cluster.executor import MPIRUN_EXIT_CODE, MPIRUN_LOST_DAEMON, CheckpointPlayer, checkpointed_run
    from wf.controller.checkpoints import AttemptRecord, Saved, parse_ledger

    location = "s3://b/checkpoints/wf/w-1/train"
    ref = SimpleNamespace(api_version="argoproj.io/v1alpha1", kind="Workflow", name="w-1", uid="w")
    argo = [SimpleNamespace(status=SimpleNamespace(phase=phase), metadata=SimpleNamespace(
        name=name, deletion_timestamp=None, owner_references=[ref]))
        for name, phase in (("w-1-train-2", "Pending"), ("w-1-train-1", "Running"))]
    core = LedgerCore()
    created: list[dict[str, Any]] = []

    def list_namespaced_pod(namespace: str, label_selector: str) -> Any:
        assert (namespace, label_selector) == ("wf", "wf.dev/mpijob=bert-train-1")
        return SimpleNamespace(items=argo)

    def read_namespaced_config_map(name: str, namespace: str) -> Any:
        return SimpleNamespace(data={"w-1-train-0": AttemptRecord(location, Saved(), Saved(4, 0.4), 40.0).encode()})

    core.list_namespaced_pod = list_namespaced_pod  # type: ignore[attr-defined]
    core.read_namespaced_config_map = read_namespaced_config_map  # type: ignore[method-assign]
    core.create_namespaced_config_map = lambda namespace, body: created.append(body)  # type: ignore[attr-defined]
    run = checkpointed_run(launcher_pod())
    assert run is not None and (run.workflow, run.attempt, run.mpijob, run.owners) == ("w-1", "", "bert-train-1", ())
    player = CheckpointPlayer(None)
    player.core = core  # type: ignore[assignment]
    pod = launcher_pod()
    player.handle(pod)
    (run,) = player.runs.values()
    assert (run.attempt, run.pod, run.resumed) == ("w-1-train-1", "bert-train-1-launcher-x7", Saved(4, 0.4))
    assert run.owners == ({"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "name": "w-1", "uid": "w"},)
    assert parse_ledger(core.writes[-1]).attempts == {"w-1-train-1": AttemptRecord(location, Saved(4, 0.4))}
    # A worker's node goes: mpirun fails, and the attempt keeps what it passed, under Argo's pod's name.
    message = MPIRUN_LOST_DAEMON.format(hostname="bert-train-1-worker-1")
    assert message.startswith("ORTE has lost communication with its daemon") and "bert-train-1-worker-1" in message
    player.handle(launcher_pod(**{SIM_EXIT_CODE: MPIRUN_EXIT_CODE, SIM_MESSAGE: message}))
    assert not player.runs
    (key, record), = parse_ledger(core.writes[-1]).attempts.items()
    assert key == "w-1-train-1" and record.resumed == Saved(4, 0.4) and record.saved is not None
    # Argo's pod gone meanwhile (with its node): the launcher runs from the start and keeps nothing.
    argo.clear()
    alone = CheckpointPlayer(None)
    alone.core = core  # type: ignore[assignment]
    alone.handle(launcher_pod())
    (run,) = alone.runs.values()
    assert (run.attempt, run.location, run.resumed) == ("bert-train-1-launcher-x7", None, Saved())
    assert not created


def test_mpirun_losing_a_rank_fails_the_launcher_once_the_recorder_has_marked_the_mpijob() -> None:
    """The node recorder marks the MPIJob (wf.controller.node_recorder); the twin's mpirun reads it every
    MARK_POLL_SECONDS and fails the launcher only once the mark is there, so Argo never reads the launcher's failure
    without it; without a mark after MARK_WAIT_SECONDS it fails anyway, as mpirun waits for no one."""
    from kubernetes.client.exceptions import ApiException

    from wf.cluster.executor import MARK_POLL_SECONDS, MARK_WAIT_SECONDS, MPIRUN_EXIT_CODE, mpirun_fails
    from wf.controller.gangs import LostWorker

    calls: list[tuple[str, str, float]] = []
    patches: list[dict[str, Any]] = []
    now = [0.0]

    class Api:
        marked_at: float | None = 0.6  # when the recorder's mark lands
        status = 200

        def get_namespaced_custom_object(self, group: str, version: str, namespace: str, plural: str,
                                         name: str) -> dict[str, Any]:
            calls.append(("read", f"{group}/{plural}/{namespace}/{name}", now[0]))
            if self.status != 200:
                raise ApiException(status=self.status)
            marked = self.marked_at is not None and now[0] >= self.marked_at
            return {"metadata": {"annotations": {"wf-worker-lost": "bert-train-1-worker-1: its node dl1-1 was "
                                                                   "deleted"} if marked else {}}}

        def patch_namespaced_pod(self, name: str, namespace: str, body: dict[str, Any]) -> None:
            calls.append(("fail", name, now[0]))
            patches.append(body)

    def sleep(seconds: float) -> None:
        now[0] += seconds

    api = Api()
    loss = LostWorker("wf", "bert-train-1", "bert-train-1-worker-1", "bert-train-1-launcher-x7",
                      "its node dl1-1 was deleted")
    mpirun_fails(api, api, loss, sleep=sleep, clock=lambda: now[0])
    *reads, (_, launcher, failed_at) = calls
    assert {what for what, _, _ in reads} == {"read"} and reads[0][1] == "kubeflow.org/mpijobs/wf/bert-train-1"
    assert api.marked_at <= failed_at < api.marked_at + 2 * MARK_POLL_SECONDS  # after the mark, at once
    annotations = patches[0]["metadata"]["annotations"]
    assert launcher == "bert-train-1-launcher-x7" and annotations[SIM_DURATION] == "0s"  # at once
    assert annotations[SIM_EXIT_CODE] == MPIRUN_EXIT_CODE != "0"
    assert "hostname:  bert-train-1-worker-1" in annotations[SIM_MESSAGE]
    # No recorder marks it: the launcher fails anyway once MARK_WAIT_SECONDS have passed.
    calls.clear()
    now[0], api.marked_at = 0.0, None
    mpirun_fails(api, api, loss, sleep=sleep, clock=lambda: now[0])
    assert calls[-1][:2] == ("fail", "bert-train-1-launcher-x7") and calls[-1][2] >= MARK_WAIT_SECONDS
    # A read refused for a while is a read without the mark; the MPIJob gone (its workflow stopped): no mpirun
    # left to fail.
    for status, last in [(503, "fail"), (404, "read")]:
        calls.clear()
        now[0], api.status = 0.0, status
        mpirun_fails(api, api, loss, sleep=sleep, clock=lambda: now[0])
        assert calls[-1][0] == last, calls
