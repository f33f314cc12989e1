"""wf's metrics: what each step cost, how often it ran and was interrupted, how long it took, and how each workflow
ended, for Prometheus and the platform's Grafana dashboard (manifests/grafana-dashboard.json).

The node facts recorder (wf.controller.node_recorder) counts them, once per workflow, when Argo has ended it: from
the view of its steps and the price of each attempt on its node that `wf get` and `wf report` read (the same
functions: wf.controller.report.run_of), so each figure is exact and agrees with theirs, an attempt whose node is
gone included. It serves them on its own /metrics (`Exporter`).

Argo's custom metrics could not say that: Argo computes them when it emits them, from what the compiled template
says (its class's first instance type, its first capacity), and cannot tell an interruption from the program's
failure in a run that failed. They also cost the platform: Argo merges a template's metrics into it on every
operation of its workflow and copies them into every pod it creates (benchmarks/README.md, "Step metrics out of
Argo"). So compiled workflows carry none.

A workflow is counted when it ends, not as each attempt ends: a step's attempts and interruptions show when its
workflow has ended. Counting once survives the recorder's restarts: a workflow is counted with the copy of its
record onto it (NODE_FACTS_ANNOTATION), which the recorder makes once, and one that holds the copy is not counted
again. A counter starts from 0 when the recorder starts (Prometheus' rate() and increase() read that as a reset).

Cardinality is bounded by what a job spec names, never by what a run makes: labels are the team, the job spec's
name, the step's name, its compute class and first capacity (fan-out items, attempts, pods and workflow names are
never labels), so a metric has at most teams x jobs x steps x classes x 2 series (a histogram x its buckets + 2).
Queue wait is Kueue's own: kueue_admission_wait_time_seconds per ClusterQueue, which is the team.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from wf.controller.cost import JobCost
from wf.controller.steps import TERMINAL_PHASES, StepRow, WorkflowView, templates_by_name
from wf.core.constants import STEP_LABEL as STEP_NAME_LABEL

PREFIX: Final = "wf_"  # every metric wf exports

TEAM_LABEL: Final = "team"  # the team whose namespace the workflow ran in (wf.controller.report.NO_TEAM: none)
JOB_LABEL: Final = "job_name"  # the job spec's metadata.name, never the workflow's; `job` is the scrape target's
STEP_LABEL: Final = "step"  # the step's name in the job spec (all its fan-out items and attempts alike)
CLASS_LABEL: Final = "compute_class"  # the step's compute class
CAPACITY_LABEL: Final = "capacity"  # the step's first attempt's capacity: spot or on-demand
STATUS_LABEL: Final = "status"  # how a workflow ended: Succeeded, Failed or Error (Argo's workflow phases)
STEP_LABELS: Final = (TEAM_LABEL, JOB_LABEL, STEP_LABEL, CLASS_LABEL, CAPACITY_LABEL)
WORKFLOW_LABELS: Final = (TEAM_LABEL, JOB_LABEL, STATUS_LABEL)
UNKNOWN: Final = "-"  # a label whose value the workflow does not say (a class of a template wf did not compile)

# Training steps run from minutes to days: seconds from one minute to three days.
DURATION_BUCKETS: Final = (60, 300, 900, 1800, 3600, 7200, 14400, 28800, 86400, 259200)


@dataclass(frozen=True)
class Metric:
    name: str
    kind: Literal["counter", "histogram"]
    help: str
    level: Literal["step", "workflow"]


STEP_ATTEMPTS: Final = Metric(
    "wf_step_attempts_total", "counter",
    "Attempts of a step (pods; for a multi-node step MPIJobs), interrupted ones included", "step")
STEP_INTERRUPTIONS: Final = Metric(
    "wf_step_interruptions_total", "counter",
    "Attempts of a step that an interruption ended (its node reclaimed, drained or gone), as wf get tells them",
    "step")
STEP_SPOT_FALLBACKS: Final = Metric(
    "wf_step_spot_fallbacks_total", "counter",
    "Runs of a Spot step that its fallback moved On-Demand after interruptions", "step")
STEP_DURATION: Final = Metric(
    "wf_step_duration_seconds", "histogram",
    "Wall time of a step's successful runs, from the first attempt's creation (queue wait and interrupted "
    "attempts included) to success", "step")
STEP_NODE_SECONDS: Final = Metric(
    "wf_step_node_seconds_total", "counter",
    "Node-seconds a step's attempts reserved: each attempt's run time x the share of its node its pods request",
    "step")
STEP_COST: Final = Metric(
    "wf_step_estimated_cost_usd_total", "counter",
    "Estimated USD of a step's attempts: each attempt's node-seconds at the hourly price of its node's type and "
    "capacity (the Spot estimate on Spot), as wf get prices them", "step")
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


@dataclass(frozen=True)
class Observation:
    """One figure of one ended workflow for one metric and its labels (in the metric's label order)."""

    metric: Metric
    labels: tuple[str, ...]
    value: float


def observations(team: str, job: str, view: WorkflowView, cost: JobCost, workflow: Mapping[str, Any]
                 ) -> Iterator[Observation]:
    """What an ended workflow adds to each metric: its steps' rows (`view`, refined by its facts) with their cost
    (`cost`, one step per row, in the same order: wf.controller.cost.job_cost), as `wf get` shows them."""
    templates = templates_by_name(dict(workflow))
    for row, priced in zip(view.steps, cost.steps, strict=True):
        labels = (team, job, _step_name(row, templates), row.compute_class or UNKNOWN, row.capacity or UNKNOWN)
        if row.attempts:
            yield Observation(STEP_ATTEMPTS, labels, len(row.attempts))
        if row.interruptions:
            yield Observation(STEP_INTERRUPTIONS, labels, row.interruptions)
        if fell_back(row):
            yield Observation(STEP_SPOT_FALLBACKS, labels, 1)
        if row.phase == "Succeeded" and row.attempts and view.finished is not None:
            yield Observation(STEP_DURATION, labels, row.seconds(view.finished))
        if priced.node_hours:
            yield Observation(STEP_NODE_SECONDS, labels, priced.node_hours * 3600)
            yield Observation(STEP_COST, labels, priced.estimate_usd)
    if view.phase in TERMINAL_PHASES:
        yield Observation(WORKFLOW_COMPLETIONS, (team, job, view.phase), 1)


def fell_back(row: StepRow) -> bool:
    """Some attempt of the step ran On-Demand after its Spot attempts were interrupted (Spot fallback)."""
    return row.capacity == "spot" and any(a.capacity not in (None, "spot") for a in row.attempts)


def _step_name(row: StepRow, templates: Mapping[str, Mapping[str, Any]]) -> str:
    """The job spec's name of the step a row is a run of (a fan-out item's row is named after its item): its
    pod-level template's label."""
    template = templates.get(row.attempts[-1].template if row.attempts else "") or {}
    return ((template.get("metadata") or {}).get("labels") or {}).get(STEP_NAME_LABEL) or row.name


class Exporter:
    """The metrics of every workflow counted so far, for Prometheus: `count` adds a workflow's observations, `serve`
    answers GET /metrics on an address of its own."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics

        disable_created_metrics()  # a `_created` series per label set doubles the series for nothing wf reads
        self.registry = CollectorRegistry(auto_describe=True)
        self._series: dict[str, Any] = {}
        for metric in METRICS:
            labels = STEP_LABELS if metric.level == "step" else WORKFLOW_LABELS
            if metric.kind == "histogram":
                self._series[metric.name] = Histogram(metric.name, metric.help, labels, registry=self.registry,
                                                      buckets=DURATION_BUCKETS)
            else:  # the client adds `_total` back to a counter's name
                self._series[metric.name] = Counter(metric.name.removesuffix("_total"), metric.help, labels,
                                                    registry=self.registry)

    def count(self, observed: Iterator[Observation]) -> None:
        for observation in observed:
            series = self._series[observation.metric.name].labels(*observation.labels)
            if observation.metric.kind == "histogram":
                series.observe(observation.value)
            else:
                series.inc(observation.value)

    def serve(self, address: str, port: int) -> int:
        """Serve /metrics on address:port (0: any free port) from a thread; the port it listens on."""
        from prometheus_client import start_http_server

        server, _ = start_http_server(port, address, registry=self.registry)
        return int(server.server_address[1])

    def text(self) -> str:
        """What /metrics answers, in Prometheus' text format."""
        from prometheus_client import generate_latest

        return generate_latest(self.registry).decode()
