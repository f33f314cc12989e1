"""Workflow status -> step rows: nested retries, interruptions apart from retries, pod names, cost, retry plan."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from controller_fakes import fallback_run, nested_run, pod_node, workflow
from test_placement import STOP_MARK
from wf.compile.node_facts import NodeRecord, decode_record
from wf.controller.checkpoints import AttemptRecord, Ledger, Saved
from wf.controller.cost import NodeFacts, job_cost
from wf.controller.ops import retry_plan
from wf.controller.steps import WorkflowView, pod_name, with_facts, workflow_view
from wf.core.constants import NODE_FACTS_ANNOTATION, RETRIED_ANNOTATION
from wf.core.errors import InputError


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
    from wf.model.instances import instance_type

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
    assert train.estimate_usd == pytest.approx(79 / 60 * dl1.spot_price()) and train.on_spot
    assert train.unpriced_attempts == 1
    assert cost.estimate_usd == pytest.approx(prep.estimate_usd + train.estimate_usd)
    assert any("Spot advisor" in a for a in cost.assumptions) and any("not priced" in a for a in cost.assumptions)
    # The workflow's record of its nodes (the recorder's) prices p0 on its node, gone since; the record comes
    # before the live node (gaudi-2 is recorded as it was when bound, the live facts say something else).
    doc["metadata"]["annotations"] = {NODE_FACTS_ANNOTATION: NodeRecord({
        "gaudi-1": NodeFacts("dl1.24xlarge", "spot", zone="us-east-1a"),
        "gaudi-2": NodeFacts("dl1.24xlarge", "spot", zone="us-east-1a")}).encode()}
    recorded = job_cost(workflow_view(doc), doc, {**nodes, "gaudi-2": NodeFacts("p3.2xlarge", "on-demand")},
                        datetime.now(UTC))
    p0 = view_attempt(doc, "p0")
    whole = recorded.steps[1]
    assert whole.unpriced_attempts == 0 and whole.instance_types == ("dl1.24xlarge",)
    assert whole.node_hours == pytest.approx(79 / 60 + p0.seconds(datetime.now(UTC)) / 3600)
    assert whole.estimate_usd == pytest.approx(whole.node_hours * dl1.spot_price())
    assert not any("not priced" in a for a in recorded.assumptions)


def test_an_ended_workflows_attempt_left_without_an_end_costs_the_same_whenever_it_is_asked() -> None:
    # Argo left the last attempt without finishedAt; the workflow ended at 14:10. Priced up to the workflow's end,
    # so `wf get`, `wf report` and the recorder's metrics agree, asked seconds or days apart.
    doc = nested_run()
    del doc["status"]["nodes"]["p2"]["finishedAt"]
    nodes = {"cpu-1": NodeFacts("r5.4xlarge", "on-demand"), "gaudi-2": NodeFacts("dl1.24xlarge", "spot")}
    view = workflow_view(doc)
    assert view.done and view.finished == datetime(2026, 3, 1, 14, 10, tzinfo=UTC)
    at_end = job_cost(view, doc, nodes, view.finished)
    assert job_cost(view, doc, nodes, datetime.now(UTC)) == at_end
    assert at_end.steps[1].node_hours == pytest.approx(79 / 60)  # p1's 19 minutes and p2's 60, as if it had ended
    # A running workflow's attempt is priced up to now.
    running = nested_run(final="Running")
    del running["status"]["nodes"]["p2"]["finishedAt"], running["status"]["finishedAt"]
    later = datetime(2026, 3, 1, 15, 10, tzinfo=UTC)
    assert job_cost(workflow_view(running), running, nodes, later).steps[1].node_hours == pytest.approx(139 / 60)


def view_attempt(doc: dict[str, Any], node_id: str) -> Any:
    return next(a for row in workflow_view(doc).steps for a in row.attempts if a.node_id == node_id)


def test_a_multi_node_step_is_priced_per_replica_at_its_own_capacity() -> None:
    from wf.compile.workflow import compile_job
    from wf.jobspec.job import TrainingJob
    from wf.model.catalog import load_catalog
    from wf.model.instances import instance_type

    catalog = load_catalog()
    job = TrainingJob.model_validate({
        "apiVersion": "wf/v1", "kind": "TrainingJob", "metadata": {"name": "bert"},
        "spec": {"image": "habana:1.21", "compute": "gaudi", "steps": [{"name": "train", "command": ["mpirun"],
                                                                         "nodes": 2}]}})
    template = next(t for t in compile_job(job, catalog)["spec"]["templates"] if t["name"] == "train")
    wf = "bert-m2p"
    doc = workflow(wf, "Succeeded", {"t0": pod_node(wf, "t0", "train", "Succeeded", host="cpu-1",
                                                     started="2026-03-01T12:00:00Z",
                                                     finished="2026-03-01T13:00:00Z")})
    doc["spec"]["templates"] = [template]
    view = workflow_view(doc)
    # Argo's resource pod only waits: without the catalog the replicas' nodes are unknown.
    (unknown,) = job_cost(view, doc, {}, datetime.now(UTC)).steps
    assert unknown.node_hours == 0 and unknown.unpriced_attempts == 1
    cost = job_cost(view, doc, {}, datetime.now(UTC), catalog)
    (train,) = cost.steps
    dl1, r5 = instance_type("dl1.24xlarge"), instance_type("r5.4xlarge")
    launcher_share = 1000 / r5.allocatable_cpu_millis  # 1 cpu of an r5.4xlarge, On-Demand
    assert train.node_hours == pytest.approx(2 + launcher_share)  # two whole DL1 nodes for the hour
    assert train.estimate_usd == pytest.approx(2 * dl1.spot_price() + launcher_share * r5.price_on_demand)
    assert train.instance_types == ("r5.4xlarge", "dl1.24xlarge") and train.on_spot  # launcher first
    assert any("launcher and workers whose nodes were not recorded" in a for a in cost.assumptions)
    # Recorded: each replica at its own node's type and capacity (a worker that ran On-Demand is charged so),
    # without the catalog; no assumption about classes is left.
    doc["metadata"]["annotations"] = {NODE_FACTS_ANNOTATION: NodeRecord(
        {"cpu-1": NodeFacts("r5.4xlarge", "on-demand"), "gaudi-1": NodeFacts("dl1.24xlarge", "spot"),
         "gaudi-9": NodeFacts("dl1.24xlarge", "on-demand")},
        {"t0": {"launcher": ("cpu-1",), "worker": ("gaudi-1", "gaudi-9")}}).encode()}
    recorded = job_cost(workflow_view(doc), doc, {}, datetime.now(UTC))
    (train,) = recorded.steps
    assert train.node_hours == pytest.approx(2 + launcher_share) and train.unpriced_attempts == 0
    assert train.estimate_usd == pytest.approx(dl1.spot_price() + dl1.price_on_demand
                                               + launcher_share * r5.price_on_demand)
    assert not any("launcher and workers" in a for a in recorded.assumptions)


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


def test_retry_plan_counts_the_retries_on_the_workflow_for_wf_resume() -> None:
    # The steps run again get new Retry nodes (`retries` 0): the mark is what tells their programs to resume.
    doc = nested_run(final="Failed")
    new, _ = retry_plan(doc)
    assert new["metadata"]["annotations"][RETRIED_ANNOTATION] == "1"
    assert RETRIED_ANNOTATION not in (doc["metadata"].get("annotations") or {})  # the input is untouched
    doc["metadata"]["annotations"] = {RETRIED_ANNOTATION: "1", "keep": "me"}  # failed again after a retry
    new, _ = retry_plan(doc)
    assert new["metadata"]["annotations"] == {RETRIED_ANNOTATION: "2", "keep": "me"}
    doc["metadata"]["annotations"] = {RETRIED_ANNOTATION: "x"}  # written by hand: still retried
    new, _ = retry_plan(doc)
    assert new["metadata"]["annotations"] == {RETRIED_ANNOTATION: "1"}


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


def test_attempts_show_where_they_ran_and_why_they_ended() -> None:
    view = workflow_view(fallback_run())
    (shard,) = view.steps
    assert [(a.capacity, a.outcome) for a in shard.attempts] == [
        ("spot", "interrupted"), ("spot", "interrupted"), ("on-demand", "succeeded")]
    assert shard.interruptions == 2 and shard.retries == 0
    now = datetime.now(UTC)
    assert shard.redone_seconds(now) == 25 * 60  # 20 min + 5 min run, no checkpoint: all of it runs again
    assert view.interruptions == 2 and view.redone_seconds(now) == 25 * 60


def _resumed_run() -> tuple[dict[str, Any], WorkflowView, WorkflowView]:
    """The fallback run with a checkpoint ledger: attempt 0 ran 20 min and passed checkpoint 5 (50%, 15 min in);
    attempt 1 resumed there, ran 5 min, passed none; attempt 2 resumed at 50% too: (run, view, refined view)."""
    doc = fallback_run()
    view = workflow_view(doc)
    pods = [pod_name(doc, a) for a in view.steps[0].attempts]
    location = "s3://b/checkpoints/wf/prep-q8z/shard"
    ledger = {pods[0]: AttemptRecord(location, Saved(), Saved(5, 0.5), 15 * 60),
              pods[1]: AttemptRecord(location, Saved(5, 0.5), Saved(5, 0.5), 0.0),
              pods[2]: AttemptRecord(location, Saved(5, 0.5))}
    return doc, view, with_facts(view, doc, Ledger(ledger))


def test_the_ledger_tells_where_attempts_resumed_and_what_their_checkpoints_kept() -> None:
    doc, view, refined = _resumed_run()
    (shard,) = refined.steps
    assert [str(a.resumed) for a in shard.attempts] == ["from the start", "at 50% from checkpoint 5",
                                                         "at 50% from checkpoint 5"]
    now = datetime.now(UTC)
    assert [a.redone_seconds(now) for a in shard.attempts] == [5 * 60, 5 * 60, 0.0]
    assert refined.redone_seconds(now) == 10 * 60
    nodes = {"cpu-spot-1": NodeFacts("r5.4xlarge", "spot"), "cpu-spot-2": NodeFacts("r5.4xlarge", "spot"),
             "cpu-od-1": NodeFacts("r5.4xlarge", "on-demand")}
    (step,) = job_cost(refined, doc, nodes, now).steps
    (unkept,) = job_cost(view, doc, nodes, now).steps
    assert step.redone_node_hours == pytest.approx(unkept.redone_node_hours * 10 / 25)


def test_a_sigterm_exit_is_the_programs_unless_marked_or_the_recorder_saw_its_pod_taken() -> None:
    doc = fallback_run()
    doc["status"]["nodes"]["q0"]["message"] = "main: Error (exit code 143)"
    view = workflow_view(doc)
    assert [a.outcome for a in view.steps[0].attempts] == ["failed", "interrupted", "succeeded"]
    assert with_facts(view, doc, Ledger()) == view
    # The node recorder saw that attempt's pod evicted while it ran (a workflow compiled before the stop hook):
    # an interruption after all.
    # While the workflow runs the record is in its ledger; once it has ended, a copy is on the workflow.
    record = '{"nodes":{},"gangs":{},"disrupted":["q0"]}'
    evicted = with_facts(view, doc, Ledger(nodes=decode_record(record)))
    assert [a.outcome for a in evicted.steps[0].attempts] == ["interrupted", "interrupted", "succeeded"]
    doc["metadata"].setdefault("annotations", {})[NODE_FACTS_ANNOTATION] = record
    assert with_facts(view, doc, Ledger()) == evicted
    # The stop hook's mark: an interruption in Argo's reading already.
    doc["status"]["nodes"]["q0"]["message"] = f"main: Error (exit code 143): {STOP_MARK}"
    assert workflow_view(doc).steps[0].attempts[0].interrupted


def test_each_attempt_is_priced_at_its_own_capacity_and_interruptions_apart() -> None:
    from wf.model.instances import instance_type

    doc = fallback_run()
    r5 = instance_type("r5.4xlarge")
    # cpu-spot-2 is gone (a reclaimed node): its attempt is counted in time but not priced.
    nodes = {"cpu-spot-1": NodeFacts("r5.4xlarge", "spot"), "cpu-od-1": NodeFacts("r5.4xlarge", "on-demand")}
    cost = job_cost(workflow_view(doc), doc, nodes, datetime.now(UTC))
    (shard,) = cost.steps
    share = 15000 / r5.allocatable_cpu_millis
    spot_hours, od_hours = 20 / 60 * share, 30 / 60 * share
    assert shard.node_hours == pytest.approx(spot_hours + od_hours)
    assert shard.estimate_usd == pytest.approx(spot_hours * r5.spot_price() + od_hours * r5.price_on_demand)
    assert shard.redone_node_hours == pytest.approx(spot_hours)
    assert shard.redone_usd == pytest.approx(spot_hours * r5.spot_price())
    assert shard.unpriced_attempts == 1
    assert cost.redone_usd == shard.redone_usd and cost.redone_node_hours == shard.redone_node_hours


def test_a_multi_node_step_shows_where_its_workers_run() -> None:
    # Argo's pod creating the MPIJob sits on the cpu class; `wf get` names the gaudi nodes the step takes, and
    # the workers' fallback is their own (gaudi has none), not an annotation on Argo's resource pod.
    from wf.compile.interruptions import SPOT_FALLBACK_ANNOTATION
    from wf.compile.workflow import compile_job
    from wf.jobspec.job import TrainingJob
    from wf.model.catalog import load_catalog

    job = TrainingJob.model_validate({
        "apiVersion": "wf/v1", "kind": "TrainingJob", "metadata": {"name": "bert"},
        "spec": {"image": "habana:1.21", "compute": "gaudi", "steps": [{"name": "train", "command": ["mpirun"],
                                                                         "nodes": 2}]}})
    template = next(t for t in compile_job(job, load_catalog())["spec"]["templates"]
                    if t["name"] == "train")
    template["metadata"].setdefault("annotations", {})[SPOT_FALLBACK_ANNOTATION] = "1"
    wf = "bert-m2p"
    nodes = {
        "r": {"id": "r", "name": f"{wf}.train", "displayName": "train", "type": "Retry", "phase": "Running",
              "startedAt": "2026-03-01T12:00:00Z", "children": ["t0", "t1"], "boundaryID": wf},
        "t0": pod_node(wf, "t0", "train(0)", "Failed", host="cpu-1",
                       message="failure condition '{status.replicaStatuses.Worker.failed gt [0]}' evaluated true"),
        "t1": pod_node(wf, "t1", "train(1)", "Running", host="cpu-1", started="2026-03-01T12:31:00Z", finished=None),
    }
    doc = workflow(wf, "Running", nodes)
    doc["spec"]["templates"] = [template]
    view = workflow_view(doc)
    (row,) = view.steps
    assert (row.compute_class, row.capacity) == ("gaudi", "spot")
    assert [(a.capacity, a.outcome) for a in row.attempts] == [("spot", "interrupted"), ("spot", "running")]
    # Each attempt's capacity per role: the launcher's On-Demand beside the workers' Spot.
    assert {a.roles for a in row.attempts} == {(("launcher", "on-demand"), ("worker", "spot"))}
    from rich.console import Console

    from wf.controller.view import attempts_table

    console = Console(width=250, record=True)
    console.print(attempts_table(view, datetime(2026, 3, 1, 13, tzinfo=UTC)))
    assert "launcher on-demand, worker spot" in console.export_text()


def test_get_shows_where_attempts_resumed_and_the_work_redone() -> None:
    from rich.console import Console

    from wf.controller.view import attempts_table, cost_table, costs_table, interruption_summary, step_note

    doc, _, refined = _resumed_run()
    now = datetime(2026, 3, 1, 14, tzinfo=UTC)
    nodes = {"cpu-spot-1": NodeFacts("r5.4xlarge", "spot"), "cpu-spot-2": NodeFacts("r5.4xlarge", "spot"),
             "cpu-od-1": NodeFacts("r5.4xlarge", "on-demand")}
    cost = job_cost(refined, doc, nodes, now)
    console = Console(width=250, record=True)
    for table in (attempts_table(refined, now), cost_table(refined.name, cost), costs_table([(refined.name, cost)])):
        console.print(table)
    text = console.export_text()
    assert "at 50% from checkpoint 5" in text and "from the start" in text
    assert "redone node-hours" in text and "redone $" in text
    assert "resumed at 50% from checkpoint 5" in step_note(refined.steps[0], {})
    assert interruption_summary(refined, cost, now).startswith("interruptions: 2 retried, 10m00s of run time redone, ")


def test_what_a_program_ran_is_what_an_interruption_cost_not_its_wait_for_a_node_nor_argo_s_noticing() -> None:
    # Attempt 0 took 20 min from its pod's creation to Argo's noticing its end, but its program ran 12 of them
    # (passing checkpoint 5 at 9 min); a step without a location says how long its program ran, and resumed nothing.
    doc = fallback_run()
    view = workflow_view(doc)
    pods = [pod_name(doc, a) for a in view.steps[0].attempts]
    ledger = {pods[0]: AttemptRecord("s3://b/x/shard", Saved(), Saved(5, 0.5), 9 * 60, 12 * 60),
              pods[1]: AttemptRecord("", Saved(), Saved(), 0.0, 4 * 60)}
    (shard,) = with_facts(view, doc, Ledger(ledger)).steps
    now = datetime.now(UTC)
    assert [a.redone_seconds(now) for a in shard.attempts] == [3 * 60, 4 * 60, 0.0]
    assert [a.resumed for a in shard.attempts] == [Saved(), None, None]
    # Without a record, the whole attempt counts (EKS: nothing writes the ledger; an upper bound).
    assert [a.redone_seconds(now) for a in view.steps[0].attempts] == [20 * 60, 5 * 60, 0.0]
