"""Watching workflows to their end: one stream per namespace, a view per change, cost and reasons on the side.

Each namespace's stream runs in a daemon thread, reduces every event to a compact snapshot (wf.controller.events)
and leaves the newest per workflow in an inbox; the consumer runs in the caller's thread, so Ctrl-C lands there,
stops the streams and leaves the workflows running. The state machine (events.WatchState) decides what is
followed and when the watch ends, the display (wf.controller.view) how it looks; this module wires them to the
cluster and adds what the stream alone cannot tell: reasons a step waits and what nodes cost.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any

from wf.argo.nodes import offloaded
from wf.compile.node_facts import NodeFacts, node_facts
from wf.compile.readback import read_placement
from wf.controller.checkpoints import Ledger, read_ledger
from wf.controller.client import Kube, cluster_error, lookup_errors
from wf.controller.cost import JobCost, job_cost
from wf.controller.events import Inbox, Key, Shared, Snapshot, WatchState, snapshot
from wf.controller.queue import QueueReader
from wf.controller.steps import TERMINAL_PHASES, StepRow, WorkflowView, pod_name, templates_by_name, with_facts
from wf.controller.stream import (
    KubeTransport,
    NamespaceStream,
    StreamStats,
    Transport,
)
from wf.controller.view import Display, detailed
from wf.core.constants import CLASS_LABEL
from wf.core.errors import ClusterError, InputError

TICK_SECONDS = 1.0  # redraw durations this often while nothing happens
EXPLAIN_EVERY_SECONDS = 10.0
NODE_COUNT_TTL_SECONDS = 30.0
LOOKUP_RETRY_SECONDS = 30.0  # a side look-up the API server could not answer is asked again after this
# An offloaded workflow's steps are its whole node map, fetched from Argo Server: at most this often while it runs.
HYDRATE_EVERY_SECONDS = 10.0

TransportFactory = Callable[[str, str, str], Transport]  # (namespace, label selector, field selector)
# (namespace, name) -> the workflow with the steps Argo offloaded to its database put back (Archive.hydrated).
Hydrate = Callable[[str, str], dict[str, Any] | None]


@dataclass
class WatchOutcome:
    views: dict[Key, WorkflowView] = field(default_factory=dict)  # the last state of each followed workflow
    noticed_at: dict[Key, float] = field(default_factory=dict)  # wall clock when the terminal phase arrived
    deleted: set[Key] = field(default_factory=set)
    costs: dict[Key, JobCost] = field(default_factory=dict)
    stopped: bool = False  # Ctrl-C: the watch ended, the workflows did not
    timed_out: bool = False  # the caller's timeout passed first: the workflows did not end
    stats: dict[str, StreamStats] = field(default_factory=dict)

    @property
    def succeeded(self) -> bool:
        return not self.stopped and not self.deleted and all(v.phase == "Succeeded" for v in self.views.values())

    @property
    def followed(self) -> list[Key]:
        return sorted(set(self.views) | self.deleted)


class Insight:
    """Lookups beyond the workflow stream, made only when they add something and never more than needed:
    node facts once per node (for cost), reasons for an unschedulable step at most every 10 s."""

    def __init__(self, kube: Kube, catalog_loader: Callable[[], Any]) -> None:
        self.kube = kube
        self._catalog_loader = catalog_loader
        self._catalog: Any = None
        self._catalog_loaded = False
        self._catalog_retry_at = 0.0
        self._nodes: dict[str, NodeFacts | None] = {}
        self._nodes_readable = True
        self._nodes_away_until = 0.0
        self._group_counts: dict[str, tuple[float, dict[str, int] | None]] = {}
        self._explained: dict[str, tuple[float, str]] = {}
        self._ledgers: dict[Key, Ledger] = {}  # read when the watch ends (or `wf get` shows one): once each
        self.queue = QueueReader(kube)

    def _catalog_or_none(self) -> Any:
        """The cluster's catalog, read once; None without one. When the API server can't be reached it is asked
        again a little later: a day's watch must not lose its explanations to a blip."""
        if not self._catalog_loaded and time.monotonic() >= self._catalog_retry_at:
            self._catalog_loaded = True
            try:
                self._catalog = self._catalog_loader()
            except InputError:
                self._catalog = None
            except ClusterError:
                self._catalog_loaded, self._catalog_retry_at = False, time.monotonic() + LOOKUP_RETRY_SECONDS
        return self._catalog

    def node(self, name: str) -> NodeFacts | None:
        from kubernetes.client.exceptions import ApiException

        if name in self._nodes or not self._nodes_readable or time.monotonic() < self._nodes_away_until:
            return self._nodes.get(name)
        try:
            node = json.loads(self.kube.core.read_node(name, _preload_content=False).data)
        except lookup_errors() as exc:
            status = exc.status if isinstance(exc, ApiException) else 0
            if status == 403:
                self._nodes_readable = False  # a developer role may not read nodes: cost stays unknown
            if status in (403, 404):
                self._nodes[name] = None
            else:  # out of reach for now: asked again a little later, not on every tick of an outage
                self._nodes_away_until = time.monotonic() + LOOKUP_RETRY_SECONDS
            return None
        facts = node_facts(node)
        self._nodes[name] = facts
        return facts

    def ledger(self, workflow: dict[str, Any]) -> Ledger:
        """The workflow's ledger, read once (what can't be read now is left out)."""
        meta = workflow.get("metadata") or {}
        key = (meta.get("namespace", ""), meta.get("name", ""))
        if (known := self._ledgers.get(key)) is None:
            try:
                known = read_ledger(self.kube, *key)
            except lookup_errors():
                return Ledger()
            self._ledgers[key] = known
        return known

    def refine(self, workflow: dict[str, Any], view: WorkflowView) -> WorkflowView:
        """The view with where attempts resumed, what their checkpoints kept, and the attempts the node recorder saw
        taken away."""
        return with_facts(view, workflow, self.ledger(workflow))

    def cost(self, workflow: dict[str, Any], view: WorkflowView, now: datetime) -> JobCost:
        """What the workflow's attempts cost, from the facts of every node one ran on: the workflow's record of
        them, else the live Node (read while it exists)."""
        record = self.ledger(workflow).record(workflow)
        for host in {a.host for row in view.steps for a in row.attempts if a.host} - set(record.nodes):
            self.node(host)
        return job_cost(view, workflow, self.nodes(), now, self._catalog_or_none(), record=record)

    def nodes(self) -> dict[str, NodeFacts]:
        return {name: facts for name, facts in self._nodes.items() if facts is not None}

    def _counts(self, compute_class: str) -> dict[str, int] | None:
        from wf.core.constants import EKS_NODEGROUP_LABEL

        cached = self._group_counts.get(compute_class)
        if cached and time.monotonic() - cached[0] < NODE_COUNT_TTL_SECONDS:
            return cached[1]
        counts: dict[str, int] | None
        try:
            found: dict[str, int] = {}
            for node in self.kube.core.list_node(label_selector=f"{CLASS_LABEL}={compute_class}").items:
                group = (node.metadata.labels or {}).get(EKS_NODEGROUP_LABEL, "")
                found[group] = found.get(group, 0) + 1
            counts = found
        except lookup_errors():
            counts = None
        self._group_counts[compute_class] = (time.monotonic(), counts)
        return counts

    def _events(self, namespace: str, pod: str) -> list[tuple[str, str]]:
        try:
            events = self.kube.core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={pod}").items
        except lookup_errors():
            return []
        events.sort(key=lambda e: (e.last_timestamp or e.event_time or e.metadata.creation_timestamp
                                   or datetime.min.replace(tzinfo=UTC)))
        return [(e.reason or "", e.message or "") for e in events]

    def explain(self, workflow: dict[str, Any], row: StepRow) -> str | None:
        """A catalog-terms reason for a step the scheduler could not place, or whose image cannot be pulled (None
        when it is not stuck)."""
        from wf.controller.pending import explain, image_problem

        attempt = row.attempts[-1]
        template = templates_by_name(workflow).get(attempt.template) or {}
        # A queued step's pod waits for its team's quota (gated) before it ever waits for a node.
        if queued := self.queue.explain(self._catalog_or_none(), workflow, template, pod_name(workflow, attempt)):
            return queued
        if problem := image_problem(template, attempt.message):
            return problem.text
        if "Unschedulable" not in attempt.message:
            return None
        last = self._explained.get(attempt.node_id)
        if last and time.monotonic() - last[0] < EXPLAIN_EVERY_SECONDS:
            return last[1]
        namespace = workflow["metadata"]["namespace"]
        events = self._events(namespace, pod_name(workflow, attempt))
        scheduler = next((m for r, m in reversed(events) if r == "FailedScheduling"), attempt.message)
        # The class of the pod that waits (a multi-node step's row shows its workers', but Argo's pod waits here).
        compute_class = read_placement(template).compute_class
        text = explain(template, scheduler, self._catalog_or_none(),
                       nodes_per_group=self._counts(compute_class) if compute_class else None, events=events).text
        self._explained[attempt.node_id] = (time.monotonic(), text)
        return text


class _Hydrator:
    """Puts back the steps of a workflow whose node status Argo offloaded to its database (wf.argo.nodes), which
    the Kubernetes API's object lacks: through Argo Server, at most every HYDRATE_EVERY_SECONDS per workflow while
    it runs, and always once it ended, so the closing table and cost are whole."""

    def __init__(self, hydrate: Hydrate, inbox: Inbox) -> None:
        self.hydrate, self.inbox = hydrate, inbox
        self.fetched: dict[Key, float] = {}
        self.failing = False

    def __call__(self, key: Key, workflow: dict[str, Any]) -> dict[str, Any] | None:
        """The workflow as the view should read it; None: not yet time to fetch again (the last view stands)."""
        if not offloaded(workflow):
            return workflow
        ended = (workflow.get("status") or {}).get("phase") in TERMINAL_PHASES
        if not ended and time.monotonic() - self.fetched.get(key, -HYDRATE_EVERY_SECONDS) < HYDRATE_EVERY_SECONDS:
            return None
        self.fetched[key] = time.monotonic()
        try:
            whole = self.hydrate(*key)
        except (ClusterError, InputError) as exc:
            if not self.failing:  # said once per outage: the view says the steps are away meanwhile
                self.failing = True
                self.inbox.notice("trouble", f"{key[0]}/{key[1]}: its steps are in Argo's database and {exc}")
            return workflow
        self.failing = False
        return whole if whole is not None and not offloaded(whole) else workflow


def _start_streams(
    namespaces: set[str], state: WatchState, inbox: Inbox, make_transport: TransportFactory,
    hydrate: Hydrate | None = None,
) -> dict[str, NamespaceStream]:
    hydrator = _Hydrator(hydrate, inbox) if hydrate else None
    share = Shared()  # the slim templates' parts, one of each for every snapshot of the watch
    streams: dict[str, NamespaceStream] = {}
    for namespace in sorted(namespaces):
        names = [name for ns, name in state.targets if ns == namespace]
        # One workflow: a field selector keeps the stream to it; several share the caller's label selector.
        field_selector = f"metadata.name={names[0]}" if len(names) == 1 else ""

        def sink(kind: str, obj: dict[str, Any], ns: str = namespace) -> None:
            key = (ns, obj["metadata"]["name"])
            if not state.wants(key):
                return
            if kind == "DELETED":
                inbox.workflow(key, None)
            elif (whole := hydrator(key, obj) if hydrator else obj) is not None:
                inbox.workflow(key, snapshot(whole, share))  # reduced here, in the stream's thread: never queued whole

        def trouble(message: str, ns: str = namespace) -> None:
            inbox.notice("trouble", f"{ns}: {message}")

        streams[namespace] = NamespaceStream(
            make_transport(namespace, "" if field_selector else state.selector, field_selector),
            sink=sink, on_trouble=trouble, on_synced=partial(inbox.notice, "synced", namespace),
        )

    def run(ns: str, stream: NamespaceStream) -> None:
        try:
            stream.run()
        except Exception as exc:  # noqa: BLE001 - handed to the consumer, which reports it in our terms
            inbox.notice("error", (ns, exc))

    for ns, stream in streams.items():
        threading.Thread(target=run, args=(ns, stream), daemon=True, name=f"wf-watch-{ns}").start()
    return streams


class _Silent:
    """The display of a caller that wants only the outcome."""

    def show(self, state: WatchState, changed: Sequence[Key], explanations: Mapping[str, str]) -> None:
        pass

    def trouble(self, message: str) -> None:
        pass

    def close(self, state: WatchState) -> None:
        pass


@dataclass
class _Consumer:
    """Takes what the streams delivered into the state, looks closer where the view needs it, shows it."""

    kube: Kube
    state: WatchState
    insight: Insight
    display: Display
    with_cost: bool
    outcome: WatchOutcome
    explanations: dict[str, str] = field(default_factory=dict)
    troubled: bool = False
    unshown: set[Key] = field(default_factory=set)  # changes before every namespace was listed

    def take(self, latest: dict[Key, Snapshot | None], notices: list[tuple[str, Any]]) -> None:
        changed = [key for key, snap in latest.items() if self.state.apply(key, snap)]
        self._notices(notices, bool(latest))
        for key in changed:
            if key in self.state.ended:
                self.outcome.noticed_at.setdefault(key, time.time())
        failure = next((payload for kind, payload in notices if kind == "error"), None)
        if failure and not self.state.finished:  # a stream that fails after the last end changes nothing
            ns, exc = failure
            raise cluster_error(exc, self.kube, f"watching workflows in {ns}", ns)
        if not self.state.listed:  # the first list is one burst: it is shown whole
            self.unshown.update(changed)
            return
        changed, self.unshown = [*self.unshown, *changed], set()
        # On a quiet tick the running workflows are looked at again: reasons and durations move on.
        for key in changed or self.state.running:
            if key in self.state.snapshots:  # not when it was deleted before we saw it
                self._look_closer(self.state.snapshots[key])
        self.display.show(self.state, changed, self.explanations)

    def _notices(self, notices: list[tuple[str, Any]], delivered: bool) -> None:
        for kind, payload in notices:
            if kind == "synced":
                self.state.on_synced(payload)
                delivered = True
            elif kind == "trouble":
                self.troubled = True
                self.display.trouble(payload)
        if self.troubled and delivered:
            self.troubled = False
            self.display.trouble("connected again; watching")

    def _look_closer(self, snap: Snapshot) -> None:
        """Reasons for waiting steps (shown step by step only) and the facts of the nodes steps run on (cost)."""
        explain = detailed(self.state)
        for row in snap.view.steps:
            if explain and row.pending and row.attempts:
                reason = self.insight.explain(snap.workflow, row)
                if reason:
                    self.explanations[row.attempts[-1].node_id] = reason
            if self.with_cost and row.node:
                self.insight.node(row.node)


def _refined(insight: Insight, state: WatchState) -> dict[Key, WorkflowView]:
    """Each workflow's last view with its checkpoint ledger and the facts of every node an attempt ran on (read
    while they still exist)."""
    return {key: insight.refine(snap.workflow, snap.view) for key, snap in state.snapshots.items()}


def _costs(insight: Insight, state: WatchState, views: dict[Key, WorkflowView]) -> dict[Key, JobCost]:
    now = datetime.now(UTC)
    return {key: insight.cost(snap.workflow, views[key], now) for key, snap in state.snapshots.items()}


def watch_workflows(
    kube: Kube,
    targets: list[Key],
    *,
    display: Display | None = None,
    label_selector: str = "",
    namespace: str | None = None,
    catalog_loader: Callable[[], Any] | None = None,
    with_cost: bool = True,
    transport_factory: TransportFactory | None = None,
    timeout: float | None = None,
    hydrate: Hydrate | None = None,
) -> WatchOutcome:
    """Watch the named workflows (or, without names, every workflow label_selector matches in namespace)
    until every one has ended (or was deleted, or Ctrl-C, or `timeout` seconds passed). `hydrate` reads the
    steps of workflows Argo offloaded to its database (without it, the view says they are away)."""
    from wf.controller.catalog_source import resolve_catalog

    if not targets and not label_selector:
        raise InputError("name the workflows to watch, or select them with -l/--selector")
    namespaces = {ns for ns, _ in targets} or {namespace or kube.namespace}
    state = WatchState(namespaces, set(targets), selector=label_selector, context=kube.context)
    outcome = WatchOutcome()
    inbox = Inbox()
    insight = Insight(kube, catalog_loader or (lambda: resolve_catalog(kube)))
    make_transport = transport_factory or (lambda ns, ls, fs: KubeTransport.workflows(kube, ns, ls, fs))
    streams = _start_streams(namespaces, state, inbox, make_transport, hydrate)
    outcome.stats = {ns: stream.stats for ns, stream in streams.items()}
    shown = display or _Silent()
    consumer = _Consumer(kube, state, insight, shown, with_cost, outcome)
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        while not state.finished:
            if deadline is not None and (left := deadline - time.monotonic()) <= 0:
                outcome.timed_out = True
                break
            consumer.take(*inbox.take(TICK_SECONDS if deadline is None else min(TICK_SECONDS, left)))
    except KeyboardInterrupt:
        outcome.stopped = True
    finally:
        for stream in streams.values():
            stream.stop()
        shown.close(state)
    outcome.views = state.views
    outcome.deleted = set(state.deleted)
    if with_cost:
        refined = _refined(insight, state)
        outcome.views = {**outcome.views, **refined}
        outcome.costs = _costs(insight, state, refined)
    return outcome
