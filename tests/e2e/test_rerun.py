"""`wf rerun --from STEP` on the local cluster: Argo's controller takes up the new workflow with the reused
steps' nodes, runs only STEP and what follows, and hands STEP the outputs the reused steps had."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from wf.controller.client import Kube
from wf.core.constants import (
    ARGO_RESUBMITTED_FROM_LABEL,
    ARGO_WORKFLOW_LABEL,
    RERUN_FROM_ANNOTATION,
    SIM_OUTPUTS,
    STEP_LABEL,
)

from .test_controller_e2e import ClusterHandle, job_file, step, wf_cli

pytestmark = pytest.mark.cluster


def test_rerun_from_a_step_reuses_the_outputs_of_the_steps_before_it(local_cluster: ClusterHandle, kube: Kube,
                                                                     tmp_path: Path) -> None:
    import wf

    # a's output names the parameter it saw: b can only get "a-saw-one" from the first run's a.
    a = {**step("a", **{SIM_OUTPUTS: json.dumps({"x": "a-saw-{{workflow.parameters.p}}"})}),
         "outputs": {"parameters": {"x": "/tmp/x"}}}
    b = {**step("b", needs=["a"]),
         "command": ["sh", "-c", "echo got {{steps.a.outputs.x}} with {{workflow.parameters.p}}"]}
    path = job_file(tmp_path, "rerun", [a, b, step("c", needs=["b"])], parameters={"p": "one"})
    (submitted,) = wf.submit(str(path), kube=kube)
    (first,) = wf.watch([submitted], kube=kube, with_cost=False).runs
    assert first.phase == "Succeeded", first

    misspelt = wf_cli(local_cluster, "rerun", submitted.name, "--from", "bb")
    assert misspelt.returncode == 2 and "did you mean 'b'" in misspelt.stderr and "a, b, c" in misspelt.stderr, \
        misspelt.stderr
    unknown = wf_cli(local_cluster, "rerun", submitted.name, "--from", "b", "-p", "q=1")
    assert unknown.returncode == 2 and "unknown parameter q" in unknown.stderr, unknown.stderr

    rerun = wf_cli(local_cluster, "rerun", submitted.name, "--from", "b", "-p", "p=two", "-o", "name")
    assert rerun.returncode == 0, rerun.stderr
    name = rerun.stdout.strip().removeprefix("workflow/")
    assert name != submitted.name and name.startswith("rerun-")
    waited = wf_cli(local_cluster, "wait", name, "--timeout", "180s")
    assert waited.returncode == 0, waited.stdout + waited.stderr

    new = wf.get(name, kube=kube)
    assert new["status"]["phase"] == "Succeeded"
    assert new["metadata"]["labels"][ARGO_RESUBMITTED_FROM_LABEL] == submitted.name
    assert new["metadata"]["annotations"][RERUN_FROM_ANNOTATION] == "b"
    pods = kube.core.list_namespaced_pod(local_cluster.namespace,
                                         label_selector=f"{ARGO_WORKFLOW_LABEL}={name}").items
    by_step = {pod.metadata.labels[STEP_LABEL]: pod for pod in pods}
    assert sorted(by_step) == ["b", "c"]  # a was reused, not run
    main = next(c for c in by_step["b"].spec.containers if c.name == "main")
    assert "echo got a-saw-one with two" in " ".join([*(main.command or []), *(main.args or [])])
    reused = [n for n in new["status"]["nodes"].values() if n["type"] == "Skipped"]
    assert [n["displayName"] for n in reused] == ["a(0)"] and reused[0]["message"].startswith("original pod: ")
    assert wf.get(submitted.name, kube=kube)["status"]["phase"] == "Succeeded"  # the original is untouched
    logs = wf_cli(local_cluster, "logs", name, "a")
    assert logs.returncode == 2 and f"reused its result from {submitted.name}" in logs.stderr, logs.stderr

    running = wf_cli(local_cluster, "rerun", submitted.name, "--from", "a", "--watch", "--plain")
    assert running.returncode == 0 and "Succeeded" in running.stdout, running.stdout + running.stderr
    for each in (name, submitted.name):
        assert wf_cli(local_cluster, "delete", each).returncode == 0
