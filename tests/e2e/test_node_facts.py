"""Every attempt is priced, whatever became of its node (issue 32): the node facts recorder keeps each workflow's
nodes as its pods are bound, so `wf get`, the watch's cost table and `wf report` price an attempt whose Spot node
was deleted mid-run, at that node's instance type, while the node is still gone."""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from wf.compile.node_facts import read_record
from wf.compile.schedulability import template_requests
from wf.controller.checkpoints import read_ledger
from wf.controller.client import Kube
from wf.controller.steps import parse_time, templates_by_name
from wf.core.constants import NODE_FACTS_ANNOTATION, SIM_CHECKPOINTS, SIM_DURATION
from wf.model.nodegroups import instance_allocatable, node_share

from .conftest import ClusterHandle
from .test_controller_e2e import job_file, step, wf_cli
from .test_retries import NAMESPACE, RECENTLY_STARTED_SECONDS, _get, _node_tree, _wait_final
from .test_spot_work import _refined

pytestmark = pytest.mark.cluster

WORK_SECONDS = 60  # long enough to lose the first attempt's node past Argo's recently-started window


def _running_past_start(kube: Kube, name: str) -> dict[str, Any]:
    deadline = time.monotonic() + 120
    while True:
        running = [n for n in (_get(kube, name).get("status") or {}).get("nodes", {}).values()
                   if n["type"] == "Pod" and n["phase"] == "Running" and n.get("hostNodeName")]
        started = parse_time(running[0]["startedAt"]) if running else None
        if started and (datetime.now(UTC) - started).total_seconds() > RECENTLY_STARTED_SECONDS + 5:
            return running[0]
        assert time.monotonic() < deadline, _node_tree(_get(kube, name))
        time.sleep(0.5)


def _recorded(kube: Kube, name: str, node: str, timeout: float = 30) -> None:
    """Once the workflow's record holds `node` (the recorder writes when the pod is bound): in its ledger, not on
    the running Workflow, which Argo's controller rewrites."""
    deadline = time.monotonic() + timeout
    while node not in read_ledger(kube, NAMESPACE, name).nodes.nodes:
        assert time.monotonic() < deadline, f"{node} never recorded in {name}'s ledger"
        time.sleep(0.5)
    assert NODE_FACTS_ANNOTATION not in (_get(kube, name)["metadata"].get("annotations") or {})


def _copied(kube: Kube, name: str, timeout: float = 30) -> dict[str, Any]:
    """The ended workflow once the recorder has copied its ledger's record onto it (for Argo's archive)."""
    deadline = time.monotonic() + timeout
    while not read_record(workflow := _get(kube, name)) or \
            read_record(workflow) != read_ledger(kube, NAMESPACE, name).nodes:
        assert time.monotonic() < deadline, f"{name}'s record never copied onto it: {workflow['metadata']}"
        time.sleep(0.5)
    return workflow


def test_an_attempt_whose_spot_node_was_deleted_is_priced_in_get_watch_and_report(
    local_cluster: ClusterHandle, kube: Kube, tmp_path: Path
) -> None:
    from kubernetes import client

    import wf

    program: dict[str, Any] = {SIM_DURATION: f"{WORK_SECONDS}s", SIM_CHECKPOINTS: "10"}
    path = job_file(tmp_path, "priced", [step("train", **program)], capacity="spot", checkpoint={})
    (submitted,) = wf.submit(str(path), kube=kube)
    name, core = submitted.name, kube.core
    try:
        first = _running_past_start(kube, name)
        node = first["hostNodeName"]
        _recorded(kube, name, node)  # kept while the node is there: nothing reads it once it is gone
        (victim,) = [p for p in core.list_namespaced_pod(NAMESPACE, label_selector=f"workflows.argoproj.io/workflow"
                                                                                   f"={name}").items
                     if p.spec.node_name == node]
        # A Spot interruption as EKS plays it: cordon, evict, then the instance and its Node go away.
        core.patch_node(node, {"spec": {"unschedulable": True}})
        core.create_namespaced_pod_eviction(victim.metadata.name, NAMESPACE, client.V1Eviction(
            metadata=client.V1ObjectMeta(name=victim.metadata.name, namespace=NAMESPACE)))
        core.delete_node(node)
        final = _wait_final(kube, name, timeout=300)
        tree = _node_tree(final)
        assert final["status"]["phase"] == "Succeeded", tree
        final = _copied(kube, name)
        view = _refined(kube, final)
        (row,) = view.steps
        attempts = list(row.attempts)
        assert len(attempts) == 2 and attempts[0].interrupted and attempts[0].host == node, tree
        assert attempts[1].resumed is not None and attempts[1].resumed.checkpoint > 0, tree  # resumed, not restarted
        record = read_record(final)
        assert {a.host for a in attempts} <= set(record.nodes), record
        assert record.nodes[node].capacity == "spot" and record.nodes[node].zone, record
        # The retry may land on another instance type of the class (r5 or r6i): each attempt on its own node's.
        instances = tuple(dict.fromkeys(record.nodes[a.host].instance_type for a in attempts))  # as `wf get` lists them
        # What both attempts reserved: their run times x the step's share of their recorded node's instance type.
        template = templates_by_name(final)[attempts[0].template]
        now = datetime.now(UTC)
        expected = sum(a.seconds(now) / 3600 * node_share(template_requests(template),
                                                          instance_allocatable(record.nodes[a.host].instance_type))
                       for a in attempts)
        assert all(a.seconds(now) > 0 for a in attempts)
        with pytest.raises(client.ApiException):
            core.read_node(node)  # still gone: what follows reads the record, not the Node

        # `wf get`: both attempts priced, nothing "node gone"; -o json carries the record.
        shown = wf_cli(local_cluster, "get", name, "-n", NAMESPACE)
        assert shown.returncode == 0, shown.stderr
        assert "node gone" not in shown.stdout and "not priced" not in shown.stdout, shown.stdout
        total = next(line for line in shown.stdout.splitlines() if re.match(r"^\W*total\b", line))
        assert f"{expected:.4f}" in total, (expected, shown.stdout)
        document = wf_cli(local_cluster, "get", name, "-n", NAMESPACE, "-o", "json")
        assert json.loads(document.stdout)["metadata"]["annotations"][NODE_FACTS_ANNOTATION], document.stdout

        # The watch's cost table, from its snapshot of the workflow.
        (run,) = wf.watch([name], namespace=NAMESPACE, kube=kube).runs
        assert run.cost is not None and run.cost.node_hours == pytest.approx(expected, rel=1e-6), run.cost
        (step_cost,) = run.cost.steps
        assert step_cost.unpriced_attempts == 0 and step_cost.instance_types == instances, step_cost

        # `wf report`: the workflow counts with both attempts, as `wf get` priced it, and the total is the sum.
        reported = wf_cli(local_cluster, "report", "--since", "1h", "-o", "json")
        assert reported.returncode == 0, reported.stderr
        report = json.loads(reported.stdout)
        (mine,) = [w for w in report["workflows"] if w["name"] == name]
        assert mine["nodeHours"] == pytest.approx(expected, rel=1e-6), mine
        assert mine["estimateUsd"] == pytest.approx(run.cost.estimate_usd, rel=1e-6), (mine, run.cost)
        (total_line,) = [u for u in report["usage"] if u["team"] == "*" and u["class"] == "*"]
        assert total_line["nodeHours"] == pytest.approx(sum(w["nodeHours"] for w in report["workflows"]), rel=1e-9)
        recorder_log = (local_cluster.cluster.workdir / "logs" / "node-recorder.log").read_text()
        assert f"recorded node {node} " in recorder_log and " ERROR " not in recorder_log, recorder_log[-2000:]
        print(f"\nnode facts e2e: {name} attempts {[round(a.seconds(now), 1) for a in attempts]} s on {instances}, "
              f"{expected:.4f} node-hours; record {final['metadata']['annotations'][NODE_FACTS_ANNOTATION]}")
    finally:
        local_cluster.cluster.up(merge_into=local_cluster.kubeconfig)  # puts the deleted node back


def test_a_gangs_launcher_and_workers_are_recorded_per_attempt_and_priced_on_their_nodes(
    local_cluster: ClusterHandle, kube: Kube, tmp_path: Path
) -> None:
    from wf.controller.watch import Insight

    from .test_mpijob import _explain, _submit

    name = _submit(kube, tmp_path, "gang-priced", {SIM_DURATION: "20s"})
    final = _wait_final(kube, name, timeout=300)
    assert final["status"]["phase"] == "Succeeded", _explain(local_cluster, kube, name)()
    final = _copied(kube, name)
    view = _refined(kube, final)
    ((attempt,),) = [row.attempts for row in view.steps]
    record = read_record(final)
    gang = record.gangs.get(attempt.node_id)
    assert gang is not None and len(gang["launcher"]) == 1 and len(set(gang["worker"])) == 2, record
    assert {record.nodes[n].instance_type for n in gang["worker"]} == {"dl1.24xlarge"}, record
    # Without the catalog a gang is priced only from the record: every replica at its own node.
    cost = Insight(kube, lambda: None).cost(final, view, datetime.now(UTC))
    (step_cost,) = cost.steps
    assert step_cost.unpriced_attempts == 0 and "dl1.24xlarge" in step_cost.instance_types, cost
    assert step_cost.node_hours >= 2 * attempt.seconds(datetime.now(UTC)) / 3600, cost  # two whole DL1 nodes
    assert not any("launcher and workers" in a for a in cost.assumptions), cost.assumptions


def test_the_recorder_without_its_rights_says_which_and_exits_3(local_cluster: ClusterHandle) -> None:
    # The workflow's own account may watch no pods: once its refusals last (FORBIDDEN_PATIENCE), the recorder names
    # the right it lacks instead of retrying.
    done = wf_cli(local_cluster, "platform", "record-nodes", f"--as=system:serviceaccount:{NAMESPACE}:wf-workflow",
                  "--metrics-address=127.0.0.1:0", timeout=120)
    assert done.returncode == 3, (done.stdout, done.stderr)
    assert "watching pods" in done.stderr and "get, list and watch on pods" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
