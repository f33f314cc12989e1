"""Targeted tests of wf.argo.validate: typos, types, required fields, Kubernetes special types, dispatch."""

from __future__ import annotations

from typing import Any

import pytest

from wf.argo import KINDS
from wf.argo import validate as validate_manifest


def validate(manifest: Any) -> list[tuple[tuple[Any, ...], str]]:
    """The findings as (path, message): what these tests assert on."""
    return [(p.path, p.message) for p in validate_manifest(manifest)]


def workflow(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "entrypoint": "main",
        "templates": [
            {"name": "main", "dag": {"tasks": [{"name": "train", "template": "train"}]}},
            {
                "name": "train",
                "container": {
                    "image": "python:3.11",
                    "command": ["python", "train.py"],
                    "resources": {"requests": {"cpu": "8", "memory": "32Gi"}},
                },
            },
        ],
    }
    base.update(spec)
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"generateName": "train-", "labels": {"wf.dev/job": "train"}},
        "spec": base,
    }


def container(manifest: dict[str, Any]) -> dict[str, Any]:
    return manifest["spec"]["templates"][1]["container"]


KNOWN = "Workflow, WorkflowTemplate, ClusterWorkflowTemplate, CronWorkflow"


def test_minimal_workflow_is_valid() -> None:
    assert validate(workflow()) == []


@pytest.mark.parametrize(
    ("mutate", "path", "suggestion"),
    [
        (lambda m: m["spec"].update(entrypiont="main"), ("spec", "entrypiont"), "entrypoint"),
        (lambda m: m["metadata"].update(lables={}), ("metadata", "lables"), "labels"),
        (
            lambda m: container(m).update(imagePullPolcy="Always"),
            ("spec", "templates", 1, "container", "imagePullPolcy"),
            "imagePullPolicy",
        ),
        (
            lambda m: container(m).update(image_pull_policy="Always"),
            ("spec", "templates", 1, "container", "image_pull_policy"),
            "imagePullPolicy",
        ),
        (
            lambda m: m["spec"]["templates"][0]["dag"]["tasks"][0].update(dependancies=["a"]),
            ("spec", "templates", 0, "dag", "tasks", 0, "dependancies"),
            "dependencies",
        ),
        (
            lambda m: container(m)["resources"].update(request={"cpu": "1"}),
            ("spec", "templates", 1, "container", "resources", "request"),
            "requests",
        ),
        (lambda m: m["spec"].update(NodeSelector={}), ("spec", "NodeSelector"), "nodeSelector"),
    ],
)
def test_typos_are_flagged_with_a_suggestion(mutate: Any, path: tuple[Any, ...], suggestion: str) -> None:
    manifest = workflow()
    mutate(manifest)
    problems = validate(manifest)
    assert len(problems) == 1
    problem_path, message = problems[0]
    assert problem_path == path
    assert message == f"unknown field '{path[-1]}' (did you mean '{suggestion}'?)"


def test_unknown_field_without_a_close_match_has_no_suggestion() -> None:
    manifest = workflow()
    container(manifest)["zzz"] = 1
    assert validate(manifest) == [(("spec", "templates", 1, "container", "zzz"), "unknown field 'zzz'")]


@pytest.mark.parametrize(
    ("mutate", "path", "expected"),
    [
        (
            lambda m: m["spec"].update(parallelism="3"),
            ("spec", "parallelism"),
            "expected an integer, got a string ('3')",
        ),
        (lambda m: m["spec"].update(parallelism=True), ("spec", "parallelism"), "expected an integer, got a boolean"),
        (lambda m: m["spec"].update(parallelism=2.5), ("spec", "parallelism"), "expected an integer, got a number"),
        (lambda m: m["spec"].update(entrypoint=7), ("spec", "entrypoint"), "expected a string, got an integer (7)"),
        (
            lambda m: m["spec"]["templates"][0].update(failFast="yes"),
            ("spec", "templates", 0, "failFast"),
            "expected a boolean (true or false), got a string",
        ),
        (
            lambda m: container(m).update(command="python train.py"),
            ("spec", "templates", 1, "container", "command"),
            "expected a list, got a string",
        ),
        (
            lambda m: container(m).update(command=["python", 3]),
            ("spec", "templates", 1, "container", "command", 1),
            "expected a string, got an integer (3)",
        ),
        (lambda m: m["spec"].update(templates={"main": {}}), ("spec", "templates"), "expected a list, got a mapping"),
        (
            lambda m: m["spec"].update(podGC="OnPodCompletion"),
            ("spec", "podGC"),
            "expected an object (PodGC), got a string",
        ),
        (lambda m: m["metadata"].update(labels=["a"]), ("metadata", "labels"), "expected a mapping, got a list"),
        (
            lambda m: m["metadata"].update(labels={"team": 1}),
            ("metadata", "labels", "team"),
            "expected a string, got an integer (1)",
        ),
        (
            lambda m: m["spec"].update(retryStrategy={"limit": True}),
            ("spec", "retryStrategy", "limit"),
            "expected an integer or a string, got a boolean",
        ),
        (
            lambda m: container(m)["resources"]["requests"].update(memory="32GB"),
            ("spec", "templates", 1, "container", "resources", "requests", "memory"),
            "invalid quantity '32GB'",
        ),
        (
            lambda m: container(m)["resources"]["requests"].update(cpu=[1]),
            ("spec", "templates", 1, "container", "resources", "requests", "cpu"),
            "expected a quantity (a number or a string such as 32Gi), got a list",
        ),
    ],
)
def test_wrong_types_are_flagged(mutate: Any, path: tuple[Any, ...], expected: str) -> None:
    manifest = workflow()
    mutate(manifest)
    problems = validate(manifest)
    assert len(problems) == 1, problems
    assert problems[0][0] == path
    assert problems[0][1].startswith(expected)


def test_missing_required_fields() -> None:
    manifest = workflow(arguments={"parameters": [{"value": "40"}]})
    manifest["spec"]["templates"][0]["dag"]["tasks"].append({"template": "train"})
    assert validate(manifest) == [  # in document order: `arguments` comes after `templates` here
        (("spec", "templates", 0, "dag", "tasks", 1), "missing required field 'name' of DAGTask"),
        (("spec", "arguments", "parameters", 0), "missing required field 'name' of Parameter"),
    ]
    del manifest["spec"]
    assert validate(manifest) == [((), "missing required field 'spec' of Workflow")]


def test_null_stands_for_an_omitted_optional_field_but_not_a_required_one() -> None:
    manifest = workflow(onExit=None)
    assert validate(manifest) == []
    manifest["spec"]["templates"][0]["dag"]["tasks"][0]["name"] = None
    assert validate(manifest) == [
        (("spec", "templates", 0, "dag", "tasks", 0), "missing required field 'name' of DAGTask")
    ]


@pytest.mark.parametrize("limit", [3, "3", "{{workflow.parameters.retries}}"])
def test_int_or_string_accepts_both(limit: Any) -> None:
    manifest = workflow(retryStrategy={"limit": limit, "backoff": {"duration": "10s", "factor": 2}})
    manifest["spec"]["podDisruptionBudget"] = {"minAvailable": 1 if isinstance(limit, int) else "50%"}
    container(manifest)["livenessProbe"] = {"httpGet": {"port": 8080 if isinstance(limit, int) else "http"}}
    manifest["spec"]["templates"][1]["activeDeadlineSeconds"] = limit
    assert validate(manifest) == []


@pytest.mark.parametrize("value", [2, 0.5, "500m", "32Gi", "1e3", "1.5", "{{inputs.parameters.memory}}"])
def test_quantities_accept_numbers_and_kubernetes_strings(value: Any) -> None:
    manifest = workflow()
    container(manifest)["resources"] = {"requests": {"cpu": value, "habana.ai/gaudi": 8}, "limits": {"memory": value}}
    assert validate(manifest) == []


def test_free_form_places_accept_anything() -> None:
    manifest = workflow()
    task = manifest["spec"]["templates"][0]["dag"]["tasks"][0]
    task["withItems"] = [1, "a", True, {"image": "x", "nested": [1, {"deep": None}]}, [1, 2]]
    manifest["spec"]["templates"].append({"name": "plug", "plugin": {"hello": {"anything": [1, {"x": 2}]}}})
    manifest["metadata"]["annotations"] = {"workflows.argoproj.io/description": "any text", "x.y/z": ""}
    manifest["spec"]["arguments"] = {"parameters": [{"name": "epochs", "value": "40", "enum": ["10", "40"]}]}
    assert validate(manifest) == []


def test_field_less_placeholders_must_be_empty() -> None:
    manifest = workflow()
    manifest["spec"]["templates"][1]["outputs"] = {
        "artifacts": [{"name": "model", "path": "/out", "archive": {"none": {}}}]
    }
    assert validate(manifest) == []
    manifest["spec"]["templates"][1]["outputs"]["artifacts"][0]["archive"]["none"] = {"compress": False}
    assert validate(manifest) == [
        (
            ("spec", "templates", 1, "outputs", "artifacts", 0, "archive", "none", "compress"),
            "unknown field 'compress': NoneStrategy takes no fields (write {})",
        )
    ]


def cron(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "CronWorkflow",
        "metadata": {"name": "nightly"},
        "spec": {"schedules": ["0 2 * * *"], "timezone": "UTC", "workflowSpec": workflow()["spec"], **spec},
    }


def test_cron_workflow_dispatch() -> None:
    assert validate(cron()) == []
    manifest = cron()
    manifest["spec"]["schedule"] = manifest["spec"].pop("schedules")[0]
    assert validate(manifest) == [
        (("spec", "schedule"), "unknown field 'schedule' (did you mean 'schedules'?)"),
        (("spec",), "missing required field 'schedules' of CronWorkflowSpec"),
    ]
    manifest = cron()
    manifest["spec"]["workflowSpec"]["templates"][1]["container"]["imagePullPolcy"] = "Always"
    assert validate(manifest)[0][0] == ("spec", "workflowSpec", "templates", 1, "container", "imagePullPolcy")


def test_template_kinds_dispatch() -> None:
    for kind in ("WorkflowTemplate", "ClusterWorkflowTemplate"):
        manifest = workflow()
        manifest["kind"] = kind
        manifest["metadata"] = {"name": "shared-train"}
        assert validate(manifest) == []
        # Only a Workflow has a status; the template kinds do not.
        manifest["status"] = {}
        assert validate(manifest) == [(("status",), "unknown field 'status'")]
    running = workflow()
    running["status"] = {"phase": "Running"}
    assert validate(running) == []


def test_kinds_lists_the_four_argo_kinds() -> None:
    assert set(KINDS) == {"Workflow", "WorkflowTemplate", "ClusterWorkflowTemplate", "CronWorkflow"}


@pytest.mark.parametrize(
    ("manifest", "expected"),
    [
        (None, [((), "expected an Argo manifest (a mapping), got null")]),
        ([1, 2], [((), "expected an Argo manifest (a mapping), got a list")]),
        ("kind: Workflow", [((), "expected an Argo manifest (a mapping), got a string ('kind: Workflow')")]),
        (
            {},
            [
                ((), "missing required field 'apiVersion' (expected 'argoproj.io/v1alpha1')"),
                ((), f"missing required field 'kind' (one of {KNOWN})"),
            ],
        ),
        (
            {"apiVersion": "v1", "kind": "ConfigMap"},
            [
                (("apiVersion",), "apiVersion must be 'argoproj.io/v1alpha1', got 'v1'"),
                (
                    ("kind",),
                    f"unknown kind 'ConfigMap'; wf lints {KNOWN}",
                ),
            ],
        ),
        (
            {"apiVersion": "argoproj.io/v1alpha1", "kind": "workflow"},
            [
                (
                    ("kind",),
                    f"unknown kind 'workflow' (did you mean 'Workflow'?); wf lints {KNOWN}",
                )
            ],
        ),
    ],
)
def test_not_an_argo_manifest(manifest: Any, expected: list[Any]) -> None:
    assert validate(manifest) == expected


def test_odd_yaml_values_do_not_crash() -> None:
    import datetime

    manifest = workflow()
    manifest["spec"][1] = "int key"
    manifest["metadata"]["labels"] = {2: "x"}
    manifest["metadata"]["annotations"] = {"built": datetime.date(2024, 1, 1)}  # PyYAML reads dates
    problems = validate(manifest)
    assert [path for path, _ in problems] == [("metadata", "labels", 2), ("spec", 1)]
    deep: Any = {}
    node = deep
    for _ in range(5000):
        node["inline"] = {"steps": [[{}]]}
        node = node["inline"]["steps"][0][0]
    manifest = workflow()
    manifest["spec"]["templates"][0] = {"name": "deep", "steps": [[deep]]}
    assert validate(manifest) == [((), "manifest is nested too deeply to validate")]


@pytest.mark.parametrize(
    ("kind", "metadata", "expected"),
    [
        ("Workflow", {"name": "Train_Job"}, "invalid name 'Train_Job'"),
        ("Workflow", {"generateName": "Train-"}, "invalid name 'Train-'"),
        ("CronWorkflow", {"name": "n" * 53}, "CronWorkflow names must not be longer than 52 characters (has 53)"),
        ("WorkflowTemplate", {"name": "t" * 64}, "WorkflowTemplate names must not be longer than 63 characters"),
    ],
)
def test_object_names(kind: str, metadata: dict[str, str], expected: str) -> None:
    manifest = cron() if kind == "CronWorkflow" else workflow()
    manifest["kind"] = kind
    manifest["metadata"] = metadata
    problems = validate(manifest)
    assert len(problems) == 1
    assert problems[0][0] == ("metadata", next(iter(metadata)))
    assert problems[0][1].startswith(expected)
    metadata_ok = {"name": "n" * 52} if kind == "CronWorkflow" else {"generateName": "train-"}
    manifest["metadata"] = metadata_ok
    assert validate(manifest) == []
