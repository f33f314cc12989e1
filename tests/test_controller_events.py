"""The watch's pure core: snapshots, the inbox, the state machine and the many-workflow summary."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from controller_fakes import nested_run, pod_node, workflow
from wf.controller.cost import NodeFacts, job_cost
from wf.controller.events import Inbox, WatchState, snapshot
from wf.controller.steps import workflow_view
from wf.controller.summary import summarize
from wf.core.errors import InputError

RUN = Path(__file__).parent / "controller_data" / "bert-large-pretrain-run.json"


def test_a_snapshot_keeps_the_view_and_what_cost_reads_but_not_the_bulk() -> None:
    run = json.loads(RUN.read_text())
    snap = snapshot(run)
    assert snap.view == workflow_view(run)
    kept = json.dumps(snap.workflow)
    assert len(kept) < len(json.dumps(run)) / 4
    assert "mpirun" not in kept and '"nodes"' not in kept and "Main" not in kept  # commands, status, DAG templates
    nodes = {"gaudi-spot-us-east-1a-0": NodeFacts("dl1.24xlarge", "spot"),
             "cpu-spot-us-east-1a-0": NodeFacts("m7i.2xlarge", "spot")}
    now = datetime.now(UTC)
    assert job_cost(snap.view, snap.workflow, nodes, now) == job_cost(workflow_view(run), run, nodes, now)


def test_a_snapshot_keeps_what_prices_a_multi_node_steps_replicas() -> None:
    from wf.compile.workflow import compile_job
    from wf.jobspec.job import load_job
    from wf.model.catalog import load_catalog

    root = Path(__file__).resolve().parents[1]
    catalog = load_catalog(root / "eksctl" / "catalog.yaml")
    run = compile_job(load_job(root / "examples" / "bert-large-multinode.yaml"), catalog)
    run["metadata"]["name"] = "bert-large-multinode-x"
    resource = next(t for t in run["spec"]["templates"] if "resource" in t)
    name = run["metadata"]["name"]
    step = pod_node(name, f"{name}-1", resource["name"], "Succeeded", template=resource["name"],
                    host="cpu-on-demand-us-east-1a-0")
    run["status"] = {"phase": "Succeeded", "nodes": {step["id"]: step}}
    snap = snapshot(run)
    now = datetime.now(UTC)
    full = job_cost(workflow_view(run), run, {}, now, catalog)
    assert full.steps and full.steps[0].node_hours > 0
    assert job_cost(snap.view, snap.workflow, {}, now, catalog) == full


def test_the_inbox_keeps_the_newest_state_per_workflow_and_notices_in_order() -> None:
    inbox = Inbox()
    first, second = snapshot(workflow("a", "Running")), snapshot(workflow("a", "Succeeded"))
    inbox.workflow(("wf", "a"), first)
    inbox.workflow(("wf", "b"), snapshot(workflow("b", "Running")))
    inbox.workflow(("wf", "a"), second)
    inbox.notice("synced", "wf")
    latest, notices = inbox.take(timeout=0)
    assert list(latest) == [("wf", "b"), ("wf", "a")] and latest[("wf", "a")] is second
    assert notices == [("synced", "wf")]
    assert inbox.take(timeout=0) == ({}, [])


def test_named_workflows_end_when_each_has_ended_or_was_deleted() -> None:
    state = WatchState({"wf"}, {("wf", "a"), ("wf", "b")}, context="test")
    assert not state.apply(("wf", "other"), snapshot(workflow("other", "Running")))
    assert state.apply(("wf", "a"), snapshot(workflow("a", "Running")))
    assert state.apply(("wf", "b"), snapshot(workflow("b", "Succeeded")))
    assert not state.finished  # not listed yet
    state.on_synced("wf")
    assert state.running == [("wf", "a")] and not state.finished
    assert state.apply(("wf", "a"), None)
    assert state.finished and state.deleted == {("wf", "a")}


def test_a_named_workflow_missing_from_the_list_is_input_error() -> None:
    state = WatchState({"wf"}, {("wf", "a"), ("wf", "nope")}, context="test")
    state.apply(("wf", "a"), snapshot(workflow("a", "Running")))
    with pytest.raises(InputError, match="no workflow nope in namespace wf"):
        state.on_synced("wf")


def test_a_selector_follows_what_it_matches_including_workflows_created_later() -> None:
    state = WatchState({"wf"}, set(), selector="wf.dev/batch=x", context="test")
    with pytest.raises(InputError, match="no workflow matches 'wf.dev/batch=x' in namespace wf"):
        state.on_synced("wf")
    state = WatchState({"wf"}, set(), selector="wf.dev/batch=x", context="test")
    state.apply(("wf", "a"), snapshot(workflow("a", "Succeeded")))
    state.on_synced("wf")
    assert state.finished
    state.apply(("wf", "late"), snapshot(workflow("late", "Running")))
    assert not state.finished and state.followed == [("wf", "a"), ("wf", "late")]


def test_the_summary_counts_phases_interruptions_failures_and_the_longest_running() -> None:
    now = datetime(2026, 3, 1, 15, 0, tzinfo=UTC)
    failed = [workflow_view(nested_run(f"f{i}", final="Failed")) for i in range(2)]
    ok = workflow_view(nested_run("ok"))
    young = workflow("young", "Running",
                     nodes={"p": pod_node("young", "p", "prep", "Running", template="prep", finished=None)})
    young["status"]["startedAt"] = "2026-03-01T14:30:00Z"
    old = workflow("old", "Running")
    summary = summarize([*failed, ok, workflow_view(young), workflow_view(old)], deleted=1, now=now)
    assert summary.workflows == {"Failed": 2, "Succeeded": 1, "Running": 2, "Deleted": 1} and summary.total == 6
    assert summary.steps == {"Succeeded": 4, "Failed": 2, "Running": 1}
    assert summary.interruptions == 3  # one per nested run
    (train,) = summary.failed_steps
    assert (train.name, train.workflows, train.message) == ("train", 2, "Error (exit code 1)")
    assert [v.name for v in summary.slowest] == ["old", "young"]


def test_snapshots_of_a_watch_share_their_templates_equal_parts() -> None:
    # A day's 250 workflows of 32 steps: 8,000 pod templates of a handful of shapes. One Shared per watch makes
    # every equal part one object, and the labels no reader reads (job, step...) are not kept.
    from wf.controller.events import Shared
    from wf.core.constants import CAPACITY_LABEL, CLASS_LABEL, KUEUE_QUEUE_LABEL

    first, second = json.loads(RUN.read_text()), json.loads(RUN.read_text())
    second["metadata"]["name"] = "another"
    share = Shared()
    a, b = snapshot(first, share), snapshot(second, share)
    for x, y in zip(a.workflow["spec"]["templates"], b.workflow["spec"]["templates"], strict=True):
        assert x == y and x is not y
        assert all(x[k] is y[k] for k in x if k != "name"), x["name"]
    labels = [t["metadata"]["labels"] for t in a.workflow["spec"]["templates"] if "metadata" in t]
    assert labels and all(set(found) <= {CLASS_LABEL, CAPACITY_LABEL, KUEUE_QUEUE_LABEL} for found in labels)
    assert a.workflow == snapshot(first).workflow  # sharing changes no value
