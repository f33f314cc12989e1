"""`wf eksctl generate` and `wf karpenter generate`: node provisioning config from the catalog."""

from __future__ import annotations

import typer

from wf.cli.options import CatalogOption, FileOption, GeneratedOutput, emit


def eksctl_generate(catalog: CatalogOption = None, output: GeneratedOutput = "yaml", file: FileOption = None) -> None:
    """eksctl ClusterConfig: one managed node group per compute class x capacity x zone."""
    from wf.model.catalog import load_catalog
    from wf.render import eksctl

    emit(eksctl.render(load_catalog(catalog)), file)


def karpenter_generate(
    catalog: CatalogOption = None, output: GeneratedOutput = "yaml", file: FileOption = None
) -> None:
    """Karpenter EC2NodeClasses and one NodePool per compute class x capacity."""
    from wf.model.catalog import load_catalog
    from wf.render import karpenter

    emit(karpenter.render(load_catalog(catalog)), file)


def register(app: typer.Typer) -> None:
    eksctl_app = typer.Typer(help="eksctl cluster config generated from the compute-class catalog.",
                             no_args_is_help=True)
    eksctl_app.command("generate")(eksctl_generate)
    karpenter_app = typer.Typer(help="Karpenter NodePools generated from the compute-class catalog.",
                                no_args_is_help=True)
    karpenter_app.command("generate")(karpenter_generate)
    app.add_typer(eksctl_app, name="eksctl")
    app.add_typer(karpenter_app, name="karpenter")
