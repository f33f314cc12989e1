"""Fan-out, data between steps, conditions and exit handlers on the local cluster: the real workflow-controller
runs what the compiler emits, and the simulated executor (wf/sim_executor.py) reports the outputs a step's
program would have written, the way Argo's wait container does (a WorkflowTaskResult per node).

The three workflows run concurrently: each waits on Argo's timing (backoffs, requeues), not on the CPU.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from wf.cluster.executor import OUTPUTS_ANNOTATION
from wf.controller.client import Kube
from wf.core.constants import SIM_DURATION, SIM_EXIT_CODE, STEP_LABEL
from wf.core.units import parse_time

from .test_controller_e2e import job_file, step
from .test_retries import (
    RECENTLY_STARTED_SECONDS,
    _get,
    _node_tree,
    _nodes,
    _pod_nodes,
    _pods,
    _wait_final,
)

pytestmark = pytest.mark.cluster

ITEMS = 50
PARALLELISM = 10


def test_fan_out_conditions_exit_handlers_and_item_interruptions(kube: Kube, tmp_path: Path) -> None:
    import wf

    # The producer outlasts the wait for the interruption below, so the fan-out is watched from its start.
    outputs = json.dumps({"shards": list(range(ITEMS)), "score": "0.5"})
    producer = step("list", **{SIM_DURATION: "25s", OUTPUTS_ANNOTATION: outputs})
    producer["outputs"] = {"parameters": {"shards": "/tmp/shards.json", "score": "/tmp/score"},
                           "artifacts": {"report": "/tmp/report"}}
    fan = step("shard", needs=["list"], **{SIM_DURATION: "2s"})
    fan |= {"forEach": "{{steps.list.outputs.shards}}", "parallelism": PARALLELISM,
            "command": ["convert", "--shard", "{{item}}", "--report", "{{steps.list.outputs.report}}"]}
    skipped = step("publish", needs=["list"]) | {"when": "{{steps.list.outputs.score}} > 0.9"}
    taken = step("retrain", needs=["list"]) | {"when": "{{steps.list.outputs.score}} <= 0.9"}
    merge = step("merge", needs=["shard", "publish"])
    notify = step("notify") | {"command": ["notify", "--status", "{{workflow.status}}"]}
    interrupted = step("item", **{SIM_DURATION: "20s"}) | {"forEach": {"count": 3}, "command": ["run", "{{item}}"]}
    jobs = {
        "fan-out": job_file(tmp_path, "fan-out", [producer, fan, skipped, taken, merge]),
        "exit": job_file(tmp_path, "exit-handler", [step("train", **{SIM_EXIT_CODE: "3"})], onExit=[notify]),
        "interrupted": job_file(tmp_path, "item-interrupted", [interrupted]),
    }
    names = {key: wf.submit(str(path), kube=kube)[0].name for key, path in jobs.items()}

    deleted = _interrupt_one_item(kube, names["interrupted"])
    peak = _peak_running(kube, names["fan-out"], "shard", timeout=300)
    final = {key: _wait_final(kube, name, timeout=300) for key, name in names.items()}
    report = "\n".join(f"{key} ({names[key]}): {w['status']['phase']}\n{_node_tree(w)}" for key, w in final.items())
    print(f"\njob constructs e2e: peak {peak} shard pods at once\n{report}")

    # A fan-out over another step's output list: every item ran, never more than `parallelism` at once.
    fan_out = final["fan-out"]
    assert fan_out["status"]["phase"] == "Succeeded", report
    shard_pods = [n for n in _pod_nodes(fan_out) if n["templateName"] == "shard"]
    assert len(shard_pods) == ITEMS and all(n["phase"] == "Succeeded" for n in shard_pods), report
    assert 1 < peak <= PARALLELISM, report
    # Each item got its value, and the artifact's local path.
    commands = {tuple(_argv(p)) for p in _pods(kube, names["fan-out"]) if p.metadata.labels.get(STEP_LABEL) == "shard"}
    assert {c[2] for c in commands} == {str(i) for i in range(ITEMS)}, commands
    assert {c[4] for c in commands} == {"/wf/inputs/list/report"}, commands
    # The condition on an output: one step skipped, its opposite ran, and their dependent still ran.
    by_name = {n["displayName"]: n for n in _nodes(fan_out)}
    assert by_name["publish"]["phase"] == "Skipped", report
    assert by_name["retrain"]["phase"] == "Succeeded" and by_name["merge"]["phase"] == "Succeeded", report

    # The exit handler ran after the failure, and read the job's result.
    failed = final["exit"]
    assert failed["status"]["phase"] == "Failed", report
    (notify_node,) = [n for n in _pod_nodes(failed) if n["templateName"] == "notify"]
    assert notify_node["phase"] == "Succeeded", report
    (notify_pod,) = [p for p in _pods(kube, names["exit"]) if p.metadata.labels.get(STEP_LABEL) == "notify"]
    assert _argv(notify_pod) == ["notify", "--status", "Failed"]

    # One item's pod vanished: that item alone was retried (two pods), the others ran once.
    items = final["interrupted"]
    assert items["status"]["phase"] == "Succeeded", report
    retries = [n for n in _nodes(items) if n["type"] == "Retry" and n["templateName"] == "item"]
    assert sorted(len(n["children"]) for n in retries) == [1, 1, 2], report
    (retried,) = [n for n in retries if len(n["children"]) == 2]
    assert retried["children"][0] == deleted, report
    assert len(_pod_nodes(items)) == 4, report


def _argv(pod: Any) -> list[str]:
    """The step's own argv: Argo's emissary runs it as `argoexec emissary ... -- ARGV`."""
    (main,) = [c for c in pod.spec.containers if c.name == "main"]
    argv = [*(main.command or []), *(main.args or [])]
    return argv[argv.index("--") + 1:] if "--" in argv else argv


def _peak_running(kube: Any, name: str, step_name: str, timeout: float) -> int:
    """The most pods of the step that were Pending or Running at once, polled until the workflow ends."""
    peak = 0
    deadline = time.monotonic() + timeout
    while (_get(kube, name).get("status") or {}).get("phase") not in ("Succeeded", "Failed", "Error"):
        active = [p for p in _pods(kube, name)
                  if p.metadata.labels.get(STEP_LABEL) == step_name and p.status.phase in ("Pending", "Running")]
        peak = max(peak, len(active))
        assert time.monotonic() < deadline, _node_tree(_get(kube, name))
        time.sleep(0.2)
    return peak


def _interrupt_one_item(kube: Any, name: str) -> str:
    """Delete one item's pod once Argo has seen it running past the recently-started window; its node id."""
    deadline = time.monotonic() + 90
    while True:
        running = [n for n in _nodes(_get(kube, name)) if n["type"] == "Pod" and n["phase"] == "Running"
                   and (datetime.now(UTC) - parse_time(n["startedAt"])).total_seconds() > RECENTLY_STARTED_SECONDS + 3]
        if running:
            break
        assert time.monotonic() < deadline, _get(kube, name).get("status")
        time.sleep(0.5)
    node = running[0]
    (pod,) = [p for p in _pods(kube, name)
              if p.metadata.annotations.get("workflows.argoproj.io/node-id") == node["id"]]
    kube.core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0)
    return str(node["id"])
