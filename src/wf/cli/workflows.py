"""`wf submit | watch | get | list | logs | retry | stop | delete`: the developer's commands against a cluster.

Kubernetes flags follow kubectl (--context, -n/--namespace, --kubeconfig, KUBECONFIG); --eks-cluster with
--region reaches an EKS cluster without a kubeconfig or the aws CLI. The Kubernetes client is imported
inside the commands only.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from wf.cli.offline import dump
from wf.cli.options import (
    CatalogOption,
    ContextOption,
    EksOption,
    KubeconfigOption,
    NamespaceOption,
    ObjectOutput,
    PlainOption,
    RegionOption,
)
from wf.core.errors import WorkFailed

out = Console()
err = Console(stderr=True)


def _connect(context: str | None, namespace: str | None, kubeconfig: str | None,
             eks_cluster: str | None = None, region: str | None = None) -> Any:
    from wf.controller.client import connect

    return connect(kubeconfig=kubeconfig, context=context, namespace=namespace, eks_cluster=eks_cluster, region=region)


def _report(runs: Any, console: Console) -> None:
    """Cost, then the verdict: exit 0 only when every workflow succeeded (the README's exit codes)."""
    from wf.controller.view import interruption_summary, print_costs

    print_costs(console, [(run.name, run.cost) for run in runs.runs if run.cost is not None])
    now = datetime.now(UTC)
    for run in runs.runs:
        view = runs.outcome.views.get((run.namespace, run.name))
        if view is not None and view.interruptions:
            console.print(f"{run.name} {interruption_summary(view, run.cost, now)}", markup=False, highlight=False)
    if runs.stopped:
        names = " ".join(r.name for r in runs.runs)
        err.print(f"stopped watching; the workflows keep running (wf watch {names} to follow again, "
                  f"wf stop NAME to stop one)", markup=False, highlight=False)
        raise typer.Exit(130)
    failures = [r for r in runs.runs if not r.succeeded]
    for run in runs.runs:
        if run.succeeded:
            console.print(f"{run.namespace}/{run.name}: Succeeded", markup=False, highlight=False)
    if failures:
        lines = []
        for run in failures:
            lines.append(f"{run.namespace}/{run.name}: {run.phase}{f' ({run.message})' if run.message else ''}")
            lines.extend(f"  step {step} failed: {message}" for step, message in run.failed_steps)
        raise WorkFailed("\n".join(lines))


def submit_command(
    jobs: Annotated[list[Path], typer.Argument(help="Job specs (kind: TrainingJob), or folders of them.")],
    watch: Annotated[
        bool, typer.Option("--watch", "-w", help="Follow the workflows to their end; exit code = result.")
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Server-side dry run: validated by the API server, nothing created.")
    ] = False,
    parameter: Annotated[
        list[str] | None, typer.Option("-p", "--parameter", help="Override a workflow parameter: key=value.")
    ] = None,
    catalog: CatalogOption = None,
    rate: Annotated[float, typer.Option("--qps", help="Client-side limit on creates per second.")] = 20.0,
    plain: PlainOption = False,
    context: ContextOption = None,
    namespace: NamespaceOption = None,
    kubeconfig: KubeconfigOption = None,
    eks_cluster: EksOption = None,
    region: RegionOption = None,
) -> None:
    """Compile jobs with the cluster's catalog and create their workflows (safe to retry)."""
    from wf.controller import api
    from wf.controller.submit import parse_parameters
    from wf.controller.view import make_display

    params = parse_parameters(parameter or [])
    kube = _connect(context, namespace, kubeconfig, eks_cluster, region)
    submitted = api.submit([str(j) for j in jobs], dry_run=dry_run, parameters=params,
                           catalog=catalog, namespace=namespace, rate=rate, burst=max(1, int(rate * 2)), kube=kube)
    for item in submitted:
        verb = "validated by the API server (dry run)" if dry_run else "created"
        out.print(f"{item.kind} {item.namespace}/{item.name} {verb} from {item.source}", markup=False, highlight=False)
    workflows = [s.light() for s in submitted if s.kind == "Workflow"]
    scheduled = len(submitted) - len(workflows)
    del submitted
    if watch and not dry_run:
        if scheduled:
            err.print("note: scheduled jobs (CronWorkflow) are not watched; each run is a Workflow of its own",
                      markup=False, highlight=False)
        if workflows:
            _report(api.watch(workflows, display=make_display(plain or None), catalog=catalog, kube=kube), out)


def watch_command(
    names: Annotated[list[str] | None, typer.Argument(help="Workflow names.")] = None,
    selector: Annotated[
        str, typer.Option("-l", "--selector", help="Every workflow with these labels, e.g. wf.dev/batch=ID.")
    ] = "",
    plain: PlainOption = False,
    catalog: CatalogOption = None,
    context: ContextOption = None,
    namespace: NamespaceOption = None,
    kubeconfig: KubeconfigOption = None,
    eks_cluster: EksOption = None,
    region: RegionOption = None,
) -> None:
    """Follow workflows to their end: exit 0 Succeeded, 1 Failed/Error (naming the failed steps)."""
    from wf.controller import api
    from wf.controller.view import make_display

    kube = _connect(context, namespace, kubeconfig, eks_cluster, region)
    _report(api.watch(names or [], selector=selector, namespace=namespace, display=make_display(plain or None),
                      catalog=catalog, kube=kube), out)


def get_command(
    name: Annotated[str, typer.Argument(help="Workflow name.")],
    output: ObjectOutput = None,
    catalog: CatalogOption = None,
    context: ContextOption = None,
    namespace: NamespaceOption = None,
    kubeconfig: KubeconfigOption = None,
    eks_cluster: EksOption = None,
    region: RegionOption = None,
) -> None:
    """A workflow's steps (phase, class, node, time, retries), its result and what it cost."""
    from wf.controller.catalog_source import resolve_catalog
    from wf.controller.cost import job_cost
    from wf.controller.ops import get_workflow
    from wf.controller.steps import workflow_view
    from wf.controller.view import attempts_table, interruption_summary, print_cost, print_table, workflow_lines
    from wf.controller.watch import Insight

    kube = _connect(context, namespace, kubeconfig, eks_cluster, region)
    workflow = get_workflow(kube, name, namespace)
    if output is not None:
        sys.stdout.write(dump(workflow, output))
        return
    view = workflow_view(workflow)
    insight = Insight(kube, lambda: resolve_catalog(kube, str(catalog) if catalog else None))
    explanations = {}
    for row in view.steps:
        if row.pending and row.attempts and (reason := insight.explain(workflow, row)):
            explanations[row.attempts[-1].node_id] = reason
        for attempt in row.attempts:
            if attempt.host:
                insight.node(attempt.host)
    out.print("\n".join(workflow_lines(view, explanations)), markup=False, highlight=False, soft_wrap=True)
    now = datetime.now(UTC)
    cost = job_cost(view, workflow, insight.nodes(), now)
    if any(len(row.attempts) > 1 for row in view.steps):
        print_table(out, attempts_table(view, now))
    if view.interruptions:
        out.print(interruption_summary(view, cost, now), markup=False, highlight=False)
    print_cost(out, view.name, cost)


def list_command(
    all_namespaces: Annotated[bool, typer.Option("-A", "--all-namespaces", help="Every namespace.")] = False,
    selector: Annotated[str, typer.Option("-l", "--selector", help="Label selector, e.g. wf.dev/job=bert.")] = "",
    output: ObjectOutput = None,
    context: ContextOption = None,
    namespace: NamespaceOption = None,
    kubeconfig: KubeconfigOption = None,
    eks_cluster: EksOption = None,
    region: RegionOption = None,
) -> None:
    """Workflows, newest first."""
    from rich.table import Table

    from wf.controller.ops import list_workflows
    from wf.controller.steps import parse_time
    from wf.controller.view import duration, print_table

    kube = _connect(context, namespace, kubeconfig, eks_cluster, region)
    items = list_workflows(kube, namespace, all_namespaces=all_namespaces, label_selector=selector)
    if output is not None:
        sys.stdout.write(dump({"apiVersion": "v1", "kind": "List", "items": items}, output))
        return
    table = Table(box=None, pad_edge=False)
    for column in (["namespace"] if all_namespaces else []) + ["name", "phase", "progress", "age", "duration", "job"]:
        table.add_column(column.upper(), no_wrap=column in ("namespace", "name"))
    now = datetime.now(UTC)
    for item in items:
        meta, status = item["metadata"], item.get("status") or {}
        created, started, finished = (parse_time(meta.get("creationTimestamp")), parse_time(status.get("startedAt")),
                                      parse_time(status.get("finishedAt")))
        row = [meta["name"], status.get("phase") or "Pending", status.get("progress") or "-",
               duration((now - created).total_seconds()) if created else "-",
               duration(((finished or now) - started).total_seconds()) if started else "-",
               (meta.get("labels") or {}).get("wf.dev/job", "-")]
        table.add_row(*([meta.get("namespace", "")] if all_namespaces else []) + row)
    print_table(out, table)


def logs_command(
    name: Annotated[str, typer.Argument(help="Workflow name.")],
    follow: Annotated[bool, typer.Option("-f", "--follow", help="Stream until the workflow ends.")] = False,
    step: Annotated[str | None, typer.Option("--step", help="Only this step.")] = None,
    context: ContextOption = None,
    namespace: NamespaceOption = None,
    kubeconfig: KubeconfigOption = None,
    eks_cluster: EksOption = None,
    region: RegionOption = None,
) -> None:
    """Logs of a workflow's steps, through the API server."""
    from wf.controller.ops import log_lines

    kube = _connect(context, namespace, kubeconfig, eks_cluster, region)
    try:
        for line in log_lines(kube, name, namespace, step=step, follow=follow):
            print(line, flush=True)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


def retry_command(
    name: Annotated[str, typer.Argument(help="A Failed or Error workflow.")],
    watch: Annotated[bool, typer.Option("--watch", "-w", help="Follow it to its end.")] = False,
    plain: PlainOption = False,
    catalog: CatalogOption = None,
    context: ContextOption = None,
    namespace: NamespaceOption = None,
    kubeconfig: KubeconfigOption = None,
    eks_cluster: EksOption = None,
    region: RegionOption = None,
) -> None:
    """Run a failed workflow's failed steps again, keeping what succeeded."""
    from wf.controller import api
    from wf.controller.ops import retry_workflow
    from wf.controller.view import make_display

    kube = _connect(context, namespace, kubeconfig, eks_cluster, region)
    retried = retry_workflow(kube, name, namespace)
    out.print(f"{retried['metadata']['namespace']}/{name} retrying its failed steps", markup=False, highlight=False)
    if watch:
        _report(api.watch([name], namespace=namespace, display=make_display(plain or None), catalog=catalog, kube=kube),
                out)


def stop_command(
    name: Annotated[str, typer.Argument(help="Workflow name.")],
    context: ContextOption = None,
    namespace: NamespaceOption = None,
    kubeconfig: KubeconfigOption = None,
    eks_cluster: EksOption = None,
    region: RegionOption = None,
) -> None:
    """Stop a running workflow (spec.shutdown=Stop): running steps end, exit handlers run."""
    from wf.controller.ops import stop_workflow

    kube = _connect(context, namespace, kubeconfig, eks_cluster, region)
    stopped = stop_workflow(kube, name, namespace)
    out.print(f"{stopped['metadata']['namespace']}/{name} stopping", markup=False, highlight=False)


def delete_command(
    names: Annotated[list[str], typer.Argument(help="Workflow names.")],
    context: ContextOption = None,
    namespace: NamespaceOption = None,
    kubeconfig: KubeconfigOption = None,
    eks_cluster: EksOption = None,
    region: RegionOption = None,
) -> None:
    """Delete workflows and their pods."""
    from wf.controller.ops import delete_workflow

    kube = _connect(context, namespace, kubeconfig, eks_cluster, region)
    for name in names:
        delete_workflow(kube, name, namespace)
        out.print(f"{namespace or kube.namespace}/{name} deleted", markup=False, highlight=False)


def register(app: typer.Typer) -> None:
    app.command("submit")(submit_command)
    app.command("watch")(watch_command)
    app.command("get")(get_command)
    app.command("list")(list_command)
    app.command("logs")(logs_command)
    app.command("retry")(retry_command)
    app.command("stop")(stop_command)
    app.command("delete")(delete_command)
