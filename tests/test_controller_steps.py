"""Workflow status -> step rows: nested retries, interruptions apart from retries, pod names, cost, retry plan."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from controller_fakes import nested_run, pod_node, workflow
from wf.controller.cost import NodeFacts, job_cost
from wf.controller.ops import retry_plan
from wf.controller.steps import pod_name, workflow_view
from wf.errors import InputError


def test_nested_retries_make_one_row_with_interruptions_counted_apart() -> None:
    view = workflow_view(nested_run(final="Succeeded"))
    assert [r.name for r in view.steps] == ["prep", "train"]  # the dependent train is not folded into prep
    train = view.steps[1]
    assert [a.node_id for a in train.attempts] == ["p0", "p1", "p2"]
    assert train.interruptions == 1  # p0: pod deleted
    assert train.retries == 1  # p1 failed with exit 3: one application retry
    assert (train.compute_class, train.capacity) == ("gaudi", "spot")
    assert train.node == "gaudi-2"
    assert view.done and not view.failed_steps


def test_failed_run_names_the_step_and_argo_message() -> None:
    view = workflow_view(nested_run(final="Failed"))
    assert [(s.name, s.failure) for s in view.failed_steps] == [("train", "Error (exit code 1)")]


def test_pending_step_and_lone_pod_without_retries() -> None:
    wf = "w"
    nodes = {
        wf: {"id": wf, "name": wf, "displayName": wf, "type": "DAG", "phase": "Running", "children": ["a"]},
        "a": pod_node(wf, "a", "prep", "Pending", template="prep", host=None, finished=None,
                      message="Unschedulable: 0/3 nodes are available: 3 Insufficient cpu."),
    }
    view = workflow_view(workflow(wf, "Running", nodes))
    (row,) = view.steps
    assert row.pending and row.retries == 0 and row.node is None
    assert (row.compute_class, row.capacity) == ("cpu", "on-demand")


def test_pod_name_matches_argo_v2_naming() -> None:
    doc = nested_run()
    view = workflow_view(doc)
    attempt = view.steps[1].attempts[0]
    # FNV-1a 32 of the node name, computed by Argo's Go code as fnv.New32a over "bert-x7k2p.train(0)".
    digest = 0x811C9DC5
    for b in b"bert-x7k2p.train(0)":
        digest = ((digest ^ b) * 0x01000193) & 0xFFFFFFFF
    assert pod_name(doc, attempt) == f"bert-x7k2p-train-{digest}"
    # Known FNV-1a vector: "hello" -> 0x4f9f2cab, so the hash above is the right function.
    h = 0x811C9DC5
    for b in b"hello":
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    assert h == 0x4F9F2CAB
    doc["metadata"]["annotations"] = {"workflows.argoproj.io/pod-name-format": "v1"}
    assert pod_name(doc, attempt) == "p0"


def test_cost_per_step_with_spot_estimate_and_unknown_nodes() -> None:
    from wf.instances import instance_type

    doc = nested_run()
    nodes = {"cpu-1": NodeFacts("r5.4xlarge", "on-demand"), "gaudi-2": NodeFacts("dl1.24xlarge", "spot")}
    cost = job_cost(workflow_view(doc), doc, nodes, datetime.now(UTC))
    prep, train = cost.steps
    r5, dl1 = instance_type("r5.4xlarge"), instance_type("dl1.24xlarge")
    prep_share = max(7000 / r5.allocatable_cpu_millis, 32 * 1024 / r5.allocatable_memory_mib)
    assert prep.node_hours == pytest.approx(10 / 60 * prep_share)
    assert prep.on_demand_usd == pytest.approx(prep.node_hours * r5.price_on_demand)
    assert prep.estimate_usd == prep.on_demand_usd and not prep.on_spot
    # train: p1 (19 min) and p2 (60 min) on gaudi-2 using all 8 cards; p0's node is gone (unpriced).
    assert train.node_hours == pytest.approx(79 / 60)
    assert train.on_demand_usd == pytest.approx(79 / 60 * dl1.price_on_demand)
    assert train.estimate_usd == pytest.approx(79 / 60 * dl1.spot_price_estimate) and train.on_spot
    assert train.unpriced_attempts == 1
    assert cost.estimate_usd == pytest.approx(prep.estimate_usd + train.estimate_usd)
    assert any("Spot advisor" in a for a in cost.assumptions) and any("not priced" in a for a in cost.assumptions)


def test_retry_plan_keeps_success_drops_failures_and_resets_the_path() -> None:
    doc = nested_run(final="Failed")
    doc["metadata"]["labels"]["workflows.argoproj.io/completed"] = "true"
    doc["spec"]["shutdown"] = "Stop"
    new, pods = retry_plan(doc)
    nodes = new["status"]["nodes"]
    assert "prep" in nodes and nodes["prep"]["phase"] == "Succeeded"
    assert not {"trainR", "dag0", "inner0", "p0", "p1", "dag1", "inner1", "p2"} & set(nodes)
    assert nodes["bert-x7k2p"]["phase"] == "Running" and "finishedAt" not in nodes["bert-x7k2p"]
    assert nodes["bert-x7k2p"]["children"] == ["prep"] and nodes["prep"]["children"] == []
    assert new["status"]["phase"] == "Running" and "finishedAt" not in new["status"]
    assert new["metadata"]["labels"]["workflows.argoproj.io/completed"] == "false"
    assert "shutdown" not in new["spec"]
    view = workflow_view(doc)
    attempts = {a.node_id: a for a in view.steps[1].attempts}
    assert pods == sorted(pod_name(doc, attempts[p]) for p in ("p0", "p1", "p2"))
    assert doc["status"]["phase"] == "Failed"  # the input is untouched


def test_retry_plan_refuses_running_or_succeeded_workflows() -> None:
    with pytest.raises(InputError, match="only Failed or Error"):
        retry_plan(nested_run(final="Succeeded"))
    running = nested_run(final="Failed")
    running["status"]["nodes"]["prep"]["phase"] = "Running"
    with pytest.raises(InputError, match="still has prep Running"):
        retry_plan(running)


def test_a_real_run_of_the_bert_example_has_one_row_per_step() -> None:
    """Captured from Argo v4.0.7 on the local cluster: DAG tasks hang off their dependencies' nested attempt
    DAGs, which must not fold the dependents into the first step."""
    import json
    from pathlib import Path

    doc = json.loads((Path(__file__).parent / "controller_data" / "bert-large-pretrain-run.json").read_text())
    view = workflow_view(doc)
    assert sorted(r.name for r in view.steps) == sorted(t["name"] for t in doc["spec"]["templates"][0]["dag"]["tasks"])
    assert all(r.phase == "Succeeded" and len(r.attempts) == 1 and r.retries == 0 for r in view.steps)
    by_name = {r.name: r for r in view.steps}
    assert by_name["download"].compute_class == "cpu" and by_name["pretrain-phase1"].compute_class == "gaudi"
    assert by_name["pretrain-phase1"].node.startswith("gaudi-")
