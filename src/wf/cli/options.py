"""The command line's shared vocabulary: every command area takes its common options from here, so one flag
means one thing everywhere (as in kubectl).

* `-o/--output` is the output FORMAT (yaml, json, text; name and wide where kubectl get offers them; table and
  html for `wf report`) where a command has a choice of formats, never a file; commands with one format (the
  lock-file generators) have no -o.
* `--file FILE` writes a generated document to a file instead of stdout (every generator: compile, schema,
  eksctl/karpenter/kueue generate, kueue roles, instances refresh); a shell redirect does the same for stdout.
* The cluster a command acts on is one `Target`, declared once by `with_target`: `--context`, `--kubeconfig`,
  `-n/--namespace`, or `--eks-cluster` with `--region` (the EKS cluster's region, nothing else) and `--role-arn`.
* `--catalog` is the compute-class catalog.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from wf.controller.archive import ARGO_SERVER_ENV, Archive
from wf.controller.client import Kube, Target

if TYPE_CHECKING:
    from wf.aws.s3 import Endpoint


@dataclass(frozen=True)
class Invocation:
    """How wf.cli.app.main was called: every command's typer context object (`ctx.obj`)."""

    # wf is the process's program (`wf`, `python -m wf`): a command may replace the process (os.execv). An
    # in-process caller (tests, typer's CliRunner) keeps its process.
    own_process: bool = False


class Output(str, Enum):
    """Formats of a Kubernetes object: a compiled manifest, a workflow, a list of them."""

    yaml = "yaml"
    json = "json"


class Listing(str, Enum):
    """Formats of objects read from a cluster, as kubectl get offers them: the objects, their `kind/name` (for
    scripts), or the table with more columns."""

    yaml = "yaml"
    json = "json"
    name = "name"
    wide = "wide"


class Created(str, Enum):
    """Formats of what a command created or waited for, or of objects whose table has no wider form (templates,
    schedules): the objects, or their `kind/name` (for scripts)."""

    yaml = "yaml"
    json = "json"
    name = "name"


class Named(str, Enum):
    """The one format of a command that says which workflows it acted on: their `kind/name`, for scripts."""

    name = "name"


class Format(str, Enum):
    """Formats of a report: lines for a person, or one JSON document for a program."""

    text = "text"
    json = "json"


class Page(str, Enum):
    """Formats of `wf report`: a table for a person, one JSON document for a program, one self-contained HTML page
    with pictures."""

    table = "table"
    json = "json"
    html = "html"


def _format_of(kind: type[Enum], *aliases: str) -> Any:
    """-o/--output for the formats of `kind`; a file name there (the old `-o FILE`) is told to use --file."""
    names = [m.value for m in kind]

    def check(value: str | None) -> str | None:
        if value is not None and value not in names:
            raise typer.BadParameter(
                f"{value!r} is not a format ({', '.join(names)}); -o/--output names the format, "
                f"write a file with a shell redirect (> {value}) or, for generated documents, --file {value}"
            )
        return value

    return typer.Option("-o", "--output", *aliases, callback=check, metavar="|".join(names),
                        help=f"Output format: {', '.join(names)}.")


# Formats are typed str and checked by the callback, so an old `-o FILE` gets the migration hint above.
ObjectOutput = Annotated[str | None, _format_of(Output)]
ListingOutput = Annotated[str | None, _format_of(Listing)]
CreatedOutput = Annotated[str | None, _format_of(Created)]
NamedOutput = Annotated[str | None, _format_of(Named)]
ReportOutput = Annotated[str, _format_of(Format)]
PageOutput = Annotated[str, _format_of(Page)]
# `wf lint --format` came first (a published flag) and stays an alias.
LintOutput = Annotated[str, _format_of(Format, "--format")]

FileOption = Annotated[Path | None, typer.Option("--file", help="Write to this file instead of stdout.",
                                                    dir_okay=False)]

CatalogOption = Annotated[
    Path | None,
    typer.Option("--catalog", help="Compute-class catalog file (default: WF_CATALOG, else the `catalog:` of the "
                                   ".wf.yaml nearest above the job or this folder, else, against a cluster, the one "
                                   "installed there)."),
]
PlainOption = Annotated[bool, typer.Option("--plain", help="Plain lines even on a terminal.")]


# The Target's fields as options, in the order help lists them.
_TARGET_OPTIONS: dict[str, Any] = {
    "context": Annotated[str | None, typer.Option("--context", help="Kubeconfig context (default: the current one).")],
    "namespace": Annotated[str | None, typer.Option("-n", "--namespace", help="Namespace (default: the context's).")],
    "kubeconfig": Annotated[
        str | None, typer.Option("--kubeconfig", help="Kubeconfig file (default: KUBECONFIG, ~/.kube/config).")
    ],
    "eks_cluster": Annotated[
        str | None,
        typer.Option("--eks-cluster", help="EKS cluster name: endpoint and token from AWS, no kubeconfig needed."),
    ],
    "region": Annotated[
        str | None,
        typer.Option("--region", help="AWS region of the EKS cluster (--eks-cluster, or a context whose "
                                      "`aws eks get-token` names none)."),
    ],
    "role_arn": Annotated[
        str | None, typer.Option("--role-arn", help="IAM role to assume for the EKS cluster's token.")
    ],
}


ArgoServerOption = Annotated[str | None, typer.Option(
    "--argo-server", envvar=ARGO_SERVER_ENV, show_envvar=True,
    help="Argo Server's URL, which serves the runs Argo archived (their live object gone) and the steps of "
         "workflows too big for their object (offloaded to its database); default: the local cluster's, which "
         "`wf cluster up` starts.")]


NO_ARGO_SERVER = ("give Argo Server's URL with --argo-server or WF_ARGO_SERVER (the platform's: `kubectl -n argo "
                  "port-forward svc/argo-server 2746` serves it at https://127.0.0.1:2746); a local cluster's "
                  "`wf cluster up` starts one")


def archive_of(kube: Kube, argo_server: str | None) -> Archive | None:
    """The run history an --argo-server option names (Argo Server's archive, and the steps Argo offloaded to its
    database), with the caller's token; else the local cluster's whose context this is; None when neither says
    where."""
    import os

    from wf.cluster.runtime import state_of_context

    if argo_server:
        origin = ARGO_SERVER_ENV if os.environ.get(ARGO_SERVER_ENV) == argo_server else "--argo-server"
        return Archive(argo_server, origin, token=kube.bearer())
    state = state_of_context(kube.context)
    if state is None or not state.argo_server_url:
        return None
    return Archive(state.argo_server_url, f"the local cluster {state.name}'s: `wf cluster up --name {state.name}` "
                                          "restarts it")


def local_artifact_store(context: str) -> Endpoint | None:
    """The S3 store of the local cluster whose context this is, when it has real nodes (Argo's executor archives
    their pods' logs there); None for any other context."""
    from wf.cluster.runtime import state_of_context

    state = state_of_context(context)
    return state.artifact_store() if state is not None else None


PROMETHEUS_ENV = "WF_PROMETHEUS_URL"  # the --prometheus of every `wf report` and `wf platform check` in a shell or CI


def local_prometheus(context: str) -> tuple[str, str] | None:
    """The Prometheus of the local cluster whose context this is (`wf cluster up` starts one), with the words that
    say so in messages; None for any other context."""
    from wf.cluster.runtime import state_of_context

    state = state_of_context(context)
    if state is None or not state.prometheus_url:
        return None
    return state.prometheus_url, (f"the local cluster {state.name}'s: `wf cluster up --name {state.name}` restarts "
                                  "it, --prometheus names another")


def with_target(*, namespaced: bool = True) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Give a command the cluster-target options: it declares one `target: Target` parameter, and its CLI takes
    --context, -n/--namespace, --kubeconfig, --eks-cluster, --region and --role-arn in its place. A command that
    acts across namespaces (`namespaced=False`) has no -n rather than one it ignores."""
    options = {name: option for name, option in _TARGET_OPTIONS.items() if namespaced or name != "namespace"}

    def decorate(command: Callable[..., None]) -> Callable[..., None]:
        hints = typing.get_type_hints(command, include_extras=True)
        own = [p.replace(annotation=hints[p.name]) for p in inspect.signature(command).parameters.values()
               if p.name != "target"]
        added = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=option)
                 for name, option in options.items()]

        @functools.wraps(command)
        def run(**values: Any) -> None:
            target = Target(**{name: values.pop(name) for name in options})
            command(**values, target=target)

        # typer reads the parameters from the signature and the annotations: it sees the options, not `target`.
        run.__signature__ = inspect.Signature([*own, *added], return_annotation=None)  # type: ignore[attr-defined]
        run.__annotations__ = {p.name: p.annotation for p in (*own, *added)}
        return run

    return decorate
