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
    from rich.segment import Segment
    from rich.style import Style
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
    as the widest row needs (the terminal wraps them) instead of cutting values to `Suc…`.

    Drawn here a line at a time from rich's own pieces (its box characters, styles and title), as rich would draw
    it at the width it needs: rich lays out and renders every cell as a renderable of its own, which costs about a
    millisecond a row (`wf get -o wide` of a 10,000-item fan-out printed 20,000 rows in a minute)."""
    from rich.segment import Segments

    out = out or console()
    out.print(Segments(_table_segments(table, out)), crop=False, soft_wrap=True)


def _table_segments(table: Table, out: Console) -> list[Segment]:
    from rich.cells import cell_len
    from rich.segment import Segment

    if not table.columns:
        return [Segment.line()]
    if table.show_footer or table.show_lines or table.leading or table.caption or table.width is not None or \
            table.expand or any(row.end_section for row in table.rows) or table.collapse_padding:
        raise ValueError("print_table draws headers, rows, a title and box edges only")  # wf's tables: no more
    top, right, bottom, left = table.padding
    if top or bottom:
        raise ValueError("print_table draws cells one line high: no vertical padding")
    get_style = out.get_style
    columns = table.columns
    header_style = get_style(table.header_style or "")
    row_styles = [get_style(row.style or "") for row in table.rows]
    grid: list[list[str | _Cell]] = []  # column by column, the header first
    pads = []
    for index, column in enumerate(columns):
        pad = (0 if index == 0 and not table.pad_edge else left, 0 if index == len(columns) - 1 and not table.pad_edge
               else right)
        base = get_style(column.style or "")
        cells = [_cell(out, column.header, header_style + get_style(column.header_style or "") + base, pad)]
        # The plain text of an unstyled cell is the cell (the test is _cell's, inlined: 10,000s of cells).
        styles = row_styles if not base else [base + style for style in row_styles]
        cells += [value if type(value) is str and not style and value.isprintable() and "[" not in value
                  else _cell(out, value, style, pad) for value, style in zip(column._cells, styles, strict=True)]
        grid.append(cells)
        pads.append(pad)
    widths = [max((len(c) if c.isascii() else cell_len(c)) + pad[0] + pad[1] if isinstance(c, str) else c.width
                  for c in cells)
              for cells, pad in zip(grid, pads, strict=True)]
    box = table.box.substitute(out.options, safe=table.safe_box if table.safe_box is not None else out.safe_box) \
        if table.box else None
    box = box.get_plain_headed_box() if box and not table.show_header else box
    border = get_style(table.style or "") + get_style(table.border_style or "")
    segments: list[Segment] = []
    if table.title:
        width = sum(widths) + (len(widths) + 1 if box and table.show_edge else len(widths) - 1 if box else 0)
        title = out.render_str(table.title, style=get_style(table.title_style or "table.title"), highlight=False) \
            if isinstance(table.title, str) else table.title
        segments += out.render(title, out.options.update(width=width, justify=table.title_justify))
    if box and table.show_edge:
        segments += [Segment(box.get_top(widths), border), Segment.line()]
    rows = list(zip(*grid, strict=True))[0 if table.show_header else 1:]
    shapes = [(" " * pad[0], width - pad[0] - pad[1], " " * pad[1], column.justify)
              for pad, width, column in zip(pads, widths, columns, strict=True)]
    for number, row in enumerate(rows):
        header = number == 0 and table.show_header
        edge = ((box.head_left, box.head_vertical, box.head_right) if number == 0 else
                (box.foot_left, box.foot_vertical, box.foot_right) if number == len(rows) - 1 else
                (box.mid_left, box.mid_vertical, box.mid_right)) if box else ("", "", "")
        outer = (edge[0], edge[2]) if box and table.show_edge else ("", "")
        if not border and all(type(cell) is str for cell in row):  # unstyled plain text: the line as one string
            # str.ljust and rjust pad an ASCII text as rich does (a wide character takes two columns: _justified).
            texts = [before + (cell.ljust(inner) if justify == "left" else cell.rjust(inner)) + after
                     if cell.isascii() and justify in ("left", "right")
                     else before + _justified(str(cell), inner, justify) + after
                     for cell, (before, inner, after, justify) in zip(row, shapes, strict=True)]
            segments.append(Segment(outer[0] + edge[1].join(texts) + outer[1] + "\n"))
            continue
        drawn = [_Cell.plain(cell, pad) if isinstance(cell, str) else cell for cell, pad in zip(row, pads, strict=True)]
        height = max(len(cell.lines) for cell in drawn)
        for line in range(height):
            if outer[0]:
                segments.append(Segment(outer[0], border))
            for index, (cell, column, width) in enumerate(zip(drawn, columns, widths, strict=True)):
                if index and box:
                    segments.append(Segment(edge[1], border))
                # A header sits on its row's last line, a body cell on its first (rich's vertical alignment).
                at = line - (height - len(cell.lines)) if header else line
                segments += cell.line(at, width, column.justify)
            if outer[1]:
                segments.append(Segment(outer[1], border))
            segments.append(Segment.line())
        if header and box:
            segments += [Segment(box.get_row(widths, "head", edge=table.show_edge), border), Segment.line()]
    if box and table.show_edge:
        segments += [Segment(box.get_bottom(widths), border), Segment.line()]
    return segments


class _Cell:
    """A cell's lines of text (each its segments, its width and the style its justification spaces take) and its
    padding: one line of plain text, nearly every cell, takes no rich layout."""

    def __init__(self, lines: list[tuple[list[Segment], int, Style]], pad: tuple[int, int], style: Style) -> None:
        self.lines, self.pad, self.style = lines, pad, style
        self.width = max((length for _, length, _ in lines), default=0) + pad[0] + pad[1]

    @classmethod
    def plain(cls, text: str, pad: tuple[int, int]) -> _Cell:
        from rich.cells import cell_len
        from rich.segment import Segment
        from rich.style import Style

        return cls([([Segment(text)] if text else [], cell_len(text), Style.null())], pad, Style.null())

    def line(self, index: int, width: int, justify: str | None) -> list[Segment]:
        """Line `index` at `width` as rich draws it: padding, then the text justified in one segment when it has
        one style, then padding; a blank of the whole width below the cell's last line."""
        from rich.segment import Segment

        if not 0 <= index < len(self.lines):
            return [Segment(" " * width, self.style)]
        segments, length, spaces = self.lines[index]
        space = width - self.pad[0] - self.pad[1] - length
        before, after = (space, 0) if justify == "right" else (space // 2, space - space // 2) \
            if justify == "center" else (0, space)
        if not segments or (len(segments) == 1 and segments[0].style == spaces):
            text = " " * before + (segments[0].text if segments else "") + " " * after
            middle = [Segment(text, spaces)] if text else []
        else:
            middle = [*([Segment(" " * before, spaces)] if before else []), *segments,
                      *([Segment(" " * after, spaces)] if after else [])]
        return [*([Segment(" " * self.pad[0], self.style)] if self.pad[0] else []), *middle,
                *([Segment(" " * self.pad[1], self.style)] if self.pad[1] else [])]


def _width(text: str) -> int:
    """Columns `text` takes on a terminal (ASCII's own length, without rich's look-ups)."""
    from rich.cells import cell_len

    return len(text) if text.isascii() else cell_len(text)


def _justified(text: str, width: int, justify: str | None) -> str:
    space = width - _width(text)
    if justify == "right":
        return " " * space + text
    if justify == "center":
        return " " * (space // 2) + text + " " * (space - space // 2)
    return text + " " * space


def _cell(out: Console, value: Any, style: Style, pad: tuple[int, int]) -> str | _Cell:
    """A cell as rich lays it out at the width it needs: its lines (markup read, as rich's tables read it); an
    unstyled line of plain text, nearly every cell, as itself."""
    from rich.cells import cell_len
    from rich.segment import Segment
    from rich.text import Text

    if isinstance(value, str) and value.isprintable() and "[" not in value:
        return value if not style else _Cell([([Segment(value, style)] if value else [], cell_len(value), style)],
                                             pad, style)
    text = value if isinstance(value, Text) else out.render_str(str(value), highlight=False)
    text = text.copy()
    text.expand_tabs()
    lines = []
    for part in text.split("\n", allow_blank=True):
        base = style + out.get_style(part.style or "")
        segments = [Segment(s.text, base + s.style if s.style else base) for s in part.render(out) if s.text]
        lines.append((segments, part.cell_len, base))
    return _Cell(lines, pad, style)
