"""`wf eksctl generate` and `wf karpenter generate`: node provisioning config from the catalog."""

from __future__ import annotations

import typer

from wf.cli.options import CatalogOption, FileOption
from wf.cli.output import emit

app = typer.Typer()
eksctl_app = typer.Typer(help="eksctl cluster config generated from the compute-class catalog.", no_args_is_help=True)
karpenter_app = typer.Typer(help="Karpenter NodePools generated from the compute-class catalog.", no_args_is_help=True)
app.add_typer(eksctl_app, name="eksctl")
app.add_typer(karpenter_app, name="karpenter")


@eksctl_app.command("generate")
def eksctl_generate(catalog: CatalogOption = None, file: FileOption = None) -> None:
    """eksctl ClusterConfig: one managed node group per compute class x capacity x zone."""
    from wf.model.catalog import load_catalog
    from wf.render import eksctl

    emit(eksctl.render(load_catalog(catalog)), file)


@karpenter_app.command("generate")
def karpenter_generate(catalog: CatalogOption = None, file: FileOption = None) -> None:
    """Karpenter EC2NodeClasses and one NodePool per compute class x capacity."""
    from wf.model.catalog import load_catalog
    from wf.render import karpenter

    emit(karpenter.render(load_catalog(catalog)), file)
