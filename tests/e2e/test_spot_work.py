"""Spot work is never done twice (issue 20), against the real workflow-controller: a checkpointed step resumes
from its last checkpoint after an interruption (and after a `wf retry`) while an unchecked one restarts, and
retries mean what they say (Argo's Error from the executor is the program's, a program's own SIGTERM on a node
that is still there is the program's in `wf get`). Each case builds the pod state directly, as test_retries.py
does, rather than hoping a race shows it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from wf.compile.interruptions import is_interruption
from wf.compile.workflow import ATTEMPTS_SUFFIX
from wf.controller.checkpoints import read_ledger
from wf.controller.client import Kube
from wf.controller.steps import pod_name, workflow_view
from wf.controller.watch import Insight
from wf.core.constants import RETRIED_ANNOTATION, SIM_CHECKPOINTS, SIM_DURATION

from .test_controller_e2e import ClusterHandle, job_file, step, wf_cli
from .test_retries import (
    NAMESPACE,
    RUNNING,
    _leave_pod_state,
    _node_tree,
    _nodes,
    _pod_nodes,
    _pods,
    _running_attempt,
    _wait_final,
)

pytestmark = pytest.mark.cluster

WORK_SECONDS = 40  # long enough to be interrupted past Argo's recently-started window, checkpoints every 4 s


def _refined(kube: Kube, workflow: dict[str, Any]) -> Any:
    """The view `wf get` shows: the checkpoint ledger and the attempts' nodes read."""
    return Insight(kube, lambda: None).refine(workflow, workflow_view(workflow))


def _interrupt_first_attempt(kube: Kube, names: dict[str, str], **state: Any) -> None:
    pending = dict(names)
    deadline = time.monotonic() + 120
    while pending:
        for key, name in list(pending.items()):
            if (found := _running_attempt(kube, name)) is not None:
                _leave_pod_state(kube, found[1], **state)
                del pending[key]
        assert time.monotonic() < deadline, f"never running: {sorted(pending)}"
        time.sleep(0.5)


def test_a_checkpointed_step_resumes_where_an_unchecked_one_restarts(kube: Kube, tmp_path: Path) -> None:
    import wf

    program = {SIM_DURATION: f"{WORK_SECONDS}s", SIM_CHECKPOINTS: "10"}
    names = {
        "checkpointed": wf.submit(str(job_file(tmp_path, "resumes", [step("train", **program)], checkpoint={})),
                                  kube=kube)[0].name,
        "unchecked": wf.submit(str(job_file(tmp_path, "restarts", [step("train", **program)])), kube=kube)[0].name,
    }
    # The node goes away under both first attempts (the pod GC's state), past the recently-started window.
    _interrupt_first_attempt(kube, names, containers=RUNNING, condition="DeletionByPodGC")
    final = {key: _wait_final(kube, name, timeout=240) for key, name in names.items()}
    report = "\n".join(f"{key} ({names[key]}): {w['status']['phase']}\n{_node_tree(w)}" for key, w in final.items())
    print(f"\ncheckpoints e2e:\n{report}")
    assert all(w["status"]["phase"] == "Succeeded" for w in final.values()), report

    def attempts(key: str) -> list[Any]:
        (row,) = _refined(kube, final[key]).steps
        return list(row.attempts)

    first, second = attempts("checkpointed")
    assert first.interrupted and second.outcome == "succeeded", report
    ledger = read_ledger(kube, NAMESPACE, names["checkpointed"]).attempts
    saved = ledger[pod_name(final["checkpointed"], first)].saved
    assert saved is not None and saved.checkpoint >= 1, ledger
    # The retry resumed from the checkpoint the interrupted attempt left, and ran only the work left.
    assert second.resumed == saved, (second, ledger)
    assert second.seconds(second.finished) < WORK_SECONDS * (1 - saved.progress) + 8, (second, report)
    assert first.redone_seconds(first.finished) < first.seconds(first.finished), first

    first, second = attempts("unchecked")
    assert first.interrupted and second.resumed is None, report  # no location: nothing kept, nothing resumed
    assert second.seconds(second.finished) >= WORK_SECONDS - 1, (second, report)
    # What its program ran is all redone: the ledger says how long that was, within the attempt's whole time.
    whole = first.seconds(first.finished)  # Argo's times are whole seconds
    assert first.ran_seconds is not None and 0 < first.ran_seconds <= whole + 1, first
    assert first.redone_seconds(first.finished) == pytest.approx(min(first.ran_seconds, whole)), first


def test_a_checkpointed_step_resumes_after_wf_retry(local_cluster: ClusterHandle, kube: Kube, tmp_path: Path) -> None:
    """The program fails on its own with no retries left, so the workflow fails; `wf retry` runs the step again in
    new Retry nodes (both attempt counts back at 0), and the new attempt is still told WF_RESUME=true: it resumes
    from the last checkpoint the failed one saved (the simulated program, like the contract's, resumes only when
    told to), as `wf get`'s resumed column shows."""
    import wf

    program = {SIM_DURATION: f"{WORK_SECONDS}s", SIM_CHECKPOINTS: "10"}
    name = wf.submit(str(job_file(tmp_path, "retried", [step("train", **program)], checkpoint={})), kube=kube)[0].name
    _interrupt_first_attempt(kube, {"failing": name}, containers={"terminated": {"exitCode": 1, "reason": "Error"}})
    failed = _wait_final(kube, name, timeout=180)
    report = _node_tree(failed)
    assert failed["status"]["phase"] == "Failed", report
    (first,) = _refined(kube, failed).steps[0].attempts
    assert not first.interrupted, report  # the program's failure: no interruption retry either
    saved = read_ledger(kube, NAMESPACE, name).attempts[pod_name(failed, first)].saved
    assert saved is not None and saved.checkpoint >= 1, read_ledger(kube, NAMESPACE, name)

    retried = wf_cli(local_cluster, "retry", name)
    assert retried.returncode == 0, retried.stdout + retried.stderr
    final = _wait_final(kube, name, timeout=180)
    report = _node_tree(final)
    print(f"\nwf retry of a checkpointed step ({name}):\n{report}")
    assert final["status"]["phase"] == "Succeeded", report
    assert final["metadata"]["annotations"][RETRIED_ANNOTATION] == "1"
    (pod,) = _pods(kube, name)  # the retry deleted the failed attempt's pod
    main = next(c for c in pod.spec.containers if c.name == "main")
    env = {e.name: e.value for e in main.env or []}
    # Argo's counts start again in the new nodes: the retry's mark on the workflow is what says resume.
    assert (env["WF_RESUME"], env["WF_ATTEMPT"], env["WF_APPLICATION_ATTEMPT"]) == ("true", "0", "0"), env
    (second,) = _refined(kube, final).steps[0].attempts
    assert second.outcome == "succeeded" and second.resumed == saved, (second, read_ledger(kube, NAMESPACE, name))
    assert second.seconds(second.finished) < WORK_SECONDS * (1 - saved.progress) + 8, (second, report)
    shown = wf_cli(local_cluster, "get", name)
    assert shown.returncode == 0 and str(saved) in shown.stdout, shown.stdout + shown.stderr


def test_an_executor_error_spends_an_application_retry_not_the_interruption_budget(kube: Kube,
                                                                                   tmp_path: Path) -> None:
    """The program ran to exit 0, then the wait container failed to save its outputs: Argo's Error, the
    program's failure, retried once on `retries: 1` and never by the pod template's interruption strategy."""
    import wf

    name = wf.submit(str(job_file(tmp_path, "upload-fails", [step("train", **{SIM_DURATION: "25s"})], retries=1)),
                     kube=kube)[0].name
    found = None
    deadline = time.monotonic() + 120
    while found is None:
        found = _running_attempt(kube, name)
        assert time.monotonic() < deadline, "never running"
        time.sleep(0.5)
    node_id, pod = found
    _leave_wait_failure(kube, pod, "failed to save outputs: failed to put file: AccessDenied: Access Denied")
    workflow = _wait_final(kube, name, timeout=180)
    report = _node_tree(workflow)
    print(f"\nexecutor error ({name}):\n{report}")
    first = next(n for n in _pod_nodes(workflow) if n["id"] == node_id)
    assert first["phase"] in ("Failed", "Error") and not is_interruption(first.get("message")), report
    # Two application attempts, one pod each: the interruption strategy declined the failure.
    (outer,) = [n for n in _nodes(workflow) if n["type"] == "Retry" and n["templateName"] == "train" + ATTEMPTS_SUFFIX]
    assert len(outer["children"]) == 2, report
    inner = [n for n in _nodes(workflow) if n["type"] == "Retry" and n["templateName"] == "train"]
    assert [len(n["children"]) for n in inner] == [1, 1], report
    (row,) = _refined(kube, workflow).steps
    assert (row.retries, row.interruptions) == (1, 0), row


def test_a_programs_own_sigterm_is_its_failure_for_argo_and_wf_get(kube: Kube, tmp_path: Path) -> None:
    """Exit 143 without the stop hook's mark, no DisruptionTarget, the node in place: the program's own SIGTERM.
    Argo's expression leaves it to the application budget (none here: the workflow fails), `wf get` agrees."""
    import wf

    name = wf.submit(str(job_file(tmp_path, "self-kill", [step("train", **{SIM_DURATION: "25s"})])),
                     kube=kube)[0].name
    _interrupt_first_attempt(kube, {"self": name},
                             containers={"terminated": {"exitCode": 143, "reason": "Error"}})
    workflow = _wait_final(kube, name, timeout=180)
    report = _node_tree(workflow)
    (first,) = _pod_nodes(workflow)
    assert first["message"] == "main: Error (exit code 143)", report
    assert workflow["status"]["phase"] == "Failed", report
    assert kube.core.read_node(first["hostNodeName"]).spec.unschedulable is None  # the node stayed
    (argo_row,) = workflow_view(workflow).steps
    assert not argo_row.attempts[0].interrupted, report
    (row,) = _refined(kube, workflow).steps
    assert row.attempts[0].outcome == "failed" and (row.retries, row.interruptions) == (0, 0), row


def _leave_wait_failure(kube: Kube, pod: Any, message: str) -> None:
    """main exited 0, the wait container (Argo's executor) exited 1 with `message`: the pod Failed."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    current = kube.core.api_client.sanitize_for_serialization(pod.status)
    statuses = []
    for status in current["containerStatuses"]:
        started = (status.get("state") or {}).get("running", {}).get("startedAt", now)
        code = 1 if status["name"] == "wait" else 0
        terminated = {"exitCode": code, "reason": "Error" if code else "Completed", "startedAt": started,
                      "finishedAt": now, **({"message": message} if code else {})}
        statuses.append({**status, "state": {"terminated": terminated}, "ready": False, "started": False})
    kube.core.patch_namespaced_pod_status(pod.metadata.name, NAMESPACE, [
        {"op": "replace", "path": "/status/phase", "value": "Failed"},
        {"op": "replace", "path": "/status/containerStatuses", "value": statuses}])
