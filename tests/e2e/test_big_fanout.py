"""A fan-out big enough that Argo's controller compresses its node status (`status.compressedNodes`, past 1 MiB):
the watch keeps printing its steps to the end and prices them, `wf get` shows every step and attempt with its
cost, `wf list` counts them, and `wf retry` writes a status the controller takes."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from wf.argo.nodes import workflow_nodes
from wf.controller.client import Kube
from wf.core.constants import SIM_EXIT_CODE
from wf.core.units import parse_time

from .test_controller_e2e import job_file, step, wf_cli
from .test_retries import _get

ClusterHandle = object  # tests/e2e/conftest.py's handle

pytestmark = pytest.mark.cluster

# About 1 KB of status per item (its Retry node and its pod's), so 1,500 items are well past Argo's 1 MiB; short
# steps on a tenth of a CPU each, so the session cluster's CPU nodes run hundreds at once.
ITEMS = 1500


def test_a_fan_out_whose_status_argo_compresses_is_seen_whole_and_retried(
        local_cluster: ClusterHandle, kube: Kube, tmp_path: Path) -> None:
    shard = step("shard") | {"forEach": {"count": ITEMS}, "command": ["convert", "--shard", "{{item}}"],
                             "resources": {"cpu": "100m", "memory": "64Mi"}}
    merge = step("merge", needs=["shard"], **{SIM_EXIT_CODE: "3"})  # fails: the retry below runs it again
    job = job_file(tmp_path, "big-fan-out", [shard, merge])
    started = time.monotonic()
    watched = wf_cli(local_cluster, "submit", str(job), "--watch", "--plain", "--context", local_cluster.context,
                     timeout=600)
    took = time.monotonic() - started
    assert watched.returncode == 1, f"{watched.stdout[-3000:]}\n{watched.stderr[-3000:]}"
    assert "step merge failed" in watched.stdout + watched.stderr, watched.stderr[-3000:]
    (name,) = re.findall(r"^Workflow wf/(\S+) created", watched.stdout, re.M)

    live = _get(kube, name)
    status = live["status"]
    assert status.get("compressedNodes") and not status.get("nodes"), sorted(status)
    pods = [n for n in workflow_nodes(live).values() if n["type"] == "Pod"]
    shards = {n["id"]: n for n in pods if n["templateName"] == "shard"}
    (merge,) = (n for n in pods if n["templateName"] == "merge")
    assert len(shards) == ITEMS and {n["phase"] for n in shards.values()} == {"Succeeded"}
    print(f"\nbig fan-out: {ITEMS} items in {took:.0f}s, compressedNodes {len(status['compressedNodes']):,} bytes")

    # The watch printed every item's end (the status compressed from the first pods on), the cost, the verdict.
    ended = set(re.findall(rf"^\S+ {name} (shard\(\d+:\d+\)): Succeeded \[", watched.stdout, re.M))
    assert len(ended) == ITEMS, watched.stdout[-3000:]
    assert f"cost of {name} (estimate)" in watched.stdout and _total_node_hours(watched.stdout) > 0

    # `wf get -o wide`: every step, every attempt, a cost above 0.
    got = wf_cli(local_cluster, "get", name, "-o", "wide", "--context", local_cluster.context)
    assert got.returncode == 0, got.stderr
    rows = re.findall(rf"^{name} (shard\(\d+:\d+\)): Succeeded \[cpu/\S+\] on \S+", got.stdout, re.M)
    assert len(set(rows)) == ITEMS, got.stdout[:3000]
    assert len(re.findall(r"^│ shard\(\d+:\d+\)\s+│ 1 ", got.stdout, re.M)) == ITEMS, got.stdout[-3000:]
    assert _total_node_hours(got.stdout) > 0

    listed = wf_cli(local_cluster, "list", "--context", local_cluster.context)
    assert re.search(rf"^{name}\s+Failed\s+{ITEMS}/{ITEMS + 1}\s", listed.stdout, re.M), listed.stdout

    # A retry writes the nodes back packed as the controller packs them; the controller takes it and runs the
    # failed step again, leaving the items that succeeded as they were.
    retried = wf_cli(local_cluster, "retry", name, "--watch", "--plain", "--context", local_cluster.context)
    assert retried.returncode == 1 and "retrying its failed steps" in retried.stdout, retried.stderr[-3000:]
    after = _get(kube, name)
    assert after["status"].get("compressedNodes") and not after["status"].get("nodes"), sorted(after["status"])
    nodes = workflow_nodes(after)
    assert {i: nodes[i] for i in shards} == shards
    (again,) = (n for n in nodes.values() if n["type"] == "Pod" and n["templateName"] == "merge")
    assert again["phase"] == "Failed" and parse_time(again["startedAt"]) >= parse_time(merge["finishedAt"]), again

    # The session cluster's next test starts on a quiet cluster: the workflow and its 1,500 pods gone (the garbage
    # collector and kwok delete them, work the next test's pods would otherwise queue behind).
    kube.custom.delete_namespaced_custom_object("argoproj.io", "v1alpha1", "wf", "workflows", name)
    started = time.monotonic()
    while kube.core.list_namespaced_pod("wf", label_selector=f"workflows.argoproj.io/workflow={name}", limit=1).items:
        assert time.monotonic() - started < 300, f"{name}'s pods still there 300 s after it was deleted"
        time.sleep(1)
    print(f"{name} and its pods gone in {time.monotonic() - started:.0f}s")


def _total_node_hours(text: str) -> float:
    """The node-hours of a cost table's total row."""
    found = re.search(r"^│ total\s+│\s+│\s+([\d.]+) │", text, re.M)
    assert found, text[-3000:]
    return float(found.group(1))
