"""`wf eksctl generate` and `wf karpenter generate`: node provisioning config from the catalog."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from wf.commands.core import CatalogOption
from wf.errors import InputError

OutputFile = Annotated[Optional[Path], typer.Option("-o", "--output", help="Write here instead of stdout.")]


def _emit(text: str, output: Path | None) -> None:
    if output is None:
        sys.stdout.write(text)
        return
    try:
        output.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot write: {exc.strerror}", file=output) from None


def eksctl_generate(catalog: CatalogOption = None, output: OutputFile = None) -> None:
    """eksctl ClusterConfig: one managed node group per compute class x capacity x zone."""
    from wf import eksctl
    from wf.catalog import load_catalog

    _emit(eksctl.render(load_catalog(catalog)), output)


def karpenter_generate(catalog: CatalogOption = None, output: OutputFile = None) -> None:
    """Karpenter EC2NodeClasses and one NodePool per compute class x capacity."""
    from wf import karpenter
    from wf.catalog import load_catalog

    _emit(karpenter.render(load_catalog(catalog)), output)


def register(app: typer.Typer) -> None:
    eksctl_app = typer.Typer(help="eksctl cluster config generated from the compute-class catalog.",
                             no_args_is_help=True)
    eksctl_app.command("generate")(eksctl_generate)
    karpenter_app = typer.Typer(help="Karpenter NodePools generated from the compute-class catalog.",
                                no_args_is_help=True)
    karpenter_app.command("generate")(karpenter_generate)
    app.add_typer(eksctl_app, name="eksctl")
    app.add_typer(karpenter_app, name="karpenter")
