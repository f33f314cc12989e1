"""A template as Argo runs it (wf.argo.defaults): the workflow's templateDefaults merged in as Argo v4 merges them,
and what compiled workflows write once per workflow reaching every template that needs it."""

from __future__ import annotations

import json
from typing import Any

from wf.argo.defaults import as_run, merge, with_defaults
from wf.compile.interruptions import APPLICATION_EXPRESSION, INTERRUPTION_EXPRESSION
from wf.compile.workflow import compile_job
from wf.model.catalog import Catalog


def test_merge_is_a_strategic_merge_without_merge_keys() -> None:
    defaults = {"a": {"x": 1, "y": [1, 2]}, "b": 2, "c": [{"k": 1}]}
    own = {"a": {"y": [3], "z": 4}, "c": []}
    merged = merge(defaults, own)
    assert merged == {"a": {"y": [3], "z": 4, "x": 1}, "c": [], "b": 2}  # lists replaced, own wins, own order first
    assert defaults == {"a": {"x": 1, "y": [1, 2]}, "b": 2, "c": [{"k": 1}]} and own == {"a": {"y": [3], "z": 4},
                                                                                         "c": []}
    merged["a"]["x"] = 9
    assert defaults["a"]["x"] == 1  # a new dict, nothing shared


def test_a_default_of_a_template_type_reaches_only_templates_of_that_type() -> None:
    spec = {"templateDefaults": {"container": {"image": "i", "securityContext": {"privileged": False}},
                                 "metrics": {"prometheus": [{"name": "m", "help": "h"}]}}}
    pod = with_defaults(spec, {"name": "p", "container": {"image": "own"}})
    dag = with_defaults(spec, {"name": "d", "dag": {"tasks": []}})
    assert pod["container"] == {"image": "own", "securityContext": {"privileged": False}}
    assert "container" not in dag and dag["metrics"]["prometheus"][0]["name"] == "m"
    assert with_defaults(spec, {"name": "d", "metrics": {"prometheus": []}, "dag": {}})["metrics"] == {
        "prometheus": []}


def _job(make_job: Any) -> Any:
    return make_job([{"name": "a", "command": ["x"]}, {"name": "b", "command": ["x"], "needs": ["a"]}], retries=2)


def test_every_step_runs_with_the_shared_hardening_and_retry_expressions(catalog: Catalog, make_job: Any) -> None:
    manifest = compile_job(_job(make_job), catalog)
    assert "lastRetry" not in json.dumps(manifest["spec"]["templates"])  # written once, outside the templates
    run = as_run(manifest)
    for step in ("a", "b"):
        pod = run[step]
        assert pod["retryStrategy"]["expression"] == INTERRUPTION_EXPRESSION
        assert run[f"{step}-Attempts"]["retryStrategy"]["expression"] == APPLICATION_EXPRESSION
        assert pod["container"]["securityContext"] == {"allowPrivilegeEscalation": False,
                                                       "capabilities": {"drop": ["ALL"]}}
    # wf's metrics are counted by its node facts recorder (wf.controller.metrics), none by Argo: no template carries
    # any, so Argo neither merges them on each operation nor copies them into each pod.
    assert not any("metrics" in template for template in run.values())
    assert "metrics" not in manifest["spec"] and "metrics" not in manifest["spec"]["templateDefaults"]


def test_a_workflow_template_keeps_each_template_whole_for_template_ref(catalog: Catalog, make_job: Any) -> None:
    # Another workflow's templateRef runs a template under the caller's defaults and annotations, not these.
    manifest = compile_job(_job(make_job), catalog, kind="WorkflowTemplate")
    spec = manifest["spec"]
    assert "templateDefaults" not in spec
    templates = {t["name"]: t for t in spec["templates"]}
    assert "{{workflow.annotations" not in json.dumps(templates)
    assert templates["a"]["retryStrategy"]["expression"] == INTERRUPTION_EXPRESSION
    assert templates["a"]["container"]["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert not any("metrics" in template for template in templates.values())
