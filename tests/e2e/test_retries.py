"""Application retries against the real workflow-controller: what the compiler's two retry strategies do.

The compiler wraps a step with `retries: N` in a DAG template carrying the application retryStrategy and puts
the interruption retryStrategy on the pod template (src/wf/compile.py). These tests read the node tree Argo
builds, so a change in how Argo nests, counts or declines retries shows up here and not on a Spot fleet.

The three scenarios run concurrently: Argo waits a retry's backoff before it evaluates the retry's expression,
so every application failure first sits out the interruption backoff, and serially the run takes longer.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from test_placement import STOP_MARK
from wf.compile.workflow import ATTEMPTS_SUFFIX
from wf.controller.client import Kube
from wf.core.constants import CAPACITY_LABEL, SIM_DURATION, SIM_EXIT_CODE
from wf.core.units import parse_time

from .test_controller_e2e import job_file, step

pytestmark = pytest.mark.cluster

GROUP, VERSION = "argoproj.io", "v1alpha1"
NAMESPACE = "wf"
# Argo re-creates, under the same attempt, a pod that vanishes within RECENTLY_STARTED_POD_DURATION (10 s) of
# its node's start; an interruption is only seen as one after that.
RECENTLY_STARTED_SECONDS = 10
NO_DEADLINE = "0001-01-01T00:00:00Z"


def test_application_retries_and_interruptions(kube: Kube, tmp_path: Path) -> None:
    import wf

    jobs = {
        "twice": job_file(tmp_path, "retry-twice", [step("train", **{SIM_EXIT_CODE: "3"})], retries=2),
        "never": job_file(tmp_path, "retry-never", [step("train", **{SIM_EXIT_CODE: "3"})], retries=0),
        "interrupted": job_file(tmp_path, "interrupted", [step("train", **{SIM_DURATION: "20s"})], retries=0),
    }
    started = time.monotonic()
    names = {key: wf.submit(str(path), kube=kube)[0].name for key, path in jobs.items()}

    deleted_pod = _interrupt_once(kube, names["interrupted"])
    final = {key: _wait_final(kube, name, timeout=240) for key, name in names.items()}
    elapsed = time.monotonic() - started
    trees = {key: _node_tree(w) for key, w in final.items()}
    report = "\n".join(f"{key} ({names[key]}): {w['status']['phase']}\n{trees[key]}" for key, w in final.items())
    print(f"\nretries e2e: {elapsed:.0f}s\n{report}")

    # retries: 2 and a step exiting 3: three attempts, three pods, the workflow fails.
    twice = final["twice"]
    assert twice["status"]["phase"] == "Failed", report
    assert len(_pod_nodes(twice)) == 3, report
    assert len(_pods(kube, names["twice"])) == 3, report
    (attempts,) = [n for n in _nodes(twice) if n["type"] == "Retry" and n["templateName"] == "train" + ATTEMPTS_SUFFIX]
    assert len(attempts["children"]) == 3 and attempts["message"] == "No more retries left", report
    # Inside each application attempt, the interruption strategy declined the exit code: one pod each.
    inner = [n for n in _nodes(twice) if n["type"] == "Retry" and n["templateName"] == "train"]
    assert len(inner) == 3 and all(len(n["children"]) == 1 for n in inner), report
    assert all(n["message"] == "retryStrategy.expression evaluated to false" for n in inner), report
    assert all("exit code 3" in n.get("message", "") for n in _pod_nodes(twice)), report

    # retries: 0: one attempt, one pod, no application wrapper.
    never = final["never"]
    assert never["status"]["phase"] == "Failed", report
    assert len(_pod_nodes(never)) == 1 and len(_pods(kube, names["never"])) == 1, report
    assert not any(n["templateName"].endswith(ATTEMPTS_SUFFIX) for n in _nodes(never)), report

    # retries: 0 survives one interruption: the pod-level strategy retried it, no application retry was spent.
    interrupted = final["interrupted"]
    assert interrupted["status"]["phase"] == "Succeeded", report
    first, second = sorted(_pod_nodes(interrupted), key=lambda n: n["startedAt"])
    assert first["phase"] == "Error" and first["message"] == "pod deleted" and first["id"] == deleted_pod, report
    assert second["phase"] == "Succeeded", report
    (retry,) = [n for n in _nodes(interrupted) if n["type"] == "Retry"]
    assert retry["children"] == [first["id"], second["id"]], report
    # The retried attempt gets the step's whole run time: Argo turns a retry backoff's maxDuration into a deadline
    # counted from the FIRST attempt's start (ARGO_DEADLINE: the wait container kills the step then), and retries
    # nothing at all once it has passed. Without a step timeout there is no deadline: Go's zero time.
    (pod,) = _pods(kube, names["interrupted"])
    deadlines = {c.name: next((e.value for e in c.env or [] if e.name == "ARGO_DEADLINE"), None)
                 for c in pod.spec.containers}
    assert deadlines == {"wait": NO_DEADLINE, "main": NO_DEADLINE}, (deadlines, report)
    assert pod.spec.active_deadline_seconds is None
    (view,) = wf.watch([names["interrupted"]], namespace=NAMESPACE, kube=kube, with_cost=False).outcome.views.values()
    (train,) = view.steps
    assert train.interruptions == 1 and train.retries == 0, train


# Each way a node loss reaches a pod, reproduced directly as the pod state it leaves (rather than hoping a race
# shows it): (how the pod's status is rewritten, the message Argo v4 derives, whether it is an interruption).
# The pod GC's states are those of kube-controller-manager's gc_controller: phase Failed and a DisruptionTarget
# condition applied over whatever container statuses the vanished kubelet last reported.
RUNNING = "running"  # leave the container statuses as the kubelet last reported them
NODE_LOSS_PATHS: dict[str, tuple[dict[str, Any], str, bool]] = {
    "podgc-running": ({"containers": RUNNING, "condition": "DeletionByPodGC"},
                      "pod failed: neither main nor wait container completed successfully", True),
    "podgc-unstarted": ({"containers": None, "condition": "DeletionByPodGC"},
                        "can't find failed message for pod", True),
    "podgc-creating": ({"containers": {"waiting": {"reason": "ContainerCreating"}}, "condition": "DeletionByPodGC"},
                       "Pod failed before main container starts due to ContainerCreating", True),
    "node-shutdown": ({"containers": {"terminated": {"exitCode": 143, "reason": "Error"}}, "reason": "Terminated",
                       "message": "Pod was terminated in response to imminent node shutdown.",
                       "condition": "TerminationByKubelet"},
                      "Pod was terminated in response to imminent node shutdown.", True),
    "pressure-eviction": ({"containers": {"terminated": {"exitCode": 137, "reason": "Error"}}, "reason": "Evicted",
                           "message": "The node was low on resource: memory. Threshold quantity: 100Mi, "
                                      "available: 52Ki. ",
                           "condition": "TerminationByKubelet"},
                          "The node was low on resource: memory.", True),
    "admission-rejected": ({"containers": None, "reason": "OutOfcpu",
                            "message": "Pod was rejected: Node didn't have enough resource: cpu, "
                                       "requested: 1000, used: 15890, capacity: 15890"},
                           "Pod was rejected: Node didn't have enough resource: cpu", True),
    # Stopped by the kubelet: the main container's stop hook left its mark as the container's termination message.
    "drain-eviction-sigterm": ({"containers": {"terminated": {"exitCode": 143, "reason": "Error",
                                                              "message": STOP_MARK}},
                                "condition": "EvictionByEvictionAPI"}, f"main: Error (exit code 143): {STOP_MARK}",
                               True),
    "preemption-sigkill": ({"containers": {"terminated": {"exitCode": 137, "reason": "Error", "message": STOP_MARK}},
                            "condition": "PreemptionByScheduler"}, f"main: Error (exit code 137): {STOP_MARK}", True),
    # The program's own SIGTERM exit, and a program killed by a signal (argoexec's emissary exits 137): no mark.
    "own-sigterm": ({"containers": {"terminated": {"exitCode": 143, "reason": "Error"}}},
                    "main: Error (exit code 143)", False),
    "own-sigkill": ({"containers": {"terminated": {"exitCode": 137, "reason": "Error"}}},
                    "main: Error (exit code 137)", False),
    "oom-kill": ({"containers": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}},
                 "main: OOMKilled (exit code 137)", False),
    "bad-image": ({"containers": {"waiting": {"reason": "ErrImagePull", "message": "manifest unknown"}}},
                  "Pod failed before main container starts due to ErrImagePull: manifest unknown", False),
}


def test_every_way_a_node_loss_reaches_argo_is_retried(kube: Kube, tmp_path: Path) -> None:
    """Each pod state a node loss leaves is an interruption retry; OOM kills and bad images stay the program's.
    Also the Eviction API itself (what kubectl drain, Karpenter and the node termination handler call)."""
    import wf

    cases = [*NODE_LOSS_PATHS, "eviction-api"]
    names = {case: wf.submit(str(job_file(tmp_path, f"loss-{case}", [step("train", **{SIM_DURATION: "25s"})])),
                             kube=kube)[0].name for case in cases}
    pending = dict(names)
    deadline = time.monotonic() + 120
    while pending:  # interrupt each workflow's first attempt as soon as it has run past the recently-started window
        for case, name in list(pending.items()):
            found = _running_attempt(kube, name)
            if found is None:
                continue
            _, pod = found
            if case == "eviction-api":
                kube.core.create_namespaced_pod_eviction(pod.metadata.name, NAMESPACE, _eviction(pod.metadata.name))
            else:
                _leave_pod_state(kube, pod, **NODE_LOSS_PATHS[case][0])
            del pending[case]
        assert time.monotonic() < deadline, f"never running: {sorted(pending)}"
        time.sleep(0.5)
    final = {case: _wait_final(kube, name, timeout=180) for case, name in names.items()}
    report = "\n".join(f"{case} ({names[case]}): {w['status']['phase']}\n{_node_tree(w)}" for case, w in final.items())
    print(f"\nnode-loss paths:\n{report}")

    expected = {case: (message, interruption) for case, (_, message, interruption) in NODE_LOSS_PATHS.items()}
    expected["eviction-api"] = ("pod deleted", True)
    for case, (message, interruption) in expected.items():
        workflow = final[case]
        first, *rest = sorted(_pod_nodes(workflow), key=lambda n: n["startedAt"])
        assert first["message"].startswith(message), (case, report)
        (view,) = wf.watch([names[case]], namespace=NAMESPACE, kube=kube, with_cost=False).outcome.views.values()
        (train,) = view.steps
        if interruption:
            # Retried on the interruption budget (retries: 0 leaves no application retry to spend).
            assert workflow["status"]["phase"] == "Succeeded", (case, report)
            assert [n["phase"] for n in rest] == ["Succeeded"], (case, report)
            assert (train.interruptions, train.retries) == (1, 0), (case, train)
            assert [a.outcome for a in train.attempts] == ["interrupted", "succeeded"], (case, train)
        else:
            assert workflow["status"]["phase"] in ("Failed", "Error") and not rest, (case, report)
            assert (train.interruptions, train.retries) == (0, 0), (case, train)
            assert [a.outcome for a in train.attempts] == ["failed"], (case, train)


def test_spot_fallback_runs_the_third_attempt_on_demand(kube: Kube, tmp_path: Path) -> None:
    """cpu falls back after 2 Spot interruptions (eksctl/catalog.yaml): the podSpecPatch's `retries` expression
    moves the third attempt to an On-Demand node, and wf's view says where each attempt ran."""
    import wf

    name = wf.submit(str(job_file(tmp_path, "fallback", [step("train", **{SIM_DURATION: "20s"})])), kube=kube)[0].name
    interrupted: list[str] = []
    deadline = time.monotonic() + 150
    while len(interrupted) < 2:
        found = _running_attempt(kube, name, exclude=tuple(interrupted))
        if found is not None:
            node_id, pod = found
            assert pod.spec.node_selector[CAPACITY_LABEL] == "spot", pod.spec.node_selector
            _leave_pod_state(kube, pod, containers=RUNNING, condition="DeletionByPodGC")
            interrupted.append(node_id)
        assert time.monotonic() < deadline, _node_tree(_get(kube, name))
        time.sleep(0.5)
    workflow = _wait_final(kube, name, timeout=180)
    report = _node_tree(workflow)
    print(f"\nspot fallback ({name}):\n{report}")
    assert workflow["status"]["phase"] == "Succeeded", report
    third = [p for p in _pods(kube, name) if p.metadata.annotations["workflows.argoproj.io/node-id"] not in interrupted]
    (pod,) = third
    assert pod.spec.node_selector[CAPACITY_LABEL] == "on-demand" and pod.metadata.labels[CAPACITY_LABEL] == "on-demand"
    node_labels = kube.core.read_node(pod.spec.node_name).metadata.labels
    assert node_labels[CAPACITY_LABEL] == "on-demand", node_labels
    (view,) = wf.watch([name], namespace=NAMESPACE, kube=kube, with_cost=False).outcome.views.values()
    (train,) = view.steps
    assert [(a.capacity, a.outcome) for a in train.attempts] == [
        ("spot", "interrupted"), ("spot", "interrupted"), ("on-demand", "succeeded")], train
    assert train.attempts[-1].host == pod.spec.node_name


def _eviction(pod: str) -> Any:
    from kubernetes import client

    return client.V1Eviction(metadata=client.V1ObjectMeta(name=pod, namespace=NAMESPACE))


def _running_attempt(kube: Any, name: str, exclude: tuple[str, ...] = ()) -> tuple[str, Any] | None:
    """The attempt (Argo node id, pod) running past Argo's recently-started window, if there is one."""
    for node in _nodes(_get(kube, name)):
        if node["type"] != "Pod" or node["phase"] != "Running" or node["id"] in exclude:
            continue
        if (datetime.now(UTC) - parse_time(node["startedAt"])).total_seconds() <= RECENTLY_STARTED_SECONDS + 3:
            continue
        for pod in _pods(kube, name):
            node_id = pod.metadata.annotations.get("workflows.argoproj.io/node-id")
            if node_id == node["id"] and pod.status.phase == "Running":
                return node["id"], pod
    return None


def _leave_pod_state(kube: Any, pod: Any, *, containers: Any, condition: str | None = None, reason: str | None = None,
                     message: str | None = None) -> None:
    """Rewrite a running pod's status to what a node loss leaves: phase Failed, optionally a DisruptionTarget
    condition, a reason and message, and container states (RUNNING: as they were; None: no statuses at all)."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    current = kube.core.api_client.sanitize_for_serialization(pod.status)
    ops: list[dict[str, Any]] = [{"op": "replace", "path": "/status/phase", "value": "Failed"}]
    if condition:
        ops.append({"op": "add", "path": "/status/conditions/-", "value": {
            "type": "DisruptionTarget", "status": "True", "reason": condition, "lastTransitionTime": now,
            "message": f"wf e2e: {condition}"}})
    if reason:
        ops.append({"op": "add", "path": "/status/reason", "value": reason})
    if message:
        ops.append({"op": "add", "path": "/status/message", "value": message})
    if containers is None:  # never reported by a kubelet: Argo's init container has no status either
        ops += [{"op": "remove", "path": f"/status/{key}"} for key in ("initContainerStatuses", "containerStatuses")
                if key in current]
    elif containers != RUNNING:
        statuses = []
        for status in current["containerStatuses"]:
            started = (status.get("state") or {}).get("running", {}).get("startedAt", now)
            if status["name"] == "main" or "waiting" in containers:
                state = dict(containers)
            else:  # the wait container exits 0 once main has ended
                state = {"terminated": {"exitCode": 0, "reason": "Completed"}}
            if "terminated" in state:
                state = {"terminated": {**state["terminated"], "startedAt": started, "finishedAt": now}}
            statuses.append({**status, "state": state, "ready": False, "started": "running" in state})
        ops.append({"op": "replace", "path": "/status/containerStatuses", "value": statuses})
    kube.core.patch_namespaced_pod_status(pod.metadata.name, NAMESPACE, ops)


def _interrupt_once(kube: Any, name: str) -> str:
    """Delete the step's pod once Argo has seen it running past the recently-started window; its node id."""
    deadline = time.monotonic() + 60
    while True:
        running = [n for n in _nodes(_get(kube, name)) if n["type"] == "Pod" and n["phase"] == "Running"]
        if running and ((datetime.now(UTC) - parse_time(running[0]["startedAt"])).total_seconds()
                        > RECENTLY_STARTED_SECONDS + 3):
            break
        assert time.monotonic() < deadline, _get(kube, name).get("status")
        time.sleep(0.5)
    (pod,) = _pods(kube, name)
    kube.core.delete_namespaced_pod(pod.metadata.name, NAMESPACE, grace_period_seconds=0)
    return running[0]["id"]


def _wait_final(kube: Any, name: str, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        workflow = _get(kube, name)
        if (workflow.get("status") or {}).get("phase") in ("Succeeded", "Failed", "Error"):
            return workflow
        assert time.monotonic() < deadline, f"{name} not finished after {timeout}s:\n{_node_tree(workflow)}"
        time.sleep(0.5)


def _get(kube: Any, name: str) -> dict[str, Any]:
    return kube.custom.get_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "workflows", name)


def _nodes(workflow: dict[str, Any]) -> list[dict[str, Any]]:
    return list(((workflow.get("status") or {}).get("nodes") or {}).values())


def _pod_nodes(workflow: dict[str, Any]) -> list[dict[str, Any]]:
    return [n for n in _nodes(workflow) if n["type"] == "Pod"]


def _pods(kube: Any, name: str) -> list[Any]:
    return kube.core.list_namespaced_pod(NAMESPACE, label_selector=f"workflows.argoproj.io/workflow={name}").items


def _node_tree(workflow: dict[str, Any]) -> str:
    """The status node tree, one line a node: what Argo did, for the failure message and the report."""
    nodes = (workflow.get("status") or {}).get("nodes") or {}
    lines: list[str] = []

    def walk(node_id: str, depth: int) -> None:
        node = nodes[node_id]
        took = ""
        if node.get("finishedAt"):
            took = f" {(parse_time(node['finishedAt']) - parse_time(node['startedAt'])).total_seconds():.0f}s"
        lines.append(f"{'  ' * depth}{node['type']} {node['displayName']} [{node.get('templateName', '')}] "
                     f"{node['phase']}{took} {node.get('message', '')}".rstrip())
        for child in node.get("children") or []:
            walk(child, depth + 1)

    if workflow["metadata"]["name"] in nodes:
        walk(workflow["metadata"]["name"], 1)
    return "\n".join(lines)
