"""The simulated executor's report: the WorkflowTaskResult Argo's wait container would create for a pod."""

from __future__ import annotations

import json
from typing import Any

from wf.sim_executor import (
    COMPLETED_LABEL,
    OUTPUTS_ANNOTATION,
    WORKFLOW_LABEL,
    task_result,
)

TEMPLATE = {"name": "list", "outputs": {
    "parameters": [{"name": "shards", "valueFrom": {"path": "/tmp/s"}},
                   {"name": "score", "valueFrom": {"path": "/tmp/score", "default": "0.1"}},
                   {"name": "empty", "valueFrom": {"path": "/tmp/e"}}],
    "artifacts": [{"name": "model", "path": "/out/model"}]}}


def pod(phase: str = "Succeeded", template: dict[str, Any] | None = TEMPLATE, **annotations: str) -> dict[str, Any]:
    env = [{"name": "ARGO_TEMPLATE", "value": json.dumps(template)}] if template else []
    return {"metadata": {"name": "wf-abc-list-123", "namespace": "ml", "uid": "u1",
                         "labels": {WORKFLOW_LABEL: "wf-abc"},
                         "annotations": {"workflows.argoproj.io/node-id": "wf-abc-123", **annotations},
                         "ownerReferences": [{"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
                                              "name": "wf-abc", "uid": "w1"}]},
            "spec": {"initContainers": [{"name": "init", "env": env}], "containers": [{"name": "main"}]},
            "status": {"phase": phase}}


def test_values_from_the_annotation_then_defaults() -> None:
    result = task_result(pod(**{OUTPUTS_ANNOTATION: json.dumps({"shards": [1, 2]})}))
    assert result is not None
    assert result["metadata"]["name"] == "wf-abc-123"
    assert result["metadata"]["labels"] == {WORKFLOW_LABEL: "wf-abc", COMPLETED_LABEL: "true"}
    assert result["metadata"]["ownerReferences"][0]["uid"] == "w1"
    assert result["outputs"]["parameters"] == [{"name": "shards", "value": "[1, 2]"},
                                               {"name": "score", "value": "0.1"}, {"name": "empty", "value": ""}]
    assert result["outputs"]["artifacts"] == [
        {"name": "model", "path": "/out/model", "s3": {"key": "ml/wf-abc/wf-abc-list-123/model.tgz"}}]


def test_only_succeeded_pods_with_outputs_are_reported() -> None:
    assert task_result(pod(phase="Running")) is None
    assert task_result(pod(phase="Failed")) is None
    assert task_result(pod(template={"name": "x"})) is None
    assert task_result(pod(template=None)) is None


def test_a_bad_annotation_falls_back_to_defaults() -> None:
    result = task_result(pod(**{OUTPUTS_ANNOTATION: "not json"}))
    assert result is not None and result["outputs"]["parameters"][0] == {"name": "shards", "value": ""}
