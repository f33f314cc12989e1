"""What every command prints goes through wf.cli.output: tables keep every value whole."""

from __future__ import annotations

import io

import pytest
from rich.console import Console
from rich.table import Table

from wf.cli.output import print_table


def test_a_table_on_a_pipe_or_a_narrow_terminal_keeps_every_value_whole() -> None:
    for terminal in (False, True):
        buffer = io.StringIO()
        console = Console(file=buffer, width=30, force_terminal=terminal, color_system=None)
        table = Table(box=None, pad_edge=False)
        for column in ("NAME", "PHASE", "JOB"):
            table.add_column(column)
        table.add_row("bert-large-pretrain-fzd27", "Succeeded", "bert-large-pretrain")
        print_table(table, console)
        row = buffer.getvalue().splitlines()[1]
        assert row.split() == ["bert-large-pretrain-fzd27", "Succeeded", "bert-large-pretrain"], buffer.getvalue()


def test_lines_and_tables_print_user_text_as_written(capsys: pytest.CaptureFixture[str]) -> None:
    # rich turns `:100:` into an emoji by default: a file:line must reach CI as it was written.
    from wf.cli.output import print_line

    print_line("job.yaml:100: spec.steps[0]: :smile: [bold]x[/bold]", style="red")
    table = Table(box=None, pad_edge=False)
    table.add_column("WHERE")
    table.add_row("job.yaml:1234:")
    print_table(table)
    out = capsys.readouterr().out
    assert "job.yaml:100: spec.steps[0]: :smile: [bold]x[/bold]" in out and "job.yaml:1234:" in out


def _tables() -> list[Table]:
    """Every kind of table wf prints: boxed with a title (left, centred, wider than the table), edge-less listings,
    styled rows and cells, markup, multi-line and wide-character cells, no rows, no header."""
    from rich.text import Text

    attempts = Table(title="attempts of x", title_justify="left")
    for column in ("step", "phase", "message"):
        attempts.add_column(column, overflow="fold")
    attempts.add_row("shard(0:0)", "1", "")
    attempts.add_row("a", Text("Succeeded", style="green"), "pod deleted")
    attempts.add_row("b", Text("Run", style="cyan"), Text.assemble("two ", ("styles", "red")))
    attempts.add_row("total", "2", "line1\nline two", style="bold")
    listing = Table(box=None, pad_edge=False)
    for column in ("NAME", "PHASE", "PROGRESS"):
        listing.add_column(column, no_wrap=column == "NAME")
    listing.add_row("w1", "Succeeded", "3/3")
    listing.add_row("w2-long-name", "Running", "-")
    cost = Table(title="cost of a workflow whose name is wider than its table (estimate)", title_justify="left")
    for column in ("step", "instance", "node-hours", "estimate $"):
        cost.add_column(column, justify="right" if column.endswith(("$", "hours")) else "left")
    cost.add_row("s", "r5.4xlarge", "0.1000", "0.01 (Spot)")
    cost.add_row("total", "", "0.1", "0.01", style="bold")
    plain = Table("component", "pid", "port")
    plain.add_row("etcd", "12", "[bold]x[/bold] markup")
    plain.add_row("wide 漢字", "1", "é")
    empty = Table(box=None, pad_edge=False, title="as of 2026", title_justify="left")
    empty.add_column("type")
    centred = Table(title="centred", show_header=False)
    centred.add_column("a", justify="center")
    centred.add_column("b")
    centred.add_row("x", "yyyyyyy")
    centred.add_row("zzzzz", "")
    return [attempts, listing, cost, plain, empty, centred]


def _rich_whole(table: Table, console: Console) -> None:
    """How rich itself prints a table with every value whole (print_table's contract)."""
    from rich.measure import Measurement

    needed = Measurement.get(console, console.options.update_width(10**6), table).maximum
    if needed <= console.width:
        console.print(table)
        return
    Console(file=console.file, width=needed, force_terminal=console.is_terminal, emoji=False,
            color_system=console.color_system).print(table, crop=False)  # type: ignore[arg-type]


@pytest.mark.parametrize("terminal", [False, True])
@pytest.mark.parametrize("width", [30, 200])
def test_a_table_prints_as_rich_prints_it_whole(terminal: bool, width: int) -> None:
    # print_table lays tables out itself (rich's layout costs about a millisecond a row): the same characters and,
    # on a terminal, the same styles as rich's own rendering.
    for table in _tables():
        ours, theirs = io.StringIO(), io.StringIO()
        for buffer, draw in ((ours, print_table), (theirs, _rich_whole)):
            draw(table, Console(file=buffer, width=width, force_terminal=terminal, emoji=False,
                                color_system="standard" if terminal else None))
        assert ours.getvalue() == theirs.getvalue(), f"{table.title}\n{ours.getvalue()}\n{theirs.getvalue()}"


def test_a_table_of_what_print_table_does_not_draw_is_refused() -> None:
    table = Table("a", show_lines=True)
    table.add_row("x")
    with pytest.raises(ValueError, match="print_table draws"):
        print_table(table, Console(file=io.StringIO()))
