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
