"""Run history on a real database: the local cluster's PostgreSQL holds Argo's workflow archive, its Argo Server
serves it, and once a finished run's live object is deleted, `wf list --archived`, `wf get` (steps, attempts,
interruptions, cost) and `wf logs` (the logs the simulated wait container archived) still answer."""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from wf.compile.node_facts import read_record
from wf.controller.archive import Archive
from wf.controller.client import Kube
from wf.core.constants import SIM_DURATION

from .conftest import ClusterHandle
from .test_controller_e2e import job_file, step, wf_cli
from .test_retries import NAMESPACE, _eviction, _get, _running_attempt

pytestmark = pytest.mark.cluster

ARCHIVED_WITHIN_SECONDS = 90  # the controller archives a run once it has ended, from a queue of its own


def history_cli(handle: ClusterHandle, *args: str, timeout: float = 300, **env: str
                ) -> subprocess.CompletedProcess[str]:
    """`wf` as a user runs it: the cluster found by its context, as `wf cluster up` recorded it (where its Argo
    Server and Prometheus are)."""
    return wf_cli(handle, *args, timeout=timeout,
                  env={"WF_DATA_HOME": str(handle.cluster.workdir.parent.parent), **env})


def test_the_archive_s_database_and_server_run_on_loopback(local_cluster: ClusterHandle) -> None:
    components = {c.name: c for c in local_cluster.cluster.status()}
    for name in ("postgres", "argo-server"):
        assert components[name].running and components[name].port, components[name]
    state = local_cluster.cluster.state()
    assert state and state.argo_server_url == f"http://127.0.0.1:{components['argo-server'].port}"
    with urllib.request.urlopen(f"{state.argo_server_url}/api/v1/version", timeout=5) as response:
        assert json.load(response)["version"].startswith("v4.")


def test_a_deleted_run_is_listed_shown_and_its_logs_read_from_the_archive(
        local_cluster: ClusterHandle, kube: Kube, tmp_path: Path) -> None:
    # No artifact anywhere: the namespace's artifact account (the catalog's) is enough for its workflow to use the
    # catalog's artifact repository, whose `archiveLogs` archives every pod's log.
    train = step("train", needs=["prep"], **{SIM_DURATION: "25s"})
    job = job_file(tmp_path, "history", [step("prep"), train])
    submitted = history_cli(local_cluster, "submit", str(job), "-o", "name")
    assert submitted.returncode == 0, submitted.stderr
    name = submitted.stdout.strip().removeprefix("workflow/")
    evicted = _evict_running_train(kube, name)
    waited = history_cli(local_cluster, "wait", name, "--timeout", "3m")
    assert waited.returncode == 0, waited.stdout + waited.stderr

    live = history_cli(local_cluster, "get", name, "-o", "wide")
    assert live.returncode == 0, live.stderr
    _eventually(lambda: f"workflow/{name}" in history_cli(
        local_cluster, "list", "--archived", "--since", "1h", "-o", "name").stdout, f"{name} archived")

    # Where its attempts ran, kept for their price once the nodes are gone: the node recorder copies the record
    # onto the ended workflow (its ledger goes with the live object), after Argo archived it here, and has it
    # archived again.
    archive = Archive(local_cluster.cluster.state().argo_server_url, "the local cluster")
    hosts = {n["hostNodeName"] for n in _get(kube, name)["status"]["nodes"].values() if n.get("hostNodeName")}
    _eventually(lambda: hosts and hosts <= set(read_record(archive.run(NAMESPACE, name) or {}).nodes),
                f"{name}'s node record ({sorted(hosts)}) in its archived copy")

    deleted = history_cli(local_cluster, "delete", name)
    assert deleted.returncode == 0, deleted.stderr
    _eventually(lambda: _gone(kube, name), f"{name}'s live object and pods deleted")

    listed = history_cli(local_cluster, "list", "--archived", "--since", "1h")
    assert listed.returncode == 0, listed.stderr
    assert re.search(rf"^{name}\s+Succeeded\s", listed.stdout, re.M), listed.stdout

    archived = history_cli(local_cluster, "get", name, "-o", "wide")
    assert archived.returncode == 0, archived.stderr
    assert "(from Argo's archive: the live workflow is gone" in archived.stdout
    # The same steps, attempts, interruption and cost as the live object showed.
    assert _shown(archived.stdout) == _shown(live.stdout), archived.stdout
    document = json.loads(history_cli(local_cluster, "get", name, "-o", "json").stdout)
    assert hosts <= set(read_record(document).nodes), document["metadata"]  # `wf get` of the archived run has it
    assert "interruption" in archived.stdout and _total_node_hours(archived.stdout) > 0, archived.stdout

    # The interrupted attempt's pod and the finished one's are gone: their logs as the wait container archived them.
    for attempt in ("1", "2"):
        logs = history_cli(local_cluster, "logs", name, "train", "--attempt", attempt)
        assert logs.returncode == 0, logs.stderr
        assert f"== step train, attempt {attempt} of 2" in logs.stdout, logs.stdout
        assert "its log as Argo archived it" in logs.stdout and "simulated by kwok" in logs.stdout, logs.stdout
    everything = history_cli(local_cluster, "logs", name)
    assert everything.returncode == 0, everything.stderr
    assert {"[prep]", "[train]"} <= set(re.findall(r"^\[\w+\]", everything.stdout, re.M)), everything.stdout
    print(f"\narchived {name}; evicted {evicted}:\n{archived.stdout}")


def test_archive_errors_name_what_to_configure(local_cluster: ClusterHandle, tmp_path: Path) -> None:
    unreachable = history_cli(local_cluster, "list", "--archived", "--argo-server", "http://127.0.0.1:1")
    assert unreachable.returncode == 3, unreachable.stderr
    assert "cannot reach Argo Server at http://127.0.0.1:1 (--argo-server)" in unreachable.stderr
    missing = history_cli(local_cluster, "get", "never-ran-x1y2z")
    assert missing.returncode == 2 and "nor in Argo's archive" in missing.stderr, missing.stderr
    # A context wf knows no local cluster of, and no --argo-server: what to configure, not a traceback.
    elsewhere = history_cli(local_cluster, "list", "--archived", WF_DATA_HOME=str(tmp_path))
    assert elsewhere.returncode == 2 and "WF_ARGO_SERVER" in elsewhere.stderr, elsewhere.stderr
    assert "Traceback" not in unreachable.stderr + missing.stderr + elsewhere.stderr


def _evict_running_train(kube: Kube, name: str) -> str:
    """Evict the train step's first attempt once Argo has seen it run (a drain's way of ending it)."""
    deadline = time.monotonic() + 120
    while (found := _running_attempt(kube, name)) is None or "train" not in found[1].metadata.name:
        assert time.monotonic() < deadline, "train never ran"
        time.sleep(0.5)
    pod = found[1].metadata.name
    kube.core.create_namespaced_pod_eviction(pod, NAMESPACE, _eviction(pod))
    return str(pod)


def _gone(kube: Kube, name: str) -> bool:
    from kubernetes.client.exceptions import ApiException

    try:
        _get(kube, name)
        return False
    except ApiException as exc:
        if exc.status != 404:
            raise
    return not kube.core.list_namespaced_pod(NAMESPACE, label_selector=f"workflows.argoproj.io/workflow={name}").items


def _shown(text: str) -> list[str]:
    """What `wf get` shows of the run, less what depends on when it is asked (ages, the archive's note)."""
    return [re.sub(r"\b\d+[smhd]( ago)?\b", "T", line) for line in text.splitlines()
            if line.strip() and not line.startswith("(from Argo's archive")]


def _total_node_hours(text: str) -> float:
    found = re.search(r"^│ total\s+│\s+│\s+([\d.]+) │", text, re.M)
    assert found, text[-3000:]
    return float(found.group(1))


def _eventually(probe: Any, what: str) -> None:
    deadline = time.monotonic() + ARCHIVED_WITHIN_SECONDS
    while not probe():
        assert time.monotonic() < deadline, f"{what}: not within {ARCHIVED_WITHIN_SECONDS}s"
        time.sleep(2)
