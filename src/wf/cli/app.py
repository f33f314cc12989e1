"""The `wf` command line: each area's module declares its commands on its own `app` (command groups such as
`wf cluster` inside it), this one joins them and maps errors to exit codes.

Command modules import the Kubernetes client, boto3, rich's tables and the compiler inside command bodies only,
so that `wf --help` and `wf compile` start fast (benchmarks/startup.py).
"""

from __future__ import annotations

import gc
import sys

import typer

from wf.cli import cluster, generate, instances, kueue, offline, platform, workflows
from wf.cli.output import print_line
from wf.core.errors import InputError, WfError

app = typer.Typer(
    name="wf",
    help="Training workflows on Kubernetes: typed job specs compiled to Argo Workflows and placed on node groups.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    # Click's plain help: typer's rich help imports rich, markdown-it and pygments, which made `wf --help` cost
    # three times the rest of the start-up (benchmarks/startup.py).
    rich_markup_mode=None,
)
for area in (offline, workflows, generate, kueue, platform, cluster, instances):
    app.add_typer(area.app)


def main(argv: list[str] | None = None) -> None:
    # A big job spec allocates a few hundred thousand long-lived objects (YAML nodes, models, the manifest);
    # with the default threshold the cyclic collector re-walks them hundreds of times and doubles `wf compile`'s
    # time. Collecting less often changes nothing else: nearly all of it is freed by reference counting.
    gc.set_threshold(20_000, 10, 10)
    try:
        rc = app(args=argv, standalone_mode=False)
    except WfError as exc:
        if isinstance(exc, InputError):
            # One problem per line whatever the width, so CI can parse `file:line: field: message`.
            for problem in exc.problems:
                print_line(str(problem), err=True)
        else:
            print_line(f"error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)
    except SystemExit:
        raise
    except Exception as exc:  # click's usage errors arrive here in non-standalone mode
        # typer >= 0.20 vendors click (typer._click), so `click.ClickException` no longer matches: test the shape.
        if isinstance(exc, typer.Abort):
            sys.exit(130)
        show = getattr(exc, "show", None)
        if callable(show) and isinstance(getattr(exc, "exit_code", None), int):
            show()
            sys.exit(2)
        raise
    sys.exit(rc if isinstance(rc, int) else 0)
