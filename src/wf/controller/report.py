"""`wf report`: what the platform did in a window, per team and compute class (pure: workflows and facts in,
dataclasses out; the command reads the cluster, wf.cli.report_page draws the pictures from the report's
`Digest`, in a process of its own).

Every figure comes from the functions `wf get` uses: the steps and attempts of `workflow_view` refined by
`with_facts` (checkpoint ledgers, nodes that stayed), and each workflow's `job_cost`, attributed to compute
classes by the step it priced. So the report's totals are the sum of `wf get`'s costs over the same workflows.

A workflow belongs to the window it started in (or, not started yet, was created in) and counts whole: started
within the window and priced up to now, all it ran lies inside the window. Its team is the one whose namespace
it runs in (the catalog's `queues:`), as Kueue's LocalQueues decide.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from wf.controller.checkpoints import AttemptRecord
from wf.controller.cost import JobCost, NodeFacts, job_cost
from wf.controller.queue import Workload
from wf.controller.steps import Attempt, StepRow, WorkflowView, parse_time, pod_name, with_facts, workflow_view
from wf.core.errors import InputError
from wf.core.units import parse_duration
from wf.model.catalog import Catalog
from wf.model.quotas import flavor_quotas

Key = tuple[str, str]  # (namespace, name)
OUTCOMES = ("Succeeded", "Failed", "Error", "Running")  # a workflow not ended yet (or not started) is Running
NO_TEAM = "-"  # a namespace no team of the catalog owns
UNKNOWN_CLASS = "-"  # a step whose template names no compute class
BINS = 96  # points of the usage-over-time series (15 minutes each over a day)
REPORT_KIND = "WorkflowReport"
REPORT_VERSION = 1  # of the -o json document: bump when a key changes meaning or goes away


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
    # A workflow's checkpoint ledger (namespace, name -> records by pod), asked as each workflow is read.
    ledger: Callable[[str, str], Mapping[str, AttemptRecord]] = lambda _namespace, _name: {}
    node_stayed: Callable[[str], bool | None] = lambda _host: None  # None: unknown, Argo's reading stands
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

    @property
    def total(self) -> Usage:
        return self.lines[-1]

    def to_json(self) -> dict[str, Any]:
        """The -o json document (a contract: REPORT_VERSION says when its keys change)."""
        return {
            "kind": REPORT_KIND, "version": REPORT_VERSION,
            "window": {"since": self.window.since, "start": _stamp(self.window.start),
                       "end": _stamp(self.window.end)},
            "usage": [line.to_json() for line in self.lines],
            "workflows": [{"namespace": r.namespace, "name": r.name, "team": r.team, "phase": r.view.phase,
                           "started": _stamp(r.view.started), "finished": _stamp(r.view.finished),
                           "nodeHours": r.cost.node_hours, "onDemandUsd": r.cost.on_demand_usd,
                           "estimateUsd": r.cost.estimate_usd, "redoneNodeHours": r.cost.redone_node_hours,
                           "redoneUsd": r.cost.redone_usd, "interruptions": r.view.interruptions}
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
        return Digest(self.window, self.lines, self.usage, self.interruptions, self.assumptions, runs)


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
                   tuple(Lanes(r["team"], r["name"], tuple(map(bars, r["steps"]))) for r in data["runs"]))


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


def fell_back(row: StepRow) -> bool:
    """Some attempt of the step ran On-Demand after its Spot attempts were interrupted (Spot fallback)."""
    return row.capacity == "spot" and any(a.capacity not in (None, "spot") for a in row.attempts)


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
    view = with_facts(view, workflow, facts.ledger(view.namespace, view.name), facts.node_stayed)
    return Run(view.namespace, view.name, team_of(catalog, view.namespace), view,
               job_cost(view, workflow, facts.nodes, now, catalog))


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
                 team: str | None = None) -> Report:
    """The window's workflows (of `team`, when given) per team and class; the caller says whether there were any."""
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
    return Report(span, tuple(runs), lines, tuple(_series(runs, span, catalog)),
                  tuple(sorted(events, key=lambda e: e.at)), _assumptions(runs, facts))


def _assumptions(runs: Sequence[Run], facts: Facts) -> tuple[str, ...]:
    own = [
        "a workflow counts whole in the window it started in; cost is wf get's (node-hours and prices below)",
        "card-hours = an accelerator step's node-hours x the node's cards; quota share = card-hours over the "
        "team's nominal quota of cards x the window's hours",
        "queue wait = from a pod's Kueue workload to its quota reservation (still waiting: until now); workloads "
        "removed with their pods are not counted" if facts.workloads is not None else
        "queue waits unknown: Kueue's workloads could not be read",
    ]
    return tuple(dict.fromkeys([*own, *(a for run in runs for a in run.cost.assumptions)]))


# Kueue's own histogram of the wait from a workload's creation to its admission, per ClusterQueue (= team).
KUEUE_WAIT_QUANTILE = ("histogram_quantile({q}, sum by (cluster_queue, le) "
                       "(increase(kueue_admission_wait_time_seconds_bucket[{seconds}s])))")


def prometheus_queue_waits(base_url: str, span: Window,
                           fetch: Callable[[str], bytes] | None = None) -> dict[str, tuple[float, float]]:
    """The seam for a Prometheus that scraped Kueue (the local cluster's, or the platform's): each team's queue
    wait p50 and p95 over the window, from Kueue's histogram, which outlives the workloads the report reads
    (they go with their pods). `fetch` GETs a URL (default: urllib); an empty answer means nothing was queued."""
    from urllib.parse import urlencode

    def get(url: str) -> bytes:
        from urllib.request import urlopen

        with urlopen(url, timeout=10) as response:  # noqa: S310 - the operator's Prometheus URL, http(s) only
            body: bytes = response.read()
            return body

    if not base_url.startswith(("http://", "https://")):
        raise InputError(f"Prometheus URL {base_url!r} is not http(s)")
    waits: dict[str, list[float]] = {}
    for q in (0.5, 0.95):
        query = KUEUE_WAIT_QUANTILE.format(q=q, seconds=int((span.end - span.start).total_seconds()))
        url = f"{base_url.rstrip('/')}/api/v1/query?{urlencode({'query': query, 'time': span.end.timestamp()})}"
        answer = json.loads((fetch or get)(url))
        for sample in (answer.get("data") or {}).get("result") or []:
            value = float(sample["value"][1])
            if value == value:  # NaN: no workload admitted in the window
                waits.setdefault(sample["metric"].get("cluster_queue", NO_TEAM), []).append(value)
    return {team: (values[0], values[1]) for team, values in waits.items() if len(values) == 2}
