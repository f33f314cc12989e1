"""A fan-out so big that Argo offloads its steps to the database (`status.offloadNodeStatusVersion`: the object
holds no nodes, plain or compressed) is seen whole: the watch prints every item's end and prices them, reading
the steps through Argo Server; `wf get -o wide` shows every step and attempt with its cost, `wf list` counts
them, `wf report` prices the same node-hours.

CI lowers Argo's status limit on a cluster of its own (Argo's MAX_WORKFLOW_SIZE 64 KiB: the status compresses
at a few dozen items and is offloaded at about 500), so a few hundred items go the way 10,000 go at the 1 MiB
default. By hand, at the job spec's maximum and Argo's own limit:

    WF_OFFLOAD_ITEMS=10000 WF_OFFLOAD_MAX_BYTES=0 WF_OFFLOAD_NODES_PER_GROUP=10 \\
        pytest tests/e2e/test_offloaded_fanout.py -s
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from wf.argo.nodes import offloaded
from wf.argo.size import ARGO_MAX_WORKFLOW_SIZE_ENV

from .conftest import ClusterHandle, become_subreaper, build_with_progress, connected, start_cluster, stop_cluster
from .test_big_fanout import _total_node_hours
from .test_controller_e2e import job_file, step
from .test_history import history_cli
from .test_retries import _get

pytestmark = pytest.mark.cluster

ITEMS = int(os.environ.get("WF_OFFLOAD_ITEMS", "800"))
MAX_BYTES = int(os.environ.get("WF_OFFLOAD_MAX_BYTES", str(64 * 1024)))  # 0: Argo's default (1 MiB)
NODES_PER_GROUP = int(os.environ.get("WF_OFFLOAD_NODES_PER_GROUP", "2"))
TIMEOUT = 600 + ITEMS * 0.3  # 10,000 items took about 20 minutes on two cores


@contextmanager
def _environment(**values: str) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture(scope="module")
def small_limit_cluster(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
                        ) -> Iterator[ClusterHandle]:
    become_subreaper()
    build_with_progress(pytestconfig)
    limit = {ARGO_MAX_WORKFLOW_SIZE_ENV: str(MAX_BYTES)} if MAX_BYTES else {}
    with _environment(**limit):  # `wf cluster up` passes Argo's knob on to the controller it starts
        handle = start_cluster(tmp_path_factory.mktemp("wf-offload"), f"off{os.getpid()}",
                               nodes_per_group=NODES_PER_GROUP, namespaces=["wf"])
    try:
        yield handle
    finally:
        stop_cluster(handle)


def test_a_fan_out_whose_steps_argo_offloads_is_seen_whole(small_limit_cluster: ClusterHandle,
                                                           tmp_path: Path) -> None:
    handle = small_limit_cluster
    shard = step("shard") | {"forEach": {"count": ITEMS}, "command": ["convert", "--shard", "{{item}}"],
                             "resources": {"cpu": "100m", "memory": "64Mi"}}
    job = job_file(tmp_path, "offloaded-fan-out", [shard, step("merge", needs=["shard"])])
    started = time.monotonic()
    watched = history_cli(handle, "submit", str(job), "--watch", "--plain", "--context", handle.context,
                     timeout=TIMEOUT)
    took = time.monotonic() - started
    assert watched.returncode == 0, f"{watched.stdout[-3000:]}\n{watched.stderr[-3000:]}"
    (name,) = re.findall(r"^Workflow wf/(\S+) created", watched.stdout, re.M)

    with connected(handle) as kube:
        live = _get(kube, name)
    assert offloaded(live), sorted(live["status"])  # neither nodes nor compressedNodes: the database has them
    print(f"\noffloaded fan-out: {ITEMS} items in {took:.0f}s (Argo's limit "
          f"{MAX_BYTES or 'default'}), offloadNodeStatusVersion {live['status']['offloadNodeStatusVersion']}")

    # The watch printed every item's end and the merge's, priced them, and never said the steps were away.
    ended = set(re.findall(rf"^\S+ {name} (shard\(\d+:\d+\)): Succeeded \[", watched.stdout, re.M))
    assert len(ended) == ITEMS, watched.stdout[-3000:]
    assert re.search(rf"^\S+ {name} merge: Succeeded \[", watched.stdout, re.M), watched.stdout[-3000:]
    assert "offloaded to Argo's database" not in watched.stdout + watched.stderr, watched.stderr[-3000:]
    watched_hours = _total_node_hours(watched.stdout)
    assert watched_hours > 0

    # `wf get -o wide`: every step and attempt, through Argo Server, and the same cost.
    read_at = time.monotonic()
    got = history_cli(handle, "get", name, "-o", "wide", "--context", handle.context, timeout=TIMEOUT)
    got_seconds = time.monotonic() - read_at
    assert got.returncode == 0, got.stderr
    rows = re.findall(rf"^{name} (shard\(\d+:\d+\)): Succeeded \[cpu/\S+\] on \S+", got.stdout, re.M)
    assert len(set(rows)) == ITEMS, got.stdout[:3000]
    assert len(re.findall(r"^│ shard\(\d+:\d+\)\s+│ 1 ", got.stdout, re.M)) == ITEMS, got.stdout[-3000:]
    got_hours = _total_node_hours(got.stdout)
    assert got_hours == pytest.approx(watched_hours, abs=0.001)

    listed = history_cli(handle, "list", "--context", handle.context)
    assert re.search(rf"^{name}\s+Succeeded\s+{ITEMS + 1}/{ITEMS + 1}\s", listed.stdout, re.M), listed.stdout

    # `wf report`: the offloaded workflow counts whole, at `wf get`'s node-hours.
    read_at = time.monotonic()
    reported = history_cli(handle, "report", "--since", "2h", "-o", "json", "--context", handle.context,
                           timeout=TIMEOUT)
    print(f"wf get -o wide {got_seconds:.1f}s, wf report {time.monotonic() - read_at:.1f}s, "
          f"{got_hours:.3f} node-hours")
    assert reported.returncode == 0, reported.stderr[-3000:]
    (run,) = [r for r in json.loads(reported.stdout)["workflows"] if r["name"] == name]
    assert run["phase"] == "Succeeded" and run["nodeHours"] == pytest.approx(got_hours, abs=0.001)
