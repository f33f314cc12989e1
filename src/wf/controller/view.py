"""Showing workflows as they run, and the tables of steps, attempts and costs (the CLI prints them whole).

One workflow: a step per row (a live table on a terminal, a line per step change otherwise). Several: a
summary (workflows and steps by phase, interruptions retried, failed steps by name, the workflows running
longest) on a terminal, and in a pipe one line per workflow phase change and per failed step, never a line
per pod event. What a row shows is declared once per table (`STEP_COLUMNS`, `WORKFLOW_COLUMNS`).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import IO, Protocol

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from wf.controller.cost import JobCost, StepCost
from wf.controller.events import Key, WatchState
from wf.controller.ops import Replica
from wf.controller.steps import StepRow, WorkflowView
from wf.controller.summary import CACHED, Summary, phase_of, running_seconds, summarize
from wf.core.units import duration

_PHASE_STYLE = {"Succeeded": "green", "Failed": "red", "Error": "red", "Running": "cyan", "Pending": "yellow",
                "Omitted": "dim", "Skipped": "dim", "Deleted": "red", CACHED: "green"}
STEP_VIEW_LIMIT = 1  # up to this many workflows are shown step by step; more get the summary
REDRAW_SECONDS = 0.25


def stamp() -> str:
    return datetime.now(UTC).strftime("%H:%M:%S")


def step_note(row: StepRow, explanations: Mapping[str, str]) -> str:
    """What to say next to a step: why it waits, that it was interrupted, or why it failed."""
    notes = []
    if row.pending and row.attempts:
        waiting = explanations.get(row.attempts[-1].node_id) or row.attempts[-1].message
        if waiting:
            notes.append(waiting)
    if row.interruptions:
        notes.append(f"interrupted {row.interruptions}x (node taken away; retried, not counted as a retry)")
    if row.attempts and (resumed := row.attempts[-1].resumed) is not None and resumed.checkpoint:
        notes.append(f"resumed {resumed}")
    if row.phase in ("Failed", "Error"):
        notes.append(row.failure)
    return "; ".join(notes)


def placement(row: StepRow) -> str:
    if not row.compute_class:
        return "-"
    return f"{row.compute_class}/{row.capacity}" if row.capacity else row.compute_class


def step_line(view: WorkflowView, row: StepRow, note: str) -> str:
    """A step as one line of text: `<workflow> <step>: <phase> [<class>/<capacity>] on <node> ...`."""
    parts = [f"{view.name} {row.name}: {phase_of(row)}", f"[{placement(row)}]"]
    if row.node:
        parts.append(f"on {row.node}")
    if row.retries:
        parts.append(f"retries {row.retries}")
    if note:
        parts.append(f"- {note}")
    return " ".join(parts)


def workflow_lines(view: WorkflowView, explanations: Mapping[str, str]) -> list[str]:
    """A workflow's phase and every step, a line each (`wf get`)."""
    ending = f" ({view.message})" if view.message and view.done else ""
    return [f"{view.name}: {view.phase}{ending}", *([view.offloaded] if view.offloaded else []),
            *(step_line(view, row, step_note(row, explanations)) for row in view.steps)]


def _phase_text(phase: str) -> Text:
    return Text(phase, style=_PHASE_STYLE.get(phase, ""))


@dataclass(frozen=True)
class Column:
    """A table column: its header and how a cell is drawn (text or styled Text)."""

    header: str
    cell: Callable[..., str | Text]


# The per-step table: (row, explanations, now) -> cell.
STEP_COLUMNS: tuple[Column, ...] = (
    Column("step", lambda row, notes, now: row.name),
    Column("phase", lambda row, notes, now: _phase_text(phase_of(row))),
    Column("class", lambda row, notes, now: placement(row)),
    Column("node", lambda row, notes, now: row.node or "-"),
    Column("time", lambda row, notes, now: duration(row.seconds(now))),
    Column("retries", lambda row, notes, now: str(row.retries)),
    Column("note", lambda row, notes, now: step_note(row, notes)),
)


def _steps_done(view: WorkflowView) -> str:
    return f"{sum(1 for s in view.steps if s.phase == 'Succeeded')}/{len(view.steps)}"


# The workflows running longest, in the summary: (view, now) -> cell.
WORKFLOW_COLUMNS: tuple[Column, ...] = (
    Column("workflow", lambda view, now: f"{view.namespace}/{view.name}"),
    Column("phase", lambda view, now: _phase_text(view.phase)),
    Column("running for", lambda view, now: duration(running_seconds(view, now))),
    Column("steps done", lambda view, now: _steps_done(view)),
    Column("interruptions retried", lambda view, now: str(sum(s.interruptions for s in view.steps))),
)


def _table(columns: Sequence[Column], rows: Sequence[Sequence[str | Text]], **options: object) -> Table:
    table = Table(**options)  # type: ignore[arg-type]
    for column in columns:
        table.add_column(column.header, overflow="fold")
    for row in rows:
        table.add_row(*row)
    return table


def steps_table(view: WorkflowView, explanations: Mapping[str, str], now: datetime) -> Table:
    title = Text.assemble(f"{view.namespace}/{view.name} ", _phase_text(view.phase))
    return _table(STEP_COLUMNS, [[c.cell(row, explanations, now) for c in STEP_COLUMNS] for row in view.steps],
                  title=title, title_justify="left", expand=False, caption=view.offloaded or None,
                  caption_justify="left")


def _counts(counter: Mapping[str, int]) -> str:
    most_first = sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))
    return ", ".join(f"{n} {phase}" for phase, n in most_first) or "none yet"


def _offloaded(summary: Summary) -> str:
    return f"steps of {summary.offloaded} workflows offloaded to Argo's database, not counted"


def summary_line(summary: Summary) -> str:
    """The summary in one line (the pipe's closing line)."""
    return (f"{summary.total} workflows: {_counts(summary.workflows)}; {sum(summary.steps.values())} steps: "
            f"{_counts(summary.steps)}; {summary.interruptions} interruptions retried"
            + (f"; {_offloaded(summary)}" if summary.offloaded else ""))


def summary_view(summary: Summary, now: datetime) -> Group:
    parts: list[RenderableType] = [
        Text(f"{summary.total} workflows: {_counts(summary.workflows)}", style="bold"),
        Text(f"steps: {_counts(summary.steps)}"),
        Text(f"interruptions retried: {summary.interruptions}"),
        *([Text(_offloaded(summary), style="yellow")] if summary.offloaded else []),
    ]
    if summary.failed_steps:
        failed = Table(title="failed steps", title_justify="left")
        for header in ("step", "workflows", "last message"):
            failed.add_column(header, overflow="fold")
        for step in summary.failed_steps[:10]:
            failed.add_row(step.name, str(step.workflows), step.message)
        parts.append(failed)
    if summary.slowest:
        parts.append(_table(WORKFLOW_COLUMNS, [[c.cell(v, now) for c in WORKFLOW_COLUMNS] for v in summary.slowest],
                            title="running longest", title_justify="left"))
    return Group(*parts)


class Display(Protocol):
    def show(self, state: WatchState, changed: Sequence[Key], explanations: Mapping[str, str]) -> None: ...
    def trouble(self, message: str) -> None: ...
    def close(self, state: WatchState) -> None: ...


def detailed(state: WatchState) -> bool:
    """Step by step for a single workflow; the summary for more."""
    return len(state.followed) <= STEP_VIEW_LIMIT


class PlainDisplay:
    """For logs (CI, a pipe): one workflow gets a line per change of a step (phase, node or waiting reason);
    several get a line per workflow phase change and per failed step, and the summary at the end."""

    def __init__(self, out: IO[str] | None = None) -> None:
        self.out = out or sys.stdout
        self._phases: dict[Key, str] = {}
        self._steps: dict[tuple[Key, str], tuple[str, str | None, str]] = {}  # one workflow only
        self._failures: set[tuple[Key, str]] = set()
        self._offloaded: set[Key] = set()

    def _emit(self, text: str) -> None:
        print(f"{stamp()} {text}", file=self.out, flush=True)

    def show(self, state: WatchState, changed: Sequence[Key], explanations: Mapping[str, str]) -> None:
        steps = detailed(state)
        for key in changed:
            if key in state.deleted:
                self._emit(f"{key[0]}/{key[1]} was deleted while being watched")
                continue
            view = state.snapshots[key].view
            if self._phases.get(key) != view.phase:
                self._phases[key] = view.phase
                ending = f" ({view.message})" if view.message and view.done else ""
                took = f" after {duration(running_seconds(view, view.finished))}" if view.done and view.finished else ""
                self._emit(f"{view.name if steps else f'{key[0]}/{key[1]}'}: {view.phase}{ending}{took}")
            if view.offloaded and key not in self._offloaded:
                self._offloaded.add(key)
                self._emit(view.offloaded)
            if steps:
                self._step_lines(key, view, explanations)
            else:
                for row in view.failed_steps:
                    if (key, row.name) not in self._failures:
                        self._failures.add((key, row.name))
                        self._emit(f"{key[0]}/{key[1]} step {row.name} failed: {row.failure}")

    def _step_lines(self, key: Key, view: WorkflowView, explanations: Mapping[str, str]) -> None:
        for row in view.steps:
            note = step_note(row, explanations)
            state = (phase_of(row), row.node, note)
            if self._steps.get((key, row.name)) != state:
                self._steps[(key, row.name)] = state
                self._emit(step_line(view, row, note))

    def trouble(self, message: str) -> None:
        self._emit(f"watch: {message}")

    def close(self, state: WatchState) -> None:
        if not detailed(state) and state.snapshots:
            self._emit(summary_line(summarize(state.views.values(), len(state.deleted), datetime.now(UTC))))
        self.out.flush()


class LiveDisplay:
    """Redrawn in place on a terminal: the steps table of one workflow, or the summary of many."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(emoji=False)  # step messages and names as written: `:100:` is no emoji
        self._trouble = ""
        self._drawn_at = 0.0
        self._live = Live(console=self.console, refresh_per_second=4, transient=False)
        self._live.start()

    def _render(self, state: WatchState, explanations: Mapping[str, str]) -> Group:
        now = datetime.now(UTC)
        parts: list[RenderableType] = []
        if detailed(state):
            parts.extend(steps_table(s.view, explanations, now) for s in state.snapshots.values())
        else:
            parts.append(summary_view(summarize(state.views.values(), len(state.deleted), now), now))
        if self._trouble:
            parts.append(Text(self._trouble, style="yellow"))
        return Group(*parts)

    def show(self, state: WatchState, changed: Sequence[Key], explanations: Mapping[str, str]) -> None:
        # Rendering 250 workflows costs more than a frame is worth: redraw at most 4 times a second.
        if time.monotonic() - self._drawn_at >= REDRAW_SECONDS:
            self._drawn_at = time.monotonic()
            self._live.update(self._render(state, explanations))

    def trouble(self, message: str) -> None:
        self._trouble = f"watch: {message}"

    def close(self, state: WatchState) -> None:
        self._trouble = ""
        self._live.update(self._render(state, {}))
        self._live.stop()


def make_display(plain: bool | None = None) -> Display:
    """Live view on a terminal, plain lines otherwise (or when asked)."""
    if plain is None:
        plain = not sys.stdout.isatty()
    return PlainDisplay() if plain else LiveDisplay()


def money(usd: float) -> str:
    """Dollars readable at any size: simulated runs cost fractions of a cent, real ones hundreds."""
    if usd >= 1:
        return f"{usd:,.2f}"
    if usd >= 0.0001:
        return f"{usd:.4f}"
    return "<0.0001" if usd > 0 else "0"


# Shown once some work was done twice: what interruptions made the steps run again (wf.controller.cost).
REDONE_COLUMNS = ("redone node-hours", "redone $")


def _redone(cost: JobCost | StepCost) -> tuple[str, str]:
    return f"{cost.redone_node_hours:.4f}", money(cost.redone_usd)


def cost_table(name: str, cost: JobCost) -> Table:
    table = Table(title=f"cost of {name} (estimate)", title_justify="left")
    redone = bool(cost.redone_node_hours)
    columns = ("step", "instance", "node-hours", "On-Demand $", "estimate $") + (REDONE_COLUMNS if redone else ())
    for column in columns:
        table.add_column(column, justify="right" if column.endswith(("$", "hours")) else "left")
    for step in cost.steps:
        estimate = money(step.estimate_usd) + (" (Spot)" if step.on_spot else "")
        instance = ", ".join(step.instance_types) or ("node gone" if step.unpriced_attempts else "-")
        table.add_row(step.step, instance, f"{step.node_hours:.4f}", money(step.on_demand_usd), estimate,
                      *(_redone(step) if redone else ()))
    table.add_row("total", "", f"{cost.node_hours:.4f}", money(cost.on_demand_usd), money(cost.estimate_usd),
                  *(_redone(cost) if redone else ()), style="bold")
    return table


def attempts_table(view: WorkflowView, now: datetime, every_step: bool = False) -> Table:
    """Every attempt of every step that took more than one (of every step, with every_step): where it asked to
    run, where it ran, and why it ended."""
    table = Table(title=f"attempts of {view.name}", title_justify="left")
    for column in ("step", "attempt", "capacity", "node", "resumed", "time", "redone", "ended", "message"):
        table.add_column(column, overflow="fold")
    for row in view.steps:
        if len(row.attempts) < (1 if every_step else 2):
            continue
        for number, attempt in enumerate(row.attempts, 1):
            capacity = ", ".join(f"{role} {capacity or '-'}" for role, capacity in attempt.roles) \
                or attempt.capacity or "-"
            table.add_row(row.name, str(number), capacity, attempt.host or "-",
                          str(attempt.resumed) if attempt.resumed else "-", duration(attempt.seconds(now)),
                          duration(attempt.redone_seconds(now)) if attempt.interrupted else "-", attempt.outcome,
                          attempt.message)
    return table


def replicas_table(name: str, replicas: Sequence[Replica]) -> Table:
    """A multi-node step's launcher and workers: where each runs and on what capacity."""
    table = Table(title=f"multi-node replicas of {name}", title_justify="left")
    for column in ("step", "MPIJob", "role", "pod", "node", "capacity", "phase"):
        table.add_column(column, overflow="fold")
    for r in replicas:
        table.add_row(r.step, r.job, r.role, r.pod, r.node or "-", r.capacity or "-", _phase_text(r.phase))
    return table


def interruption_summary(view: WorkflowView, cost: JobCost | None, now: datetime) -> str:
    """Interruptions retried and what they cost, per workflow (the per-step figures are in the tables)."""
    lost = f"{duration(view.redone_seconds(now))} of run time redone"
    if cost is not None and cost.redone_node_hours:
        lost += f", {cost.redone_node_hours:.4f} node-hours, ${money(cost.redone_usd)} (estimate)"
    return f"interruptions: {view.interruptions} retried, {lost}"


def costs_table(costs: Sequence[tuple[str, JobCost]]) -> Table:
    """Several workflows' costs, a row each, with the total (one workflow gets `cost_table`, step by step)."""
    table = Table(title=f"cost of {len(costs)} workflows (estimate)", title_justify="left")
    redone = any(c.redone_node_hours for _, c in costs)
    for column in ("workflow", "node-hours", "On-Demand $", "estimate $") + (REDONE_COLUMNS if redone else ()):
        table.add_column(column, justify="left" if column == "workflow" else "right")
    for name, cost in costs:
        table.add_row(name, f"{cost.node_hours:.4f}", money(cost.on_demand_usd), money(cost.estimate_usd),
                      *(_redone(cost) if redone else ()))
    total_redone = (f"{sum(c.redone_node_hours for _, c in costs):.4f}",
                    money(sum(c.redone_usd for _, c in costs))) if redone else ()
    table.add_row("total", f"{sum(c.node_hours for _, c in costs):.4f}",
                  money(sum(c.on_demand_usd for _, c in costs)), money(sum(c.estimate_usd for _, c in costs)),
                  *total_redone, style="bold")
    return table
