"""Argo custom metrics of a compiled workflow: what each step cost, how often it ran and was interrupted, how long
it took, and how the workflow ended, for Prometheus and the platform's Grafana dashboard
(manifests/grafana-dashboard.json).

Argo's controller emits them (template- and workflow-level `metrics.prometheus`, argo-workflows v4.0.7
workflow/controller/operator.go) and its Prometheus exporter prefixes each name with `argo_workflows_`
(ARGO_PREFIX) and appends nothing (no `_total`, no unit). Only a step's pod-level template carries metrics: the
pod template, or a multi-node step's MPIJob resource template; the DAGs and wrappers carry none. Their definitions
are written once per workflow (its templateDefaults), and what differs per step is the template's inputs
(shared_step_metrics, step_metric_inputs): the same metrics, emitted alike, for a fifth of the bytes.

When Argo emits a template's metrics, and what a `when` can tell apart, decides what each metric can say. The
template's retryStrategy retries interruptions only (wf.compile.interruptions), so Argo makes a Retry node per
run of the step (per fan-out item, per application retry) and emits the metrics
  * once for each attempt it retries, in that attempt's scope: an interruption within the budget, `{{status}}`
    Failed or Error, `{{duration}}` the attempt's;
  * once when the run ends, in the Retry node's scope: `{{status}}` the run's, `{{duration}}` from its first
    attempt's creation (queue wait, interrupted attempts and backoffs included) to its end.
Only the second scope holds `{{retries}}`, and Argo substitutes the whole metric, `when` included, before it
reads `when`: a metric naming `retries` fails in the first scope and marks the workflow with a MetricsError
condition. So no metric reads the attempt's index, and a `when` tells the two scopes apart only by a success
(only a run ends Succeeded). Hence, per metric (METRICS documents each in its `help`):
  * attempts: exact, one per emission, whatever its scope;
  * interruptions: every attempt that did not succeed: exact for runs that succeed, an upper bound for failed
    ones (their last attempt counts, an interruption past the budget or the program's own failure);
  * Spot fallbacks: the compiled structure has no fallback template to count (the attempt's capacity is an
    expression over `retries`); a run moves On-Demand at its Nth interruption, so interruptions / N bounds them
    from above;
  * duration, node-seconds and cost: runs that succeeded, over their whole wall time (queue wait and interrupted
    attempts included, failed runs left out), at the step's first capacity (a fallen-back attempt is priced as
    the step's Spot), for the class's first instance type. `wf get` prices each attempt on its node exactly.

Cardinality is bounded by what a job spec names, never by what a run makes: labels are the team, the job spec's
name, the step's name, its compute class and capacity (fan-out items, attempts, pods and workflow names are never
labels), so a metric has at most teams x jobs x steps x classes x 2 series (a histogram x its buckets + 3).
Queue wait is Kueue's own: kueue_admission_wait_time_seconds per ClusterQueue, which is the team.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache
from typing import Any, Final, Literal

from wf.compile.kinds.mpijob import replica_templates
from wf.compile.placement import Placement
from wf.compile.readback import CompiledPlacement, read_placement
from wf.compile.schedulability import pod_requests, template_requests
from wf.model.catalog import Catalog
from wf.model.nodegroups import instance_allocatable, node_share

ARGO_PREFIX: Final = "argo_workflows_"  # what Argo's Prometheus exporter puts before a custom metric's name
PREFIX: Final = "wf_"  # every metric wf's compiled workflows emit

TEAM_LABEL: Final = "team"  # the team whose queue the job runs in ("" outside every team)
JOB_LABEL: Final = "job_name"  # the job spec's metadata.name, never the workflow's; `job` is the scrape target's
STEP_LABEL: Final = "step"  # the step's name in the job spec (all its fan-out items and attempts alike)
CLASS_LABEL: Final = "compute_class"  # the step's compute class
CAPACITY_LABEL: Final = "capacity"  # the step's first attempt's capacity: spot or on-demand
STATUS_LABEL: Final = "status"  # how a workflow ended: Succeeded, Failed or Error (Argo's workflow phases)
STEP_LABELS: Final = (TEAM_LABEL, JOB_LABEL, STEP_LABEL, CLASS_LABEL, CAPACITY_LABEL)
WORKFLOW_LABELS: Final = (TEAM_LABEL, JOB_LABEL, STATUS_LABEL)

# Argo's metric scopes: a run's end (the Retry node) is the only one that can say Succeeded.
RUN_SUCCEEDED: Final = "{{status}} == Succeeded"
NOT_SUCCEEDED: Final = "{{status}} != Succeeded"
# Training steps run from minutes to days: seconds from one minute to three days.
DURATION_BUCKETS: Final = (60, 300, 900, 1800, 3600, 7200, 14400, 28800, 86400, 259200)


@dataclass(frozen=True)
class Metric:
    name: str
    kind: Literal["counter", "histogram"]
    help: str  # Argo requires one help text per name across every workflow of the cluster
    level: Literal["step", "workflow"]


STEP_ATTEMPTS: Final = Metric(
    "wf_step_attempts_total", "counter",
    "Attempts of a step (pods; for a multi-node step MPIJobs), interrupted ones included", "step")
STEP_INTERRUPTIONS: Final = Metric(
    "wf_step_interruptions_total", "counter",
    "Attempts of a step that did not succeed: every interruption Argo retried, plus the last attempt of a failed "
    "run (an upper bound)", "step")
STEP_SPOT_FALLBACKS: Final = Metric(
    "wf_step_spot_fallbacks_total", "counter",
    "Upper bound on a Spot step's runs moved On-Demand by its fallback: its unsuccessful attempts over the "
    "interruptions after which it falls back", "step")
STEP_DURATION: Final = Metric(
    "wf_step_duration_seconds", "histogram",
    "Wall time of a step's successful runs, from the first attempt's creation (queue wait and interrupted "
    "attempts included) to success", "step")
STEP_NODE_SECONDS: Final = Metric(
    "wf_step_node_seconds_total", "counter",
    "Node-seconds a step's successful runs reserved: wall time x the share of the class's node its pods request",
    "step")
STEP_COST: Final = Metric(
    "wf_step_estimated_cost_usd_total", "counter",
    "Estimated USD of a step's successful runs: node-seconds at the hourly price of the step's capacity "
    "(the Spot estimate on Spot), as wf's cost table prices them", "step")
WORKFLOW_COMPLETIONS: Final = Metric(
    "wf_workflow_completions_total", "counter", "Workflows of a job that ended, by how they ended", "workflow")
METRICS: Final = (STEP_ATTEMPTS, STEP_INTERRUPTIONS, STEP_SPOT_FALLBACKS, STEP_DURATION, STEP_NODE_SECONDS,
                  STEP_COST, WORKFLOW_COMPLETIONS)
KUEUE_ADMISSION_WAIT: Final = "kueue_admission_wait_time_seconds"  # Kueue's histogram of a workload's queue wait
KUEUE_QUEUE_LABEL: Final = "cluster_queue"  # its label naming the ClusterQueue, which is wf's team
# What the platform's dashboard reads beside wf's own metrics, with where upstream documents it.
UPSTREAM_METRICS: Final = {
    KUEUE_ADMISSION_WAIT: "Kueue v0.17 pkg/metrics: histogram per cluster_queue (wf's team), "
                          "from a workload's creation or requeue to its admission",
    "argo_workflows_gauge": "Argo v4 docs/metrics.md `gauge`: workflows in the cluster per phase",
    "argo_workflows_pods_gauge": "Argo v4 docs/metrics.md `pods_gauge`: workflow pods in the cluster per phase",
}


# Every step's metrics are written once, in the workflow's templateDefaults (Argo merges them into each template
# that has no `metrics` of its own, wf.compile.workflow gives its DAGs an empty list), and read what differs per
# step from the pod-level template's inputs, which Argo substitutes before it emits them. Input names have no '_'
# and do not start with 'item', so they never collide with a reference's input (Reference.input_name).
STEP_INPUT: Final = "wfstep"  # the step's name
CLASS_INPUT: Final = "wfclass"  # its compute class
CAPACITY_INPUT: Final = "wfcapacity"  # its first attempt's capacity
FALLBACK_INPUT: Final = "wffallback"  # what one unsuccessful attempt adds to the Spot fallback bound; 0: none
NODES_INPUT: Final = "wfnodes"  # node-seconds one second of an attempt reserves
USD_INPUT: Final = "wfusd"  # estimated USD one second of an attempt costs
METRIC_INPUTS: Final = (STEP_INPUT, CLASS_INPUT, CAPACITY_INPUT, FALLBACK_INPUT, NODES_INPUT, USD_INPUT)
# The Spot fallback bound counts only where the step falls back (a counter incremented by 0 would still be a series).
FALLS_BACK: Final = NOT_SUCCEEDED + " && {{inputs.parameters." + FALLBACK_INPUT + "}} > 0"


def shared_step_metrics(*, team: str, job: str) -> dict[str, Any]:
    """The `metrics` every pod-level template of the job's workflow gets from its templateDefaults."""
    values = list(zip(STEP_LABELS, (team, job, *(_input(n) for n in (STEP_INPUT, CLASS_INPUT, CAPACITY_INPUT))),
                      strict=True))
    return {"prometheus": [
        _metric(STEP_ATTEMPTS, values, "1"),
        _metric(STEP_INTERRUPTIONS, values, "1", NOT_SUCCEEDED),
        _metric(STEP_SPOT_FALLBACKS, values, _input(FALLBACK_INPUT), FALLS_BACK),
        _metric(STEP_DURATION, values, "{{duration}}", RUN_SUCCEEDED),
        _metric(STEP_NODE_SECONDS, values, _per_second(NODES_INPUT), RUN_SUCCEEDED),
        _metric(STEP_COST, values, _per_second(USD_INPUT), RUN_SUCCEEDED),
    ]}


def step_metric_inputs(template: dict[str, Any], *, step: str, placement: Placement, catalog: Catalog
                       ) -> list[dict[str, str]]:
    """The input parameters of a step's pod-level template (`template`, as its kind rendered it) that its shared
    metrics read."""
    if "resource" in template:  # a multi-node step: its MPIJob's replicas, each at its own placement
        node_rate, usd_rate = reserved_rates(template, catalog)
    else:  # the template's own pod, placed by `placement`: as reserved_rates reads it back, once per distinct pod
        instance = catalog.compute_class(placement.compute_class).instances[0]
        node_rate, usd_rate = _pod_rates(instance.name, instance.price(placement.capacity),
                                         tuple(placement.requests.items()), tuple(placement.limits.items()))
    after = placement.on_demand_after
    fallback = _decimal(1 / after) if after is not None and after <= placement.interruption_retries else "0"
    values = (step, placement.compute_class, placement.capacity, fallback, _decimal(node_rate), _decimal(usd_rate))
    return [{"name": name, "value": value} for name, value in zip(METRIC_INPUTS, values, strict=True)]


def workflow_metrics(*, team: str, job: str) -> dict[str, Any]:
    """The workflow-level `metrics`: emitted once, when the workflow ends."""
    values = [(TEAM_LABEL, team), (JOB_LABEL, job), (STATUS_LABEL, "{{workflow.status}}")]
    return {"prometheus": [_metric(WORKFLOW_COMPLETIONS, values, "1")]}


def reserved_rates(template: dict[str, Any], catalog: Catalog) -> tuple[float, float]:
    """What one second of a step's attempt reserves: node-seconds and estimated USD, summed over its pods (a
    multi-node step's launcher and workers, each at its own class and capacity), as the cost table charges them."""
    nodes = usd = 0.0
    for count, requests, placed in _pods(template):
        if placed.compute_class is None:
            continue
        instance = catalog.compute_class(placed.compute_class).instances[0]
        share = count * node_share(requests, instance_allocatable(instance.name))
        nodes += share
        usd += share * instance.price(placed.capacity) / 3600
    return nodes, usd


@lru_cache(maxsize=1024)  # a big job's steps ask for a few distinct pods
def _pod_rates(instance: str, hourly: float, requests: tuple[tuple[str, str], ...],
               limits: tuple[tuple[str, str], ...]) -> tuple[float, float]:
    """What one second of a one-pod attempt asking for `requests` and `limits` reserves on `instance` (its price
    `hourly`): node-seconds and estimated USD, as reserved_rates reckons them."""
    pod_requests_, _ = pod_requests([{"resources": {"requests": dict(requests), "limits": dict(limits)}}], [])
    share = node_share(pod_requests_, instance_allocatable(instance))
    return share, share * hourly / 3600


def _pods(template: dict[str, Any]) -> Iterator[tuple[int, dict[str, Decimal], CompiledPlacement]]:
    """The pods one attempt of the template runs, with their count, requests and placement: an MPIJob's replicas
    (Argo's resource pod only waits), else the template's own pod."""
    replicas = replica_templates(template)
    if not replicas:
        yield 1, template_requests(template), read_placement(template)
        return
    for _, count, pod in replicas:
        spec = pod.get("spec") or {}
        requests, _ = pod_requests(list(spec.get("containers") or []), list(spec.get("initContainers") or []))
        yield count, requests, read_placement(pod)


def _metric(metric: Metric, labels: list[tuple[str, str]], value: str, when: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"name": metric.name, "help": metric.help,
                           "labels": [{"key": k, "value": v} for k, v in labels]}
    if when is not None:
        out["when"] = when
    if metric.kind == "histogram":
        out["histogram"] = {"value": value, "buckets": list(DURATION_BUCKETS)}
    else:
        out["counter"] = {"value": value}
    return out


def _input(name: str) -> str:
    return "{{inputs.parameters." + name + "}}"


def _per_second(rate_input: str) -> str:
    """An Argo expression: the run's `duration` (seconds, a string in Argo's metric scope) times the rate in the
    template's input `rate_input`."""
    return "{{=asFloat(duration) * asFloat(inputs.parameters." + rate_input + ")}}"


def _decimal(number: float) -> str:
    """`number` to 9 significant digits, written out as a plain decimal (no exponent)."""
    return format(Decimal(f"{number:.9g}").normalize(), "f")
