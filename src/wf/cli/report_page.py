"""`wf report`'s presentation: the table's cells, and `-o html`'s one self-contained page (no network: the
pictures are PNGs in data URIs) drawn with matplotlib's Agg renderer from the report's Digest.

It is also the program that draws the page, `python -m wf.cli.report_page DIGEST [--file FILE]`: `wf report`
writes the digest to a private file and replaces its process with this one (wf.cli.report.hand_over), so the
Kubernetes client's modules (67 MB) and matplotlib's with numpy and Pillow (40 MB) are never in memory together.
It never imports the Kubernetes client; matplotlib is imported inside the drawing functions, so `wf --help`, the
table and `-o json` never load it.
"""

from __future__ import annotations

import base64
import html
import io
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wf.cli.output import emit, print_error
from wf.controller.report import OUTCOMES, Digest, StepBars, Usage
from wf.controller.view import money
from wf.core.errors import InputError, WfError
from wf.core.units import duration

if TYPE_CHECKING:
    from matplotlib.figure import Figure, FigureBase

OUTCOME_COLOURS = {"succeeded": "#2e8b57", "failed": "#c0392b", "error": "#7b241c", "interrupted": "#e67e22",
                   "running": "#2e86c1", "pending": "#aab7b8"}
SPOT_TINT = 0.5  # Spot attempts are their outcome's colour this much lighter (hatching 8,000 bars takes seconds)
DPI = 100
WIDTH = 12.0  # inches: 1,200 pixels at DPI
TIMELINE_MAX_HEIGHT = 16.0  # inches: 250 workflows get 6 pixels each, and the canvas stays under 8 MB
LABELLED_ROWS = 60  # beyond this many workflows the timeline names none (the table and JSON do)


def headers() -> list[str]:
    return ["team", "class", "workflows S/F/E/R", "node-hours", "On-Demand $", "Spot est. $", "card-hours",
            "quota share", "queue wait p50/p95", "interruptions", "fallbacks", "redone node-h", "redone $"]


def cells(line: Usage) -> list[str]:
    """A Usage line as the table shows it ("*" reads "all")."""
    waits = (f"{duration(line.queue_wait_p50)}/{duration(line.queue_wait_p95)}"
             if line.queue_wait_p50 is not None and line.queue_wait_p95 is not None else "-")
    share = (f"{line.quota_share:.0%}" if line.quota_share is not None else
             "no quota" if line.card_hours and line.compute_class != "*" else "-")  # a total has no one quota
    return [
        "all" if line.team == "*" else line.team, "all" if line.compute_class == "*" else line.compute_class,
        "/".join(str(line.workflows.get(outcome, 0)) for outcome in OUTCOMES),
        f"{line.node_hours:.2f}", money(line.on_demand_usd), money(line.estimate_usd),
        f"{line.card_hours:.2f}" if line.card_hours is not None else "-", share, waits,
        str(line.interruptions), str(line.fallbacks), f"{line.redone_node_hours:.2f}", money(line.redone_usd),
    ]


def main(argv: Sequence[str] | None = None) -> int:
    """The drawing program: the page from the digest file (which it removes) to --file or stdout; wf's exit
    codes and error lines."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m wf.cli.report_page",
                                     description="wf report -o html's page from a report digest (removed once read)")
    parser.add_argument("digest", type=Path)
    parser.add_argument("--file", type=Path)
    args = parser.parse_args(argv)
    try:
        write_page(args.digest, args.file)
    except WfError as exc:
        return print_error(exc)
    except KeyboardInterrupt:
        return 130
    return 0


def write_page(digest: Path, file: Path | None) -> None:
    """The page of a digest file (`Digest.dumps`) to `file` or stdout; the digest file is removed once read."""
    try:
        text = digest.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read the report's digest: {exc.strerror}", file=digest) from None
    finally:
        digest.unlink(missing_ok=True)
    try:
        report = Digest.loads(text)
    except (ValueError, KeyError, TypeError) as exc:
        raise InputError(f"not a report digest ({type(exc).__name__}: {exc})", file=digest) from None
    del text
    emit(html_page(report), file)


def html_page(report: Digest) -> str:
    """The report as one HTML document that needs nothing else: the table, the three pictures, the assumptions."""
    pictures = []
    for title, draw, height in PICTURES:  # each encoded before the next is drawn: one canvas in memory at a time
        figure = _figure(WIDTH, height(report))
        draw(figure, report)
        pictures.append((title, png(figure)))
        del figure
    rows = "\n".join("<tr" + (' class="total"' if line.compute_class == "*" else "") + ">"
                     + "".join(f"<td>{html.escape(cell)}</td>" for cell in cells(line)) + "</tr>"
                     for line in report.lines)
    images = "\n".join(f'<figure><img alt="{html.escape(title)}" src="data:image/png;base64,{data}">'
                       f"<figcaption>{html.escape(title)}</figcaption></figure>" for title, data in pictures)
    notes = "\n".join(f"<li>{html.escape(a)}</li>" for a in report.assumptions)
    comparison = f"<p>{html.escape(report.comparison)}</p>" if report.comparison else ""
    span = report.window
    title = (f"wf report: workflows started in the last {span.since} "
             f"({span.start:%Y-%m-%d %H:%M} to {span.end:%Y-%m-%d %H:%M} UTC)")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font-family: sans-serif; margin: 1.5em; color: #222; }}
table {{ border-collapse: collapse; font-size: 0.9em; }}
th, td {{ padding: 0.2em 0.6em; border-bottom: 1px solid #ddd; text-align: right; }}
th:nth-child(-n+2), td:nth-child(-n+2) {{ text-align: left; }}
tr.total td {{ font-weight: bold; }}
img {{ max-width: 100%; }}
figure {{ margin: 1.5em 0; }}
</style></head>
<body>
<h1>{html.escape(title)}</h1>
<p>{len(report.runs)} workflows; cost {money(report.total.estimate_usd)} $ estimated
({money(report.total.on_demand_usd)} $ On-Demand), {report.total.interruptions} interruptions,
{money(report.total.redone_usd)} $ of work redone.</p>
<table><thead><tr>{"".join(f"<th>{html.escape(h)}</th>" for h in headers())}</tr></thead>
<tbody>
{rows}
</tbody></table>
{comparison}
{images}
<h2>Assumptions</h2>
<ul>
{notes}
</ul>
</body></html>
"""


def png(figure: Figure) -> str:
    """A figure as base64 PNG (without matplotlib's software tag: the page links nowhere)."""
    out = io.BytesIO()
    figure.savefig(out, format="png", dpi=DPI, metadata={"Software": None})
    return base64.b64encode(out.getvalue()).decode("ascii")


def _figure(width: float, height: float) -> Figure:
    """A figure of its own (never pyplot's global state), drawn by Agg."""
    import matplotlib

    matplotlib.use("Agg")  # no display, no GUI toolkit: the same pictures on a laptop, a server and CI
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


@cache
def _epoch() -> datetime:
    from matplotlib.dates import get_epoch

    return datetime.fromisoformat(get_epoch()).replace(tzinfo=UTC)


def _days(moment: datetime) -> float:
    """matplotlib's date number (days since its epoch), without date2num's per-call cost: a timeline has
    thousands of attempts."""
    return (moment - _epoch()).total_seconds() / 86400


def _time_axis(ax: Any, report: Digest) -> None:
    from matplotlib.dates import AutoDateLocator, ConciseDateFormatter

    locator = AutoDateLocator()
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(ConciseDateFormatter(locator))
    ax.set_xlim(_days(report.window.start), _days(report.window.end))


def timeline(figure: FigureBase, report: Digest) -> None:
    """A Gantt chart: a row per workflow, a lane per step inside it, a bar per attempt coloured by how it ended;
    Spot attempts lighter."""
    from matplotlib.collections import PolyCollection
    from matplotlib.patches import Patch

    runs = report.runs
    ax = figure.add_subplot()
    bars: dict[tuple[str, bool], list[list[tuple[float, float]]]] = {}
    end = _days(report.window.end)
    for y, run in enumerate(runs):
        lane_of = _lanes(run.steps, end)
        lanes = max(lane_of, default=0) + 1
        for lane, row in zip(lane_of, run.steps, strict=True):
            low = y - 0.4 + 0.8 * lane / lanes
            high = low + 0.8 / lanes
            for attempt in row.attempts:
                if attempt.started is None:
                    continue
                left = _days(attempt.started)
                right = max(left, _days(attempt.finished) if attempt.finished else end)
                key = (attempt.outcome if attempt.outcome in OUTCOME_COLOURS else "running", attempt.capacity == "spot")
                bars.setdefault(key, []).append([(left, low), (right, low), (right, high), (left, high)])
    for (outcome, spot), polygons in sorted(bars.items()):
        ax.add_collection(PolyCollection(polygons, facecolors=_colour(outcome, spot), edgecolors="none",
                                         linewidths=0))
    ax.set_ylim(len(runs) - 0.5, -0.5)
    if len(runs) <= LABELLED_ROWS:
        ax.set_yticks(range(len(runs)), [f"{r.team}/{r.name}" for r in runs], fontsize=7)
    else:
        ax.set_yticks([])
        ax.set_ylabel(f"{len(runs)} workflows, oldest at the top")
    _time_axis(ax, report)
    handles = [Patch(facecolor=_colour(o, spot), label=f"{o}{' (Spot)' if spot else ''}") for o, spot in sorted(bars)]
    ax.legend(handles=handles, loc="lower left", bbox_to_anchor=(0, 1), fontsize=7, ncols=len(handles), frameon=False)


def _colour(outcome: str, spot: bool) -> tuple[float, float, float]:
    from matplotlib.colors import to_rgb

    rgb = to_rgb(OUTCOME_COLOURS[outcome])
    return tuple(c + (1 - c) * SPOT_TINT for c in rgb) if spot else rgb  # type: ignore[return-value]


def _lanes(steps: Sequence[StepBars], now: float) -> list[int]:
    """A lane per step inside its workflow's row, as few as the steps that ran at once need (steps that ran one
    after the other share one)."""
    free_at: list[float] = []  # when each lane's last step ended
    out = []
    for row in steps:  # in the order of their start
        begin = _days(row.started) if row.started else now
        lane = next((i for i, end in enumerate(free_at) if end <= begin), len(free_at))
        if lane == len(free_at):
            free_at.append(0.0)
        free_at[lane] = max(begin, _days(row.finished) if row.finished else now)
        out.append(lane)
    return out


def usage(figure: FigureBase, report: Digest) -> None:
    """A panel per compute class: each team's cards (or nodes) in use over the window, its quota dashed."""
    classes = _classes(report)
    axes = figure.subplots(max(1, len(classes)), 1, sharex=True, squeeze=False)[:, 0]
    colours = _team_colours(sorted({s.team for s in report.usage}))
    times = None
    for ax, compute_class in zip(axes, classes, strict=False):
        unit = "nodes"
        for series in (s for s in report.usage if s.compute_class == compute_class):
            times = times or [_days(t) for t in series.times]
            unit = series.unit
            ax.step(times, series.values, where="post", color=colours[series.team], label=series.team)
            if series.quota:
                ax.axhline(series.quota, color=colours[series.team], linestyle="--", linewidth=1)
        ax.set_ylabel(f"{compute_class}\n{unit}")
        ax.set_ylim(bottom=0)
        ax.legend(loc="upper left", fontsize=7)
        _time_axis(ax, report)
    if not classes:
        axes[0].text(0.5, 0.5, "no node time was priced in the window", ha="center", va="center",
                     transform=axes[0].transAxes)


def interruptions(figure: FigureBase, report: Digest) -> None:
    """Interrupted attempts per hour (or per window/48 when shorter), stacked by class and capacity."""
    from matplotlib.ticker import MaxNLocator

    ax = figure.add_subplot()
    groups: dict[str, list[float]] = {}
    for event in report.interruptions:
        groups.setdefault(f"{event.compute_class} {event.capacity}", []).append(_days(event.at))
    start, end = _days(report.window.start), _days(report.window.end)
    count = max(1, min(48, round(report.window.hours)))
    edges = [start + (end - start) * i / count for i in range(count + 1)]
    if groups:
        labels = sorted(groups)
        ax.hist([groups[label] for label in labels], bins=edges, stacked=True, label=labels)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.legend(loc="upper left", fontsize=7)
    else:
        ax.text(0.5, 0.5, "no interruptions in the window", ha="center", va="center", transform=ax.transAxes)
    ax.set_ylabel(f"interruptions per {duration((end - start) * 86400 / count)}")
    _time_axis(ax, report)


def _team_colours(teams: Sequence[str]) -> dict[str, Any]:
    from matplotlib import colormaps

    palette = colormaps["tab10"]
    return {team: palette(i % 10) for i, team in enumerate(teams)}


def _classes(report: Digest) -> list[str]:
    return sorted({s.compute_class for s in report.usage})


# Each picture: its caption, how it is drawn into a figure, and its height in inches for a report.
PICTURES: tuple[tuple[str, Callable[[FigureBase, Digest], None], Callable[[Digest], float]], ...] = (
    ("Timeline of the window's workflows: each attempt of each step, by outcome (Spot lighter)", timeline,
     lambda r: min(TIMELINE_MAX_HEIGHT, max(3.0, 0.8 + 0.14 * len(r.runs)))),
    ("Use per team and class over time, against the team's quota (dashed)", usage,
     lambda r: 0.6 + 2.2 * max(1, len(_classes(r)))),
    ("Interruptions over time", interruptions, lambda r: 2.6),
)


def save_png(report: Digest, path: str) -> None:
    """The page's pictures stacked in one PNG (the README's screenshot: `benchmarks/report.py --png`)."""
    heights = [height(report) for _, _, height in PICTURES]
    figure = _figure(WIDTH, sum(heights))
    parts = figure.subfigures(len(PICTURES), 1, height_ratios=heights, squeeze=False)[:, 0]
    for part, (_, draw, _) in zip(parts, PICTURES, strict=True):
        draw(part, report)
    figure.savefig(path, dpi=DPI, metadata={"Software": None})


if __name__ == "__main__":
    sys.exit(main())
