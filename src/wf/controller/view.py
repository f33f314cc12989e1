"""Showing workflows as they run: a live rich table on a terminal, one plain line per change otherwise (CI logs)."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from typing import IO, Protocol

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from wf.controller.cost import JobCost
from wf.controller.steps import StepRow, WorkflowView

_PHASE_STYLE = {"Succeeded": "green", "Failed": "red", "Error": "red", "Running": "cyan", "Pending": "yellow",
                "Omitted": "dim", "Skipped": "dim"}


def duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def step_note(row: StepRow, explanations: dict[str, str]) -> str:
    """What to say next to a step: why it waits, that it was interrupted, or why it failed."""
    notes = []
    if row.pending and row.attempts:
        waiting = explanations.get(row.attempts[-1].node_id) or row.attempts[-1].message
        if waiting:
            notes.append(waiting)
    if row.interruptions:
        notes.append(f"interrupted {row.interruptions}x (node taken away; retried, not counted as a retry)")
    if row.phase in ("Failed", "Error"):
        notes.append(row.failure)
    return "; ".join(notes)


def phase_of(row: StepRow) -> str:
    """A step whose current attempt waits for a node is Pending, whatever its retry node says."""
    return "Pending" if row.pending else row.phase


def placement(row: StepRow) -> str:
    if not row.compute_class:
        return "-"
    return f"{row.compute_class}/{row.capacity}" if row.capacity else row.compute_class


class Display(Protocol):
    def update(self, view: WorkflowView, explanations: dict[str, str]) -> None: ...
    def trouble(self, message: str) -> None: ...
    def close(self) -> None: ...


class PlainDisplay:
    """A line per change of a step (phase, node, or waiting reason), so CI logs read as a timeline."""

    def __init__(self, out: IO[str] | None = None) -> None:
        self.out = out or sys.stdout
        self._last: dict[tuple[str, str], tuple[str, str | None, str]] = {}
        self._phases: dict[str, str] = {}

    def _emit(self, text: str) -> None:
        stamp = datetime.now(UTC).strftime("%H:%M:%S")
        print(f"{stamp} {text}", file=self.out, flush=True)

    def update(self, view: WorkflowView, explanations: dict[str, str]) -> None:
        if self._phases.get(view.name) != view.phase:
            self._phases[view.name] = view.phase
            self._emit(f"{view.name}: {view.phase}{f' ({view.message})' if view.message and view.done else ''}")
        for row in view.steps:
            note = step_note(row, explanations)
            state = (phase_of(row), row.node, note)
            if self._last.get((view.name, row.name)) == state:
                continue
            self._last[(view.name, row.name)] = state
            parts = [f"{view.name} {row.name}: {phase_of(row)}", f"[{placement(row)}]"]
            if row.node:
                parts.append(f"on {row.node}")
            if row.retries:
                parts.append(f"retries {row.retries}")
            if note:
                parts.append(f"- {note}")
            self._emit(" ".join(parts))

    def trouble(self, message: str) -> None:
        self._emit(f"watch: {message}")

    def close(self) -> None:
        self.out.flush()


class LiveDisplay:
    """A rich table per workflow, redrawn in place (a terminal is attached)."""

    MAX_TABLES = 20  # beyond this, one summary line per workflow keeps the screen readable

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console()
        self._views: dict[str, tuple[WorkflowView, dict[str, str]]] = {}
        self._trouble = ""
        self._live = Live(console=self.console, refresh_per_second=4, transient=False)
        self._live.start()

    def _table(self, view: WorkflowView, explanations: dict[str, str]) -> Table:
        now = datetime.now(UTC)
        phase = Text(view.phase, style=_PHASE_STYLE.get(view.phase, ""))
        table = Table(title=Text.assemble(f"{view.namespace}/{view.name} ", phase), title_justify="left", expand=False)
        for column in ("step", "phase", "class", "node", "time", "retries", "note"):
            table.add_column(column, overflow="fold")
        for row in view.steps:
            table.add_row(row.name, Text(phase_of(row), style=_PHASE_STYLE.get(phase_of(row), "")), placement(row),
                          row.node or "-", duration(row.seconds(now)), str(row.retries), step_note(row, explanations))
        return table

    def _render(self) -> Group:
        parts: list[object] = []
        views = list(self._views.values())
        if len(views) <= self.MAX_TABLES:
            parts.extend(self._table(v, e) for v, e in views)
        else:
            counts: dict[str, int] = {}
            for v, _ in views:
                counts[v.phase] = counts.get(v.phase, 0) + 1
            parts.append(Text(f"{len(views)} workflows: " + ", ".join(f"{n} {p}" for p, n in sorted(counts.items()))))
            parts.extend(self._table(v, e) for v, e in views if v.failed_steps)
        if self._trouble:
            parts.append(Text(self._trouble, style="yellow"))
        return Group(*parts)

    def update(self, view: WorkflowView, explanations: dict[str, str]) -> None:
        self._views[view.name] = (view, dict(explanations))
        self._live.update(self._render())

    def trouble(self, message: str) -> None:
        self._trouble = f"watch: {message}"
        self._live.update(self._render())

    def close(self) -> None:
        self._trouble = ""
        self._live.update(self._render())
        self._live.stop()


def make_display(plain: bool | None = None) -> Display:
    """Live table on a terminal, plain lines otherwise (or when asked)."""
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


def cost_table(name: str, cost: JobCost) -> Table:
    table = Table(title=f"cost of {name} (estimate)", title_justify="left")
    interrupted = bool(cost.interrupted_node_hours)
    columns = ("step", "instance", "node-hours", "On-Demand $", "estimate $") + (("lost to interruptions $",)
                                                                             if interrupted else ())
    for column in columns:
        table.add_column(column, justify="right" if column.endswith(("$", "hours")) else "left")
    for step in cost.steps:
        estimate = money(step.estimate_usd) + (" (Spot)" if step.on_spot else "")
        instance = ", ".join(step.instance_types) or ("node gone" if step.unpriced_attempts else "-")
        lost = (money(step.interrupted_usd),) if interrupted else ()
        table.add_row(step.step, instance, f"{step.node_hours:.4f}", money(step.on_demand_usd), estimate, *lost)
    total_lost = (money(cost.interrupted_usd),) if interrupted else ()
    table.add_row("total", "", f"{cost.node_hours:.4f}", money(cost.on_demand_usd), money(cost.estimate_usd),
                  *total_lost, style="bold")
    return table


def print_cost(console: Console, name: str, cost: JobCost) -> None:
    console.print(cost_table(name, cost))
    for assumption in cost.assumptions:
        console.print(f"  assumption: {assumption}", markup=False, highlight=False)


def attempts_table(view: WorkflowView, now: datetime) -> Table:
    """Every attempt of every step that took more than one: where it asked to run, where it ran, and why it ended."""
    table = Table(title=f"attempts of {view.name}", title_justify="left")
    for column in ("step", "attempt", "capacity", "node", "time", "ended", "message"):
        table.add_column(column, overflow="fold")
    for row in view.steps:
        if len(row.attempts) < 2:
            continue
        for number, attempt in enumerate(row.attempts, 1):
            table.add_row(row.name, str(number), attempt.capacity or "-", attempt.host or "-",
                          duration(attempt.seconds(now)), attempt.outcome, attempt.message)
    return table


def interruption_summary(view: WorkflowView, cost: JobCost | None, now: datetime) -> str:
    """Interruptions retried and what they cost, per workflow (the per-step figures are in the tables)."""
    lost = f"{duration(view.interrupted_seconds(now))} of run time lost"
    if cost is not None and cost.interrupted_node_hours:
        lost += f", {cost.interrupted_node_hours:.4f} node-hours, ${money(cost.interrupted_usd)} (estimate)"
    return f"interruptions: {view.interruptions} retried, {lost}"
