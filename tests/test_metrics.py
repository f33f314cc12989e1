"""Argo custom metrics of compiled workflows (wf.compile.metrics): valid for Argo, bounded labels, cost at the cost
table's rate, on the pod-level templates only, and a dashboard that reads only what is emitted or documented."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from wf.argo.defaults import as_run
from wf.compile import metrics
from wf.compile.schedulability import template_requests
from wf.compile.workflow import ATTEMPTS_SUFFIX, ENTRYPOINT, EXIT_HANDLER, ITEMS_SUFFIX, compile_job
from wf.controller.cost import NodeFacts, job_cost
from wf.controller.steps import Attempt, StepRow, WorkflowView
from wf.jobspec.job import load_job
from wf.model.catalog import Catalog
from wf.model.nodegroups import instance_allocatable, node_share

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
DASHBOARD = ROOT / "manifests" / "grafana-dashboard.json"
BY_NAME = {m.name: m for m in metrics.METRICS}
RATE = re.compile(r"^\{\{=asFloat\(duration\) \* asFloat\(inputs\.parameters\.([a-z]+)\)\}\}$")


def spec_of(manifest: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = manifest["spec"]
    return spec.get("workflowSpec", spec)


def templates(manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The templates as Argo runs them: the metrics of templateDefaults merged in, their inputs substituted."""
    return as_run(manifest)


def emitted(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """Every metric the manifest defines, workflow-level ones included."""
    found = list(spec_of(manifest)["metrics"]["prometheus"])
    for template in templates(manifest).values():
        found += (template.get("metrics") or {}).get("prometheus", [])
    return found


def by_name(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["name"]: m for m in template["metrics"]["prometheus"]}


def rate(template: dict[str, Any], metric: dict[str, Any]) -> float:
    """The per-second rate of a metric whose value is the run's duration times one of the template's inputs."""
    match = RATE.match(metric["counter"]["value"])
    assert match, metric["counter"]["value"]
    return float(next(p["value"] for p in template["inputs"]["parameters"] if p["name"] == match.group(1)))


@pytest.fixture(scope="module")
def compiled(catalog: Catalog) -> dict[str, dict[str, Any]]:
    return {e.stem: compile_job(load_job(e), catalog) for e in EXAMPLES}


@pytest.mark.parametrize("kind", ["Workflow", "WorkflowTemplate", "CronWorkflow"])
def test_every_kind_carries_metrics_valid_for_argo_v4(kind: str, catalog: Catalog, argo_schemas: Any) -> None:
    from wf import argo

    job = load_job(ROOT / "examples" / "data-prep.yaml")
    if kind == "CronWorkflow":
        job.spec.schedule = "0 2 * * *"
    manifest = compile_job(job, catalog, kind=kind)  # type: ignore[arg-type]
    assert spec_of(manifest)["metrics"]["prometheus"]
    assert any("metrics" in t for t in spec_of(manifest)["templates"])
    assert argo.validate(manifest) == []
    assert argo_schemas.json_errors("v4", manifest) == []


def test_the_schema_rejects_a_malformed_metric(compiled: dict[str, dict[str, Any]], argo_schemas: Any) -> None:
    # The validity above means something only if a broken metric fails.
    manifest = json.loads(json.dumps(compiled["data-prep"]))
    metric = spec_of(manifest)["metrics"]["prometheus"][0]
    metric["counter"]["valeu"] = metric["counter"].pop("value")
    assert argo_schemas.json_errors("v4", manifest)


def test_labels_are_the_bounded_set(compiled: dict[str, dict[str, Any]], catalog: Catalog) -> None:
    for example, manifest in compiled.items():
        job = load_job(ROOT / "examples" / f"{example}.yaml")
        steps = {s.name for _, s in job.spec.step_entries()}
        for metric in emitted(manifest):
            labels = {label["key"]: label["value"] for label in metric["labels"]}
            level = BY_NAME[metric["name"]].level
            assert tuple(labels) == (metrics.STEP_LABELS if level == "step" else metrics.WORKFLOW_LABELS)
            assert labels[metrics.JOB_LABEL] == job.name  # the job spec's, never the generated workflow name
            assert labels[metrics.TEAM_LABEL] in {t.name for t in catalog.queues.teams}  # type: ignore[union-attr]
            if level == "step":
                assert labels[metrics.STEP_LABEL] in steps
                assert labels[metrics.CLASS_LABEL] in catalog.class_names
                assert labels[metrics.CAPACITY_LABEL] in ("spot", "on-demand")
            else:
                assert labels[metrics.STATUS_LABEL] == "{{workflow.status}}"  # Succeeded, Failed or Error
            # Nothing a run makes: no item, pod, workflow name or attempt number.
            assert not any("{{" in v for k, v in labels.items() if k != metrics.STATUS_LABEL), labels


def test_no_metric_reads_the_attempt_index(compiled: dict[str, dict[str, Any]]) -> None:
    # Argo emits a template's metrics for each retried attempt too, in a scope without `retries`: a metric naming
    # it would fail there and mark the workflow with a MetricsError condition.
    for manifest in compiled.values():
        assert "retries" not in json.dumps(emitted(manifest))


def test_one_help_and_one_type_per_name(compiled: dict[str, dict[str, Any]]) -> None:
    # Argo refuses a second help text or type for a name, across every workflow of the cluster.
    for manifest in compiled.values():
        for metric in emitted(manifest):
            declared = BY_NAME[metric["name"]]
            assert metric["help"] == declared.help
            assert declared.kind in metric
            if declared.kind == "histogram":
                assert metric["histogram"]["buckets"] == list(metrics.DURATION_BUCKETS)


def test_names_follow_prometheus_conventions() -> None:
    for metric in metrics.METRICS:
        assert re.fullmatch(r"wf_[a-z_]+", metric.name), metric.name
        assert metric.name.endswith("_total") == (metric.kind == "counter"), metric.name
        assert metric.name.startswith(metrics.PREFIX)
    assert metrics.STEP_DURATION.name.endswith("_seconds")


def test_only_pod_level_templates_carry_metrics(compiled: dict[str, dict[str, Any]]) -> None:
    for manifest in compiled.values():
        for name, template in templates(manifest).items():
            wrapper = name in (ENTRYPOINT, EXIT_HANDLER) or name.endswith((ATTEMPTS_SUFFIX, ITEMS_SUFFIX))
            emits = bool((template.get("metrics") or {}).get("prometheus"))  # a DAG's empty list: none
            assert emits == (not wrapper), name
            assert emits == ("container" in template or "resource" in template), name


def test_fan_out_items_share_their_step(compiled: dict[str, dict[str, Any]]) -> None:
    data_prep = templates(compiled["data-prep"])
    assert "to-tfrecords" + ITEMS_SUFFIX in data_prep  # the example fans out, behind a capped loop
    labels = {m["labels"][2]["value"] for m in data_prep["to-tfrecords"]["metrics"]["prometheus"]}
    assert labels == {"to-tfrecords"}


def test_success_only_metrics_and_the_fallback_bound(compiled: dict[str, dict[str, Any]]) -> None:
    step = by_name(templates(compiled["bert-large-pretrain"])["download"])  # cpu, Spot, falls back after 2
    assert "when" not in step[metrics.STEP_ATTEMPTS.name]
    assert step[metrics.STEP_INTERRUPTIONS.name]["when"] == metrics.NOT_SUCCEEDED
    assert step[metrics.STEP_SPOT_FALLBACKS.name]["counter"]["value"] == "0.5"
    assert falls_back(step[metrics.STEP_SPOT_FALLBACKS.name])
    for metric in (metrics.STEP_DURATION, metrics.STEP_NODE_SECONDS, metrics.STEP_COST):
        assert step[metric.name]["when"] == metrics.RUN_SUCCEEDED
    assert step[metrics.STEP_DURATION.name]["histogram"]["value"] == "{{duration}}"
    # On-Demand, or Spot with no fallback: nothing falls back.
    on_demand = by_name(templates(compiled["extreme-classification-graviton"])["train"])
    assert not falls_back(on_demand[metrics.STEP_SPOT_FALLBACKS.name])  # its `when` never holds


def falls_back(metric: dict[str, Any]) -> bool:
    """Whether the fallback bound's `when` can hold (for some unsuccessful attempt): its number compared, as Argo's
    govaluate does once the template's input is substituted."""
    status, bound = metric["when"].split(" && ")
    assert status == metrics.NOT_SUCCEEDED
    number, operator, zero = bound.split()
    assert (operator, zero) == (">", "0")
    return float(number) > 0


def _cost_table(manifest: dict[str, Any], template: str, catalog: Catalog, instance: str, capacity: str
                ) -> tuple[float, float]:
    """Node-hours and estimate of the cost table for one attempt of `template` running one hour."""
    start = datetime(2026, 1, 1, tzinfo=UTC)
    attempt = Attempt("n1", "wf.step(0)", "Succeeded", "node-1", start, start + timedelta(hours=1), "", template,
                      False, capacity)
    row = StepRow(template, "n0", "Succeeded", None, capacity, attempt.started, attempt.finished, "", (attempt,))
    view = WorkflowView("wf", "ns", "Succeeded", "", attempt.started, attempt.finished, (row,))
    cost = job_cost(view, manifest, {"node-1": NodeFacts(instance, capacity)}, start + timedelta(hours=2), catalog)
    return cost.node_hours, cost.estimate_usd


@pytest.mark.parametrize(("example", "step"), [
    ("bert-large-pretrain", "download"),  # a pod on the cpu class, on Spot
    ("extreme-classification-graviton", "train"),
    ("bert-large-multinode", "pretrain-phase1"),  # an MPIJob: a launcher On-Demand and two workers on Spot
])
def test_cost_matches_the_cost_table(example: str, step: str, compiled: dict[str, dict[str, Any]],
                                     catalog: Catalog) -> None:
    manifest = compiled[example]
    template = templates(manifest)[step]
    found = by_name(template)
    labels = {label["key"]: label["value"] for label in found[metrics.STEP_COST.name]["labels"]}
    instance = catalog.compute_class(labels[metrics.CLASS_LABEL]).instances[0]
    node_hours, usd = _cost_table(manifest, step, catalog, instance.name, labels[metrics.CAPACITY_LABEL])
    assert node_hours > 0 and usd > 0
    # Node-seconds per second of run time is node-hours per hour; USD per second, an hour's estimate / 3600.
    assert rate(template, found[metrics.STEP_NODE_SECONDS.name]) == pytest.approx(node_hours, rel=1e-6)
    assert rate(template, found[metrics.STEP_COST.name]) * 3600 == pytest.approx(usd, rel=1e-6)


def test_a_known_class_is_priced_at_its_capacity(catalog: Catalog, make_job: Any) -> None:
    # One cpu core and 2Gi on the cpu class (r5.4xlarge first): its share of the node at the type's prices.
    r5 = catalog.compute_class("cpu").instances[0]
    for capacity, hourly in (("on-demand", r5.price_on_demand), ("spot", r5.spot_price())):
        manifest = compile_job(make_job(capacity=capacity), catalog)
        template = templates(manifest)["main"]
        share = node_share(template_requests(template), instance_allocatable(r5.name))
        assert hourly is not None and 0 < share < 1
        assert rate(template, by_name(template)[metrics.STEP_COST.name]) == pytest.approx(share * hourly / 3600,
                                                                                        rel=1e-6)


def test_the_multi_node_step_counts_every_replica(compiled: dict[str, dict[str, Any]]) -> None:
    template = templates(compiled["bert-large-multinode"])["pretrain-phase1"]
    assert "resource" in template
    # Two whole accelerator nodes and the launcher's share of a CPU node.
    assert 2 < rate(template, by_name(template)[metrics.STEP_NODE_SECONDS.name]) < 3


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
    if name in metrics.UPSTREAM_METRICS:
        return True
    ours = name.removeprefix(metrics.ARGO_PREFIX)
    if name.startswith(metrics.ARGO_PREFIX) and ours in BY_NAME:
        return True
    base = next((name.removesuffix(s) for s in HISTOGRAM_SERIES if name.endswith(s)), None)
    if base is None:
        return False
    if base in metrics.UPSTREAM_METRICS:
        return True
    declared = BY_NAME.get(base.removeprefix(metrics.ARGO_PREFIX))
    return base.startswith(metrics.ARGO_PREFIX) and declared is not None and declared.kind == "histogram"


def test_the_dashboard_reads_only_emitted_or_documented_metrics() -> None:
    queried = set().union(*(queried_metrics(e) for e in dashboard_exprs()))
    assert queried, "no queries found"
    unknown = {n for n in queried if not known(n)}
    assert not unknown, f"the dashboard queries metrics nobody emits: {sorted(unknown)}"
    # It shows every one of ours, and Kueue's queue wait.
    shown = {n.removeprefix(metrics.ARGO_PREFIX).removesuffix("_bucket") for n in queried}
    assert {m.name for m in metrics.METRICS} <= shown
    assert "kueue_admission_wait_time_seconds_bucket" in queried


def test_the_dashboard_check_can_fail() -> None:
    assert queried_metrics('sum by (team) (rate(argo_workflows_wf_step_bogus_total{team=~"$team"}[5m]))') == {
        "argo_workflows_wf_step_bogus_total"}
    assert not known("argo_workflows_wf_step_bogus_total")
    assert not known("wf_step_attempts_total")  # Argo's exporter prefixes every custom metric
