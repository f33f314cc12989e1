"""Watching workflows to their end: one stream per namespace, a view per change, cost and reasons on the side.

The consumer runs in the caller's thread; each namespace's stream runs in a daemon thread and hands events
over a queue, so Ctrl-C lands in the caller, stops the streams and leaves the workflows running.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Callable

from wf.controller.client import Kube, cluster_error
from wf.controller.cost import JobCost, NodeFacts, job_cost
from wf.controller.queue import QueueReader
from wf.controller.stream import KubeWorkflowTransport, NamespaceStream, StreamStats, Transport
from wf.controller.steps import StepRow, WorkflowView, pod_name, workflow_view
from wf.controller.view import Display
from wf.errors import InputError
from wf.labels import CAPACITY_LABEL, CLASS_LABEL, EKS_CAPACITY_LABEL, INSTANCE_TYPE_LABEL

Key = tuple[str, str]  # (namespace, name)
TICK_SECONDS = 1.0  # redraw durations this often while nothing happens
EXPLAIN_EVERY_SECONDS = 10.0
NODE_COUNT_TTL_SECONDS = 30.0

TransportFactory = Callable[[str, str, str], Transport]  # (namespace, label selector, field selector)


@dataclass
class WatchOutcome:
    workflows: dict[Key, dict[str, Any]] = field(default_factory=dict)
    views: dict[Key, WorkflowView] = field(default_factory=dict)
    noticed_at: dict[Key, float] = field(default_factory=dict)  # wall clock when the terminal phase arrived
    deleted: set[Key] = field(default_factory=set)
    costs: dict[Key, JobCost] = field(default_factory=dict)
    stopped: bool = False  # Ctrl-C: the watch ended, the workflows did not
    stats: dict[str, StreamStats] = field(default_factory=dict)

    @property
    def succeeded(self) -> bool:
        return not self.stopped and not self.deleted and all(v.phase == "Succeeded" for v in self.views.values())


class Insight:
    """Lookups beyond the workflow stream, made only when they add something and never more than needed:
    node facts once per node (for cost), reasons for an unschedulable step at most every 10 s."""

    def __init__(self, kube: Kube, catalog_loader: Callable[[], Any]) -> None:
        self.kube = kube
        self._catalog_loader = catalog_loader
        self._catalog: Any = None
        self._catalog_loaded = False
        self._nodes: dict[str, NodeFacts | None] = {}
        self._nodes_readable = True
        self._group_counts: dict[str, tuple[float, dict[str, int] | None]] = {}
        self._explained: dict[str, tuple[float, str]] = {}
        self.queue = QueueReader(kube)

    def _catalog_or_none(self) -> Any:
        if not self._catalog_loaded:
            self._catalog_loaded = True
            try:
                self._catalog = self._catalog_loader()
            except InputError:
                self._catalog = None
        return self._catalog

    def node(self, name: str) -> NodeFacts | None:
        from kubernetes.client.exceptions import ApiException

        if name in self._nodes or not self._nodes_readable:
            return self._nodes.get(name)
        try:
            labels = self.kube.core.read_node(name).metadata.labels or {}
        except ApiException as exc:
            if exc.status == 403:
                self._nodes_readable = False  # a developer role may not read nodes: cost stays unknown
            self._nodes[name] = None
            return None
        capacity = labels.get(CAPACITY_LABEL) or {"SPOT": "spot", "ON_DEMAND": "on-demand"}.get(labels.get(EKS_CAPACITY_LABEL, ""))
        facts = NodeFacts(labels[INSTANCE_TYPE_LABEL], capacity) if INSTANCE_TYPE_LABEL in labels else None
        self._nodes[name] = facts
        return facts

    def nodes(self) -> dict[str, NodeFacts]:
        return {name: facts for name, facts in self._nodes.items() if facts is not None}

    def _counts(self, compute_class: str) -> dict[str, int] | None:
        from kubernetes.client.exceptions import ApiException
        from wf.labels import EKS_NODEGROUP_LABEL

        cached = self._group_counts.get(compute_class)
        if cached and time.monotonic() - cached[0] < NODE_COUNT_TTL_SECONDS:
            return cached[1]
        counts: dict[str, int] | None = {}
        try:
            for node in self.kube.core.list_node(label_selector=f"{CLASS_LABEL}={compute_class}").items:
                group = (node.metadata.labels or {}).get(EKS_NODEGROUP_LABEL, "")
                counts[group] = counts.get(group, 0) + 1
        except ApiException:
            counts = None
        self._group_counts[compute_class] = (time.monotonic(), counts)
        return counts

    def _events(self, namespace: str, pod: str) -> list[tuple[str, str]]:
        from kubernetes.client.exceptions import ApiException

        try:
            events = self.kube.core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={pod}").items
        except ApiException:
            return []
        events.sort(key=lambda e: (e.last_timestamp or e.event_time or e.metadata.creation_timestamp or datetime.min.replace(tzinfo=UTC)))
        return [(e.reason or "", e.message or "") for e in events]

    def explain(self, workflow: dict[str, Any], row: StepRow) -> str | None:
        """A catalog-terms reason for a step the scheduler could not place (None when it is not stuck)."""
        from wf.controller.pending import explain

        attempt = row.attempts[-1]
        templates = {t.get("name"): t for t in (workflow.get("spec") or {}).get("templates") or []}
        template = templates.get(attempt.template) or {}
        # A queued step's pod waits for its team's quota (gated) before it ever waits for a node.
        if queued := self.queue.explain(self._catalog_or_none(), workflow, template, pod_name(workflow, attempt)):
            return queued
        if "Unschedulable" not in attempt.message:
            return None
        last = self._explained.get(attempt.node_id)
        if last and time.monotonic() - last[0] < EXPLAIN_EVERY_SECONDS:
            return last[1]
        namespace = workflow["metadata"]["namespace"]
        events = self._events(namespace, pod_name(workflow, attempt))
        scheduler = next((m for r, m in reversed(events) if r == "FailedScheduling"), attempt.message)
        compute_class = row.compute_class or ""
        text = explain(template, scheduler, self._catalog_or_none(),
                       nodes_per_group=self._counts(compute_class) if compute_class else None, events=events).text
        self._explained[attempt.node_id] = (time.monotonic(), text)
        return text


def watch_workflows(
    kube: Kube,
    targets: list[Key],
    *,
    display: Display | None = None,
    label_selector: str = "",
    catalog_loader: Callable[[], Any] | None = None,
    with_cost: bool = True,
    transport_factory: TransportFactory | None = None,
) -> WatchOutcome:
    """Watch the named workflows until every one has ended (or was deleted, or Ctrl-C)."""
    from wf.controller.catalog_source import resolve_catalog

    wanted = set(targets)
    outcome = WatchOutcome()
    events: queue.Queue[tuple[str, Any]] = queue.Queue()
    insight = Insight(kube, catalog_loader or (lambda: resolve_catalog(kube)))
    make_transport = transport_factory or (lambda ns, ls, fs: KubeWorkflowTransport(kube, ns, ls, fs))

    streams: dict[str, NamespaceStream] = {}
    for namespace in sorted({ns for ns, _ in wanted}):
        names = [name for ns, name in wanted if ns == namespace]
        # One workflow: a field selector keeps the stream to it; several share the caller's label selector.
        field_selector = f"metadata.name={names[0]}" if len(names) == 1 else ""
        stream = NamespaceStream(
            make_transport(namespace, "" if field_selector else label_selector, field_selector),
            sink=lambda kind, obj, ns=namespace: events.put(("event", (ns, kind, obj))),
            on_trouble=lambda message, ns=namespace: events.put(("trouble", f"{ns}: {message}")),
            on_synced=lambda ns=namespace: events.put(("synced", ns)),
        )
        streams[namespace] = stream
        outcome.stats[namespace] = stream.stats

    def run(ns: str, stream: NamespaceStream) -> None:
        try:
            stream.run()
        except Exception as exc:  # handed to the consumer, which reports it in our terms
            events.put(("error", (ns, exc)))

    threads = [threading.Thread(target=run, args=(ns, s), daemon=True, name=f"wf-watch-{ns}") for ns, s in streams.items()]
    for thread in threads:
        thread.start()

    explanations: dict[str, str] = {}
    troubled = False
    remaining = set(wanted)
    try:
        while remaining:
            try:
                kind, payload = events.get(timeout=TICK_SECONDS)
            except queue.Empty:
                kind, payload = "tick", None
            if kind == "error":
                ns, exc = payload
                raise cluster_error(exc, kube, f"watching workflows in {ns}", ns)
            if kind == "trouble":
                troubled = True
                if display:
                    display.trouble(payload)
                continue
            if troubled and kind in ("event", "synced"):
                troubled = False
                if display:
                    display.trouble("connected again; watching")
            if kind == "synced":
                # A list delivers every selected workflow before it reports synced: absent now means absent.
                missing = [name for ns, name in remaining if ns == payload and (ns, name) not in outcome.workflows]
                if missing:
                    raise InputError(f"no workflow {', '.join(sorted(missing))} in namespace {payload} ({kube.context})")
                continue
            changed: list[Key] = []
            if kind == "event":
                ns, event_type, obj = payload
                key = (ns, obj["metadata"]["name"])
                if key not in wanted:
                    continue
                if event_type == "DELETED":
                    if key in remaining:
                        outcome.deleted.add(key)
                        remaining.discard(key)
                        if display:
                            display.trouble(f"{key[1]} was deleted while being watched")
                    continue
                outcome.workflows[key] = obj
                changed.append(key)
            else:  # tick: refresh durations and reasons of what is still running
                changed = [k for k in remaining if k in outcome.workflows]
            for key in changed:
                workflow = outcome.workflows[key]
                view = workflow_view(workflow)
                outcome.views[key] = view
                for row in view.steps:
                    if row.pending and row.attempts:
                        reason = insight.explain(workflow, row)
                        if reason:
                            explanations[row.attempts[-1].node_id] = reason
                    if with_cost and row.node:
                        insight.node(row.node)
                if display:
                    display.update(view, explanations)
                if view.done and key in remaining:
                    outcome.noticed_at[key] = time.time()
                    remaining.discard(key)
    except KeyboardInterrupt:
        outcome.stopped = True
    finally:
        for stream in streams.values():
            stream.stop()
        if display:
            display.close()
    if with_cost:
        now = datetime.now(UTC)
        for key, view in outcome.views.items():
            for row in view.steps:
                for attempt in row.attempts:
                    if attempt.host:
                        insight.node(attempt.host)
            outcome.costs[key] = job_cost(view, outcome.workflows[key], insight.nodes(), now)
    return outcome
