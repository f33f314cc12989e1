"""The `wf` command line: each area's module declares its commands on its own `app` (command groups such as
`wf cluster` inside it), this one joins them and maps errors to exit codes.

Command modules import the Kubernetes client, boto3, rich's tables and the compiler inside command bodies only,
so that `wf --help` and `wf compile` start fast (benchmarks/startup.py).
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable
from typing import Annotated, Any

import typer

from wf.cli import cluster, generate, instances, kueue, offline, platform, report, templates, workflows
from wf.cli.options import Invocation
from wf.cli.output import print_error, print_line
from wf.core.errors import WfError

app = typer.Typer(
    name="wf",
    help="Training workflows on Kubernetes: typed job specs compiled to Argo Workflows and placed on node groups.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # --install-completion and --show-completion for bash, zsh, fish and PowerShell (typer's).
    add_completion=True,
    # Click's plain help: typer's rich help imports rich, markdown-it and pygments, which made `wf --help` cost
    # three times the rest of the start-up (benchmarks/startup.py).
    rich_markup_mode=None,
)
for area in (offline, workflows, templates, report, generate, kueue, platform, cluster, instances):
    app.add_typer(area.app)


def _print_version(asked: bool) -> None:
    if asked:
        from importlib.metadata import PackageNotFoundError, version

        try:
            print_line(f"wf {version('wf')}")
        except PackageNotFoundError:  # run from a source tree that was never installed
            print_line("wf (not installed)")
        raise typer.Exit()


@app.callback()
def _options(
    show_version: Annotated[bool, typer.Option("--version", callback=_print_version, is_eager=True,
                                               help="Print wf's version and exit.")] = False,
) -> None:
    pass


# typer (0.20 and later) labels each parameter in help with its Python type (`<list[Path]>`, `<str>`, `<float>`).
# Help speaks the developer's words instead, as click does: an argument is its name (`paths...`), an option's
# value its metavar or click's type name (TEXT, NUMBER, PATH).
_WORDS = {"str": "TEXT", "int": "INTEGER", "float": "NUMBER", "Path": "PATH", "path": "PATH", "file": "FILE",
          "dir": "DIR", "directory": "DIR"}


_TYPER_DISPLAY_TYPE: Callable[[Any, Any], str] | None = getattr(typer.core._TyperParameter, "display_type", None)


def _display_type(parameter: Any, ctx: Any) -> str:
    if isinstance(parameter, typer.core.TyperArgument) or _TYPER_DISPLAY_TYPE is None:
        return ""
    label = _TYPER_DISPLAY_TYPE(parameter, ctx).removeprefix("<").removesuffix(">")
    many = label.startswith("list[")
    label = label.removeprefix("list[").removesuffix("]") if many else label
    kind, ranged, _ = label.partition(" range")
    return f"<{_WORDS.get(kind, kind)}{' RANGE' if ranged else ''}{'...' if many else ''}>"


if _TYPER_DISPLAY_TYPE is not None:  # older typer prints click's help, without Python types
    typer.core._TyperParameter.display_type = _display_type  # type: ignore[method-assign,assignment]


def main(argv: list[str] | None = None) -> None:
    """wf with `argv`, or, without, as the process's program (the `wf` script, `python -m wf`): then a command
    may replace the process (`wf report -o html` hands over to its drawing program by exec)."""
    # A big job spec allocates a few hundred thousand long-lived objects (YAML nodes, models, the manifest);
    # with the default threshold the cyclic collector re-walks them hundreds of times and doubles `wf compile`'s
    # time. Collecting less often changes nothing else: nearly all of it is freed by reference counting.
    gc.set_threshold(20_000, 10, 10)
    try:
        rc = app(args=argv, standalone_mode=False, obj=Invocation(own_process=argv is None))
    except WfError as exc:
        sys.exit(print_error(exc))
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
