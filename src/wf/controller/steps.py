"""A Workflow's status as the developer thinks of it: one row per step, attempts split into retries and interruptions.

Argo records a step with a retryStrategy as a `Retry` node whose children are the attempts (`Pod` nodes); a
step without one is a lone `Pod` node. Which attempts were interruptions (the node went away) rather than the
program's failures is decided by wf.compile.interruptions, the rule the compiled retry strategies use too; those are
counted, timed and priced apart from the application's own retries. Where a step and each attempt ran (class,
capacity, Spot fallback) is read back from its template by the step's kind (wf.compile.kinds): a multi-node step's
are its workers', not those of Argo's pod that creates their MPIJob.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from wf.argo.nodes import NodesOffloaded, fnv32a, workflow_nodes
from wf.compile.interruptions import is_interruption
from wf.compile.kinds import kind_of_template
from wf.compile.readback import CompiledPlacement
from wf.controller.checkpoints import Ledger, Saved
from wf.core.constants import ARGO_POD_NAME_FORMAT_ANNOTATION
from wf.core.units import parse_time

TERMINAL_PHASES = frozenset({"Succeeded", "Failed", "Error"})
FAILED_PHASES = frozenset({"Failed", "Error"})
_STEP_TYPES = ("Retry", "Pod", "Skipped")
_MAX_POD_PREFIX = 253 - 10  # Kubernetes name limit minus the hash suffix (Argo's maxPrefixLength)


@dataclass(frozen=True)
class Attempt:
    node_id: str
    node_name: str  # Argo's full node name, e.g. "train-x7k2p.pretrain(1)": pod names hash it
    phase: str
    host: str | None
    started: datetime | None
    finished: datetime | None
    message: str
    template: str
    interrupted: bool
    capacity: str | None = None  # the capacity the attempt's pod asked for (after any Spot fallback)
    # A multi-node step's attempt: each role (launcher, worker) with the capacity its pods asked for.
    roles: tuple[tuple[str, str | None], ...] = ()
    resumed: Saved | None = None  # the checkpoint it started from (None: unknown, the ledger has no record)
    kept_seconds: float = 0.0  # of its run time, what the checkpoint it left holds (not run again)
    ran_seconds: float | None = None  # how long its program ran (the ledger's); None: unknown, its whole time counts

    def seconds(self, now: datetime) -> float:
        if self.started is None:
            return 0.0
        return max(0.0, ((self.finished or now) - self.started).total_seconds())

    def redone_seconds(self, now: datetime) -> float:
        """Run time the step must run again: an interrupted attempt's program's (else its whole time), less what
        its last checkpoint kept."""
        if not self.interrupted:
            return 0.0
        ran = self.ran_seconds if self.ran_seconds is not None else self.seconds(now)
        return max(0.0, min(ran, self.seconds(now)) - self.kept_seconds)

    @property
    def outcome(self) -> str:
        """Why the attempt ended, in the developer's terms."""
        if self.interrupted:
            return "interrupted"
        if self.phase in FAILED_PHASES:
            return "failed"
        return self.phase.lower()


@dataclass(frozen=True)
class StepRow:
    name: str
    node_id: str
    phase: str
    compute_class: str | None
    capacity: str | None
    started: datetime | None
    finished: datetime | None
    message: str
    attempts: tuple[Attempt, ...] = ()
    cached: bool = False  # its result came from the step cache (Argo's memoization hit): no pod ran

    @property
    def retries(self) -> int:
        """Application retries: attempts after the first that followed a failure of the program itself."""
        return sum(1 for a in self.attempts[:-1] if not a.interrupted)

    @property
    def interruptions(self) -> int:
        return sum(1 for a in self.attempts if a.interrupted)

    def redone_seconds(self, now: datetime) -> float:
        """Run time lost to interruptions: what the interrupted attempts ran that no checkpoint kept."""
        return sum(a.redone_seconds(now) for a in self.attempts)

    @property
    def node(self) -> str | None:
        return self.attempts[-1].host if self.attempts else None

    @property
    def pending(self) -> bool:
        return self.phase == "Pending" or (bool(self.attempts) and self.attempts[-1].phase == "Pending")

    def seconds(self, now: datetime) -> float:
        if self.started is None:
            return 0.0
        return max(0.0, ((self.finished or now) - self.started).total_seconds())

    @property
    def failure(self) -> str:
        """Why the step failed, in Argo's words (the last attempt's message is the most specific)."""
        for attempt in reversed(self.attempts):
            if attempt.message:
                return attempt.message
        return self.message


@dataclass(frozen=True)
class WorkflowView:
    name: str
    namespace: str
    phase: str
    message: str
    started: datetime | None
    finished: datetime | None
    steps: tuple[StepRow, ...] = field(default_factory=tuple)
    offloaded: str = ""  # why the steps are not known: Argo keeps them in its database (wf.argo.nodes)

    @property
    def done(self) -> bool:
        return self.phase in TERMINAL_PHASES

    @property
    def failed_steps(self) -> tuple[StepRow, ...]:
        return tuple(s for s in self.steps if s.phase in FAILED_PHASES)

    @property
    def interruptions(self) -> int:
        return sum(s.interruptions for s in self.steps)

    def redone_seconds(self, now: datetime) -> float:
        return sum(s.redone_seconds(now) for s in self.steps)


def templates_by_name(workflow: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The workflow's templates by name: its own, and those Argo stored from a WorkflowTemplate it refers to."""
    stored = ((workflow.get("status") or {}).get("storedWorkflowTemplateSpec") or {}).get("templates") or []
    own = (workflow.get("spec") or {}).get("templates") or []
    return {t.get("name", ""): t for t in [*stored, *own]}


def _attempt(node: dict[str, Any], placement: CompiledPlacement, retry: int) -> Attempt:
    message = node.get("message") or ""
    phase = node.get("phase") or "Pending"
    return Attempt(
        node_id=node.get("id", ""),
        node_name=node.get("name", ""),
        phase=phase,
        host=node.get("hostNodeName") or None,
        started=parse_time(node.get("startedAt")),
        finished=parse_time(node.get("finishedAt")),
        message=message,
        template=node.get("templateName") or "",
        interrupted=phase in FAILED_PHASES and is_interruption(message),
        capacity=placement.attempt_capacity(retry),
        roles=placement.attempt_roles(retry),
    )


def pod_name(workflow: dict[str, Any], attempt: Attempt) -> str:
    """The pod Argo created for an attempt (workflow/util/pod_name.go: v2 "<wf>-<template>-<fnv32a(node name)>")."""
    name = (workflow.get("metadata") or {}).get("name", "")
    annotations = (workflow.get("metadata") or {}).get("annotations") or {}
    if annotations.get(ARGO_POD_NAME_FORMAT_ANNOTATION) == "v1":
        return attempt.node_id
    if name == attempt.node_name:
        return name
    prefix = f"{name}-{attempt.template}" if attempt.template else name
    prefix = prefix[:_MAX_POD_PREFIX - 1] if len(prefix) > _MAX_POD_PREFIX - 1 else prefix
    return f"{prefix}-{fnv32a(attempt.node_name)}"


def containment(nodes: dict[str, dict[str, Any]]) -> dict[str, str]:
    """Each node's container: the Retry node it is an attempt of, else its boundary (the DAG/Steps node whose
    template holds it). Argo's `children` are no guide here: it links DAG tasks to the outbound nodes of
    the tasks they depend on, so a pod's or a nested DAG's children include its dependents."""
    parent: dict[str, str] = {}
    for node_id, node in nodes.items():
        if node.get("type") == "Retry":
            for child in node.get("children") or []:
                parent[child] = node_id
    for node_id, node in nodes.items():
        boundary = node.get("boundaryID")
        if node_id not in parent and boundary and boundary != node_id and boundary in nodes:
            parent[node_id] = boundary
    return parent


def members(parent: Mapping[str, str]) -> dict[str, list[str]]:
    """Each container's own members: containment turned around, once per workflow (a fan-out has thousands)."""
    inside: dict[str, list[str]] = {}
    for child, up in parent.items():
        inside.setdefault(up, []).append(child)
    return inside


def contents(inside: Mapping[str, list[str]], node_id: str) -> list[str]:
    """Every node inside node_id (transitively), by containment (`inside`: `members(containment(nodes))`)."""
    out, stack = [], list(inside.get(node_id, []))
    while stack:
        current = stack.pop()
        out.append(current)
        stack.extend(inside.get(current, []))
    return out


def workflow_view(workflow: dict[str, Any]) -> WorkflowView:
    """Per-step rows from a Workflow object (pure: the same dict always gives the same view)."""
    metadata = workflow.get("metadata") or {}
    status = workflow.get("status") or {}
    try:
        nodes, offloaded = workflow_nodes(workflow), ""
    except NodesOffloaded as exc:
        nodes, offloaded = {}, str(exc)
    templates = templates_by_name(workflow)
    placements: dict[str, CompiledPlacement] = {}
    parent = containment(nodes)
    inside = members(parent)

    def placed(template_name: str | None) -> CompiledPlacement:
        """Where the template's step runs, as its kind reads it back (wf.compile.kinds), once per template."""
        if (name := template_name or "") not in placements:
            template = templates.get(name)
            placements[name] = kind_of_template(template).read_back(template) if template else CompiledPlacement()
        return placements[name]

    def retry_index(node_id: str) -> int:
        """An attempt's position among its Retry node's children: Argo's `retries` when it made the pod."""
        siblings = nodes.get(parent.get(node_id, ""), {}).get("children") or []
        return siblings.index(node_id) if node_id in siblings else 0

    def inside_step(node_id: str) -> bool:
        seen = set()
        while (up := parent.get(node_id)) is not None and up not in seen:
            seen.add(up)
            if nodes.get(up, {}).get("type") in _STEP_TYPES:
                return True
            node_id = up
        return False

    rows: list[StepRow] = []
    for node_id, node in nodes.items():
        kind = node.get("type")
        # A step is the outermost Retry/Pod node of its chain: the compiler nests the application retries
        # (outer Retry) around the interruption retries (inner Retry) around the pods.
        if kind not in _STEP_TYPES or inside_step(node_id):
            continue
        inner = contents(inside, node_id)
        # A hit is the memoized (pod-level) node itself, Succeeded without children: wf.compile.cache.
        hit = next((n for n in [node_id, *inner] if (nodes[n].get("memoizationStatus") or {}).get("hit") is True),
                   None)
        cached = hit is not None
        if kind == "Retry":
            pods = [nodes[n] for n in inner if nodes[n].get("type") == "Pod"]
            attempts = tuple(sorted((_attempt(p, placed(p.get("templateName")), retry_index(p.get("id", "")))
                                     for p in pods),
                                    key=lambda a: (a.started or datetime.max.replace(tzinfo=UTC), a.node_id)))
        elif kind == "Pod" and not cached:
            attempts = (_attempt(node, placed(node.get("templateName")), 0),)
        else:
            attempts = ()
        template_name = attempts[-1].template if attempts else nodes[hit or node_id].get("templateName")
        placement = placed(template_name)
        rows.append(StepRow(
            name=node.get("displayName") or node.get("name") or node_id,
            node_id=node_id,
            phase=node.get("phase") or "Pending",
            compute_class=placement.compute_class,
            capacity=placement.capacity,
            started=parse_time(node.get("startedAt")),
            finished=parse_time(node.get("finishedAt")),
            message=node.get("message") or "",
            attempts=attempts,
            cached=cached,
        ))
    rows.sort(key=lambda r: (r.started or datetime.max.replace(tzinfo=UTC), r.name))
    return WorkflowView(
        name=metadata.get("name", ""),
        namespace=metadata.get("namespace", ""),
        phase=status.get("phase") or "Pending",
        message=status.get("message") or "",
        started=parse_time(status.get("startedAt")),
        finished=parse_time(status.get("finishedAt")),
        steps=tuple(rows),
        offloaded=offloaded,
    )


def with_facts(view: WorkflowView, workflow: dict[str, Any], ledger: Ledger) -> WorkflowView:
    """`view` with what Argo's node tree does not hold: where each attempt resumed and what its checkpoint kept
    (the workflow's ledger, by pod), and an attempt the node recorder saw taken away (its record's `disrupted`)
    told as an interruption whatever its message (a workflow compiled before the stop hook, whose drained attempts
    end with a bare exit 143 or 137)."""

    disrupted = ledger.record(workflow).disrupted
    attempts = ledger.attempts

    def refined(attempt: Attempt) -> Attempt:
        record = attempts.get(pod_name(workflow, attempt)) if attempts else None
        # Taken away while it ran (the node recorder saw it evicted or deleted): an interruption, whatever its exit.
        taken = attempt.node_id in disrupted and attempt.phase in FAILED_PHASES
        interrupted = attempt.interrupted or taken
        # A record without a location only says how long a program without checkpoints ran: it resumed nothing.
        resumed = record.resumed if record and record.location else None
        kept = record.kept_seconds if record and record.saved else 0.0
        ran = record.ran_seconds if record else None
        if (interrupted, resumed, kept, ran) == (attempt.interrupted, attempt.resumed, attempt.kept_seconds,
                                                 attempt.ran_seconds):
            return attempt  # nothing to add (a fan-out's 10,000 items without a ledger): not copied
        return replace(attempt, interrupted=interrupted, resumed=resumed, kept_seconds=kept, ran_seconds=ran)

    def refined_row(row: StepRow) -> StepRow:
        attempts = tuple(refined(a) for a in row.attempts)
        unchanged = all(a is b for a, b in zip(attempts, row.attempts, strict=True))
        return row if unchanged else replace(row, attempts=attempts)

    return replace(view, steps=tuple(refined_row(row) for row in view.steps))
