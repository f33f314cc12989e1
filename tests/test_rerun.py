"""`wf rerun --from STEP`'s plan: a new workflow reusing the nodes of the steps before STEP (Argo's
`resubmit --memoized`, narrowed to a step), on recorded workflow status."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from controller_fakes import nested_run, pod_node
from test_argo_nodes import compressed
from test_controller_submit import FakeCustom, FakeKube
from wf.argo.nodes import node_id
from wf.controller.ops import rerun_workflow, retry_plan
from wf.controller.resubmit import rerun_plan
from wf.controller.steps import workflow_view
from wf.core.constants import RETRIED_ANNOTATION
from wf.core.errors import InputError

NOW = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
NEW = "bert-n3w00"


def bert_run() -> dict[str, Any]:
    """A real run (Argo v4.0.7, local cluster): download -> pack-phase1 -> pretrain-phase1 -> pretrain-phase2, and
    download -> pack-phase2 -> pretrain-phase2; every step in its -Attempts wrapper."""
    doc: dict[str, Any] = json.loads((Path(__file__).parent / "controller_data" / "bert-large-pretrain-run.json")
                                     .read_text())
    return doc


def plan(doc: dict[str, Any], step: str, parameters: dict[str, str] | None = None) -> dict[str, Any]:
    return rerun_plan(doc, step, parameters or {}, name=NEW, submission="sub-1", now=NOW)


def steps_of(nodes: dict[str, Any], workflow: str) -> set[str]:
    return {n["name"][len(workflow) + 1:].split("(")[0].split(".")[0] for n in nodes.values() if n["name"] != workflow}


def assert_consistent(new: dict[str, Any]) -> None:
    """Every node is keyed by the id Argo derives from its new name, and every link points at a node that exists."""
    nodes = new["status"]["nodes"]
    for key, node in nodes.items():
        assert key == node["id"] == node_id(NEW, node["name"]) and node["name"].startswith(NEW)
        assert all(link in nodes for link in [*node.get("children", []), *node.get("outboundNodes", [])])
        assert node.get("boundaryID") is None or node["boundaryID"] in nodes


def test_two_branches_only_the_from_steps_descendants_are_dropped() -> None:
    old = bert_run()
    before = copy.deepcopy(old)
    new = plan(old, "pack-phase1")
    nodes = new["status"]["nodes"]
    assert steps_of(nodes, NEW) == {"download", "pack-phase2"}  # pack-phase1 and both pretrain steps run again
    assert_consistent(new)
    root = nodes[NEW]
    assert root["phase"] == "Running" and "finishedAt" not in root  # the DAG runs again what it lost
    old_nodes = old["status"]["nodes"]
    reused = [n for n in nodes.values() if n["type"] == "Skipped"]
    assert sorted(n["name"] for n in reused) == [f"{NEW}.download(0).download(0)",
                                                 f"{NEW}.pack-phase2(0).pack-phase2(0)"]
    for node in reused:  # Argo's resubmit: the pod is not run again, its outputs stay
        original = old_nodes[node["message"].removeprefix("original pod: ")]
        assert original["type"] == "Pod" and original["name"].removeprefix(old["metadata"]["name"]) == \
            node["name"].removeprefix(NEW)
        assert node["phase"] == "Skipped" and node["outputs"] == original["outputs"]
        assert node["startedAt"] == node["finishedAt"] == "2026-03-02T09:00:00Z"
    download_dag = next(n for n in nodes.values() if n["name"] == f"{NEW}.download(0)")
    # The dropped dependent is unlinked; pack-phase2 stays linked under its new id.
    assert sorted(nodes[c]["name"] for c in download_dag["children"]) == [f"{NEW}.download(0).download",
                                                                         f"{NEW}.pack-phase2"]
    view = workflow_view(new)
    assert {(r.name, r.phase, r.attempts) for r in view.steps} == {("download", "Succeeded", ()),
                                                                   ("pack-phase2", "Succeeded", ())}
    assert old == before  # the input is untouched


def test_the_new_workflow_keeps_wf_labels_and_names_its_origin() -> None:
    old = bert_run()
    new = plan(old, "pretrain-phase2", {"phase2_steps": "10"})
    meta = new["metadata"]
    assert meta["name"] == NEW and meta["namespace"] == "wf" and "resourceVersion" not in meta
    assert meta["labels"] == {"model": "bert-large", "team": "nlp", "wf.dev/job": "bert-large-pretrain",
                              "wf.dev/submission": "sub-1",
                              "workflows.argoproj.io/resubmitted-from-workflow": "bert-large-pretrain-fzd27"}
    assert meta["annotations"] == {"wf.dev/rerun-from": "pretrain-phase2"}
    assert {p["name"]: p["value"] for p in new["spec"]["arguments"]["parameters"]}["phase2_steps"] == "10"
    assert new["status"]["conditions"] == [{"type": "Completed", "status": "False"}]
    assert "phase" not in new["status"]  # unknown: the controller starts it as a new workflow
    assert steps_of(new["status"]["nodes"], NEW) == {"download", "pack-phase1", "pack-phase2", "pretrain-phase1"}


def test_the_new_workflow_does_not_inherit_the_old_ones_retries() -> None:
    # `wf retry` marked the old one: the new one's checkpoint locations (its own name) hold nothing to resume.
    old = bert_run()
    old["metadata"]["annotations"] = {RETRIED_ANNOTATION: "2", "note": "kept"}
    new = plan(old, "pretrain-phase2")
    assert new["metadata"]["annotations"] == {"note": "kept", "wf.dev/rerun-from": "pretrain-phase2"}


def test_from_the_first_step_reuses_nothing() -> None:
    new = plan(bert_run(), "download")
    assert list(new["status"]["nodes"]) == [NEW]
    assert new["status"]["nodes"][NEW]["children"] == []


def with_eval(doc: dict[str, Any]) -> dict[str, Any]:
    """nested_run's prep -> train, then eval after train (a lone pod); the attempts named as Argo names them."""
    wf = doc["metadata"]["name"]
    for pod, name in (("p0", "train(0).train(0)"), ("p1", "train(0).train(1)"), ("p2", "train(1).train(0)")):
        doc["status"]["nodes"][pod]["name"] = f"{wf}.{name}"
    doc["spec"]["templates"][0]["dag"]["tasks"].append({"name": "eval", "template": "prep",
                                                         "dependencies": ["train"]})
    doc["status"]["nodes"]["p2"]["children"] = ["evalP"]
    doc["status"]["nodes"]["evalP"] = pod_node(wf, "evalP", "eval", "Succeeded", template="prep")
    return doc


def test_a_retried_step_is_reused_by_its_succeeded_attempt_alone() -> None:
    new = plan(with_eval(nested_run(final="Succeeded")), "eval")
    nodes = new["status"]["nodes"]
    assert_consistent(new)
    by_name = {n["name"].removeprefix(NEW): n for n in nodes.values()}
    # The interrupted and the failed attempt (p0, p1) and their attempt DAG belong to the old run.
    assert set(by_name) == {"", ".prep", ".train", ".train(1)", ".train(1).train", ".train(1).train(0)"}
    assert by_name[".train"]["children"] == [by_name[".train(1)"]["id"]]
    assert by_name[".train"]["phase"] == "Succeeded"
    assert by_name[".train(1).train(0)"]["message"] == "original pod: p2"
    assert by_name[".train(1).train(0)"]["children"] == []  # eval, its dependent, is no longer linked
    assert by_name[".prep"]["children"] == [by_name[".train"]["id"]]
    assert [r.name for r in workflow_view(new).steps] == ["prep", "train"]


def test_a_failed_workflow_reruns_from_its_failed_step() -> None:
    new = plan(nested_run(final="Failed"), "train")
    nodes = new["status"]["nodes"]
    assert sorted(n["name"] for n in nodes.values()) == [NEW, f"{NEW}.prep"]
    assert nodes[node_id(NEW, f"{NEW}.prep")]["type"] == "Skipped"
    assert nodes[NEW]["phase"] == "Running" and "message" not in nodes[NEW]


def fan_out_run() -> dict[str, Any]:
    """list -> shard (withItems [a, b], a TaskGroup whose items hang off the root DAG) -> merge, all Succeeded."""
    wf = "fan-x1y2z"
    nodes: dict[str, Any] = {
        wf: {"id": wf, "name": wf, "displayName": wf, "type": "DAG", "phase": "Succeeded", "children": ["listR"],
             "outboundNodes": ["mergeP"]},
        "listR": {"id": "listR", "name": f"{wf}.list", "displayName": "list", "type": "Retry",
                  "phase": "Succeeded", "boundaryID": wf, "children": ["listP"],
                  "outputs": {"parameters": [{"name": "shards", "value": "[\"a\", \"b\"]"}]}},
        "listP": {**pod_node(wf, "listP", "list(0)", "Succeeded", template="list", children=["shardG"]),
                  "outputs": {"parameters": [{"name": "shards", "value": "[\"a\", \"b\"]"}]}},
        "shardG": {"id": "shardG", "name": f"{wf}.shard", "displayName": "shard", "type": "TaskGroup",
                   "phase": "Succeeded", "boundaryID": wf, "children": ["i0R", "i1R"]},
        "mergeR": {"id": "mergeR", "name": f"{wf}.merge", "displayName": "merge", "type": "Retry",
                   "phase": "Succeeded", "boundaryID": wf, "children": ["mergeP"]},
        "mergeP": pod_node(wf, "mergeP", "merge(0)", "Succeeded", template="merge"),
    }
    for i, item in enumerate("ab"):
        nodes[f"i{i}R"] = {"id": f"i{i}R", "name": f"{wf}.shard({i}:{item})", "displayName": f"shard({i}:{item})",
                           "type": "Retry", "phase": "Succeeded", "boundaryID": wf, "children": [f"i{i}P"]}
        nodes[f"i{i}P"] = pod_node(wf, f"i{i}P", f"shard({i}:{item})(0)", "Succeeded", template="shard",
                                   children=["mergeR"])
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
            "metadata": {"name": wf, "namespace": "wf", "labels": {"wf.dev/job": "fan"}},
            "spec": {"entrypoint": "Main", "templates": [{"name": "Main", "dag": {"tasks": [
                {"name": "list", "template": "list"},
                {"name": "shard", "template": "shard", "dependencies": ["list"],
                 "withParam": "{{tasks.list.outputs.parameters.shards}}"},
                {"name": "merge", "template": "merge", "dependencies": ["shard"]}]}}]},
            "status": {"phase": "Succeeded", "nodes": nodes}}


def test_a_fan_out_step_is_dropped_with_every_item() -> None:
    new = plan(fan_out_run(), "shard")
    nodes = new["status"]["nodes"]
    assert sorted(n["name"] for n in nodes.values()) == [NEW, f"{NEW}.list", f"{NEW}.list(0)"]
    assert_consistent(new)
    assert nodes[node_id(NEW, f"{NEW}.list(0)")]["children"] == []


def test_a_fan_out_before_the_step_is_reused_item_by_item() -> None:
    new = plan(fan_out_run(), "merge")
    nodes = new["status"]["nodes"]
    assert_consistent(new)
    items = sorted(n["name"].removeprefix(NEW) for n in nodes.values() if n["type"] == "Skipped")
    assert items == [".list(0)", ".shard(0:a)(0)", ".shard(1:b)(0)"]
    assert not any("merge" in n["name"] for n in nodes.values())
    assert nodes[node_id(NEW, f"{NEW}.shard")]["phase"] == "Succeeded"


def test_compressed_nodes_are_read_and_the_plan_is_the_same() -> None:
    plain = plan(bert_run(), "pack-phase1")
    assert plan(compressed(bert_run()), "pack-phase1") == plain


def test_an_unknown_step_is_named_with_the_steps_there_are() -> None:
    with pytest.raises(InputError, match=r"no step 'pack-phase'.*did you mean 'pack-phase\d'.*its steps: download, "
                                         r"pack-phase1, pack-phase2, pretrain-phase1, pretrain-phase2") as caught:
        plan(bert_run(), "pack-phase")
    assert caught.value.exit_code == 2


def test_an_exit_handler_step_is_refused() -> None:
    doc = nested_run()
    doc["spec"]["onExit"] = "Exit"
    doc["spec"]["templates"].append({"name": "Exit", "dag": {"tasks": [{"name": "notify", "template": "prep"}]}})
    with pytest.raises(InputError, match="notify of bert-x7k2p belongs to its onExit handler.*: prep, train"):
        plan(doc, "notify")


def test_a_step_that_did_not_run_is_refused_with_the_steps_that_did() -> None:
    skipped = with_eval(nested_run())
    skipped["status"]["nodes"]["evalP"].update(type="Skipped", phase="Skipped",
                                                message="when 'false' evaluated false")
    with pytest.raises(InputError, match=r"step eval of bert-x7k2p did not run \(Skipped: when 'false' evaluated "
                                         r"false\).*steps that ran: prep, train"):
        plan(skipped, "eval")
    never = with_eval(nested_run(final="Failed"))
    del never["status"]["nodes"]["evalP"]
    with pytest.raises(InputError, match="step eval of bert-x7k2p never started.*steps that ran: prep, train"):
        plan(never, "eval")


def test_a_running_workflow_is_refused() -> None:
    running = nested_run()
    running["status"]["phase"] = "Running"
    with pytest.raises(InputError, match="bert-x7k2p is Running; it can be rerun once it has ended"):
        plan(running, "train")


def test_parameters_replace_the_workflows_and_an_unknown_one_lists_them() -> None:
    with pytest.raises(InputError, match=r"workflow bert-large-pretrain-fzd27: unknown parameter nope \(the job "
                                         r"declares: data_root, phase1_steps, phase2_steps, results\)"):
        plan(bert_run(), "download", {"nope": "1"})


def test_retry_still_keeps_a_succeeded_retry_whose_attempt_failed() -> None:
    """The shared carry-over: a failed attempt inside a succeeded step is dropped, the step is not reopened."""
    doc = with_eval(nested_run(final="Succeeded"))
    doc["status"]["phase"] = "Failed"
    doc["status"]["nodes"]["evalP"]["phase"] = "Failed"
    new, pods = retry_plan(doc)
    nodes = new["status"]["nodes"]
    # The failed application attempt (dag0) goes with its pods: reopened, it would stay Running for good.
    assert nodes["trainR"]["phase"] == "Succeeded" and nodes["trainR"]["children"] == ["dag1"]
    assert not {"dag0", "inner0", "p0", "p1", "evalP"} & set(nodes) and len(pods) == 3  # p0, p1 and eval's pod


def test_the_new_workflow_is_named_like_a_submitted_one_and_created_once() -> None:
    """A POST whose answer is lost is sent again, and its 409 read back as ours (wf.controller.submit.create)."""
    old = bert_run()
    custom = FakeCustom(["lost", "ok"])
    custom.store[old["metadata"]["name"]] = old
    created = rerun_workflow(FakeKube(custom), old["metadata"]["name"], "pretrain-phase2", {"phase2_steps": "9"})
    (new,) = [name for name in custom.store if name != old["metadata"]["name"]]
    assert created["metadata"]["name"] == new and new.startswith("bert-large-pretrain-") and len(new) == 25
    assert custom.calls == ["get", "create", "create", "get"]
    assert created["status"]["nodes"][new]["phase"] == "Running"


def test_a_workflow_of_a_template_takes_every_parameter_it_ran_with() -> None:
    """Its spec refers to the template and names only the parameters given; Argo's stored spec has them all."""
    old = bert_run()
    old["status"]["storedWorkflowTemplateSpec"] = {"entrypoint": "Main", "templates": old["spec"].pop("templates"),
                                                   "arguments": old["spec"]["arguments"]}
    old["spec"] = {"workflowTemplateRef": {"name": "bert"},
                   "arguments": {"parameters": [{"name": "results", "value": "/results/x"}]}}
    new = plan(old, "pack-phase1", {"phase1_steps": "5"})
    assert steps_of(new["status"]["nodes"], NEW) == {"download", "pack-phase2"}
    values = {p["name"]: p["value"] for p in new["spec"]["arguments"]["parameters"]}
    assert values == {"results": "/results/x", "data_root": "/root/Model-References/PyTorch/nlp/bert/data",
                      "phase1_steps": "5", "phase2_steps": "1563"}
    assert new["spec"]["workflowTemplateRef"] == {"name": "bert"} and "storedWorkflowTemplateSpec" not in new["status"]
