"""Many workflows at a glance (pure): workflows and steps by phase, interruptions retried, failed steps by
name, the workflows running longest. The many-workflow view renders this; nothing here reads a cluster."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from wf.controller.steps import StepRow, WorkflowView

Key = tuple[str, str]  # (namespace, name)
SLOWEST = 5


CACHED = "Succeeded (cached)"  # a step whose result came from the step cache: no pod ran, nothing was paid


def phase_of(row: StepRow) -> str:
    """A step whose current attempt waits for a node is Pending, whatever its retry node says; one the step cache
    answered is told apart from one that ran."""
    if row.cached and row.phase == "Succeeded":
        return CACHED
    return "Pending" if row.pending else row.phase


def running_seconds(view: WorkflowView, now: datetime) -> float:
    return max(0.0, (now - view.started).total_seconds()) if view.started else 0.0


@dataclass(frozen=True)
class FailedStep:
    name: str
    workflows: int  # how many workflows this step failed in
    message: str  # the newest failure message seen for it


@dataclass(frozen=True)
class Summary:
    workflows: Counter[str]  # by phase ("Deleted" for those deleted while watched)
    steps: Counter[str]  # by phase, waiting steps counted as Pending
    interruptions: int  # attempts ended by an interruption and retried
    failed_steps: tuple[FailedStep, ...]  # most frequent first
    slowest: tuple[WorkflowView, ...]  # unfinished workflows, longest running first
    offloaded: int = 0  # workflows whose steps are in Argo's database: not in `steps`

    @property
    def total(self) -> int:
        return sum(self.workflows.values())


def summarize(views: Iterable[WorkflowView], deleted: int, now: datetime, slowest: int = SLOWEST) -> Summary:
    workflows: Counter[str] = Counter()
    steps: Counter[str] = Counter()
    interruptions = 0
    failed: Counter[str] = Counter()
    messages: dict[str, str] = {}
    running: list[WorkflowView] = []
    offloaded = 0
    for view in views:
        workflows[view.phase] += 1
        offloaded += bool(view.offloaded)
        if not view.done:
            running.append(view)
        for row in view.steps:
            steps[phase_of(row)] += 1
            interruptions += row.interruptions
        for row in view.failed_steps:
            failed[row.name] += 1
            messages[row.name] = row.failure
    if deleted:
        workflows["Deleted"] = deleted
    running.sort(key=lambda v: -running_seconds(v, now))
    return Summary(
        workflows=workflows,
        steps=steps,
        interruptions=interruptions,
        failed_steps=tuple(FailedStep(name, count, messages[name]) for name, count in failed.most_common()),
        slowest=tuple(running[:slowest]),
        offloaded=offloaded,
    )
