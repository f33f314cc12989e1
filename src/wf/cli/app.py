"""The `wf` command line. Each area registers its own commands; this module maps errors to exit codes.

Command modules import the Kubernetes client and boto3 inside command bodies only, so that `wf compile`
and `wf lint` start fast (see benchmarks/).
"""

from __future__ import annotations

import gc
import sys

import typer
from rich.console import Console

from wf.core.errors import InputError, WfError

app = typer.Typer(
    name="wf",
    help="Training workflows on Kubernetes: typed job specs compiled to Argo Workflows and placed on node groups.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
# soft_wrap: one problem per line whatever the width, so CI can parse `file:line: field: message`.
err = Console(stderr=True, soft_wrap=True)


def _register() -> None:
    # Each area registers its own commands; their modules import the Kubernetes client and boto3 only inside
    # command bodies, so registering them all costs `wf compile` nothing.
    from wf.cli import cluster, generate, instances, kueue, offline, workflows

    for module in (offline, workflows, generate, kueue, cluster, instances):
        module.register(app)


def main(argv: list[str] | None = None) -> None:
    # A big job spec allocates a few hundred thousand long-lived objects (YAML nodes, models, the manifest);
    # with the default threshold the cyclic collector re-walks them hundreds of times and doubles `wf compile`'s
    # time. Collecting less often changes nothing else: nearly all of it is freed by reference counting.
    gc.set_threshold(20_000, 10, 10)
    _register()
    try:
        rc = app(args=argv, standalone_mode=False)
    except WfError as exc:
        if isinstance(exc, InputError):
            for problem in exc.problems:
                err.print(str(problem), markup=False, highlight=False)
        else:
            err.print(f"error: {exc}", markup=False, highlight=False)
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
