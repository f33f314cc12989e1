"""`wf report`: what the platform did in a window, per team and compute class (pure: workflows and facts in,
dataclasses out; the command reads the cluster, wf.cli.report_page draws the pictures from the report's
`Digest`, in a process of its own).

Every figure comes from the functions `wf get` uses: the steps and attempts of `workflow_view` refined by
`with_facts` (checkpoint ledgers, nodes that stayed), and each workflow's `job_cost`, attributed to compute
classes by the step it priced. So the report's totals are the sum of `wf get`'s costs over the same workflows.

A workflow belongs to the window it started in (or, not started yet, was created in) and counts whole: started
within the window and priced up to now, all it ran lies inside the window. Its team is the one whose namespace
it runs in (the catalog's `queues:`), as Kueue's LocalQueues decide.

A Prometheus that scraped Kueue and wf's node facts recorder, when there is one, is read by `read_prometheus` (the
module's one network call, its GET injectable): each team's queue waits then come from Kueue's histogram, and the
counters of wf's metrics (wf.controller.metrics) stand beside the cluster's figures.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from wf.compile.node_facts import NodeRecord, read_record
from wf.controller.checkpoints import Ledger
from wf.controller.client import http_address
from wf.controller.cost import JobCost, NodeFacts, job_cost
from wf.controller.metrics import (
    KUEUE_ADMISSION_WAIT,
    KUEUE_QUEUE_LABEL,
    STATUS_LABEL,
    STEP_ATTEMPTS,
    STEP_INTERRUPTIONS,
    TEAM_LABEL,
    WORKFLOW_COMPLETIONS,
    fell_back,
)
from wf.controller.queue import Workload
from wf.controller.steps import (
    FAILED_PHASES,
    Attempt,
    WorkflowView,
    pod_name,
    with_facts,
    workflow_view,
)
from wf.core.errors import ClusterError, InputError
from wf.core.units import parse_duration, parse_time
from wf.model.catalog import Catalog
from wf.model.quotas import flavor_quotas

Key = tuple[str, str]  # (namespace, name)
OUTCOMES = ("Succeeded", "Failed", "Error", "Running")  # a workflow not ended yet (or not started) is Running
NO_TEAM = "-"  # a namespace no team of the catalog owns
UNKNOWN_CLASS = "-"  # a step whose template names no compute class
BINS = 96  # points of the usage-over-time series (15 minutes each over a day)
REPORT_KIND = "WorkflowReport"
REPORT_VERSION = 1  # of the -o json document: bump when a key changes meaning or goes away
PROMETHEUS_TIMEOUT = 10.0  # seconds to connect to Prometheus and for each answer


@dataclass(frozen=True)
class Window:
    since: str  # as the user wrote it: "24h"
    start: datetime
    end: datetime  # now

    @property
    def hours(self) -> float:
        return (self.end - self.start).total_seconds() / 3600


def window(since: str, now: datetime) -> Window:
    """The window ending now that `--since` names; InputError (exit 2) when it is not a duration."""
    try:
        seconds = parse_duration(since)
    except ValueError as exc:
        raise InputError(f"--since: {exc}") from None
    return Window(since, now - timedelta(seconds=seconds), now)


def in_window(workflow: dict[str, Any], span: Window) -> bool:
    """Started in the window, or created in it and not started yet."""
    status = workflow.get("status") or {}
    began = parse_time(status.get("startedAt")) or parse_time((workflow.get("metadata") or {}).get("creationTimestamp"))
    return began is not None and span.start <= began <= span.end


@dataclass(frozen=True)
class Facts:
    """What the cluster says beside the workflows: the same facts `wf get` reads (wf.controller.watch.Insight)."""

    nodes: dict[str, NodeFacts] = field(default_factory=dict)  # node name -> facts, for cost
    # A workflow's ledger (namespace, name -> records by pod, the node record), asked as each workflow is read.
    ledger: Callable[[str, str], Ledger] = lambda _namespace, _name: Ledger()
    workloads: Sequence[Workload] | None = None  # Kueue's; None: not readable (no Kueue, or not ours to list)


@dataclass(frozen=True)
class Run:
    """One workflow of the window, as `wf get` sees it."""

    namespace: str
    name: str
    team: str
    view: WorkflowView
    cost: JobCost

    @property
    def outcome(self) -> str:
        return self.view.phase if self.view.phase in OUTCOMES[:3] else "Running"


@dataclass(frozen=True)
class Usage:
    """One team's figures on one compute class ("*": every class; team "*": every team)."""

    team: str
    compute_class: str
    workflows: Mapping[str, int]  # by outcome; a workflow counts on every class it ran a step on
    node_hours: float
    on_demand_usd: float
    estimate_usd: float  # Spot estimate for Spot attempts, On-Demand otherwise (wf.controller.cost)
    redone_node_hours: float  # of the above, what interruptions made run again
    redone_usd: float
    card_hours: float | None  # accelerator classes only
    quota_cards: float | None  # the team's nominal quota of the class's cards (every capacity); None: none
    queue_waits: int  # pods whose Kueue admission wait is known
    queue_wait_p50: float | None  # seconds
    queue_wait_p95: float | None
    interruptions: int  # attempts ended by an interruption
    fallbacks: int  # steps that fell back from Spot to On-Demand
    window_hours: float

    @property
    def quota_share(self) -> float | None:
        """Card-hours over what the quota holds in the window (1.0: the quota used all the time)."""
        if self.card_hours is None or not self.quota_cards or not self.window_hours:
            return None
        return self.card_hours / (self.quota_cards * self.window_hours)

    def to_json(self) -> dict[str, Any]:
        return {
            "team": self.team, "class": self.compute_class,
            "workflows": {outcome: self.workflows.get(outcome, 0) for outcome in OUTCOMES},
            "nodeHours": self.node_hours, "onDemandUsd": self.on_demand_usd, "estimateUsd": self.estimate_usd,
            "redoneNodeHours": self.redone_node_hours, "redoneUsd": self.redone_usd,
            "cardHours": self.card_hours, "quotaCards": self.quota_cards, "quotaShare": self.quota_share,
            "queueWait": {"count": self.queue_waits, "p50Seconds": self.queue_wait_p50,
                          "p95Seconds": self.queue_wait_p95},
            "interruptions": self.interruptions, "fallbacks": self.fallbacks,
        }


@dataclass(frozen=True)
class Series:
    """A team's use of a class over the window: cards (accelerator classes) or nodes, averaged per bin."""

    team: str
    compute_class: str
    unit: str  # "cards" | "nodes"
    times: tuple[datetime, ...]  # each bin's start
    values: tuple[float, ...]
    quota: float | None  # in the same unit; None: no quota to draw


@dataclass(frozen=True)
class Interruption:
    at: datetime  # when the interrupted attempt ended
    team: str
    compute_class: str
    capacity: str


@dataclass(frozen=True)
class Report:
    window: Window
    runs: tuple[Run, ...]  # oldest first
    lines: tuple[Usage, ...]  # per team x class, then each team's total, then the total
    usage: tuple[Series, ...]
    interruptions: tuple[Interruption, ...]
    assumptions: tuple[str, ...]
    prometheus: PrometheusReading | None = None  # what a Prometheus says of the window, when one was asked

    @property
    def total(self) -> Usage:
        return self.lines[-1]

    @property
    def comparison(self) -> str | None:
        """Prometheus' counts of the window beside the cluster's, in one line (None: no Prometheus was asked)."""
        if self.prometheus is None:
            return None
        counted = self.prometheus.count("*")
        ended = {outcome: n for outcome in OUTCOMES[:3] if (n := self.total.workflows.get(outcome, 0))}
        attempts = sum(len(row.attempts) for run in self.runs for row in run.view.steps)
        return (f"Prometheus at {self.prometheus.url}: {counted.attempts:.0f} attempts, "
                f"{counted.interruptions:.0f} interruptions, {_ended(counted.completions)} in the window; "
                f"the cluster's workflows of the window: {attempts} attempts, {self.total.interruptions} "
                f"interruptions, {_ended(ended)}")

    def to_json(self) -> dict[str, Any]:
        """The -o json document (a contract: REPORT_VERSION says when its keys change)."""
        return {
            "kind": REPORT_KIND, "version": REPORT_VERSION,
            "window": {"since": self.window.since, "start": _stamp(self.window.start),
                       "end": _stamp(self.window.end)},
            "usage": [{**line.to_json(), "prometheus": self.prometheus.to_json(line.team)
                       if self.prometheus is not None and line.compute_class == "*" else None}
                      for line in self.lines],
            "workflows": [{"namespace": r.namespace, "name": r.name, "team": r.team, "phase": r.view.phase,
                           "started": _stamp(r.view.started), "finished": _stamp(r.view.finished),
                           "nodeHours": r.cost.node_hours, "onDemandUsd": r.cost.on_demand_usd,
                           "estimateUsd": r.cost.estimate_usd, "redoneNodeHours": r.cost.redone_node_hours,
                           "redoneUsd": r.cost.redone_usd, "interruptions": r.view.interruptions,
                           # A figure above that leaves out attempts whose node nothing recorded is a lower bound.
                           "unpricedAttempts": r.cost.unpriced_attempts}
                          for r in self.runs],
            "assumptions": list(self.assumptions),
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2) + "\n"

    def digest(self) -> Digest:
        """What the page shows: the report less each run's view and cost, but for its attempts' bars."""
        runs = tuple(Lanes(r.team, r.name, tuple(
            StepBars(row.started, row.finished, tuple(Bar(a.started, a.finished, a.outcome, a.capacity or row.capacity)
                                                      for a in row.attempts))
            for row in r.view.steps)) for r in self.runs)
        return Digest(self.window, self.lines, self.usage, self.interruptions, self.assumptions, runs,
                      self.comparison)


@dataclass(frozen=True)
class Bar:
    """An attempt as the timeline draws it."""

    started: datetime | None
    finished: datetime | None  # None: still running
    outcome: str  # Attempt.outcome
    capacity: str | None  # the attempt's, else its step's


@dataclass(frozen=True)
class StepBars:
    started: datetime | None
    finished: datetime | None
    attempts: tuple[Bar, ...]


@dataclass(frozen=True)
class Lanes:
    """A run's row of the timeline."""

    team: str
    name: str
    steps: tuple[StepBars, ...]  # in workflow_view's order (by start)


@dataclass(frozen=True)
class Digest:
    """The report as its page draws it: small (about 2 MB of JSON for 250 workflows of 32 steps) and plain data,
    so that `wf report -o html` hands it as JSON to a drawing process that never loads the Kubernetes client."""

    window: Window
    lines: tuple[Usage, ...]
    usage: tuple[Series, ...]
    interruptions: tuple[Interruption, ...]
    assumptions: tuple[str, ...]
    runs: tuple[Lanes, ...]  # oldest first
    comparison: str | None  # Report.comparison

    @property
    def total(self) -> Usage:
        return self.lines[-1]

    def dumps(self) -> str:
        return json.dumps(asdict(self), default=datetime.isoformat)  # datetimes in full, to read back the same

    @classmethod
    def loads(cls, text: str) -> Digest:
        """The digest from `dumps`; ValueError, KeyError or TypeError when the text is not one."""
        data = json.loads(text)
        at = datetime.fromisoformat

        def when(value: str | None) -> datetime | None:
            return at(value) if value is not None else None

        def bars(step: dict[str, Any]) -> StepBars:
            return StepBars(when(step["started"]), when(step["finished"]), tuple(
                Bar(when(a["started"]), when(a["finished"]), a["outcome"], a["capacity"]) for a in step["attempts"]))

        span = data["window"]
        return cls(Window(span["since"], at(span["start"]), at(span["end"])),
                   tuple(Usage(**line) for line in data["lines"]),
                   tuple(Series(**{**s, "times": tuple(map(at, s["times"])), "values": tuple(s["values"])})
                         for s in data["usage"]),
                   tuple(Interruption(**{**i, "at": at(i["at"])}) for i in data["interruptions"]),
                   tuple(data["assumptions"]),
                   tuple(Lanes(r["team"], r["name"], tuple(map(bars, r["steps"]))) for r in data["runs"]),
                   data["comparison"])


def _ended(by_status: Mapping[str, float]) -> str:
    """`9 workflows ended (8 Succeeded, 1 Failed)`."""
    order = sorted(by_status, key=lambda s: (OUTCOMES.index(s) if s in OUTCOMES else len(OUTCOMES), s))
    parts = ", ".join(f"{by_status[status]:.0f} {status}" for status in order if round(by_status[status]))
    return f"{sum(by_status.values()):.0f} workflows ended" + (f" ({parts})" if parts else "")


def _stamp(moment: datetime | None) -> str | None:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if moment else None


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100), interpolated between the closest ranks; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def team_of(catalog: Catalog, namespace: str) -> str:
    team = catalog.queues.team_of_namespace(namespace) if catalog.queues else None
    return team.name if team else NO_TEAM


def _cards(catalog: Catalog, compute_class: str) -> int | None:
    """Cards per node of an accelerator class; None for other classes (or one the catalog does not know)."""
    if compute_class not in catalog.class_names:
        return None
    accelerator = catalog.compute_class(compute_class).accelerator
    return accelerator.count if accelerator else None


def _quota_cards(catalog: Catalog, team: str, compute_class: str) -> float | None:
    if catalog.queues is None or team == NO_TEAM or _cards(catalog, compute_class) is None:
        return None
    cards = sum((q.nominal["accelerators"] for q in flavor_quotas(catalog, catalog.queues.team(team))
                 if q.compute_class == compute_class), Decimal(0))
    return float(cards) if cards else None


@dataclass
class _Tally:
    """Sums for one Usage line while the runs are read."""

    workflows: set[Key] = field(default_factory=set)
    outcomes: Counter[str] = field(default_factory=Counter)
    node_hours: float = 0.0
    on_demand_usd: float = 0.0
    estimate_usd: float = 0.0
    redone_node_hours: float = 0.0
    redone_usd: float = 0.0
    card_hours: float = 0.0
    accelerated: bool = False
    waits: list[float] = field(default_factory=list)
    interruptions: int = 0
    fallbacks: int = 0

    def count(self, run: Run) -> None:
        if (key := (run.namespace, run.name)) not in self.workflows:
            self.workflows.add(key)
            self.outcomes[run.outcome] += 1

    def freeze(self, team: str, compute_class: str, quota: float | None, hours: float) -> Usage:
        return Usage(team, compute_class, dict(self.outcomes), self.node_hours, self.on_demand_usd,
                     self.estimate_usd, self.redone_node_hours, self.redone_usd,
                     self.card_hours if self.accelerated else None, quota, len(self.waits),
                     percentile(self.waits, 50), percentile(self.waits, 95), self.interruptions, self.fallbacks, hours)


def run_of(workflow: dict[str, Any], facts: Facts, catalog: Catalog, now: datetime) -> Run:
    """A workflow as `wf get` reads it: its refined view and its cost, through the same functions."""
    view = workflow_view(workflow)
    copied = read_record(workflow)  # decoded once: the ledger read or not, the record below is this one's
    ledger = facts.ledger(view.namespace, view.name) if _ledger_adds(view, copied, facts.nodes) \
        else Ledger(nodes=copied)
    view = with_facts(view, workflow, ledger)
    return Run(view.namespace, view.name, team_of(catalog, view.namespace), view,
               job_cost(view, workflow, facts.nodes, now, catalog, record=ledger.record(workflow)))


def _ledger_adds(view: WorkflowView, copied: NodeRecord, nodes: Mapping[str, NodeFacts]) -> bool:
    """Whether the workflow's ledger can change a figure of it, so it is asked for (a GET per workflow) only then:
    it tells what interrupted attempts redid (their programs' run time, their checkpoints' share), and, until the
    node recorder has copied its record onto the ended workflow (`copied`), the nodes of attempts whose Node is
    gone, a gang's nodes, and which failed attempts were taken away."""
    if view.interruptions:
        return True
    if copied:
        return False
    return any(a.roles or a.phase in FAILED_PHASES or (a.host and a.host not in nodes)
               for row in view.steps for a in row.attempts)


def _pods(run: Run, workflow: dict[str, Any]) -> Iterator[tuple[Key, tuple[str, str]]]:
    """Each attempt's pod (namespace, the name Argo gives it) -> the team and class it counts for."""
    for row in run.view.steps:
        for attempt in row.attempts:
            yield (run.namespace, pod_name(workflow, attempt)), (run.team, row.compute_class or UNKNOWN_CLASS)


def _queue_waits(pods: Mapping[Key, tuple[str, str]], workloads: Sequence[Workload],
                 now: datetime) -> dict[tuple[str, str], list[float]]:
    """Seconds each of the window's pods waited for Kueue to reserve its team's quota (still waiting: so far), by
    team x class."""
    waits: dict[tuple[str, str], list[float]] = {}
    for workload in workloads:
        where = pods.get((workload.namespace, workload.pod or ""))
        created = parse_time(workload.created)
        if where is None or created is None:
            continue
        admitted = parse_time(workload.reserved_at) if workload.reserved else None
        if workload.reserved and admitted is None:
            continue  # admitted at a time Kueue did not record: no wait to tell
        waits.setdefault(where, []).append(max(0.0, ((admitted or now) - created).total_seconds()))
    return waits


def _series(runs: Sequence[Run], span: Window, catalog: Catalog) -> list[Series]:
    """Cards or nodes in use per team x class, averaged over BINS bins: each attempt at its step's node share
    (the step's node-hours over its attempts' hours), so each series' area is the lines' card- or node-hours."""
    width = (span.end - span.start) / BINS
    starts = tuple(span.start + width * i for i in range(BINS))
    bins: dict[tuple[str, str], list[float]] = {}
    for run in runs:
        for row, cost in zip(run.view.steps, run.cost.steps, strict=True):
            hours = sum(a.seconds(span.end) for a in row.attempts) / 3600
            if not hours or not cost.node_hours:
                continue
            compute_class = row.compute_class or UNKNOWN_CLASS
            rate = cost.node_hours / hours * (_cards(catalog, compute_class) or 1)
            values = bins.setdefault((run.team, compute_class), [0.0] * BINS)
            for attempt in row.attempts:
                _spread(attempt, rate, span, width, values)
    return [Series(team, compute_class, "cards" if _cards(catalog, compute_class) else "nodes", starts,
                   tuple(values), _quota_cards(catalog, team, compute_class))
            for (team, compute_class), values in sorted(bins.items())]


def _spread(attempt: Attempt, rate: float, span: Window, width: timedelta, values: list[float]) -> None:
    """Add the attempt's `rate` to each bin for the share of the bin it ran."""
    if attempt.started is None:
        return
    begin, end = max(attempt.started, span.start), min(attempt.finished or span.end, span.end)
    first = int((begin - span.start) / width)
    for i in range(max(0, first), min(BINS, int((end - span.start) / width) + 1)):
        low, high = span.start + width * i, span.start + width * (i + 1)
        overlap = (min(end, high) - max(begin, low)) / width
        if overlap > 0:
            values[i] += rate * overlap


def build_report(workflows: Iterable[dict[str, Any]], facts: Facts, catalog: Catalog, span: Window,
                 team: str | None = None, prometheus: PrometheusReading | None = None) -> Report:
    """The window's workflows (of `team`, when given) per team and class; the caller says whether there were any.
    With a Prometheus' reading, each team's queue waits (and the total's) are Kueue's histogram's."""
    runs: list[Run] = []
    pods: dict[Key, tuple[str, str]] = {}
    for workflow in workflows:  # one at a time: what stays of each is its Run and its pods' names
        namespace = (workflow.get("metadata") or {}).get("namespace", "")
        if in_window(workflow, span) and team in (None, team_of(catalog, namespace)):
            runs.append(run_of(workflow, facts, catalog, span.end))
            pods.update(_pods(runs[-1], workflow))
    runs.sort(key=lambda r: (r.view.started or span.end, r.namespace, r.name))
    tallies: dict[tuple[str, str], _Tally] = {}
    events: list[Interruption] = []

    def tally(team_name: str, compute_class: str) -> _Tally:
        return tallies.setdefault((team_name, compute_class), _Tally())

    for run in runs:
        for scope in (tally(run.team, "*"), tally("*", "*")):
            scope.count(run)
        for row, cost in zip(run.view.steps, run.cost.steps, strict=True):
            compute_class = row.compute_class or UNKNOWN_CLASS
            cards = _cards(catalog, compute_class)
            tally(run.team, compute_class).count(run)
            for scope in (tally(run.team, compute_class), tally(run.team, "*"), tally("*", "*")):
                scope.node_hours += cost.node_hours
                scope.on_demand_usd += cost.on_demand_usd
                scope.estimate_usd += cost.estimate_usd
                scope.redone_node_hours += cost.redone_node_hours
                scope.redone_usd += cost.redone_usd
                scope.interruptions += row.interruptions
                scope.fallbacks += fell_back(row)
                if cards is not None:
                    scope.accelerated = True
                    scope.card_hours += cost.node_hours * cards
            events += [Interruption(a.finished or span.end, run.team, compute_class, a.capacity or "-")
                       for a in row.attempts if a.interrupted]
    if facts.workloads is not None:
        for (team_name, compute_class), waits in _queue_waits(pods, facts.workloads, span.end).items():
            for scope in (tally(team_name, compute_class), tally(team_name, "*"), tally("*", "*")):
                scope.waits += waits
    hours = span.hours

    def order(key: tuple[str, str]) -> tuple[bool, str, bool, str]:
        return key[0] == "*", key[0], key[1] == "*", key[1]  # per class, then the team's total; the total last

    lines = tuple(tallies[key].freeze(*key, _quota_cards(catalog, *key) if key[1] != "*" else None, hours)
                  for key in sorted(tallies, key=order))
    if not lines:
        lines = (_Tally().freeze("*", "*", None, hours),)
    if prometheus is not None:
        prometheus = prometheus.of_team(team)
        kueue = {line.team: prometheus.wait(line.team) for line in lines}
        lines = tuple(replace(line, queue_waits=kueue[line.team].count, queue_wait_p50=kueue[line.team].p50,
                              queue_wait_p95=kueue[line.team].p95) if line.compute_class == "*" else line
                      for line in lines)
    return Report(span, tuple(runs), lines, tuple(_series(runs, span, catalog)),
                  tuple(sorted(events, key=lambda e: e.at)), _assumptions(runs, facts, prometheus), prometheus)


def _assumptions(runs: Sequence[Run], facts: Facts, prometheus: PrometheusReading | None) -> tuple[str, ...]:
    pods = ("from a pod's Kueue workload to its quota reservation (still waiting: until now); workloads removed "
            "with their pods are not counted" if facts.workloads is not None else None)
    if prometheus is None:
        waits = [f"queue wait = {pods}" if pods else "queue waits unknown: Kueue's workloads could not be read"]
    else:
        waits = [
            f"queue wait of a team and of all: Kueue's admission-wait histogram ({KUEUE_ADMISSION_WAIT}) in "
            f"Prometheus at {prometheus.url}, over the window's admissions (of workloads gone with their pods too; "
            f"pods still waiting are not in it); per class: {pods or 'unknown, Kueue workloads could not be read'}",
            "Prometheus' counts (under the table, and `prometheus` in -o json): increase() of wf's metrics over the "
            "window: the workflows that ended in it, whenever they started, each counted when it ended",
        ]
    own = [
        "a workflow counts whole in the window it started in; cost is wf get's (node-hours and prices below)",
        "card-hours = an accelerator step's node-hours x the node's cards; quota share = card-hours over the "
        "team's nominal quota of cards x the window's hours",
        *waits,
    ]
    return tuple(dict.fromkeys([*own, *(a for run in runs for a in run.cost.assumptions)]))


@dataclass(frozen=True)
class Waits:
    """A team's queue waits as Kueue's histogram tells them: the admissions of the window, their p50 and p95."""

    count: int
    p50: float | None  # seconds; None: nothing admitted in the window
    p95: float | None


@dataclass(frozen=True)
class Counted:
    """What wf's metrics (wf.controller.metrics) counted for a team over the window. Prometheus' increase()
    extrapolates to the window's edges, so the figures need not be whole."""

    attempts: float = 0.0
    interruptions: float = 0.0
    completions: Mapping[str, float] = field(default_factory=dict)  # by the workflow's status

    def __add__(self, other: Counted) -> Counted:
        statuses = Counter(self.completions)
        statuses.update(other.completions)
        return Counted(self.attempts + other.attempts, self.interruptions + other.interruptions, dict(statuses))


@dataclass(frozen=True)
class PrometheusReading:
    """What a Prometheus that scraped Kueue and Argo's controller says of the window, per team ("*": the total)."""

    url: str
    waits: Mapping[str, Waits]
    counted: Mapping[str, Counted]  # no "*": counters add up (`count("*")`)

    def wait(self, team: str) -> Waits:
        return self.waits.get(team, Waits(0, None, None))

    def count(self, team: str) -> Counted:
        return sum(self.counted.values(), Counted()) if team == "*" else self.counted.get(team, Counted())

    def of_team(self, team: str | None) -> PrometheusReading:
        """The reading of one team (`--team`), whose figures are then the total; every team's for None."""
        if team is None:
            return self
        return PrometheusReading(self.url, {team: self.wait(team), "*": self.wait(team)},
                                 {team: self.count(team)} if team in self.counted else {})

    def to_json(self, team: str) -> dict[str, Any]:
        counted = self.count(team)
        return {"url": self.url, "interruptions": counted.interruptions, "attempts": counted.attempts,
                "completions": dict(counted.completions)}


# Each query's {range} is the window; `A or B`: B's series without the team label is every team's.
_WAIT = f"increase({KUEUE_ADMISSION_WAIT}_bucket[{{range}}])"
_QUERIES = {
    "p50": f"histogram_quantile(0.5, sum by ({KUEUE_QUEUE_LABEL}, le) ({_WAIT})) "
           f"or histogram_quantile(0.5, sum by (le) ({_WAIT}))",
    "p95": f"histogram_quantile(0.95, sum by ({KUEUE_QUEUE_LABEL}, le) ({_WAIT})) "
           f"or histogram_quantile(0.95, sum by (le) ({_WAIT}))",
    "admissions": f"sum by ({KUEUE_QUEUE_LABEL}) (increase({KUEUE_ADMISSION_WAIT}_count[{{range}}])) "
                  f"or sum(increase({KUEUE_ADMISSION_WAIT}_count[{{range}}]))",
    "attempts": f"sum by ({TEAM_LABEL}) (increase({STEP_ATTEMPTS.name}[{{range}}]))",
    "interruptions": f"sum by ({TEAM_LABEL}) (increase({STEP_INTERRUPTIONS.name}[{{range}}]))",
    "completions": f"sum by ({TEAM_LABEL}, {STATUS_LABEL}) "
                   f"(increase({WORKFLOW_COMPLETIONS.name}[{{range}}]))",
}


def prometheus_url(url: str, origin: str) -> str:
    """`url` if it is an http(s) address; InputError (exit 2) naming `origin` (where it came from) otherwise."""
    return http_address(url, origin, "a Prometheus", "http://127.0.0.1:9090")


def read_prometheus(url: str, span: Window, origin: str,
                    fetch: Callable[[str], bytes] | None = None) -> PrometheusReading:
    """Kueue's queue waits and Argo's custom-metric counters of the window, per team, from the Prometheus at `url`
    (the local cluster's, or the platform's): Kueue's histogram outlives the workloads the report otherwise reads
    (they go with their pods). `fetch` GETs a URL (default: urllib). `origin` says where the URL came from, for the
    messages: ClusterError (exit 3) when Prometheus cannot be reached or fails the query, InputError (exit 2) when
    what answers is not Prometheus' HTTP API."""
    from urllib.parse import urlencode

    url = prometheus_url(url, origin)
    where = f"Prometheus at {url} ({origin})"
    seconds = max(1, int((span.end - span.start).total_seconds()))
    answers = {}
    for name, query in _QUERIES.items():
        asked = urlencode({"query": query.format(range=f"{seconds}s"), "time": span.end.timestamp()})
        answers[name] = _samples(_ask(fetch or _get, f"{url}/api/v1/query?{asked}", where), where)

    def by_queue(name: str) -> dict[str, float]:  # a series without a queue is every queue's
        return {labels.get(KUEUE_QUEUE_LABEL, "*"): value for labels, value in answers[name]}

    def by_team(name: str) -> dict[str, float]:  # Argo's team label is empty outside every team
        return {labels.get(TEAM_LABEL) or NO_TEAM: value for labels, value in answers[name]}

    p50, p95 = by_queue("p50"), by_queue("p95")
    waits = {team: Waits(round(count), _known(p50.get(team)), _known(p95.get(team)))
             for team, count in by_queue("admissions").items()}
    attempts, interruptions = by_team("attempts"), by_team("interruptions")
    completions: dict[str, dict[str, float]] = {}
    for labels, value in answers["completions"]:
        completions.setdefault(labels.get(TEAM_LABEL) or NO_TEAM, {})[labels.get(STATUS_LABEL, "-")] = value
    counted = {team: Counted(attempts.get(team, 0.0), interruptions.get(team, 0.0), completions.get(team, {}))
               for team in {*attempts, *interruptions, *completions}}
    return PrometheusReading(url, waits, counted)


def prometheus_targets(url: str, origin: str, fetch: Callable[[str], bytes] | None = None) -> list[dict[str, Any]]:
    """The active scrape targets of the Prometheus at `url` (each with its `labels`, `health` and `lastError`);
    errors as read_prometheus's."""
    url = prometheus_url(url, origin)
    where = f"Prometheus at {url} ({origin})"
    body = _ask(fetch or _get, f"{url}/api/v1/targets?state=active", where)
    try:
        answer = json.loads(body)
        targets = answer["data"]["activeTargets"]
        if answer["status"] != "success" or not isinstance(targets, list):
            raise ValueError(f"status {answer['status']!r}")
        return [t for t in targets if isinstance(t, dict) and isinstance(t.get("labels"), dict)]
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        shown = body[:60].decode("utf-8", "replace").strip()
        raise InputError(f"{where} is not Prometheus' HTTP API: its answer to /api/v1/targets is not a target list "
                         f"({type(exc).__name__}; it begins {shown!r}); give Prometheus' own address, "
                         "e.g. http://127.0.0.1:9090") from None


def _known(value: float | None) -> float | None:
    return None if value is None or value != value else value  # NaN: nothing in the histogram's buckets


def _get(url: str) -> bytes:
    from urllib.request import urlopen

    with urlopen(url, timeout=PROMETHEUS_TIMEOUT) as response:  # noqa: S310 - http(s) only (prometheus_url)
        body: bytes = response.read()
        return body


def _ask(fetch: Callable[[str], bytes], url: str, where: str) -> bytes:
    """The answer's body; the network's and the server's failures as wf's errors."""
    from http.client import HTTPException
    from urllib.error import HTTPError, URLError

    try:
        return fetch(url)
    except HTTPError as exc:
        body = exc.read() if exc.fp is not None else b""
        try:
            said = json.loads(body).get("error")
        except (ValueError, AttributeError):
            said = None
        if said or exc.code in (401, 403) or exc.code >= 500:
            raise ClusterError(f"{where} answered HTTP {exc.code}: {said or exc.reason}") from None
        raise InputError(f"{where} is not Prometheus' HTTP API: /api/v1/query answered HTTP {exc.code} "
                         f"({exc.reason}); give Prometheus' own address, e.g. http://127.0.0.1:9090") from None
    except URLError as exc:
        raise ClusterError(f"cannot reach {where}: {exc.reason}") from None
    except (OSError, HTTPException) as exc:  # a timeout while reading, a connection reset, not HTTP at all
        raise ClusterError(f"cannot reach {where}: {exc or type(exc).__name__}") from None


def _samples(body: bytes, where: str) -> list[tuple[dict[str, str], float]]:
    """An instant vector's samples (labels, value) from Prometheus' answer to a query."""
    try:
        answer = json.loads(body)
        if answer.get("status") == "error":
            raise ClusterError(f"{where} failed the query: {answer.get('error') or answer.get('errorType')}")
        data = answer["data"]
        if answer["status"] != "success" or data["resultType"] != "vector":
            raise ValueError(f"status {answer['status']!r}, result type {data['resultType']!r}")
        return [(dict(s["metric"]), float(s["value"][1])) for s in data["result"]]
    except (ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
        shown = body[:60].decode("utf-8", "replace").strip()
        raise InputError(f"{where} is not Prometheus' HTTP API: its answer to /api/v1/query is not a query result "
                         f"({type(exc).__name__}; it begins {shown!r}); give Prometheus' own address, "
                         "e.g. http://127.0.0.1:9090") from None
