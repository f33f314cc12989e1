"""The everyday verbs on the local cluster: `wf wait`, `wf logs STEP --tail/--follow` across a retry, `wf delete -l`
and `wf suspend`/`wf resume`, through the real command line and the real workflow-controller."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from wf.controller.client import Kube
from wf.core.constants import SIM_DURATION, SIM_EXIT_CODE

from .test_controller_e2e import ClusterHandle, job_file, step, wf_cli

pytestmark = pytest.mark.cluster


def _nodes(kube: Kube, name: str) -> list[dict[str, Any]]:
    import wf

    return list((wf.get(name, kube=kube).get("status") or {}).get("nodes", {}).values())


def _until(condition: Any, seconds: float = 60, what: str = "") -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def test_wait_exits_by_the_end_and_at_its_timeout(local_cluster: ClusterHandle, kube: Kube, tmp_path: Path) -> None:
    import wf

    (quick,) = wf.submit(str(job_file(tmp_path, "wait-ok", [step("a", **{SIM_DURATION: "2s"})])), kube=kube)
    (failing,) = wf.submit(str(job_file(tmp_path, "wait-fail", [step("a", **{SIM_EXIT_CODE: "3"})])), kube=kube)
    (slow,) = wf.submit(str(job_file(tmp_path, "wait-slow", [step("a", **{SIM_DURATION: "60s"})])), kube=kube)

    done = wf_cli(local_cluster, "wait", quick.name, "-o", "name", timeout=120)
    assert done.returncode == 0 and done.stdout == f"workflow/{quick.name}\n", done.stderr
    failed = wf_cli(local_cluster, "wait", failing.name, timeout=120)
    assert failed.returncode == 1 and "step a failed" in failed.stderr, failed.stdout + failed.stderr
    timed_out = wf_cli(local_cluster, "wait", slow.name, "--timeout", "2s", timeout=60)
    assert timed_out.returncode == 1 and "after --timeout 2s" in timed_out.stderr, timed_out.stderr
    assert wf_cli(local_cluster, "stop", slow.name).returncode == 0
    assert wf_cli(local_cluster, "delete", quick.name, failing.name, slow.name).returncode == 0


def test_logs_follow_a_step_across_its_retry_then_tail_an_attempt(local_cluster: ClusterHandle, kube: Kube,
                                                                 tmp_path: Path) -> None:
    import wf

    job = job_file(tmp_path, "logs-retry", [step("train", **{SIM_DURATION: "4s", SIM_EXIT_CODE: "3"})], retries=1)
    (submitted,) = wf.submit(str(job), kube=kube)
    followed = wf_cli(local_cluster, "logs", submitted.name, "train", "-f", "--tail", "20", timeout=120)
    assert followed.returncode == 0, followed.stderr
    headers = [line for line in followed.stdout.splitlines() if line.startswith("== step train, attempt ")]
    # Started as the first attempt ran (or just after): it shows that one, then moves on to the retry's pod.
    assert headers and headers[-1].startswith("== step train, attempt 2 of 2 (pod "), followed.stdout
    assert len(headers) == len(set(headers)), followed.stdout

    first = wf_cli(local_cluster, "logs", submitted.name, "train", "--attempt", "1", "--tail", "1")
    lines = first.stdout.splitlines()
    assert first.returncode == 0 and lines[0].startswith("== step train, attempt 1 of 2 (pod ") and len(lines) <= 2
    assert wf_cli(local_cluster, "logs", submitted.name, "train", "--attempt", "3").returncode == 2
    assert wf_cli(local_cluster, "delete", submitted.name).returncode == 0


def test_delete_by_label_with_a_dry_run_first(local_cluster: ClusterHandle, kube: Kube, tmp_path: Path) -> None:
    import wf

    (gone,) = wf.submit(str(job_file(tmp_path, "delete-me", [step("a")])), kube=kube)
    (kept,) = wf.submit(str(job_file(tmp_path, "keep-me", [step("a")])), kube=kube)
    assert wf_cli(local_cluster, "wait", gone.name, kept.name, timeout=120).returncode == 0

    assert wf_cli(local_cluster, "delete").returncode == 2
    selection = ("-l", "wf.dev/job=delete-me", "--completed")
    planned = wf_cli(local_cluster, "delete", *selection, "--dry-run")
    assert planned.returncode == 0 and planned.stdout == f"wf/{gone.name} would be deleted (dry run)\n"
    assert wf_cli(local_cluster, "get", gone.name).returncode == 0
    deleted = wf_cli(local_cluster, "delete", *selection)
    assert deleted.returncode == 0 and deleted.stdout == f"wf/{gone.name} deleted\n", deleted.stderr
    _until(lambda: wf_cli(local_cluster, "get", gone.name).returncode == 2, what=f"{gone.name} to go")
    assert wf_cli(local_cluster, "get", kept.name).returncode == 0
    assert wf_cli(local_cluster, "delete", kept.name).returncode == 0


def test_a_suspended_workflow_starts_no_step_until_resumed(local_cluster: ClusterHandle, kube: Kube,
                                                           tmp_path: Path) -> None:
    import wf

    job = job_file(tmp_path, "suspend", [step("prep", **{SIM_DURATION: "3s"}), step("train", needs=["prep"])])
    (submitted,) = wf.submit(str(job), kube=kube)
    suspended = wf_cli(local_cluster, "suspend", submitted.name)
    assert suspended.returncode == 0 and "suspended" in suspended.stdout, suspended.stderr
    assert wf.get(submitted.name, kube=kube)["spec"]["suspend"] is True

    # prep may have been running: it runs on to its end, and train does not start after it.
    time.sleep(6)
    assert not [n for n in _nodes(kube, submitted.name) if n["displayName"].startswith("train")]
    assert wf.get(submitted.name, kube=kube)["status"]["phase"] == "Running"

    resumed = wf_cli(local_cluster, "resume", submitted.name)
    assert resumed.returncode == 0 and "suspend" not in wf.get(submitted.name, kube=kube)["spec"]
    assert wf_cli(local_cluster, "wait", submitted.name, "--timeout", "2m", timeout=180).returncode == 0
    assert wf_cli(local_cluster, "resume", submitted.name).returncode == 2  # it has ended
    assert wf_cli(local_cluster, "delete", submitted.name).returncode == 0
