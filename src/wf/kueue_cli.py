"""`wf kueue generate` and `wf kueue roles`: the teams' queues and permissions from the catalog."""

from __future__ import annotations

import typer

from wf.commands.core import CatalogOption
from wf.eksctl_cli import OutputFile, _emit


def kueue_generate(catalog: CatalogOption = None, output: OutputFile = None) -> None:
    """Kueue ResourceFlavors, a ClusterQueue per team (one cohort), LocalQueues and WorkloadPriorityClasses."""
    from wf import kueue
    from wf.catalog import load_catalog

    _emit(kueue.render(load_catalog(catalog)), output)


def kueue_roles(catalog: CatalogOption = None, output: OutputFile = None) -> None:
    """A Role and RoleBinding per team namespace: run, stop, retry and delete workflows; read pods and logs."""
    from wf import team_roles
    from wf.catalog import load_catalog

    _emit(team_roles.render(load_catalog(catalog)), output)


def register(app: typer.Typer) -> None:
    kueue_app = typer.Typer(help="Team queues (Kueue) and team permissions from the catalog's `queues:`.",
                            no_args_is_help=True)
    kueue_app.command("generate")(kueue_generate)
    kueue_app.command("roles")(kueue_roles)
    app.add_typer(kueue_app, name="kueue")
