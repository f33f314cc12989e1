"""The step cache on the local cluster: Argo's controller memoizes what wf compiles. The simulated executor
reports a step's outputs from its pod's `sim.wf.dev/outputs` annotation, which is not part of the cache key; so
each run below gives `prepare` a new value, and the value `train` receives says whether `prepare` ran (this
run's value) or came from the cache (the value of the run that saved it).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from wf.cluster.executor import OUTPUTS_ANNOTATION
from wf.compile.cache import CONFIGMAP
from wf.controller.client import Kube
from wf.core.constants import STEP_LABEL
from wf.render.platform import CONTROLLER_NAMESPACE

from .conftest import ClusterHandle
from .test_controller_e2e import job_file, step, wf_cli
from .test_retries import _node_tree, _nodes, _pods, _wait_final

pytestmark = pytest.mark.cluster

RUN_SECONDS = 300


def _job(tmp_path: Path, value: str) -> Path:
    prepare = step("prepare", **{OUTPUTS_ANNOTATION: json.dumps({"value": value})})
    prepare |= {"cache": True, "outputs": {"parameters": {"value": "/tmp/value"}}}
    train = step("train", needs=["prepare"]) | {"command": ["train", "--value", "{{steps.prepare.outputs.value}}"]}
    # One application retry: the cached step sits inside wf's retry wrapper, whose outputs must still flow.
    return job_file(tmp_path, "cached", [prepare, train], retries=1)


def _run(handle: ClusterHandle, kube: Kube, tmp_path: Path, value: str, *flags: str) -> dict[str, Any]:
    submitted = wf_cli(handle, "submit", str(_job(tmp_path, value)), *flags, "-o", "json", "--context", handle.context)
    assert submitted.returncode == 0, submitted.stderr
    (created,) = json.loads(submitted.stdout)["created"]
    workflow = _wait_final(kube, created["name"], timeout=RUN_SECONDS)
    assert workflow["status"]["phase"] == "Succeeded", _node_tree(workflow)
    return workflow


def _prepare_pods(kube: Kube, workflow: dict[str, Any]) -> list[Any]:
    return [p for p in _pods(kube, workflow["metadata"]["name"]) if p.metadata.labels.get(STEP_LABEL) == "prepare"]


def _hits(workflow: dict[str, Any]) -> list[dict[str, Any]]:
    return [n for n in _nodes(workflow) if n.get("templateName") == "prepare"
            and (n.get("memoizationStatus") or {}).get("hit")]


def _train_input(workflow: dict[str, Any]) -> str:
    values = {p["value"] for n in _nodes(workflow) if n.get("templateName") == "train"
              for p in (n.get("inputs") or {}).get("parameters") or [] if p["name"] == "prepare_value"}
    assert len(values) == 1, _node_tree(workflow)
    return values.pop()


def test_a_second_run_takes_the_cached_step_from_the_cache_and_no_cache_runs_it_again(
        local_cluster: ClusterHandle, kube: Kube, tmp_path: Path) -> None:
    first = _run(local_cluster, kube, tmp_path, "first")
    assert _prepare_pods(kube, first) and not _hits(first), _node_tree(first)
    assert _train_input(first) == "first"
    cache = kube.core.read_namespaced_config_map(CONFIGMAP.replace("{{workflow.namespace}}", local_cluster.namespace),
                                                 CONTROLLER_NAMESPACE)
    # prepare's entry; train is not cached (the session's other workflows, the examples', share the ConfigMap).
    entries = [e for e in cache.data.values() if json.loads(e)["nodeID"].startswith(f"{first['metadata']['name']}-")]
    assert len(entries) == 1, cache.data

    second = _run(local_cluster, kube, tmp_path, "second")
    tree = _node_tree(second)
    assert not _prepare_pods(kube, second), tree  # no pod for the cached step
    (hit,) = _hits(second)
    assert hit["phase"] == "Succeeded" and not hit.get("children"), tree
    assert _train_input(second) == "first", tree  # the first run's output, from the cache
    shown = wf_cli(local_cluster, "get", second["metadata"]["name"], "--context", local_cluster.context)
    assert shown.returncode == 0, shown.stderr
    lines = {line.split(":")[0].split()[-1]: line for line in shown.stdout.splitlines() if ": " in line}
    assert "Succeeded (cached)" in lines["prepare"] and "(cached)" not in lines["train"], shown.stdout

    third = _run(local_cluster, kube, tmp_path, "third", "--no-cache")
    assert _prepare_pods(kube, third) and not _hits(third), _node_tree(third)
    assert _train_input(third) == "third"

    # --no-cache saved its result: the next run is answered with it.
    fourth = _run(local_cluster, kube, tmp_path, "fourth")
    assert not _prepare_pods(kube, fourth) and _hits(fourth), _node_tree(fourth)
    assert _train_input(fourth) == "third"
