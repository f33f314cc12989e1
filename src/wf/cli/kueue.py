"""`wf kueue generate`, `wf kueue roles` and `wf queue`: the teams' queues and permissions from the catalog, and
how each team's queue stands."""

from __future__ import annotations

from typing import Annotated

import typer

from wf.cli.options import CatalogOption, FileOption, Format, ReportOutput, with_target
from wf.cli.output import emit, print_report, print_table
from wf.controller.client import Target, connect
from wf.core.errors import InputError

app = typer.Typer()
kueue_app = typer.Typer(help="Team queues (Kueue) and team permissions from the catalog's `queues:`.",
                        no_args_is_help=True)
app.add_typer(kueue_app, name="kueue")


@kueue_app.command("generate")
def kueue_generate(catalog: CatalogOption = None, file: FileOption = None) -> None:
    """Kueue ResourceFlavors, a ClusterQueue per team (one cohort), LocalQueues and WorkloadPriorityClasses."""
    from wf.model.catalog import load_catalog
    from wf.render import kueue

    emit(kueue.render(load_catalog(catalog)), file)


@kueue_app.command("roles")
def kueue_roles(catalog: CatalogOption = None, file: FileOption = None) -> None:
    """A Role and RoleBinding per team namespace: run, stop, retry and delete workflows; read pods and logs."""
    from wf.model.catalog import load_catalog
    from wf.render import team_roles

    emit(team_roles.render(load_catalog(catalog)), file)


@app.command("queue")
@with_target(namespaced=False)
def queue_command(
    team: Annotated[str | None, typer.Option("--team", help="One team (default: every team).")] = None,
    catalog: CatalogOption = None,
    output: ReportOutput = Format.text.value,
    *,
    target: Target,
) -> None:
    """Each team's usage, quota, borrowing and pending work per compute class (from Kueue's workloads)."""
    from rich.table import Table

    from wf.controller.catalog_source import resolve_catalog
    from wf.controller.queue import QueueReader, team_table
    from wf.render.kueue import queues_of

    kube = connect(target)
    resolved = resolve_catalog(kube, str(catalog) if catalog else None)
    queues = queues_of(resolved)
    try:
        teams = [queues.team(team)] if team else queues.teams
    except KeyError:
        raise InputError(f"unknown team {team!r}; the catalog's teams: "
                         f"{', '.join(t.name for t in queues.teams)}") from None
    columns = ("team", "class", "capacity", "resource", "used", "quota", "borrowed", "pending")
    rows = team_table(resolved, QueueReader(kube), teams)
    if output == Format.json.value:
        print_report({"usage": [dict(zip(columns, row, strict=True)) for row in rows]})
        return
    table = Table(*columns)
    for row in rows:
        table.add_row(*row)
    print_table(table)
