"""`wf template create|list|get|delete` and `wf cron list|suspend|resume|delete`: the platform's shared jobs as
WorkflowTemplates (run with `wf submit --from workflowtemplate/NAME`, in cli/workflows.py), and the scheduled
ones `wf submit` makes of a job with a `schedule:`.

The Kubernetes client is imported inside the commands only.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from wf.cli.options import CatalogOption, Created, CreatedOutput, with_target
from wf.cli.output import print_document, print_line, print_table
from wf.controller.client import Target, connect
from wf.core.constants import CRON_WORKFLOW, JOB_LABEL, JOB_TEAM_LABEL, WORKFLOW_TEMPLATE

if TYPE_CHECKING:
    from rich.table import Table

app = typer.Typer()
template_app = typer.Typer(help="Shared jobs as WorkflowTemplates: created from job specs, run with "
                                "`wf submit --from workflowtemplate/NAME -p key=value`.", no_args_is_help=True)
cron_app = typer.Typer(help="Scheduled jobs: the CronWorkflows `wf submit` creates from a job with `schedule:`.",
                       no_args_is_help=True)
app.add_typer(template_app, name="template")
app.add_typer(cron_app, name="cron")

AllNamespaces = Annotated[bool, typer.Option("-A", "--all-namespaces", help="Every namespace.")]


def _ago(timestamp: str | None, now: datetime) -> str:
    from wf.core.units import duration, parse_time

    when = parse_time(timestamp)
    return f"{duration((now - when).total_seconds())} ago" if when else "-"


def _table(columns: list[str], rows: list[list[str]]) -> Table:
    from rich.table import Table

    table = Table(box=None, pad_edge=False)
    for column in columns:
        table.add_column(column.upper(), no_wrap=column in ("namespace", "name", "step"))
    for row in rows:
        table.add_row(*row)
    return table


def _namespaced(columns: list[str], all_namespaces: bool) -> list[str]:
    return (["namespace"] if all_namespaces else []) + columns


def _where(item: dict[str, Any], all_namespaces: bool) -> list[str]:
    return [item["metadata"].get("namespace", "")] if all_namespaces else []


def _print_objects(items: list[dict[str, Any]], kind: str, output: str | None) -> bool:
    """The objects in an -o format other than the table (True), or nothing (False)."""
    if output == Created.name.value:
        for item in items:
            print_line(f"{kind}/{item['metadata']['name']}")
        return True
    if output is not None:
        print_document(items[0] if len(items) == 1 else {"apiVersion": "v1", "kind": "List", "items": items}, output)
        return True
    return False


# --- wf template -------------------------------------------------------------------------------------------------


@template_app.command("create")
@with_target()
def template_create(
    jobs: Annotated[list[Path], typer.Argument(help="Job specs (kind: TrainingJob), or folders of them.")],
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Server-side dry run: validated by the API server, nothing written.")
    ] = False,
    catalog: CatalogOption = None,
    output: CreatedOutput = None,
    *,
    target: Target,
) -> None:
    """Compile job specs as WorkflowTemplates with the cluster's catalog, checked as `wf submit` checks a job
    (nothing is written if any is refused), and create them, or update those wf made before."""
    from wf.controller.catalog_source import resolve_catalog
    from wf.controller.submit import load_jobs
    from wf.controller.templates import create_templates

    loaded = load_jobs([str(j) for j in jobs])
    kube = connect(target)
    resolved = resolve_catalog(kube, catalog, near=jobs[0])
    applied = create_templates(kube, loaded, resolved, namespace=target.namespace, dry_run=dry_run)
    if _print_objects([a.template for a in applied], "workflowtemplate", output):
        return
    for item in applied:
        outcome = "validated by the API server (dry run)" if item.outcome == "validated" else item.outcome
        print_line(f"WorkflowTemplate {item.namespace}/{item.name} {outcome} from {item.source}")


@template_app.command("list")
@with_target()
def template_list(all_namespaces: AllNamespaces = False, output: CreatedOutput = None, *, target: Target) -> None:
    """The namespace's WorkflowTemplates: job, team, parameters (required ones marked) and when each was made."""
    from wf.controller.templates import list_objects, template_parameters

    items = list_objects(connect(target), WORKFLOW_TEMPLATE, target.namespace, all_namespaces=all_namespaces)
    if _print_objects(items, "workflowtemplate", output):
        return
    now = datetime.now(UTC)
    rows = []
    for item in items:
        meta = item["metadata"]
        labels = meta.get("labels") or {}
        parameters = ", ".join(f"{p.name} (required)" if p.required else p.name for p in template_parameters(item))
        rows.append(_where(item, all_namespaces) + [meta["name"], labels.get(JOB_LABEL, "-"),
                                                    labels.get(JOB_TEAM_LABEL, "-"), parameters or "-",
                                                    _ago(meta.get("creationTimestamp"), now)])
    print_table(_table(_namespaced(["name", "job", "team", "parameters", "created"], all_namespaces), rows))


@template_app.command("get")
@with_target()
def template_get(name: Annotated[str, typer.Argument(help="WorkflowTemplate name.")], output: CreatedOutput = None,
                 *, target: Target) -> None:
    """A WorkflowTemplate: its job and team, its parameters with their defaults, and each step's compute class,
    capacity (with its Spot fallback) and queue as compiled."""
    from wf.controller.templates import get_template, template_parameters, template_steps

    template = get_template(connect(target), name, target.namespace)
    if _print_objects([template], "workflowtemplate", output):
        return
    meta = template["metadata"]
    labels = meta.get("labels") or {}
    print_line(f"WorkflowTemplate {meta.get('namespace')}/{meta['name']}: job {labels.get(JOB_LABEL, '-')}, team "
               f"{labels.get(JOB_TEAM_LABEL, '-')}, created {meta.get('creationTimestamp', '-')} "
               f"({_ago(meta.get('creationTimestamp'), datetime.now(UTC))})")
    parameters = template_parameters(template)
    if parameters:
        choices = any(p.choices for p in parameters)
        rows = [[p.name, "(required)" if p.required else p.default or '""',
                 *([", ".join(p.choices) or "-"] if choices else [])] for p in parameters]
        print_table(_table(["parameter", "default", *(["choices"] if choices else [])], rows))
    steps = []
    for step in template_steps(template):
        placed = step.placement
        capacity = placed.capacity or "-"
        if placed.fallback_after is not None:
            capacity += f", on-demand after {placed.fallback_after} interruptions"
        steps.append([step.name + (" (on exit)" if step.on_exit else ""), placed.compute_class or "-", capacity,
                      placed.queue or "-"])
    print_table(_table(["step", "class", "capacity", "queue"], steps))
    example = " ".join(f"-p {p.name}=VALUE" for p in parameters if p.required)
    print_line(f"run it: wf submit --from workflowtemplate/{meta['name']}{' ' + example if example else ''}")


@template_app.command("delete")
@with_target()
def template_delete(names: Annotated[list[str], typer.Argument(help="WorkflowTemplate names.")], *,
                    target: Target) -> None:
    """Delete WorkflowTemplates; the workflows started from them keep the copy Argo stored in each."""
    from wf.controller.ops import delete_object

    kube = connect(target)
    for name in names:
        print_line(f"{delete_object(kube, WORKFLOW_TEMPLATE, name, target.namespace)}/{name} deleted")


# --- wf cron -----------------------------------------------------------------------------------------------------


@cron_app.command("list")
@with_target()
def cron_list(all_namespaces: AllNamespaces = False, output: CreatedOutput = None, *, target: Target) -> None:
    """The namespace's CronWorkflows: schedule, whether suspended, when each last started a workflow and how many
    of its workflows are running."""
    from wf.controller.templates import list_objects, schedule_of

    items = list_objects(connect(target), CRON_WORKFLOW, target.namespace, all_namespaces=all_namespaces)
    if _print_objects(items, "cronworkflow", output):
        return
    now = datetime.now(UTC)
    rows = []
    for item in items:
        cron = schedule_of(item)
        rows.append(_where(item, all_namespaces) + [cron.name, cron.job or "-", "; ".join(cron.schedules) or "-",
                                                    "yes" if cron.suspended else "no", _ago(cron.last_scheduled, now),
                                                    str(cron.active)])
    print_table(_table(_namespaced(["name", "job", "schedule", "suspended", "last scheduled", "active"],
                                   all_namespaces), rows))


@cron_app.command("suspend")
@with_target()
def cron_suspend(name: Annotated[str, typer.Argument(help="CronWorkflow name.")], *, target: Target) -> None:
    """Suspend a CronWorkflow (spec.suspend, as `argo cron suspend`): no workflow starts on its schedule until
    `wf cron resume`; workflows already running run on."""
    from wf.controller.templates import set_cron_suspended

    suspended = set_cron_suspended(connect(target), name, target.namespace, True)
    print_line(f"{suspended['metadata']['namespace']}/{name} suspended")


@cron_app.command("resume")
@with_target()
def cron_resume(name: Annotated[str, typer.Argument(help="CronWorkflow name.")], *, target: Target) -> None:
    """Resume a suspended CronWorkflow: clear spec.suspend; its next scheduled time starts a workflow."""
    from wf.controller.templates import set_cron_suspended

    resumed = set_cron_suspended(connect(target), name, target.namespace, False)
    print_line(f"{resumed['metadata']['namespace']}/{name} resumed")


@cron_app.command("delete")
@with_target()
def cron_delete(names: Annotated[list[str], typer.Argument(help="CronWorkflow names.")], *, target: Target) -> None:
    """Delete CronWorkflows, and the workflows they started (which they own)."""
    from wf.controller.ops import delete_object

    kube = connect(target)
    for name in names:
        print_line(f"{delete_object(kube, CRON_WORKFLOW, name, target.namespace)}/{name} deleted")
