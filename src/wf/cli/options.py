"""The command line's shared vocabulary: every command area takes its common options from here, so one flag
means one thing everywhere (as in kubectl).

* `-o/--output` is the output FORMAT (yaml, json, text), never a file.
* `--file FILE` writes a generated document to a file instead of stdout (every generator: compile, schema,
  eksctl/karpenter generate, instances refresh); a shell redirect does the same for stdout.
* `-n/--namespace` is the namespace a command acts in; `--context`, `--kubeconfig` (and `--eks-cluster`
  with `--region`) choose the cluster; `--catalog` the compute-class catalog.
"""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer

from wf.core.errors import InputError


class Output(str, Enum):
    """Formats of a Kubernetes object or generated document."""

    yaml = "yaml"
    json = "json"


class Format(str, Enum):
    """Formats of a report: lines for a person, or one JSON document for a program."""

    text = "text"
    json = "json"


class Generated(str, Enum):
    """Formats of generated multi-document YAML (eksctl, Karpenter)."""

    yaml = "yaml"


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
ReportOutput = Annotated[str, _format_of(Format)]
# `wf lint --format` came first (a published flag) and stays an alias.
LintOutput = Annotated[str, _format_of(Format, "--format")]
GeneratedOutput = Annotated[str, _format_of(Generated)]

FileOption = Annotated[Path | None, typer.Option("--file", help="Write to this file instead of stdout.",
                                                    dir_okay=False)]

CatalogOption = Annotated[
    Path | None,
    typer.Option("--catalog", help="Compute-class catalog file (default: WF_CATALOG, else, against a cluster, the "
                                   "one installed there, else eksctl/catalog.yaml)."),
]
ContextOption = Annotated[str | None, typer.Option("--context", help="Kubeconfig context (default: the current one).")]
NamespaceOption = Annotated[str | None, typer.Option("-n", "--namespace", help="Namespace (default: the context's).")]
KubeconfigOption = Annotated[
    str | None, typer.Option("--kubeconfig", help="Kubeconfig file (default: KUBECONFIG, ~/.kube/config).")
]
EksOption = Annotated[
    str | None,
    typer.Option("--eks-cluster", help="EKS cluster name: endpoint and token from AWS, no kubeconfig needed."),
]
RegionOption = Annotated[str | None, typer.Option("--region", help="AWS region of --eks-cluster.")]
PlainOption = Annotated[bool, typer.Option("--plain", help="Plain lines even on a terminal.")]


def emit(text: str, file: Path | None) -> None:
    """Generated text to `file` (--file) or stdout."""
    if file is None:
        sys.stdout.write(text)
        return
    try:
        file.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot write: {exc.strerror}", file=file) from None
