"""The pieces that let a real node's pods reach the cluster's services on the host: the relay (a listener inside a
network namespace forwarding to 127.0.0.1), the Services' addresses in the API server's certificate, the artifact
store's repository and objects. The relay's test makes a network namespace of its own (root, as real nodes need)
and removes it."""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from wf.cluster import artifact_store, processes
from wf.cluster.executor import RealNodes
from wf.cluster.relay import Forward
from wf.cluster.runtime import LocalCluster
from wf.cluster.supervise import KUBERNETES_SERVICE_IP, SERVICE_CIDR
from wf.compile.artifacts import KeyedEndpoint, repository
from wf.core.constants import REAL_NODE_LABEL
from wf.model.catalog import load_catalog

CATALOG = Path(__file__).resolve().parents[1] / "eksctl" / "catalog.yaml"


def test_forward_round_trips_through_its_argument() -> None:
    forward = Forward("10.96.0.1", 443, 31234)
    assert Forward.parse(forward.argument()) == forward
    with pytest.raises(Exception, match="IP:PORT=TARGET_PORT"):
        Forward.parse("10.96.0.1=443")


@pytest.fixture
def netns() -> Iterator[str]:
    name = f"wf-test-{uuid.uuid4().hex[:6]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
        subprocess.run(["ip", "-n", name, "address", "add", "10.96.0.1/32", "dev", "lo"], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "delete", name], check=True)


def test_relay_listens_only_inside_the_namespace_and_reaches_the_hosts_loopback(netns: str, tmp_path: Path) -> None:
    class Hello(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the handler's name
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"from the host")

        def log_message(self, *_: object) -> None:
            pass

    host = http.server.HTTPServer((processes.LOOPBACK, 0), Hello)
    threading.Thread(target=host.serve_forever, daemon=True).start()
    ready = tmp_path / "ready"
    relay = subprocess.Popen([sys.executable, "-m", "wf.cluster.relay", "--netns", f"/run/netns/{netns}",
                              "--ready", str(ready), "--forward", f"10.96.0.1:443={host.server_port}"],
                             env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        deadline = time.monotonic() + 10
        while not ready.is_file() and relay.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert ready.is_file(), "the relay never bound its listener"
        inside = subprocess.run(["ip", "netns", "exec", netns, sys.executable, "-c",
                                 "import urllib.request; print(urllib.request.urlopen('http://10.96.0.1:443/', "
                                 "timeout=5).read().decode())"], capture_output=True, text=True, timeout=30)
        assert inside.stdout.strip() == "from the host", inside.stderr
        listening = subprocess.run(["ss", "-ltnH"], capture_output=True, text=True).stdout
        assert "10.96.0.1:443" not in listening  # the host's own namespace has no such listener
        there = subprocess.run(["ip", "netns", "exec", netns, "ss", "-ltnH"], capture_output=True, text=True).stdout
        assert "10.96.0.1:443" in there
    finally:
        relay.terminate()
        relay.wait(timeout=10)
        host.shutdown()


def test_api_servers_certificate_names_the_kubernetes_service_whose_range_is_set(tmp_path: Path) -> None:
    cluster = LocalCluster("unit", root=tmp_path)
    cluster.workdir.mkdir(parents=True)
    kwokctl = cluster.supervisor.kwokctl_config()[0]
    assert kwokctl["options"]["kubeApiserverCertSANs"] == [KUBERNETES_SERVICE_IP]
    patch = next(p for p in kwokctl["componentsPatches"] if p["name"] == "kube-apiserver")
    assert {"key": "service-cluster-ip-range", "value": SERVICE_CIDR} in patch["extraArgs"]
    import ipaddress

    network = ipaddress.ip_network(SERVICE_CIDR)
    assert ipaddress.ip_address(KUBERNETES_SERVICE_IP) == network[1]  # what the API server gives `kubernetes`
    # The store's address is in the band the API server hands out only on request.
    assert ipaddress.ip_address(artifact_store.SERVICE_IP) in network
    assert int(ipaddress.ip_address(artifact_store.SERVICE_IP)) - int(network[0]) < 256


def test_local_repository_names_the_stores_cluster_address_and_keys_by_reference() -> None:
    store = load_catalog(CATALOG).artifacts
    assert store is not None
    local = repository(store, KeyedEndpoint("10.96.0.10:9000", "wf-artifact-store"))
    assert local["archiveLogs"] is True
    s3 = local["s3"]
    assert s3["endpoint"] == "10.96.0.10:9000" and s3["insecure"] is True and "useSDKCreds" not in s3
    assert s3["accessKeySecret"] == {"name": "wf-artifact-store", "key": "AWS_ACCESS_KEY_ID"}
    assert s3["secretKeySecret"] == {"name": "wf-artifact-store", "key": "AWS_SECRET_ACCESS_KEY"}
    assert (s3["bucket"], s3["keyFormat"]) == (store.s3.bucket, store.s3.key_format)
    assert repository(store)["s3"]["useSDKCreds"] is True  # the platform's stays as it was


def test_store_objects_keep_one_set_of_keys_private_to_the_cluster(tmp_path: Path) -> None:
    store = artifact_store.LocalArtifactStore(tmp_path)
    service, *secrets = store.objects(["wf", "ml-training"])
    assert service["spec"]["clusterIP"] == artifact_store.SERVICE_IP and "selector" not in service["spec"]
    assert [s["metadata"]["namespace"] for s in secrets] == ["wf", "ml-training"]
    access, secret = store.keys()
    # The environment's names: a checkpointing program takes the Secret whole (envFrom) and finds the store.
    assert all(s["stringData"] == {"AWS_ACCESS_KEY_ID": access, "AWS_SECRET_ACCESS_KEY": secret,
                                   "AWS_ENDPOINT_URL_S3": "http://10.96.0.10:9000"} for s in secrets)
    assert store.keys() == (access, secret)  # made once
    assert store.keys_file.stat().st_mode & 0o777 == 0o600
    # A cluster made before the Secret's keys took the environment's names reads its file as before.
    store.keys_file.write_text('{"accessKey": "a1", "secretKey": "s1"}')
    assert store.keys() == ("a1", "s1")
    endpoint = store.endpoint(12345)
    assert endpoint.url == "http://127.0.0.1:12345" and secret not in repr(endpoint)


def test_the_simulated_executor_leaves_real_nodes_pods_alone() -> None:
    real = RealNodes({"cpu-real-0"})
    on = {"spec": {"nodeName": "cpu-real-0"}}
    assert real.runs(on)
    assert not real.runs({"spec": {"nodeName": "cpu-0"}}) and not real.runs({"spec": {}})
    real.observe("ADDED", {"metadata": {"name": "cpu-real-1", "labels": {REAL_NODE_LABEL: "true"}}})
    real.observe("ADDED", {"metadata": {"name": "cpu-1", "labels": {}}})
    assert real.runs({"spec": {"nodeName": "cpu-real-1"}}) and not real.runs({"spec": {"nodeName": "cpu-1"}})
    real.observe("DELETED", {"metadata": {"name": "cpu-real-0", "labels": {REAL_NODE_LABEL: "true"}}})
    assert not real.runs(on)


def test_a_real_node_is_relayed_the_api_server_and_the_store_where_they_listen(tmp_path: Path) -> None:
    from dataclasses import replace

    from wf.cluster.runtime import ClusterState

    cluster = LocalCluster("unit", root=tmp_path)
    cluster.workdir.mkdir(parents=True)
    cluster.kubeconfig.write_text(yaml.safe_dump({"clusters": [{"name": "c", "cluster": {
        "server": "https://127.0.0.1:31234"}}]}))
    state = ClusterState(name="unit", context="wf-unit", workdir=str(cluster.workdir),
                         kubeconfig=str(cluster.kubeconfig), merged_into=None, controller_health_port=1,
                         nodes_per_group=0, namespaces=["wf"], real_nodes=1)
    assert cluster._service_forwards(state) == [Forward(KUBERNETES_SERVICE_IP, 443, 31234)]
    with_store = replace(state, artifact_store_port=25000)
    assert cluster._service_forwards(with_store)[1] == Forward(artifact_store.SERVICE_IP, 9000, 25000)
    endpoint = with_store.artifact_store()
    assert endpoint is not None and endpoint.url == "http://127.0.0.1:25000"
    assert state.artifact_store() is None  # no real nodes, no store: archived logs are the twin's
