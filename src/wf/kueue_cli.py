"""`wf kueue generate` and `wf kueue roles`: the teams' queues and permissions from the catalog."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from wf.commands.core import CatalogOption
from wf.controller.cli import ContextOption, KubeconfigOption
from wf.eksctl_cli import OutputFile, _emit
from wf.errors import InputError


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


def queue_command(
    team: Annotated[Optional[str], typer.Option("--team", help="One team (default: every team).")] = None,
    context: ContextOption = None,
    kubeconfig: KubeconfigOption = None,
) -> None:
    """Each team's usage, quota, borrowing and pending work per compute class (from Kueue's workloads)."""
    from rich.console import Console
    from rich.table import Table

    from wf.controller.catalog_source import resolve_catalog
    from wf.controller.client import connect
    from wf.controller.queue import QueueReader, team_table
    from wf.kueue import queues_of

    kube = connect(kubeconfig=kubeconfig, context=context, namespace=None)
    catalog = resolve_catalog(kube)
    queues = queues_of(catalog)
    try:
        teams = [queues.team(team)] if team else queues.teams
    except KeyError:
        raise InputError(f"unknown team {team!r}; the catalog's teams: "
                         f"{', '.join(t.name for t in queues.teams)}") from None
    table = Table("team", "class", "capacity", "resource", "used", "quota", "borrowed", "pending")
    for row in team_table(catalog, QueueReader(kube), teams):
        table.add_row(*row)
    Console(soft_wrap=True).print(table)


def register(app: typer.Typer) -> None:
    kueue_app = typer.Typer(help="Team queues (Kueue) and team permissions from the catalog's `queues:`.",
                            no_args_is_help=True)
    kueue_app.command("generate")(kueue_generate)
    kueue_app.command("roles")(kueue_roles)
    app.add_typer(kueue_app, name="kueue")
    app.command("queue")(queue_command)
