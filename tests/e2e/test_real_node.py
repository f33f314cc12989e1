"""Steps really run: a local cluster with one real node (kubelet, containerd, runc of our build) beside simulated
ones; the job's image is on the real node only, so `wf submit` places its pods there, with the cpu class's placement
kept. A two-step job runs there with Argo's own
executor: its init and wait containers reach the API server and the cluster's S3 store through the node's relay,
pass an output parameter and an output artifact to the next step, and archive every pod's log in the store, which
`wf logs` reads once the pods are gone. `down` leaves no process, listener, namespace, mount or cgroup behind."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from wf.cluster import images, realnode
from wf.controller.client import Kube
from wf.core.constants import CLASS_LABEL, REAL_NODE_LABEL, TWIN_ARTIFACT_KEY_ANNOTATION, TWIN_ARTIFACT_LABEL

from .conftest import ClusterHandle, connected
from .test_controller_e2e import job_file, wf_cli

pytestmark = [pytest.mark.cluster, pytest.mark.components(*realnode.COMPONENTS)]


def _cli(handle: ClusterHandle, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """`wf` as a user runs it, finding the cluster (and its artifact store) by its context."""
    return wf_cli(handle, *args, timeout=timeout, env={"WF_DATA_HOME": str(handle.cluster.workdir.parent.parent)})


def _nodes(workflow: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The pod nodes by step ("make(0)": the first attempt of `make`)."""
    return {n["displayName"].partition("(")[0]: n for n in (workflow.get("status") or {}).get("nodes", {}).values()
            if n.get("type") == "Pod"}


def test_a_job_runs_on_the_real_node_with_argos_executor_and_its_logs_outlive_its_pods(
        real_cluster: ClusterHandle, tmp_path: Path) -> None:
    status = {c.name: c for c in real_cluster.cluster.status()}
    assert status["artifact-store"].running and status["artifact-store"].port, status
    assert any(name.startswith("relay (") and c.running for name, c in status.items()), status
    printed = _cli(real_cluster, "cluster", "status", "--name", real_cluster.name, "-o", "json").stdout
    shown, state = json.loads(printed), real_cluster.cluster.state()
    store = state.artifact_store() if state else None
    assert store is not None and shown["realNodes"] == 1 and shown["artifactStore"] == store.url, shown
    assert store.access_key not in printed and store.secret_key not in printed  # its address, never its keys
    steps = [
        {"name": "make", "command": ["sh", "-c", "echo making on $(hostname); mkdir -p /tmp/out; echo 42 > "
                                                 "/tmp/answer; echo payload > /tmp/out/data.txt"],
         "resources": {"cpu": 1, "memory": "256Mi"},
         "outputs": {"parameters": {"answer": "/tmp/answer"}, "artifacts": {"data": "/tmp/out"}}},
        {"name": "use", "needs": ["make"], "resources": {"cpu": 1, "memory": "256Mi"},
         "command": ["sh", "-c", "echo answer={{steps.make.outputs.answer}}; "
                                 "cat {{steps.make.outputs.data}}/data.txt"]},
    ]
    job = job_file(tmp_path, "real-steps", steps, image=images.BUSYBOX)
    submitted = _cli(real_cluster, "submit", str(job), "-o", "name")
    assert submitted.returncode == 0, submitted.stderr
    name = submitted.stdout.strip().removeprefix("workflow/")
    started = time.monotonic()
    waited = _cli(real_cluster, "wait", name, "--timeout", "3m")
    ran_seconds = time.monotonic() - started
    with connected(real_cluster) as kube:
        workflow = kube.custom.get_namespaced_custom_object("argoproj.io", "v1alpha1", "wf", "workflows", name)
        assert waited.returncode == 0, f"{waited.stdout}{waited.stderr}\n{_pods_report(kube, name)}"
        nodes = _nodes(workflow)
        assert nodes["make"]["outputs"]["parameters"][0]["value"] == "42"
        pods = kube.core.list_namespaced_pod("wf", label_selector=f"workflows.argoproj.io/workflow={name}").items
        assert len(pods) == 2
        real_names = {n.metadata.name for n in kube.core.list_node(label_selector=REAL_NODE_LABEL).items}
        for pod in pods:
            assert pod.spec.node_name in real_names  # its image is there only
            assert pod.spec.node_selector and pod.spec.node_selector.get(CLASS_LABEL) == "cpu"
            # Argo's own init and wait containers really ran (containerd's IDs), beside the step's program.
            statuses = [*(pod.status.init_container_statuses or []), *pod.status.container_statuses]
            assert {s.name for s in statuses} == {"init", "wait", "main"}, statuses
            assert all(s.container_id.startswith("containerd://") and s.state.terminated.exit_code == 0
                       for s in statuses), statuses
        live = _cli(real_cluster, "logs", name, "use")
        assert live.returncode == 0 and "answer=42" in live.stdout and "payload" in live.stdout, live.stdout
        # Everything archived went to the cluster's S3 store through the wait containers.
        keys = [k for k in _stored_keys(real_cluster) if name in k]  # the cluster's other tests store theirs
        assert sum(k.endswith("/main.log") for k in keys) == 2 and any("data" in k for k in keys), keys
        # The simulated executor left these pods alone: it would have kept their logs in the twin's store.
        twins = [t for t in kube.core.list_namespaced_config_map("wf", label_selector=TWIN_ARTIFACT_LABEL).items
                 if name in (t.metadata.annotations or {}).get(TWIN_ARTIFACT_KEY_ANNOTATION, "")]
        assert not twins, [t.metadata.name for t in twins]
        for pod in pods:
            kube.core.delete_namespaced_pod(pod.metadata.name, "wf", grace_period_seconds=0)
        _eventually(lambda: not _pods(kube, name), f"{name}'s pods deleted")
    archived = _cli(real_cluster, "logs", name, "use")
    assert archived.returncode == 0, archived.stderr
    assert "its log as Argo archived it" in archived.stdout, archived.stdout
    assert "answer=42" in archived.stdout and "payload" in archived.stdout, archived.stdout
    made = _cli(real_cluster, "logs", name, "make")
    assert "making on" in made.stdout and "its log as Argo archived it" in made.stdout, made.stdout
    print(f"\nreal node cluster up in {real_cluster.up_seconds:.1f}s; {name} ran in {ran_seconds:.1f}s\n"
          f"{archived.stdout}")


def _stored_keys(handle: ClusterHandle) -> list[str]:
    import boto3

    state = handle.cluster.state()
    endpoint = state.artifact_store() if state else None
    assert endpoint is not None
    client = boto3.session.Session(region_name="us-east-1").client(
        "s3", endpoint_url=endpoint.url, aws_access_key_id=endpoint.access_key,
        aws_secret_access_key=endpoint.secret_key)
    buckets = [b["Name"] for b in client.list_buckets()["Buckets"]]
    return [o["Key"] for b in buckets for o in client.list_objects_v2(Bucket=b).get("Contents", [])]


def _pods(kube: Kube, name: str) -> list[Any]:
    return list(kube.core.list_namespaced_pod("wf", label_selector=f"workflows.argoproj.io/workflow={name}").items)


def _pods_report(kube: Kube, name: str) -> str:
    """What a failed run's pods said: each container's state, for the assertion's message."""
    out = []
    for pod in _pods(kube, name):
        statuses = [*(pod.status.init_container_statuses or []), *(pod.status.container_statuses or [])]
        out.append(f"{pod.metadata.name} on {pod.spec.node_name}: {pod.status.phase} "
                   + "; ".join(f"{s.name}={s.state}" for s in statuses))
    return "\n".join(out)


def _eventually(check: Any, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout:.0f}s: {what}"
        time.sleep(0.5)
