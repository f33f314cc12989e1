"""A Spot storm on a dedicated local cluster: 30 workflows, 20% of the cpu class's Spot nodes vanish mid-run; then
the day's report, `wf get` and Prometheus's counters must agree.

The Node objects are deleted without a drain, as when a reclaimed instance takes its node away and nothing
drains it: kube-controller-manager's pod garbage collector then fails (DisruptionTarget DeletionByPodGC) and
deletes the pods bound to them, about 40-60 s later (its orphan quarantine and check period). Whichever of those
two states Argo sees ("pod failed: neither main nor wait container completed successfully" or "pod deleted"),
the step must come back through its interruption retry, and every workflow must Succeed.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from wf.controller.steps import StepRow
from wf.core.constants import (
    ARGO_NODE_ID_ANNOTATION,
    ARGO_WORKFLOW_LABEL,
    CAPACITY_LABEL,
    CLASS_LABEL,
    SIM_DURATION,
    STEP_LABEL,
)

from .conftest import (
    ClusterHandle,
    become_subreaper,
    build_with_progress,
    connected,
    start_cluster,
    stop_cluster,
)
from .test_controller_e2e import job_file, step, wf_cli
from .test_prometheus import eventually, prometheus_api
from .test_retries import NAMESPACE, _node_tree, _wait_final

pytestmark = pytest.mark.cluster

NODES_PER_GROUP = 16  # 13 node groups in the catalog: 208 nodes, 48 of them cpu Spot
WORKFLOWS = 30
SHARDS = 3
SHARE_LOST = 0.2
SHARD_SECONDS = 100  # long enough to still be running when the pod GC acts on the vanished nodes (40-60 s)


@pytest.fixture(scope="module")
def storm_cluster(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Iterator[ClusterHandle]:
    become_subreaper()
    build_with_progress(pytestconfig)
    handle = start_cluster(tmp_path_factory.mktemp("wf-storm"), f"storm{os.getpid()}", nodes_per_group=NODES_PER_GROUP)
    try:
        yield handle
    finally:
        stop_cluster(handle)


def test_a_spot_storm_loses_no_workflow(storm_cluster: ClusterHandle, tmp_path: Path) -> None:
    import wf

    with connected(storm_cluster) as kube:
        shards = [f"shard-{i}" for i in range(SHARDS)]
        steps = [step("prep", **{SIM_DURATION: "5s"}),
                 *(step(s, needs=["prep"], **{SIM_DURATION: f"{SHARD_SECONDS}s"}) for s in shards),
                 step("merge", needs=shards, **{SIM_DURATION: "5s"})]
        started = time.monotonic()
        names = [wf.submit(str(job_file(tmp_path, f"storm-{i:02d}", steps)), kube=kube)[0].name
                 for i in range(WORKFLOWS)]

        running = _wait_for_running_shards(kube, WORKFLOWS * SHARDS // 2, timeout=180)
        nodes = kube.core.list_node().items
        spot = [n.metadata.name for n in nodes
                if n.metadata.labels.get(CLASS_LABEL) == "cpu" and n.metadata.labels.get(CAPACITY_LABEL) == "spot"]
        # 20% of the class's Spot nodes; the busiest ones, so the storm surely hits running steps.
        load = Counter(pod.spec.node_name for pod in running)
        lost = sorted(spot, key=lambda n: (-load[n], n))[:round(len(spot) * SHARE_LOST)]
        gone: dict[str, datetime] = {}  # each lost node, and when its deletion had been made
        for node in lost:
            kube.core.delete_node(node)
            gone[node] = datetime.now(UTC)
        storm_at = time.monotonic() - started
        # Every unfinished pod bound to a lost node, listed after the deletions: nothing runs them any more.
        hit = {(pod.metadata.labels[ARGO_WORKFLOW_LABEL], pod.metadata.labels[STEP_LABEL]): pod
               for pod in kube.core.list_namespaced_pod(NAMESPACE, label_selector=ARGO_WORKFLOW_LABEL).items
               if pod.spec.node_name in lost and pod.status.phase not in ("Succeeded", "Failed")}

        final = {name: _wait_final(kube, name, timeout=420) for name in names}
        elapsed = time.monotonic() - started
        failed = {n: _node_tree(w) for n, w in final.items() if w["status"]["phase"] != "Succeeded"}
        print(f"\nspot storm: {len(nodes)} nodes, {len(lost)} of {len(spot)} cpu Spot nodes deleted at "
              f"{storm_at:.0f}s, {len(hit)} unfinished steps on them; all {WORKFLOWS} workflows done in {elapsed:.0f}s")
        assert not failed, "\n".join(f"{n}:\n{t}" for n, t in failed.items())
        assert len(lost) == round(len(spot) * SHARE_LOST) and hit, (lost, load)

        views = wf.watch(names, namespace=NAMESPACE, kube=kube, with_cost=False).outcome.views
        pods = {pod.metadata.name: pod  # Argo keeps a succeeded step's pod 10 minutes (wf.compile.workflow.POD_GC)
                for pod in kube.core.list_namespaced_pod(NAMESPACE, label_selector=ARGO_WORKFLOW_LABEL).items}
    seen = Counter(a.message.split(" namespace ")[0].rsplit(" ", 1)[0] if a.message.startswith("can't") else a.message
                   for view in views.values() for row in view.steps for a in row.attempts if a.interrupted)
    print(f"how the interruptions reached Argo: {dict(seen)}")
    # Every step with an attempt on a lost node is accounted for, each such attempt by its evidence: interrupted
    # (and retried elsewhere), or finished before its node went (its containers' end, as Argo recorded it from
    # the pod, no later than the node's deletion). No count is compared: a listing taken at the storm races with
    # programs ending and with their reports (Argo keeps a step whose program ended Running until the wait
    # container's report arrives, and one that never can, its node gone, ends as "pod deleted").
    rows = {(view.name, row.name): row for view in views.values() for row in view.steps}
    struck = {key: row for key, row in rows.items() if any(a.host in gone for a in row.attempts)}
    evidence = {key: _evidence(row, gone) for key, row in struck.items()}
    # And every step that had an unfinished pod on a lost node at the storm: struck, or its pod had not started
    # (Argo then creates it again in the same attempt, see _recreated).
    evidence |= {key: _recreated(pod, rows[key], pods.get(pod.metadata.name), gone)
                 for key, pod in hit.items() if key not in struck}
    print("what became of each step the storm struck:\n" + "\n".join(
        f"  {workflow} {step_name}: {told}" for (workflow, step_name), told in sorted(evidence.items())))
    unaccounted = {key: told for key, told in evidence.items() if told.startswith("UNACCOUNTED")}
    assert not unaccounted, (unaccounted, {n: _node_tree(final[n]) for n, _ in unaccounted})
    for view in views.values():
        for row in view.steps:
            assert row.retries == 0 and row.phase == "Succeeded", (view.name, row)
            assert all(a.host in gone for a in row.attempts if a.interrupted), (view.name, row)
    interruptions = sum(row.interruptions for row in struck.values())
    assert interruptions, "the storm interrupted no step"

    name, _ = min(key for key, row in struck.items() if row.interruptions)
    shown = wf_cli(storm_cluster, "get", name, "--context", storm_cluster.context)
    assert shown.returncode == 0, shown.stderr
    assert ("interrupted" in shown.stdout and "interruptions: " in shown.stdout
            and " retried" in shown.stdout), shown.stdout
    _the_numbers_agree(storm_cluster, names, interruptions=interruptions,
                       attempts=sum(len(row.attempts) for view in views.values() for row in view.steps))


def _evidence(row: StepRow, gone: dict[str, datetime]) -> str:
    """What became of a step that had an attempt on a lost node, in words, each such attempt with its evidence;
    "UNACCOUNTED ..." when an attempt on a lost node was neither interrupted nor done before its node went."""
    told = []
    for number, attempt in enumerate(row.attempts):
        where = f"attempt {number} on {attempt.host}"
        if attempt.host not in gone:
            told.append(f"{where}: {attempt.outcome}")
        elif attempt.interrupted:
            later = row.attempts[number + 1:]
            if not later or later[-1].outcome != "succeeded":
                return f"UNACCOUNTED: {where} interrupted ({attempt.message}) and not retried to success"
            told.append(f"{where}: interrupted ({attempt.message})")
        elif (attempt is row.attempts[-1] and attempt.outcome == "succeeded" and attempt.finished is not None
              and attempt.finished <= gone[attempt.host]):
            told.append(f"{where}: ended {attempt.finished:%H:%M:%S}, before its node went at "
                        f"{gone[attempt.host]:%H:%M:%S.%f}")
        else:
            return (f"UNACCOUNTED: {where} {attempt.outcome} at {attempt.finished}, its node gone at "
                    f"{gone[attempt.host]} ({attempt.message})")
    return "; ".join(told)


def _recreated(listed: Any, row: StepRow, now: Any | None, gone: dict[str, datetime]) -> str:
    """What became of a step whose pod, listed at the storm on a lost node, had not started there, in words;
    "UNACCOUNTED ..." unless the evidence says it never ran and came back. A pod whose step Argo still holds
    Pending and which has gone missing is created again for the same attempt, not failed (v4.0.7
    workflow/controller/operator.go, podReconciliation: "If the node is pending and the pod does not exist ...
    submit it again"): the pod garbage collector deleted this one, so its attempt ran on another node."""
    where = f"pod {listed.metadata.name} {listed.status.phase} on {listed.spec.node_name}"
    started = [c.name for c in listed.status.container_statuses or [] if c.state.running or c.state.terminated]
    node_id = (listed.metadata.annotations or {}).get(ARGO_NODE_ID_ANNOTATION)
    attempt = next((a for a in row.attempts if a.node_id == node_id), None)
    if listed.status.phase != "Pending" or started or attempt is None:
        return f"UNACCOUNTED: {where}, containers started {started}, its attempt {attempt}"
    if now is None or now.metadata.uid == listed.metadata.uid or now.spec.node_name != attempt.host:
        return f"UNACCOUNTED: {where}, not created again for its attempt on {attempt.host} ({now and now.spec})"
    if attempt.outcome != "succeeded" or attempt.host in gone:
        return f"UNACCOUNTED: {where}, created again: attempt on {attempt.host} {attempt.outcome}"
    return f"{where}, never started; created again for the same attempt, which succeeded on {attempt.host}"


def _the_numbers_agree(handle: ClusterHandle, names: list[str], interruptions: int, attempts: int) -> None:
    """The day's report, `wf get` of each workflow and wf's metrics in Prometheus tell the same story (issue 24)."""
    answered = wf_cli(handle, "report", "--since", "1h", "-o", "json", "--context", handle.context)
    assert answered.returncode == 0, answered.stderr
    report = json.loads(answered.stdout)
    runs = {run["name"]: run for run in report["workflows"] if run["name"] in names}
    assert sorted(runs) == sorted(names), sorted(set(names) ^ set(runs))
    total = report["usage"][-1]
    assert total["team"] == "*" and total["class"] == "*", total
    assert total["workflows"]["Succeeded"] == len(names) and total["interruptions"] == interruptions, total
    for name in names:  # each workflow's cost as `wf get` prints it (its table's total row, 4 decimals)
        shown = wf_cli(handle, "get", name, "--context", handle.context)
        assert shown.returncode == 0, shown.stderr
        # The cost table's total row: | total | (instance) | node-hours | On-Demand $ | estimate $ | ...
        row = next(cells for line in shown.stdout.splitlines()
                   if (cells := [c.strip() for c in line.split("│")[1:-1]])[:1] == ["total"])
        assert abs(float(row[2]) - runs[name]["nodeHours"]) <= 0.00005, (name, row, runs[name])
        on_demand = 0.0 if row[3].startswith("<") else float(row[3].replace(",", ""))  # "<0.0001"
        assert abs(on_demand - runs[name]["onDemandUsd"]) <= 0.0001, (name, row, runs[name])
    assert abs(sum(r["nodeHours"] for r in runs.values()) - total["nodeHours"]) < 1e-9, total
    assert abs(sum(r["estimateUsd"] for r in runs.values()) - total["estimateUsd"]) < 1e-9, total

    # wf's metrics (wf.controller.metrics: the node facts recorder counts each workflow as it ends) as Prometheus
    # scraped them: every workflow's end, every attempt and interruption, and what the report priced.
    storm = '{job_name=~"storm-.*"}'

    def counted(metric: str) -> float | None:
        result = prometheus_api(handle, "query", query=f"sum({metric}{storm})")["result"]
        return float(result[0]["value"][1]) if result else None

    assert eventually(lambda: counted("wf_workflow_completions_total") == len(names),
                       "every storm workflow's completion scraped")
    assert counted("wf_step_interruptions_total") == interruptions
    assert counted("wf_step_attempts_total") == attempts
    node_seconds, usd = counted("wf_step_node_seconds_total"), counted("wf_step_estimated_cost_usd_total")
    assert node_seconds is not None and abs(node_seconds / 3600 - total["nodeHours"]) < 1e-6, (node_seconds, total)
    assert usd is not None and abs(usd - total["estimateUsd"]) < 1e-6, (usd, total)


def _wait_for_running_shards(kube: Any, count: int, timeout: float) -> list[Any]:
    """The running shard pods once at least `count` of them run."""
    deadline = time.monotonic() + timeout
    while True:
        pods = [p for p in kube.core.list_namespaced_pod(NAMESPACE, label_selector=ARGO_WORKFLOW_LABEL).items
                if p.status.phase == "Running" and p.metadata.labels.get(STEP_LABEL, "").startswith("shard-")]
        if len(pods) >= count:
            return pods
        assert time.monotonic() < deadline, f"{len(pods)} of {count} shards running after {timeout}s"
        time.sleep(1)
