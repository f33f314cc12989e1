"""Shared and scheduled jobs on the local cluster, through the real command line and Argo's controller: a
WorkflowTemplate made from an example job by the developer role, run with `wf submit --from -p`, read back by
`wf get` (steps, placement, cost) from the spec Argo stores; a scheduled job listed, run by its schedule,
suspended and resumed."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from wf.controller.client import Kube
from wf.core.constants import ARGO_WORKFLOW_TEMPLATE_LABEL, CRON_WORKFLOW, JOB_LABEL, SIM_DURATION, WORKFLOW

from .test_controller_e2e import (
    ROOT,
    ClusterHandle,
    assert_placed_by_class,
    developer_kubeconfig,
    job_file,
    step,
    wf_cli,
)

pytestmark = pytest.mark.cluster


def _ok(result: Any) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    return str(result.stdout)


def test_a_template_from_an_example_runs_with_parameters_and_reads_as_its_job(
        local_cluster: ClusterHandle, kube: Kube, tmp_path: Path) -> None:
    doc = yaml.safe_load((ROOT / "examples" / "data-prep.yaml").read_text())
    doc["metadata"]["namespace"] = local_cluster.namespace  # the developer role's namespace
    doc["spec"]["steps"][-1]["annotations"] = {SIM_DURATION: "8s"}  # enough run time to price
    example = tmp_path / "data-prep.yaml"
    example.write_text(yaml.safe_dump(doc, sort_keys=False))
    dev = developer_kubeconfig(local_cluster, kube, tmp_path / "dev-kubeconfig")

    made = _ok(wf_cli(local_cluster, "template", "create", str(example), kubeconfig=dev))
    assert made == f"WorkflowTemplate wf/data-prep created from {example}\n"
    again = _ok(wf_cli(local_cluster, "template", "create", str(example), kubeconfig=dev))
    assert again == f"WorkflowTemplate wf/data-prep unchanged from {example}\n"
    listed = _ok(wf_cli(local_cluster, "template", "list", kubeconfig=dev))
    assert re.search(r"^data-prep\s+data-prep\s+perception\s+source, dest, shards\s+\S+ ago", listed, re.M), listed
    shown = _ok(wf_cli(local_cluster, "template", "get", "data-prep", kubeconfig=dev))
    assert re.search(r"^\s*to-tfrecords\s+cpu\s+spot, on-demand after 2 interruptions", shown, re.M), shown

    unknown = wf_cli(local_cluster, "submit", "--from", "workflowtemplate/data-prep", "-p", "shard=2", kubeconfig=dev)
    assert unknown.returncode == 2 and "(did you mean 'shards'?)" in unknown.stderr, unknown.stderr
    run = wf_cli(local_cluster, "submit", "--from", "workflowtemplate/data-prep", "-p", "shards=2", "--watch",
                 "--plain", kubeconfig=dev)
    out = _ok(run)
    name = re.search(r"^Workflow wf/(\S+) created from workflowtemplate/data-prep$", out, re.M)
    assert name and ": Succeeded" in out, out
    name = name[1]

    workflow = kube.custom.get_namespaced_custom_object(WORKFLOW.group, WORKFLOW.version, "wf", WORKFLOW.plural,
                                                        name)
    assert workflow["spec"]["workflowTemplateRef"] == {"name": "data-prep"}
    assert workflow["spec"]["arguments"]["parameters"] == [{"name": "shards", "value": "2"}]
    assert workflow["status"]["storedWorkflowTemplateSpec"]["templates"]  # where its steps are read from
    labels = workflow["metadata"]["labels"]
    assert (labels["team"], labels[JOB_LABEL], labels[ARGO_WORKFLOW_TEMPLATE_LABEL]) == ("perception", "data-prep",
                                                                                      "data-prep")
    assert f"workflow/{name}\n" in _ok(wf_cli(local_cluster, "list", "-l", f"{JOB_LABEL}=data-prep", "-o", "name"))
    assert_placed_by_class(kube, name, doc)

    got = _ok(wf_cli(local_cluster, "get", name))  # as the admin, who may read the nodes cost is priced by
    for s in ("list-inputs", "merge"):
        assert f"{name} {s}: Succeeded [cpu/spot] on " in got, got
    priced = re.search(r"│ merge\s+│ (r5\.4xlarge|r6i\.4xlarge)\s+│\s+([\d.]+) │", got)
    assert priced and float(priced[2]) > 0, got
    _ok(wf_cli(local_cluster, "delete", name))
    assert _ok(wf_cli(local_cluster, "template", "delete", "data-prep")) == "wf/data-prep deleted\n"


def _cron(kube: Kube, name: str) -> dict[str, Any]:
    return kube.custom.get_namespaced_custom_object(CRON_WORKFLOW.group, CRON_WORKFLOW.version, "wf",
                                                    CRON_WORKFLOW.plural, name)


def _row(listing: str, name: str) -> list[str]:
    return next(line.split() for line in listing.splitlines() if line.startswith(f"{name} "))


def test_a_scheduled_job_is_listed_runs_and_is_suspended_and_resumed(local_cluster: ClusterHandle, kube: Kube,
                                                                      tmp_path: Path) -> None:
    path = job_file(tmp_path, "nightly", [step("sync", **{SIM_DURATION: "2s"})], schedule="* * * * *")
    dev = developer_kubeconfig(local_cluster, kube, tmp_path / "dev-kubeconfig")
    assert _ok(wf_cli(local_cluster, "submit", str(path), kubeconfig=dev)).startswith("CronWorkflow wf/nightly created")

    # NAME JOB SCHEDULE(5 fields) SUSPENDED LAST-SCHEDULED ACTIVE
    row = _row(_ok(wf_cli(local_cluster, "cron", "list", kubeconfig=dev)), "nightly")
    assert row[:8] == ["nightly", "nightly", "*", "*", "*", "*", "*", "no"], row
    deadline = time.monotonic() + 130  # the next minute, and the controller's pass over it
    while not (_cron(kube, "nightly").get("status") or {}).get("lastScheduledTime"):
        assert time.monotonic() < deadline, _cron(kube, "nightly")
        time.sleep(2)
    row = _row(_ok(wf_cli(local_cluster, "cron", "list", kubeconfig=dev)), "nightly")
    assert row[9] == "ago" and row[10] in ("0", "1"), row
    started = kube.custom.list_namespaced_custom_object(WORKFLOW.group, WORKFLOW.version, "wf", WORKFLOW.plural,
                                                        label_selector=f"{JOB_LABEL}=nightly")["items"]
    assert started, "the schedule started no workflow labelled as its job"

    assert _ok(wf_cli(local_cluster, "cron", "suspend", "nightly", kubeconfig=dev)) == "wf/nightly suspended\n"
    assert _cron(kube, "nightly")["spec"]["suspend"] is True
    assert _row(_ok(wf_cli(local_cluster, "cron", "list", kubeconfig=dev)), "nightly")[7] == "yes"
    assert _ok(wf_cli(local_cluster, "cron", "resume", "nightly", kubeconfig=dev)) == "wf/nightly resumed\n"
    assert "suspend" not in _cron(kube, "nightly")["spec"]
    assert _row(_ok(wf_cli(local_cluster, "cron", "list", kubeconfig=dev)), "nightly")[7] == "no"

    denied = wf_cli(local_cluster, "cron", "delete", "nightly", kubeconfig=dev)  # the developer role deletes nothing
    assert denied.returncode == 3 and "forbidden by RBAC" in denied.stderr, denied.stderr
    assert _ok(wf_cli(local_cluster, "cron", "delete", "nightly")) == "wf/nightly deleted\n"
