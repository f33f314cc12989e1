"""The local cluster's Prometheus: it scrapes Argo's workflow-controller, wf's node facts recorder and the API server
on loopback; wf's metrics of a compiled workflow that ended, and a custom metric a workflow of Argo's own emits, reach
it. (That it scrapes Kueue is checked on the cluster with queues, test_platform.)"""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from wf.cluster.prometheus import APISERVER
from wf.cluster.supervise import CONTROLLER
from wf.controller.client import Kube
from wf.core.constants import SIM_DURATION
from wf.render.platform import ARGO_METRICS, KUEUE_METRICS, NODE_RECORDER_METRICS

from .conftest import ClusterHandle
from .test_cluster_workflows import _run, _workflow
from .test_controller_e2e import job_file, step
from .test_retries import _wait_final

pytestmark = pytest.mark.cluster

# Prometheus scrapes every 5 s; a first scrape, a workflow's metric, a restarted target: a few rounds at most.
WAIT_SECONDS = 60


def prometheus_api(handle: ClusterHandle, path: str, **params: str) -> Any:
    state = handle.cluster.state()
    assert state and state.prometheus_url, state
    query = f"?{urllib.parse.urlencode(params)}" if params else ""
    with urllib.request.urlopen(f"{state.prometheus_url}/api/v1/{path}{query}", timeout=5) as response:
        body = json.load(response)
    assert body["status"] == "success", body
    return body["data"]


def eventually(probe: Callable[[], Any], what: str) -> Any:
    """probe()'s first truthy answer within WAIT_SECONDS."""
    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        answer = probe()
        if answer:
            return answer
        assert time.monotonic() < deadline, f"{what}: not within {WAIT_SECONDS}s"
        time.sleep(1)


def _health(handle: ClusterHandle) -> dict[str, list[str]]:
    """Each scrape job's targets' health ("up", "down", "unknown" before the first scrape)."""
    out: dict[str, list[str]] = {}
    for target in prometheus_api(handle, "targets", state="active")["activeTargets"]:
        out.setdefault(target["labels"]["job"], []).append(target["health"])
    return out


def _all_up(handle: ClusterHandle, jobs: set[str]) -> dict[str, list[str]] | None:
    health = _health(handle)
    return health if all(health.get(job) == ["up"] for job in jobs) else None


def _series(handle: ClusterHandle, query: str) -> list[dict[str, Any]]:
    return list(prometheus_api(handle, "query", query=query)["result"])


def test_prometheus_answers_on_loopback_and_scrapes_argo_the_recorder_and_the_api_server(
        local_cluster: ClusterHandle) -> None:
    url = local_cluster.state.prometheus_url
    assert url and url.startswith("http://127.0.0.1:")
    status = {c.name: c for c in local_cluster.cluster.status()}
    assert status["prometheus"].running and url.endswith(f":{status['prometheus'].port}")
    health = eventually(lambda: _all_up(local_cluster, {ARGO_METRICS.job, NODE_RECORDER_METRICS.job, APISERVER.job}),
                        "targets up")
    assert KUEUE_METRICS.job not in health  # the session cluster runs without queues
    # Argo's own metrics (v4 names them argo_workflows_*), and the API server's, read with the scrape token.
    assert eventually(lambda: _series(local_cluster, '{__name__=~"argo_workflows_.+"}'), "argo_workflows_*")
    requests = eventually(lambda: _series(local_cluster, "apiserver_request_total"), "apiserver_request_total")
    assert all(s["metric"]["job"] == APISERVER.job for s in requests)


def test_a_compiled_workflow_is_counted_once_it_ended_by_the_recorder(local_cluster: ClusterHandle, kube: Kube,
                                                                       tmp_path: Path) -> None:
    import wf

    name = f"counted-{uuid.uuid4().hex[:6]}"
    steps = [step("a", **{SIM_DURATION: "2s"}), step("b", needs=["a"], **{SIM_DURATION: "2s"})]
    [submitted] = wf.submit(str(job_file(tmp_path, name, steps)), kube=kube)
    assert _wait_final(kube, submitted.name, timeout=180)["status"]["phase"] == "Succeeded"
    job = f'{{job_name="{name}"}}'
    [ended] = eventually(lambda: _series(local_cluster, f"wf_workflow_completions_total{job}"), "its completion")
    assert ended["metric"]["job"] == NODE_RECORDER_METRICS.job and ended["metric"]["status"] == "Succeeded"
    assert float(ended["value"][1]) == 1
    attempts = {s["metric"]["step"]: float(s["value"][1])
                for s in _series(local_cluster, f"wf_step_attempts_total{job}")}
    assert attempts == {"a": 1, "b": 1}
    # Priced on the node each ran on, as `wf get` prices it: a cpu pod's share of an r5 for its seconds.
    [node_seconds] = _series(local_cluster, f"sum(wf_step_node_seconds_total{job})")
    assert 0 < float(node_seconds["value"][1]) < 60


def test_a_metric_a_workflow_emits_is_scraped(local_cluster: ClusterHandle, kube: Kube) -> None:
    probe = uuid.uuid4().hex[:8]
    workflow = _workflow("probe")
    workflow["spec"]["templates"][0]["metrics"] = {"prometheus": [{
        "name": "wf_e2e_probe_total",
        "help": "Runs of the e2e probe template",
        "labels": [{"key": "probe", "value": probe}],
        "counter": {"value": "1"},
    }]}
    wf, _ = _run(kube, workflow)
    assert wf["status"]["phase"] == "Succeeded", wf["status"]
    # Argo v4 exports a template's custom metric under its own namespace: wf_x is argo_workflows_wf_x.
    query = f'argo_workflows_wf_e2e_probe_total{{probe="{probe}"}}'
    [series] = eventually(lambda: _series(local_cluster, query), "the workflow's wf_e2e_probe_total")
    assert series["metric"]["job"] == ARGO_METRICS.job
    assert float(series["value"][1]) == 1


def test_prometheus_follows_a_restarted_controller_to_its_new_port(local_cluster: ClusterHandle) -> None:
    before = {c.name: c.pid for c in local_cluster.cluster.status()}
    old_state = local_cluster.cluster.state()
    controller = before[CONTROLLER]
    assert old_state and controller
    os.kill(controller, signal.SIGKILL)
    local_cluster.cluster.up(merge_into=local_cluster.kubeconfig)
    state = local_cluster.cluster.state()
    assert state and state.controller_metrics_port != old_state.controller_metrics_port
    # Reloaded in place (SIGHUP), not restarted: same process, same address, the history kept.
    assert {c.name: c.pid for c in local_cluster.cluster.status()}["prometheus"] == before["prometheus"]
    assert state.prometheus_url == old_state.prometheus_url

    def scraped_at_new_port() -> bool:
        targets = prometheus_api(local_cluster, "targets", state="active")["activeTargets"]
        return any(t["labels"]["job"] == ARGO_METRICS.job and t["health"] == "up"
                   and t["scrapeUrl"].startswith(f"http://127.0.0.1:{state.controller_metrics_port}/") for t in targets)

    eventually(scraped_at_new_port, "the restarted controller scraped")
