"""A workflow's node status in each of Argo's forms (status.nodes, compressedNodes, offloaded) reads the same
everywhere: steps, cost, retry, the watch's reducer and display."""

from __future__ import annotations

import base64
import copy
import gzip
import io
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from controller_fakes import FakeTransport, nested_run, pod_node, workflow
from test_controller_watch import KUBE, factory, modified
from wf.argo.nodes import NodesOffloaded, compress_nodes, packed_status, workflow_nodes
from wf.argo.size import ARGO_MAX_WORKFLOW_BYTES, json_size
from wf.controller.cost import NodeFacts, job_cost
from wf.controller.events import WatchState, snapshot
from wf.controller.ops import retry_plan
from wf.controller.steps import pod_name, workflow_view
from wf.controller.summary import summarize
from wf.controller.view import PlainDisplay, summary_line, workflow_lines
from wf.controller.watch import watch_workflows
from wf.core.constants import SIM_DURATION
from wf.core.errors import InputError

RUN = Path(__file__).parent / "controller_data" / "bert-large-pretrain-run.json"
ITEMS = 4000  # a fan-out whose status is over Argo's 1 MiB
NODES = {"gaudi-spot-us-east-1a-0": NodeFacts("dl1.24xlarge", "spot"),
         "cpu-spot-us-east-1a-0": NodeFacts("m7i.2xlarge", "spot")}


def compressed(run: dict[str, Any]) -> dict[str, Any]:
    """`run` as the controller stores it past its size limit (util/file CompressEncodeString over json.Marshal of
    the nodes map; written here with the standard library alone, not with wf's own encoder)."""
    packed = copy.deepcopy(run)
    nodes = packed["status"].pop("nodes")
    text = json.dumps(nodes, separators=(",", ":"), sort_keys=True)
    packed["status"]["compressedNodes"] = base64.standard_b64encode(gzip.compress(text.encode())).decode()
    return packed


def offloaded(run: dict[str, Any]) -> dict[str, Any]:
    away = copy.deepcopy(run)
    del away["status"]["nodes"]
    away["status"]["offloadNodeStatusVersion"] = "fnv:1234567890"
    return away


def test_the_nodes_read_the_same_in_every_stored_form() -> None:
    run = json.loads(RUN.read_text())
    assert workflow_nodes(compressed(run)) == workflow_nodes(run) == run["status"]["nodes"]
    assert workflow_nodes({"status": {"nodes": {}, "compressedNodes": compressed(run)["status"]["compressedNodes"]}}) \
        == run["status"]["nodes"]  # Argo decompresses whenever nodes is empty
    assert workflow_nodes({"status": {}}) == {} and workflow_nodes({}) == {}


def test_steps_and_cost_of_a_compressed_workflow_are_those_of_the_uncompressed_one() -> None:
    run = json.loads(RUN.read_text())
    view, packed_view = workflow_view(run), workflow_view(compressed(run))
    assert packed_view == view and len(view.steps) == 5
    now = datetime.now(UTC)
    cost = job_cost(packed_view, compressed(run), NODES, now)
    assert cost == job_cost(view, run, NODES, now) and cost.node_hours > 0


def test_the_watch_reducer_keeps_the_same_view_of_a_compressed_workflow() -> None:
    run = json.loads(RUN.read_text())
    snap, packed = snapshot(run), snapshot(compressed(run))
    assert packed == snap and packed.view.steps
    assert "compressedNodes" not in json.dumps(packed.workflow)  # the bulk is not kept


def test_the_watch_prints_progress_and_the_end_of_a_workflow_once_compressed() -> None:
    """Past its size limit the controller compresses the nodes: each event still makes its step lines."""
    running = nested_run(final="Failed")
    running["status"]["phase"] = "Running"
    for node in running["status"]["nodes"].values():
        if node["id"] in ("bert-x7k2p", "trainR", "dag1", "inner1", "p2"):
            node.update(phase="Running")
            node.pop("finishedAt", None)
    key = ("wf", "bert-x7k2p")
    state, out = WatchState({"wf"}, {key}), io.StringIO()
    display = PlainDisplay(out)
    state.apply(key, snapshot(running))
    state.on_synced("wf")
    display.show(state, [key], {})
    state.apply(key, snapshot(compressed(nested_run(final="Failed"))))
    display.show(state, [key], {})
    lines = [line.split(" ", 1)[1] for line in out.getvalue().splitlines()]
    assert lines[:3] == ["bert-x7k2p: Running", "bert-x7k2p prep: Succeeded [cpu/on-demand] on cpu-1",
                         "bert-x7k2p train: Running [gaudi/spot] on gaudi-2 retries 1 - interrupted 1x (node taken "
                         "away; retried, not counted as a retry)"]
    assert lines[3:] == ["bert-x7k2p: Failed after 2h10m",
                          "bert-x7k2p train: Failed [gaudi/spot] on gaudi-2 retries 1 - interrupted 1x (node taken "
                          "away; retried, not counted as a retry); Error (exit code 1)"]

    # The whole watch, from a list to the end, every event compressed.
    ended = compressed(nested_run(final="Failed"))
    transport = FakeTransport(lists=[([compressed(running)], "1")], watches=[[modified(ended)]])
    outcome = watch_workflows(KUBE, [key], with_cost=False, transport_factory=factory(transport, []))
    assert outcome.views[key] == workflow_view(nested_run(final="Failed"))


def test_retry_of_a_compressed_workflow_writes_back_what_argo_writes() -> None:
    doc = nested_run(final="Failed")
    plain_new, plain_pods = retry_plan(doc)
    packed_new, packed_pods = retry_plan(compressed(doc))
    assert packed_pods == plain_pods
    # Small enough for Argo's limit: the nodes map, once, as Argo's retry (Hydrate, then Dehydrate) leaves it.
    assert "compressedNodes" not in packed_new["status"] and packed_new == plain_new


def test_retry_of_a_workflow_over_argos_limit_writes_its_nodes_compressed() -> None:
    big = _fan_out("big", ITEMS, "Failed")
    assert json_size(big) > ARGO_MAX_WORKFLOW_BYTES
    new, pods = retry_plan(compressed(big))
    assert "nodes" not in new["status"] and json_size(new) <= ARGO_MAX_WORKFLOW_BYTES
    nodes = workflow_nodes(new)
    failed = next(a for row in workflow_view(big).steps for a in row.attempts if a.phase == "Failed")
    assert len(nodes) == ITEMS and "big-7" not in nodes  # the failed item, dropped to run again
    assert pods == [pod_name(big, failed)]
    assert nodes["big"]["phase"] == "Running" and new["status"]["phase"] == "Running"


def test_packing_keeps_a_small_status_as_is_and_compresses_a_large_one_as_argo_does() -> None:
    small = nested_run()
    assert packed_status(small, small["status"]["nodes"]) == small["status"]
    big = _fan_out("big", ITEMS, "Succeeded")
    status = packed_status(big, big["status"]["nodes"])
    assert set(status) == set(big["status"]) - {"nodes"} | {"compressedNodes"}
    assert workflow_nodes({"status": status}) == big["status"]["nodes"]
    assert status["compressedNodes"] == compress_nodes(big["status"]["nodes"])


def test_offloaded_nodes_are_said_never_shown_as_an_empty_workflow() -> None:
    away = offloaded(json.loads(RUN.read_text()))
    with pytest.raises(NodesOffloaded, match="offloaded to Argo's database"):
        workflow_nodes(away)
    view = workflow_view(away)
    assert not view.steps and "status.offloadNodeStatusVersion fnv:1234567890" in view.offloaded
    assert workflow_lines(view, {})[1] == view.offloaded
    assert "steps of 1 workflows offloaded" in summary_line(summarize([view], 0, datetime.now(UTC)))
    out = io.StringIO()
    transport = FakeTransport(lists=[([away], "1")], watches=[])
    watch_workflows(KUBE, [("wf", away["metadata"]["name"])], display=PlainDisplay(out), with_cost=False,
                    transport_factory=factory(transport, []))
    assert view.offloaded in out.getvalue()
    failed = offloaded(nested_run(final="Failed"))
    with pytest.raises(InputError, match="offloaded to Argo's database"):
        retry_plan(failed)


def test_a_compressed_status_not_in_argos_encoding_is_a_clear_error() -> None:
    for value in ("not base64!", base64.b64encode(b"not gzip").decode(),
                  base64.b64encode(gzip.compress(b"[1, 2]")).decode()):
        with pytest.raises(InputError, match="status.compressedNodes is not a map of nodes in Argo's encoding"):
            workflow_nodes({"metadata": {"name": "w"}, "status": {"compressedNodes": value}})


def _fan_out(name: str, items: int, phase: str) -> dict[str, Any]:
    """A fan-out of `items` lone pods under the workflow's DAG; with phase Failed, item 7 failed."""
    nodes: dict[str, Any] = {name: {"id": name, "name": name, "displayName": name, "type": "DAG", "phase": phase,
                                    "children": [f"{name}-{i}" for i in range(items)]}}
    for i in range(items):
        node = pod_node(name, f"{name}-{i}", f"shard({i}:{i})", "Failed" if phase == "Failed" and i == 7 else
                        "Succeeded", template="shard", host=f"cpu-{i % 40}",
                        message="Error (exit code 1)" if phase == "Failed" and i == 7 else "")
        node["outputs"] = {"exitCode": "0"}
        node["resourcesDuration"] = {"cpu": 1800, "memory": 3600}
        nodes[node["id"]] = node
    doc = workflow(name, phase, nodes)
    doc["spec"]["templates"].append({"name": "shard", "metadata": {"annotations": {SIM_DURATION: "1s"}},
                                     "container": {"image": "x"}})
    return doc
