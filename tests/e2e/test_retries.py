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

from wf.compile import ATTEMPTS_SUFFIX
from wf.constants import SIM_DURATION, SIM_EXIT_CODE
from wf.controller.client import connect
from wf.controller.steps import parse_time

from .conftest import ClusterHandle
from .test_controller_e2e import job_file, step

pytestmark = pytest.mark.cluster

GROUP, VERSION = "argoproj.io", "v1alpha1"
NAMESPACE = "wf"
# Argo re-creates, under the same attempt, a pod that vanishes within RECENTLY_STARTED_POD_DURATION (10 s) of
# its node's start; an interruption is only seen as one after that.
RECENTLY_STARTED_SECONDS = 10
NO_DEADLINE = "0001-01-01T00:00:00Z"


def test_application_retries_and_interruptions(local_cluster: ClusterHandle, tmp_path: Path) -> None:
    import wf

    kube = connect(kubeconfig=str(local_cluster.kubeconfig), context=local_cluster.context)
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
    deadlines = {c.name: next((e.value for e in c.env or [] if e.name == "ARGO_DEADLINE"), None) for c in pod.spec.containers}
    assert deadlines == {"wait": NO_DEADLINE, "main": NO_DEADLINE}, (deadlines, report)
    assert pod.spec.active_deadline_seconds is None
    (view,) = wf.watch([names["interrupted"]], namespace=NAMESPACE, kube=kube, with_cost=False).outcome.views.values()
    (train,) = view.steps
    assert train.interruptions == 1 and train.retries == 0, train


def _interrupt_once(kube: Any, name: str) -> str:
    """Delete the step's pod once Argo has seen it running past the recently-started window; its node id."""
    deadline = time.monotonic() + 60
    while True:
        running = [n for n in _nodes(_get(kube, name)) if n["type"] == "Pod" and n["phase"] == "Running"]
        if running and (datetime.now(UTC) - parse_time(running[0]["startedAt"])).total_seconds() > RECENTLY_STARTED_SECONDS + 3:
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
