"""The controller on the real local cluster: submit, watch, failures, outages, 410, RBAC, Spot interruptions, scale."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from wf.controller.client import Kube
from wf.controller.stream import WORKFLOW_PAGE
from wf.core.constants import SIM_DURATION, SIM_EXIT_CODE, WORKFLOW
from wf.core.units import parse_time

ClusterHandle = Any  # tests/e2e/conftest.py's handle: .kubeconfig, .context, .namespace, .cluster

pytestmark = pytest.mark.cluster
ROOT = Path(__file__).resolve().parents[2]


def wf_cli(handle: ClusterHandle, *args: str, kubeconfig: Path | None = None, timeout: float = 300,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the real `wf` command line against the cluster."""
    environment = {**os.environ, "KUBECONFIG": str(kubeconfig or handle.kubeconfig), **(env or {})}
    environment.pop("WF_CATALOG", None)
    return subprocess.run([sys.executable, "-m", "wf", *args], cwd=ROOT, env=environment, capture_output=True,
                          text=True, timeout=timeout)


def job_file(tmp_path: Path, name: str, steps: list[dict[str, Any]], **spec: Any) -> Path:
    doc = {"apiVersion": "wf/v1", "kind": "TrainingJob", "metadata": {"name": name, "namespace": "wf"},
           "spec": {"image": "busybox:1.36", "compute": "cpu", "retries": 0, **spec, "steps": steps}}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def step(name: str, *, needs: list[str] | None = None, **annotations: str) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "command": ["sh", "-c", f"echo {name}"],
                           "resources": {"cpu": 1, "memory": "1Gi"}}
    if needs:
        out["needs"] = needs
    if annotations:
        out["annotations"] = annotations
    return out


def test_every_example_submits_and_watches_to_succeeded(local_cluster: ClusterHandle, kube: Kube,
                                                        tmp_path: Path) -> None:
    examples = sorted((ROOT / "examples").glob("*.yaml"))
    assert examples
    for example in examples:
        doc = yaml.safe_load(example.read_text())
        doc["metadata"]["namespace"] = local_cluster.namespace  # the local cluster's workflow namespace
        copy = tmp_path / example.name
        copy.write_text(yaml.safe_dump(doc, sort_keys=False))
        result = wf_cli(local_cluster, "submit", str(copy), "--watch", "--plain", "--context", local_cluster.context)
        assert result.returncode == 0, f"{example.name}:\n{result.stdout}\n{result.stderr}"
        assert ": Succeeded" in result.stdout and "cost of" in result.stdout
        for s in doc["spec"]["steps"]:
            if "forEach" in s:  # a row per item, named after it: "shard(0:a)"
                last = dict(re.findall(rf" ({re.escape(s['name'])}\([^\n]*?\)): (\w+) \[", result.stdout))
                assert last and set(last.values()) == {"Succeeded"}, (s["name"], result.stdout)
            else:
                assert f" {s['name']}: Succeeded [" in result.stdout, (s["name"], result.stdout)
        name = next(line.split()[1].split("/")[1] for line in result.stdout.splitlines()
                    if line.startswith("Workflow "))
        assert_placed_by_class(kube, name, doc)


def assert_placed_by_class(kube: Kube, name: str, doc: dict[str, Any]) -> None:
    """Every pod of the workflow was bound by the scheduler to a node of its step's compute class and capacity
    (the job spec's, defaults per ../shared/DESIGN.md: the job's, else the class's first capacity)."""
    from wf.compile.kinds.mpijob import launcher_capacity, launcher_class
    from wf.core.constants import CAPACITY_LABEL, CLASS_LABEL
    from wf.model.catalog import load_catalog

    catalog = load_catalog()
    spec = doc["spec"]
    wanted = {}
    for s in [*spec["steps"], *spec.get("onExit", [])]:
        cls = s.get("compute") or spec["compute"]
        capacity = s.get("capacity") or spec.get("capacity") or catalog.compute_class(cls).default_capacity
        wanted[s["name"]] = (cls, capacity)
        if s.get("nodes"):  # a multi-node step's own pod is Argo's, creating the MPIJob where the launcher runs:
            launcher = launcher_class(catalog, catalog.compute_class(cls))  # On-Demand where its class offers it
            assert launcher
            wanted[s["name"]] = (launcher.name, launcher_capacity(launcher))
    workflow = kube.custom.get_namespaced_custom_object("argoproj.io", "v1alpha1", kube.namespace, "workflows", name)
    pods = [n for n in workflow["status"]["nodes"].values() if n["type"] == "Pod"]
    assert {n["templateName"] for n in pods} == wanted.keys(), pods
    for node in pods:
        assert node.get("hostNodeName"), node
        labels = kube.core.read_node(node["hostNodeName"]).metadata.labels
        placed = (labels[CLASS_LABEL], labels[CAPACITY_LABEL])
        assert placed == wanted[node["templateName"]], (name, node["displayName"], node["hostNodeName"], placed)


def test_a_failed_step_exits_1_naming_it(local_cluster: ClusterHandle, tmp_path: Path) -> None:
    path = job_file(tmp_path, "fails", [step("prep"), step("train", needs=["prep"], **{SIM_EXIT_CODE: "3"})])
    result = wf_cli(local_cluster, "submit", str(path), "--watch", "--plain")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "step train failed" in result.stderr and "exit code 3" in result.stderr
    assert "Traceback" not in result.stderr
    name = next(line.split()[1].split("/")[1] for line in result.stdout.splitlines() if line.startswith("Workflow "))
    # get shows the same verdict; get -o json is the object
    got = wf_cli(local_cluster, "get", name)
    assert got.returncode == 0 and "train: Failed" in got.stdout
    as_json = wf_cli(local_cluster, "get", name, "-o", "json")
    assert '"phase": "Failed"' in as_json.stdout
    # list decodes only the fields it shows of each workflow: they are the whole object's, as the API server sent it
    whole = json.loads(as_json.stdout)
    listed = wf_cli(local_cluster, "list", "-o", "wide")
    (row,) = (line.split() for line in listed.stdout.splitlines() if line.split()[:1] == [name])
    status = whole["status"]
    assert row[:3] == [name, "Failed", status.get("progress", "-")], listed.stdout
    assert row[5] == whole["metadata"]["labels"]["wf.dev/job"] == "fails", row
    assert row[6:8] == [status["startedAt"], status["finishedAt"]], row


def test_watch_survives_the_api_server_restarting(local_cluster: ClusterHandle, kube: Kube, tmp_path: Path) -> None:
    import wf

    path = job_file(tmp_path, "outage", [step("slow", **{SIM_DURATION: "25s"})])
    (submitted,) = wf.submit(str(path), kube=kube)
    env = {**os.environ, "KUBECONFIG": str(local_cluster.kubeconfig)}
    watcher = subprocess.Popen([sys.executable, "-m", "wf", "watch", submitted.name, "-n", "wf", "--plain"], cwd=ROOT,
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(watcher.stdout), daemon=True)  # type: ignore[arg-type]
        reader.start()
        deadline = time.monotonic() + 60
        while not any("slow: Running" in line for line in lines):
            assert time.monotonic() < deadline and watcher.poll() is None, lines
            time.sleep(0.2)
        apiserver = next(c for c in local_cluster.cluster.status() if c.name == "kube-apiserver")
        os.kill(apiserver.pid, signal.SIGKILL)
        time.sleep(5)  # the watch is cut and reconnects fail meanwhile
        local_cluster.cluster.up(merge_into=local_cluster.kubeconfig)  # repairs the dead API server only
        rc = watcher.wait(timeout=180)
        reader.join(timeout=5)
        text = "".join(lines)
        assert rc == 0, text + watcher.stderr.read()  # type: ignore[union-attr]
        assert "lost the API server" in text and "connected again" in text
        assert f"{submitted.name}: Succeeded" in text
    finally:
        if watcher.poll() is None:
            watcher.kill()
            watcher.wait()


def test_a_stale_resource_version_is_relisted(kube: Kube, tmp_path: Path) -> None:
    import wf
    from wf.controller.stream import KubeTransport, NamespaceStream

    path = job_file(tmp_path, "gone", [step("one")])
    (submitted,) = wf.submit(str(path), kube=kube)
    seen: list[str] = []
    stream = NamespaceStream(KubeTransport.workflows(kube, "wf", field_selector=f"metadata.name={submitted.name}"),
                             sink=lambda kind, obj: seen.append((obj.get("status") or {}).get("phase", "")))
    stream.resource_version = "1"  # far older than the API server's watch window: 410 Gone
    stream._connected = True
    thread = threading.Thread(target=stream.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while "Succeeded" not in seen and time.monotonic() < deadline:
        time.sleep(0.2)
    stream.stop()
    assert stream.stats.relists_after_gone >= 1, stream.stats
    assert "Succeeded" in seen


def test_dry_run_is_validated_by_the_server_and_creates_nothing(local_cluster: ClusterHandle, tmp_path: Path) -> None:
    path = job_file(tmp_path, "dry", [step("one")])
    before = wf_cli(local_cluster, "list", "-o", "json").stdout.count('"wf.dev/job": "dry"')
    result = wf_cli(local_cluster, "submit", str(path), "--dry-run")
    assert result.returncode == 0 and "validated by the API server (dry run)" in result.stdout, result.stderr
    assert wf_cli(local_cluster, "list", "-o", "json").stdout.count('"wf.dev/job": "dry"') == before == 0


def test_an_unreachable_cluster_exits_3_without_a_traceback(local_cluster: ClusterHandle, tmp_path: Path) -> None:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there
    config = yaml.safe_load(local_cluster.kubeconfig.read_text())
    for cluster in config["clusters"]:
        cluster["cluster"]["server"] = f"https://127.0.0.1:{port}"
    dead = tmp_path / "dead-kubeconfig"
    dead.write_text(yaml.safe_dump(config))
    dead.chmod(0o600)
    path = job_file(tmp_path, "unreachable", [step("one")])
    for args in (("list",), ("watch", "nope"), ("submit", str(path)), ("get", "nope"), ("logs", "nope")):
        result = wf_cli(local_cluster, *args, kubeconfig=dead)
        assert result.returncode == 3, (args, result.stdout, result.stderr)
        assert "cannot reach the API server" in result.stderr and "Traceback" not in result.stderr


def developer_kubeconfig(handle: ClusterHandle, kube: Kube, path: Path) -> Path:
    """A kubeconfig acting as the wf-developer service account (the developer role), by a bound token."""
    from kubernetes import client

    request = client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600))
    token = kube.core.create_namespaced_service_account_token("wf-developer", "wf", request).status.token
    config = yaml.safe_load(handle.kubeconfig.read_text())
    context = next(c for c in config["contexts"] if c["name"] == handle.context)
    user = context["context"]["user"]
    config["users"] = [{"name": user, "user": {"token": token}}]
    config["contexts"] = [context]
    config["current-context"] = handle.context
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


def test_developer_role_forbidden_namespace_exits_3_with_the_rbac_message(
    local_cluster: ClusterHandle, kube: Kube, tmp_path: Path
) -> None:
    dev = developer_kubeconfig(local_cluster, kube, tmp_path / "dev-kubeconfig")
    forbidden = wf_cli(local_cluster, "list", "-n", "kube-system", kubeconfig=dev)
    assert forbidden.returncode == 3, forbidden.stderr
    assert "forbidden by RBAC" in forbidden.stderr
    assert ('cannot list resource "workflows" in API group "argoproj.io" in the namespace "kube-system"'
            in forbidden.stderr)
    assert "Traceback" not in forbidden.stderr
    watch = wf_cli(local_cluster, "watch", "x", "-n", "kube-system", kubeconfig=dev)
    assert watch.returncode == 3 and "forbidden by RBAC" in watch.stderr
    # In its own namespace the developer submits and watches (no node reads: cost shows what it can).
    path = job_file(tmp_path, "devjob", [step("one")])
    ok = wf_cli(local_cluster, "submit", str(path), "--watch", "--plain", kubeconfig=dev)
    assert ok.returncode == 0, ok.stdout + ok.stderr


def test_a_spot_node_taken_away_is_an_interruption_and_the_job_still_succeeds(
    local_cluster: ClusterHandle, kube: Kube, tmp_path: Path
) -> None:
    from kubernetes import client

    import wf

    path = job_file(tmp_path, "spot", [step("train", **{SIM_DURATION: "40s"})], capacity="spot", retries=1)
    (submitted,) = wf.submit(str(path), kube=kube)
    result: list[Any] = []
    watcher = threading.Thread(target=lambda: result.append(wf.watch([submitted], kube=kube)), daemon=True)
    watcher.start()
    core = kube.core
    try:
        # Interrupt an attempt Argo has seen running for a while: the controller silently re-creates a pod
        # that vanishes within RECENTLY_STARTED_POD_DURATION (10 s) of its start, under the same attempt.
        deadline = time.monotonic() + 60
        while True:
            current = kube.custom.get_namespaced_custom_object("argoproj.io", "v1alpha1", "wf", "workflows",
                                                               submitted.name)
            running = [n for n in (current.get("status") or {}).get("nodes", {}).values()
                       if n["type"] == "Pod" and n["phase"] == "Running" and n.get("hostNodeName")]
            if running and (datetime.now(UTC) - parse_time(running[0]["startedAt"])).total_seconds() > 15:
                break
            assert time.monotonic() < deadline, current.get("status")
            time.sleep(0.5)
        node = running[0]["hostNodeName"]
        pods = core.list_namespaced_pod("wf", label_selector=f"workflows.argoproj.io/workflow={submitted.name}")
        (victim,) = [p for p in pods.items if p.spec.node_name == node]
        assert core.read_node(node).metadata.labels["wf.dev/capacity"] == "spot"
        # What a Spot interruption does on EKS: cordon, evict (drain), then the instance and its node go away.
        core.patch_node(node, {"spec": {"unschedulable": True}})
        core.create_namespaced_pod_eviction(victim.metadata.name, "wf", client.V1Eviction(
            metadata=client.V1ObjectMeta(name=victim.metadata.name, namespace="wf")))
        core.delete_node(node)
        watcher.join(timeout=240)
        assert result, "watch did not end"
        (run,) = result[0].runs
        assert run.phase == "Succeeded", run
        view = result[0].outcome.views[("wf", submitted.name)]
        (train,) = view.steps
        assert train.interruptions == 1 and train.retries == 0, train
        assert train.attempts[0].host == node and train.attempts[-1].host != node
    finally:
        local_cluster.cluster.up(merge_into=local_cluster.kubeconfig)  # puts the deleted node back


def test_250_workflows_are_submitted_and_watched_through_one_stream(kube: Kube, tmp_path: Path) -> None:
    import wf

    path = job_file(tmp_path, "many",
                    [{"name": "one", "command": ["true"], "resources": {"cpu": "100m", "memory": "64Mi"}}])
    # Named workflows are watched through one stream of the whole namespace: its list holds the session's earlier
    # workflows too.
    earlier = len(kube.custom.list_namespaced_custom_object(WORKFLOW.group, WORKFLOW.version, kube.namespace,
                                                            WORKFLOW.plural)["items"])
    started, earlier_requests = time.monotonic(), kube.requests.total  # the client is the session's
    submitted = wf.submit([str(path)] * 250, kube=kube, rate=50, burst=50)
    submit_requests = kube.requests.total - earlier_requests
    runs = wf.watch(submitted, kube=kube, with_cost=False)
    assert runs.succeeded, runs.failures[:5]
    stats = runs.outcome.stats["wf"]
    assert stats.lists == 1 and stats.watches <= 3, stats  # one stream served all 250
    watch_requests = kube.requests.total - earlier_requests - submit_requests
    # The one list's pages (WORKFLOW_PAGE workflows each: a relist holds a page at a time) and the stream's watches.
    assert watch_requests <= -(-(earlier + 250) // WORKFLOW_PAGE) + stats.watches, kube.requests.by_method
    print(f"\n250 workflows: {time.monotonic() - started:.0f}s, submit {submit_requests} requests, "
          f"watch {watch_requests} requests, stream {stats}")


def test_logs_retry_stop_and_delete(local_cluster: ClusterHandle, kube: Kube, tmp_path: Path) -> None:
    import wf

    path = job_file(tmp_path, "ops", [step("prep"), step("train", needs=["prep"], **{SIM_EXIT_CODE: "3"})])
    (submitted,) = wf.submit(str(path), kube=kube)
    (first,) = wf.watch([submitted], kube=kube, with_cost=False).runs
    assert first.phase == "Failed" and [s for s, _ in first.failed_steps] == ["train"]

    logs = wf_cli(local_cluster, "logs", submitted.name)
    assert logs.returncode == 0, logs.stderr
    assert any(line.startswith("[prep] ") for line in logs.stdout.splitlines()), logs.stdout
    only_train = wf_cli(local_cluster, "logs", submitted.name, "--step", "train")
    assert only_train.stdout and all(line.startswith("[train] ") for line in only_train.stdout.splitlines())
    assert wf_cli(local_cluster, "logs", submitted.name, "--step", "nope").returncode == 2
    followed = wf_cli(local_cluster, "logs", "-f", submitted.name, timeout=60)  # ends: the workflow has ended
    assert followed.returncode == 0 and "[prep] " in followed.stdout

    before = wf.get(submitted.name, kube=kube)["status"]["nodes"]
    prep_before = next(n for n in before.values() if n["displayName"].startswith("prep") and n["type"] == "Pod")
    retried = wf_cli(local_cluster, "retry", submitted.name, "--watch", "--plain")
    # The step still exits 3, so the retried run fails again: but it ran train again and kept prep.
    assert retried.returncode == 1 and "step train failed" in retried.stderr, retried.stdout + retried.stderr
    after = wf.get(submitted.name, kube=kube)["status"]
    prep_after = next(n for n in after["nodes"].values() if n["displayName"].startswith("prep") and n["type"] == "Pod")
    assert prep_after == prep_before  # succeeded work is kept, not re-run
    train_pods = [n for n in after["nodes"].values() if n["type"] == "Pod" and n["displayName"].startswith("train")]
    assert train_pods and all(parse_time(n["startedAt"]) >= parse_time(prep_before["finishedAt"]) for n in train_pods)
    old_train = [n for n in before.values() if n["type"] == "Pod" and n["displayName"].startswith("train")]
    assert min(parse_time(n["startedAt"]) for n in train_pods) > max(parse_time(n["finishedAt"]) for n in old_train)
    assert wf_cli(local_cluster, "retry", "no-such-workflow").returncode == 2

    slow = job_file(tmp_path, "slow", [step("long", **{SIM_DURATION: "120s"})])
    (running,) = wf.submit(str(slow), kube=kube)
    stopped = wf_cli(local_cluster, "stop", running.name)
    assert stopped.returncode == 0 and "stopping" in stopped.stdout
    assert wf.get(running.name, kube=kube)["spec"]["shutdown"] == "Stop"
    for name in (running.name, submitted.name):
        assert wf_cli(local_cluster, "delete", name).returncode == 0
    assert wf_cli(local_cluster, "get", running.name).returncode == 2
