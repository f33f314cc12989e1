"""Everything the commands print goes through here: generated text and YAML/JSON documents (to stdout or
--file), JSON reports, plain lines, and tables that never cut a value.

Lines are printed as they are (no markup, no highlighting, never wrapped by us), so what CI parses is what the
command said. rich is imported on first use only: `wf compile` prints a document and never loads it.
"""

from __future__ import annotations

import json
import sys
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wf.core.errors import InputError, WfError

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table


def dump(data: Any, fmt: str) -> str:
    """An object as YAML or JSON text (`fmt` is an -o value: yaml or json)."""
    if fmt == "json":
        # Indented for a person at a terminal; compact (C encoder, 4x faster on large DAGs) for pipes and files.
        return json.dumps(data, indent=2 if sys.stdout.isatty() else None) + "\n"
    import yaml

    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    return yaml.dump(data, Dumper=dumper, sort_keys=False, default_flow_style=False, allow_unicode=True)


def emit(text: str, file: Path | None = None) -> None:
    """Generated text to `file` (--file) or stdout."""
    if file is None:
        sys.stdout.write(text)
        return
    try:
        file.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot write: {exc.strerror}", file=file) from None


def print_document(data: Any, fmt: str, file: Path | None = None) -> None:
    """A Kubernetes object or manifest in the -o format, to `file` or stdout."""
    emit(dump(data, fmt), file)


def print_report(report: Any) -> None:
    """A report for programs (`-o json` of `wf lint`, `wf cluster status`): one indented JSON document."""
    sys.stdout.write(json.dumps(report, indent=2) + "\n")


def print_line(text: str = "", *, err: bool = False, style: str | None = None) -> None:
    """One line for a person or a log, to stdout (results) or stderr (progress, notes, errors); `style` colours
    it on a terminal only."""
    if style is None:
        print(text, file=sys.stderr if err else sys.stdout, flush=True)
    else:
        console(err=err).print(text, style=style, markup=False, highlight=False, soft_wrap=True)


def print_error(exc: WfError) -> int:
    """An error as wf reports it, to stderr; its exit code. Bad input is one problem per line whatever the width,
    so CI can parse `file:line: field: message`."""
    if isinstance(exc, InputError):
        for problem in exc.problems:
            print_line(str(problem), err=True)
    else:
        print_line(f"error: {exc}", err=True)
    return exc.exit_code


@cache
def console(*, err: bool = False) -> Console:
    """The console of stdout or stderr, for live displays and styled lines. It prints user text (file:line,
    messages, names) as it is: no emoji codes (`job.yaml:100:` is not 💯)."""
    from rich.console import Console

    return Console(stderr=err, emoji=False)


def print_table(table: Table, out: Console | None = None) -> None:
    """A table with every value whole, as kubectl get prints: on a pipe or a narrow terminal the lines get as wide
    as the widest row needs (the terminal wraps them) instead of cutting values to `Suc…`."""
    from rich.console import Console
    from rich.measure import Measurement

    out = out or console()
    needed = Measurement.get(out, out.options.update_width(10**6), table).maximum
    if needed <= out.width:
        out.print(table)
        return
    wide = Console(file=out.file, width=needed, force_terminal=out.is_terminal, emoji=False,
                   color_system=out.color_system, no_color=out.no_color)  # type: ignore[arg-type]
    wide.print(table, crop=False)
