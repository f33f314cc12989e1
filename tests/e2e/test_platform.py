"""`wf platform check` on a local cluster with queues: it matches the catalog it was brought up with, and each
kind of gap injected into it (a taint changed on one node group's node, a queue deleted, a ConfigMap edited,
an accelerator class's node without its devices) is reported with its fix, then repaired. The bundle's own
documents are accepted by the API server in a server-side dry run (kinds it serves). The check asks the cluster's
Prometheus whether it scrapes Argo and Kueue, and Prometheus reaches Kueue with the scrape token.

Its own cluster: the session cluster runs without Kueue, and a check of the repository's catalog needs the
teams' queues.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from wf.cluster.install import FIELD_MANAGER, pinned_versions
from wf.cluster.prometheus import APISERVER
from wf.cluster.runtime import LocalCluster
from wf.controller.client import Kube
from wf.core.constants import CATALOG_CONFIGMAP, CATALOG_KEY, CATALOG_NAMESPACE, CLASS_LABEL, CLUSTER_QUEUE
from wf.model.catalog import Catalog, load_catalog
from wf.render import platform
from wf.render.platform import ARGO_METRICS, KUEUE_METRICS

from .conftest import ClusterHandle, become_subreaper, build_with_progress, connected, example_namespaces, stop_cluster
from .test_prometheus import _all_up, _series, eventually, prometheus_api

pytestmark = [pytest.mark.cluster, pytest.mark.components("kueue")]

CATALOG = Path(__file__).resolve().parents[2] / "eksctl" / "catalog.yaml"


@pytest.fixture(scope="module")
def platform_cluster(tmp_path_factory: pytest.TempPathFactory,
                     pytestconfig: pytest.Config) -> Iterator[tuple[ClusterHandle, Catalog]]:
    become_subreaper()
    build_with_progress(pytestconfig)
    root = tmp_path_factory.mktemp("wf-platform")
    cluster = LocalCluster(f"pf{os.getpid()}", root=root / "clusters")
    kubeconfig = root / "kubeconfig"
    started = time.monotonic()
    try:
        state = cluster.up(nodes_per_group=1, catalog_path=CATALOG, namespaces=example_namespaces(),
                           merge_into=kubeconfig, queues=True)
    except BaseException:
        cluster.down()
        raise
    handle = ClusterHandle(name=cluster.name, context=state.context, kubeconfig=kubeconfig,
                           namespace=platform.WORKFLOW_NAMESPACE, cluster=cluster, state=state,
                           up_seconds=time.monotonic() - started)
    try:
        # A Prometheus just started lists no target until its discovery's first update (at most every 5 s): the
        # check would rightly say it scrapes nothing yet.
        eventually(lambda: prometheus_api(handle, "targets", state="active")["activeTargets"],
                   "the cluster's Prometheus lists its targets")
        yield handle, load_catalog(CATALOG)
    finally:
        stop_cluster(handle)


@pytest.fixture(scope="module")
def kube(platform_cluster: tuple[ClusterHandle, Catalog]) -> Iterator[Kube]:
    with connected(platform_cluster[0]) as client:
        yield client


def check(handle: ClusterHandle) -> tuple[int, list[dict[str, str]]]:
    """`wf platform check -o json` against the cluster (and its Prometheus): exit code and findings."""
    # WF_DATA_HOME: the fixture's cluster lives under <root>/clusters, where the CLI finds its Prometheus.
    env = {k: v for k, v in os.environ.items() if k != "WF_PROMETHEUS_URL"} | {
        "KUBECONFIG": str(handle.kubeconfig), "WF_DATA_HOME": str(handle.cluster.workdir.parent.parent)}
    result = subprocess.run([sys.executable, "-m", "wf", "platform", "check", "--context", handle.context,
                             "--catalog", str(CATALOG), "-o", "json"],
                            capture_output=True, text=True, env=env, timeout=120)
    assert "Traceback" not in result.stderr, result.stderr
    report = json.loads(result.stdout)
    assert report["prometheus"] == handle.state.prometheus_url  # the local cluster's, asked by default
    return result.returncode, report["findings"]


def dynamic(kube: Kube) -> Any:
    from kubernetes.dynamic import DynamicClient

    return DynamicClient(kube.api_client)


def test_the_local_cluster_matches_the_catalog(platform_cluster: tuple[ClusterHandle, Catalog]) -> None:
    code, findings = check(platform_cluster[0])
    assert (code, findings) == (0, [])


def test_an_unreachable_cluster_is_exit_3(platform_cluster: tuple[ClusterHandle, Catalog], tmp_path: Path) -> None:
    handle = platform_cluster[0]
    text = handle.kubeconfig.read_text()
    server = next(line.split("server:", 1)[1].strip() for line in text.splitlines() if "server:" in line)
    dead = tmp_path / "kubeconfig"
    dead.write_text(text.replace(server, "https://127.0.0.1:9"))  # nothing listens on the discard port
    env = {**os.environ, "KUBECONFIG": str(dead)}
    result = subprocess.run([sys.executable, "-m", "wf", "platform", "check", "--context", handle.context,
                             "--catalog", str(CATALOG)], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 3 and "cannot reach the API server" in result.stderr


def test_the_bundle_is_accepted_in_a_server_side_dry_run(platform_cluster: tuple[ClusterHandle, Catalog],
                                                         kube: Kube) -> None:
    from kubernetes.dynamic.exceptions import ResourceNotFoundError

    catalog = platform_cluster[1]
    client = dynamic(kube)
    # The catalog's Prometheus runs in its own namespace, where metrics.yaml puts its scrape configuration.
    kube.core.create_namespace({"metadata": {"name": catalog.cluster.prometheus.namespace}})
    # With a wf image, so the node facts recorder's Deployment is judged too.
    imaged = catalog.model_copy(update={"cluster": catalog.cluster.model_copy(update={"wf_image": "wf:0.1"})})
    files = platform.bundle(imaged, pinned_versions(), "123456789012")
    assert any(doc["kind"] == "Deployment" for doc in files["node-recorder.yaml"])
    tried, unserved = 0, []
    for name, docs in files.items():
        if name in platform.PATCHES:
            continue  # patches of upstream objects the local cluster runs as processes
        for doc in docs:
            try:
                resource = client.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
            except ResourceNotFoundError:
                unserved.append(doc["kind"])
                continue
            client.server_side_apply(resource, body=doc, name=doc["metadata"]["name"],
                                     namespace=doc["metadata"].get("namespace"), field_manager="wf-platform-dry-run",
                                     dry_run="All", force_conflicts=True)
            tried += 1
    assert tried and not unserved  # cluster-autoscaler's catalog: every kind is core or Kueue's


def _node_of(kube: Kube, compute_class: str) -> dict[str, Any]:
    nodes = kube.core.list_node(label_selector=f"{CLASS_LABEL}={compute_class}").items
    return kube.api_client.sanitize_for_serialization(nodes[0])  # type: ignore[no-any-return]


def test_a_taint_changed_on_a_node_group_s_node_is_reported(platform_cluster: tuple[ClusterHandle, Catalog],
                                                            kube: Kube) -> None:
    node = _node_of(kube, "gaudi")
    name, taints = node["metadata"]["name"], node["spec"]["taints"]
    changed = [{**t, "value": "false"} if t["key"] == "habana.ai/gaudi" else t for t in taints]
    kube.core.patch_node(name, {"spec": {"taints": changed}})
    try:
        code, findings = check(platform_cluster[0])
        assert code == 1
        [finding] = [f for f in findings if f["subject"].startswith(f"node {name} ")]
        assert "taint habana.ai/gaudi=true:NoSchedule replaced by habana.ai/gaudi=false:NoSchedule" in \
            finding["problem"]
        assert finding["fix"] == "wf cluster up"
    finally:
        kube.core.patch_node(name, {"spec": {"taints": taints}})


def test_a_deleted_queue_is_reported(platform_cluster: tuple[ClusterHandle, Catalog], kube: Kube) -> None:
    catalog = platform_cluster[1]
    queue = next(o for o in platform.expected(catalog, pinned_versions()).objects if o["kind"] == "ClusterQueue")
    resource = dynamic(kube).resources.get(api_version=CLUSTER_QUEUE.api_version, kind=CLUSTER_QUEUE.kind)
    resource.delete(name=queue["metadata"]["name"])
    try:
        code, findings = check(platform_cluster[0])
        assert code == 1
        assert {"subject": f"ClusterQueue {queue['metadata']['name']}", "problem": "missing",
                "fix": "wf cluster up"} in findings
    finally:
        dynamic(kube).server_side_apply(resource, body=queue, name=queue["metadata"]["name"],
                                        field_manager=FIELD_MANAGER, force_conflicts=True)


def test_an_edited_configmap_is_reported(platform_cluster: tuple[ClusterHandle, Catalog], kube: Kube) -> None:
    original = kube.core.read_namespaced_config_map(CATALOG_CONFIGMAP, CATALOG_NAMESPACE).data[CATALOG_KEY]
    edited = original.replace("maxSize: 16", "maxSize: 17")
    assert edited != original
    kube.core.patch_namespaced_config_map(CATALOG_CONFIGMAP, CATALOG_NAMESPACE, {"data": {CATALOG_KEY: edited}})
    try:
        code, findings = check(platform_cluster[0])
        assert code == 1
        [finding] = [f for f in findings if f["subject"] == f"ConfigMap {CATALOG_NAMESPACE}/{CATALOG_CONFIGMAP}"]
        assert "maxSize: 17 instead of 16" in finding["problem"]
    finally:
        kube.core.patch_namespaced_config_map(CATALOG_CONFIGMAP, CATALOG_NAMESPACE, {"data": {CATALOG_KEY: original}})


def test_a_class_node_without_its_devices_is_reported(platform_cluster: tuple[ClusterHandle, Catalog],
                                                      kube: Kube) -> None:
    """A Gaudi node whose device plugin does not run: the node group's labels and taints, no habana.ai/gaudi."""
    node = _node_of(kube, "gaudi")
    bare = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "wf-platform-no-plugin", "labels": node["metadata"]["labels"],
                         "annotations": {k: v for k, v in (node["metadata"].get("annotations") or {}).items()
                                         if k.startswith("kwok.x-k8s.io")}},
            "spec": copy.deepcopy(node["spec"]),
            "status": {"allocatable": {k: v for k, v in node["status"]["allocatable"].items()
                                       if k != "habana.ai/gaudi"},
                       "capacity": {k: v for k, v in node["status"]["capacity"].items() if k != "habana.ai/gaudi"}}}
    bare["spec"].pop("providerID", None)
    kube.core.create_node(bare)
    try:
        code, findings = check(platform_cluster[0])
        assert code == 1
        [finding] = [f for f in findings if f["subject"].startswith("node wf-platform-no-plugin ")]
        assert "advertises 0 habana.ai/gaudi, the class needs 8" in finding["problem"]
    finally:
        kube.core.delete_node("wf-platform-no-plugin")


def test_prometheus_scrapes_kueue_with_the_scrape_token(platform_cluster: tuple[ClusterHandle, Catalog]) -> None:
    handle = platform_cluster[0]
    # Kueue asks the API server who the caller is (TokenReview) and whether it may GET /metrics.
    eventually(lambda: _all_up(handle, {ARGO_METRICS.job, APISERVER.job, KUEUE_METRICS.job}), "targets up")
    [build_info] = eventually(lambda: _series(handle, "kueue_build_info"), "kueue_build_info")
    assert build_info["metric"]["job"] == KUEUE_METRICS.job
    # The teams' ClusterQueues, as Kueue reports them.
    assert eventually(lambda: _series(handle, "kueue_cluster_queue_status"), "kueue_cluster_queue_status")
