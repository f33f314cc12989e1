"""What the watch prints: one line per workflow change for many workflows, a summary or steps on a terminal."""

from __future__ import annotations

import io
from datetime import UTC, datetime

from rich.console import Console

from controller_fakes import nested_run, workflow
from wf.controller.events import WatchState, snapshot
from wf.controller.summary import summarize
from wf.controller.view import PlainDisplay, summary_view


def test_many_workflows_in_a_pipe_get_a_line_per_phase_change_and_per_failure_only() -> None:
    keys = [("wf", f"w{i}") for i in range(3)]
    state = WatchState({"wf"}, set(keys))
    out = io.StringIO()
    display = PlainDisplay(out)
    for key in keys:
        state.apply(key, snapshot(workflow(key[1], "Running")))
    state.on_synced("wf")
    display.show(state, keys, {})
    display.show(state, keys, {})  # nothing changed: nothing printed
    state.apply(keys[0], snapshot(nested_run("w0", final="Failed")))
    display.show(state, [keys[0]], {})
    state.apply(keys[0], snapshot(nested_run("w0", final="Failed")))
    display.show(state, [keys[0]], {})
    for key in keys[1:]:
        state.apply(key, snapshot(nested_run(key[1])))
    display.show(state, keys[1:], {})
    display.close(state)
    lines = [line.split(" ", 1)[1] for line in out.getvalue().splitlines()]  # without the time stamp
    assert lines == [
        "wf/w0: Running", "wf/w1: Running", "wf/w2: Running",
        "wf/w0: Failed after 2h10m", "wf/w0 step train failed: Error (exit code 1)",
        "wf/w1: Succeeded after 2h10m", "wf/w2: Succeeded after 2h10m",
        "3 workflows: 2 Succeeded, 1 Failed; 6 steps: 5 Succeeded, 1 Failed; 3 interruptions retried",
    ]


def test_one_workflow_in_a_pipe_keeps_a_line_per_step_change() -> None:
    state = WatchState({"wf"}, {("wf", "w")})
    state.apply(("wf", "w"), snapshot(nested_run("w")))
    state.on_synced("wf")
    out = io.StringIO()
    display = PlainDisplay(out)
    display.show(state, [("wf", "w")], {})
    display.close(state)
    text = out.getvalue()
    assert "w prep: Succeeded [cpu/on-demand] on cpu-1" in text and "w train: Succeeded [gaudi/spot] on gaudi-2" in text
    assert "workflows:" not in text


def test_the_terminal_summary_names_phases_failures_and_the_longest_running() -> None:
    now = datetime(2026, 3, 1, 15, 0, tzinfo=UTC)
    views = [snapshot(nested_run("bad", final="Failed")).view, snapshot(workflow("slow", "Running")).view]
    console = Console(file=io.StringIO(), width=120, color_system=None)
    with console.capture() as captured:
        console.print(summary_view(summarize(views, 0, now), now))
    text = captured.get()
    assert "2 workflows: 1 Failed, 1 Running" in text and "interruptions retried: 1" in text
    assert "failed steps" in text and "Error (exit code 1)" in text
    assert "running longest" in text and "wf/slow" in text and "3h00m" in text


def test_the_live_view_shows_one_workflow_step_by_step_and_many_as_a_summary() -> None:
    from wf.controller.view import LiveDisplay

    for count, expected, absent in ((1, "interrupted 1x", "interruptions retried:"),
                                    (3, "interruptions retried: 3", "│ prep")):
        keys = [("wf", f"w{i}") for i in range(count)]
        state = WatchState({"wf"}, set(keys))
        for key in keys:
            state.apply(key, snapshot(nested_run(key[1], final="Failed")))
        state.on_synced("wf")
        buffer = io.StringIO()
        display = LiveDisplay(Console(file=buffer, width=160, force_terminal=True, color_system=None))
        display.show(state, keys, {})
        display.close(state)
        assert expected in buffer.getvalue() and absent not in buffer.getvalue()
