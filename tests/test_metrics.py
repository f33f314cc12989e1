"""wf's metrics (wf.controller.metrics): what an ended workflow adds to each, the same figures `wf get` shows (its
steps, interruptions, fallbacks and each attempt priced on its node), bounded labels, the exporter's text, and a
dashboard that reads only what is exported or documented."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from controller_fakes import fallback_run, nested_run
from wf.controller import metrics
from wf.controller.cost import NodeFacts
from wf.controller.report import Facts, run_of
from wf.core.constants import STEP_LABEL
from wf.model.catalog import load_catalog

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "manifests" / "grafana-dashboard.json"
BY_NAME = {m.name: m for m in metrics.METRICS}
CATALOG = load_catalog()
NOW = datetime(2026, 12, 1, tzinfo=UTC)
NODES = {"cpu-1": NodeFacts("r5.4xlarge", "on-demand"), "gaudi-1": NodeFacts("dl1.24xlarge", "spot"),
         "gaudi-2": NodeFacts("dl1.24xlarge", "spot"),
         "cpu-spot-1": NodeFacts("r5.4xlarge", "spot"), "cpu-spot-2": NodeFacts("r5.4xlarge", "spot"),
         "cpu-od-1": NodeFacts("r5.4xlarge", "on-demand")}


def observed(workflow: dict[str, Any], nodes: dict[str, NodeFacts] = NODES) -> tuple[Any, list[metrics.Observation]]:
    run = run_of(workflow, Facts(nodes), CATALOG, NOW)
    return run, list(metrics.observations(run.team, "bert", run.view, run.cost, workflow))


def of(found: list[metrics.Observation], metric: metrics.Metric, step: str | None = None) -> list[float]:
    return [o.value for o in found if o.metric == metric and (step is None or o.labels[2] == step)]


def test_an_ended_workflow_adds_what_wf_get_shows() -> None:
    # prep succeeded; train: interrupted, then the program failed, then an application retry succeeded.
    workflow = nested_run("bert-x")
    run, found = observed(workflow)
    by_step = {row.name: row for row in run.view.steps}
    assert of(found, metrics.STEP_ATTEMPTS, "train") == [len(by_step["train"].attempts)] == [3]
    assert of(found, metrics.STEP_INTERRUPTIONS, "train") == [by_step["train"].interruptions] == [1]
    assert of(found, metrics.STEP_INTERRUPTIONS, "prep") == []  # nothing counted is not a series
    # Each attempt priced on its node as `wf get` prices it, the failed and interrupted ones included.
    assert {step.step for step in run.cost.steps if step.node_hours and not step.unpriced_attempts} == {"prep", "train"}
    for step in run.cost.steps:
        assert of(found, metrics.STEP_NODE_SECONDS, step.step) == [pytest.approx(step.node_hours * 3600)]
        assert of(found, metrics.STEP_COST, step.step) == [pytest.approx(step.estimate_usd)]
    assert of(found, metrics.STEP_DURATION, "train") == [by_step["train"].seconds(NOW)] == [7200]
    assert of(found, metrics.WORKFLOW_COMPLETIONS) == [1]
    assert {o.labels for o in found if o.metric == metrics.WORKFLOW_COMPLETIONS} == {("-", "bert", "Succeeded")}


def test_a_failed_run_counts_its_attempts_and_cost_but_no_duration() -> None:
    _, found = observed(nested_run("bert-y", final="Failed"))
    assert of(found, metrics.STEP_ATTEMPTS, "train") == [3]
    assert of(found, metrics.STEP_DURATION, "train") == []
    assert of(found, metrics.STEP_NODE_SECONDS, "train") and of(found, metrics.STEP_COST, "train")
    assert [o.labels[2] for o in found if o.metric == metrics.WORKFLOW_COMPLETIONS] == ["Failed"]


def test_a_spot_fallback_is_one_run_moved_on_demand_and_an_unpriced_attempt_adds_no_cost() -> None:
    _, found = observed(fallback_run())
    assert of(found, metrics.STEP_SPOT_FALLBACKS, "shard") == [1]
    assert of(found, metrics.STEP_INTERRUPTIONS, "shard") == [2]
    _, unknown = observed(fallback_run(), nodes={})  # no node known: wf get prices nothing, nor do the metrics
    assert of(unknown, metrics.STEP_NODE_SECONDS) == [] and of(unknown, metrics.STEP_ATTEMPTS, "shard") == [3]


def test_labels_are_what_the_job_spec_names() -> None:
    # A fan-out item's row is named after its item; the metric's step is the job spec's, its template's label.
    workflow = fallback_run()
    workflow["status"]["nodes"]["r"]["displayName"] = "shard(0:a)"
    shard = next(t for t in workflow["spec"]["templates"] if t["name"] == "shard")
    shard["metadata"]["labels"] = {STEP_LABEL: "shard"}
    _, found = observed(workflow)
    for observation in found:
        labels = dict(zip(metrics.STEP_LABELS if observation.metric.level == "step" else metrics.WORKFLOW_LABELS,
                          observation.labels, strict=True))
        assert labels[metrics.JOB_LABEL] == "bert"  # the job spec's name, never the workflow's
        if observation.metric.level == "step":
            assert labels[metrics.STEP_LABEL] in {"shard", "prep", "train"}
            assert labels[metrics.CLASS_LABEL] in CATALOG.class_names
            assert labels[metrics.CAPACITY_LABEL] in ("spot", "on-demand")


def test_the_exporter_adds_up_and_writes_prometheus_text() -> None:
    exporter = metrics.Exporter()
    for name in ("bert-a", "bert-b"):
        workflow = nested_run(name)
        run = run_of(workflow, Facts(NODES), CATALOG, NOW)
        exporter.count(metrics.observations(run.team, "bert", run.view, run.cost, workflow))
    text = exporter.text()
    assert 'wf_step_attempts_total{capacity="spot",compute_class="gaudi",job_name="bert",step="train",team="-"} 6.0' \
        in text
    assert 'wf_workflow_completions_total{job_name="bert",status="Succeeded",team="-"} 2.0' in text
    assert 'wf_step_duration_seconds_bucket{capacity="spot",compute_class="gaudi",job_name="bert",le="7200.0",' \
           'step="train",team="-"} 2.0' in text
    assert "_created" not in text  # one series per label set, not two
    for metric in metrics.METRICS:
        assert f"# HELP {metric.name.removesuffix('_total')}" in text or f"# HELP {metric.name} " in text


def test_names_follow_prometheus_conventions() -> None:
    for metric in metrics.METRICS:
        assert re.fullmatch(r"wf_[a-z_]+", metric.name), metric.name
        assert metric.name.endswith("_total") == (metric.kind == "counter"), metric.name
        assert metric.name.startswith(metrics.PREFIX)
    assert metrics.STEP_DURATION.name.endswith("_seconds")


# --- the dashboard -----------------------------------------------------------------------------------------------

PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset", "and", "or",
                "unless", "le"}
HISTOGRAM_SERIES = ("_bucket", "_sum", "_count")


def queried_metrics(expr: str) -> set[str]:
    """The metric names a PromQL expression reads: identifiers left once label matchers, grouping clauses, ranges,
    strings and function calls are removed."""
    text = re.sub(r'"[^"]*"', "", expr)
    text = re.sub(r"\{[^}]*\}|\[[^\]]*\]", "", text)
    text = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", "", text)
    text = re.sub(r"\blabel_values\(([^,)]+),[^)]*\)", r"\1", text)  # Grafana's: a metric, then a label
    names = {m.group() for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text)
             if not text[m.end():].lstrip().startswith("(")}
    return {n for n in names if n not in PROMQL_WORDS}


def dashboard_exprs() -> list[str]:
    board = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    exprs += [v["query"]["query"] for v in board["templating"]["list"] if v.get("type") == "query"]
    return exprs


def known(name: str) -> bool:
    if name in metrics.UPSTREAM_METRICS or name in BY_NAME:
        return True
    base = next((name.removesuffix(s) for s in HISTOGRAM_SERIES if name.endswith(s)), None)
    if base is None:
        return False
    declared = BY_NAME.get(base)
    return base in metrics.UPSTREAM_METRICS or (declared is not None and declared.kind == "histogram")


def test_the_dashboard_reads_only_emitted_or_documented_metrics() -> None:
    queried = set().union(*(queried_metrics(e) for e in dashboard_exprs()))
    assert queried, "no queries found"
    unknown = {n for n in queried if not known(n)}
    assert not unknown, f"the dashboard queries metrics nobody emits: {sorted(unknown)}"
    # It shows every one of ours, and Kueue's queue wait.
    shown = {n.removesuffix("_bucket") for n in queried}
    assert {m.name for m in metrics.METRICS} <= shown
    assert "kueue_admission_wait_time_seconds_bucket" in queried


def test_the_dashboard_check_can_fail() -> None:
    assert queried_metrics('sum by (team) (rate(wf_step_bogus_total{team=~"$team"}[5m]))') == {"wf_step_bogus_total"}
    assert not known("wf_step_bogus_total")
    assert not known("argo_workflows_wf_step_attempts_total")  # Argo's custom metrics: wf's are the recorder's now
