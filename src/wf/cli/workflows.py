"""`wf submit | watch | wait | get | list | logs | retry | rerun | stop | suspend | resume | delete`: the developer's
commands against a cluster.

Each takes its cluster as one `Target` (options.with_target: kubectl's flags, or an EKS cluster by name). The
Kubernetes client is imported inside the commands only.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from wf.cli.options import (
    NO_ARGO_SERVER,
    ArgoServerOption,
    CatalogOption,
    CreatedOutput,
    Listing,
    ListingOutput,
    Named,
    NamedOutput,
    Output,
    PlainOption,
    archive_of,
    local_artifact_store,
    with_target,
)
from wf.cli.output import print_document, print_line, print_table
from wf.controller.client import Kube, Target, connect
from wf.core.errors import InputError, WorkFailed

if TYPE_CHECKING:
    from wf.controller.api import Run, Runs
    from wf.controller.cost import JobCost
    from wf.controller.submit import SubmitInterrupted, Submitted

app = typer.Typer()


def _print_costs(costs: Sequence[tuple[str, JobCost]]) -> None:
    """One workflow's cost step by step, several workflows' a row each with the total; then the assumptions."""
    from wf.controller.view import cost_table, costs_table

    print_table(cost_table(*costs[0]) if len(costs) == 1 else costs_table(costs))
    for assumption in dict.fromkeys(a for _, cost in costs for a in cost.assumptions):
        print_line(f"  assumption: {assumption}")


def _failure(run: Run) -> list[str]:
    """How a workflow that did not succeed ended: its phase and message, then each failed step."""
    return [f"{run.namespace}/{run.name}: {run.phase}{f' ({run.message})' if run.message else ''}",
            *(f"  step {step} failed: {message}" for step, message in run.failed_steps)]


def _report(runs: Runs) -> None:
    """Cost, then the verdict: exit 0 only when every workflow succeeded (the README's exit codes)."""
    from wf.controller.view import interruption_summary

    if priced := [(run.name, run.cost) for run in runs.runs if run.cost is not None and run.cost.steps]:
        _print_costs(priced)
    now = datetime.now(UTC)
    for run in runs.runs:
        view = runs.outcome.views.get((run.namespace, run.name))
        if view is not None and view.interruptions:
            print_line(f"{run.name} {interruption_summary(view, run.cost, now)}")
    if runs.stopped:
        names = " ".join(r.name for r in runs.runs)
        print_line(f"stopped watching; the workflows keep running (wf watch {names} to follow again, "
                   f"wf stop NAME to stop one)", err=True)
        raise typer.Exit(130)
    failures = [r for r in runs.runs if not r.succeeded]
    for run in runs.runs:
        if run.succeeded:
            print_line(f"{run.namespace}/{run.name}: Succeeded")
    if failures:
        raise WorkFailed("\n".join(line for run in failures for line in _failure(run)))


@app.command("submit")
@with_target()
def submit_command(
    jobs: Annotated[list[Path] | None, typer.Argument(help="Job specs (kind: TrainingJob), or folders of them.")]
    = None,
    from_template: Annotated[
        str | None, typer.Option("--from", help="Instead of job specs: run a WorkflowTemplate `wf template create` "
                                                "made, workflowtemplate/NAME (-p sets its parameters).")
    ] = None,
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
    argo_server: ArgoServerOption = None,
    rate: Annotated[float, typer.Option("--qps", help="Client-side limit on creates per second.")] = 20.0,
    skip_existing: Annotated[
        bool, typer.Option("--skip-existing", help="Create only the jobs an earlier run of the same submit did not "
                                                   "(after an interrupted submit).")
    ] = False,
    no_cache: Annotated[
        bool, typer.Option("--no-cache", help="Run cached steps again and save their results afresh (the job "
                                              "spec's `cache:`).")
    ] = False,
    plain: PlainOption = False,
    output: CreatedOutput = None,
    *,
    target: Target,
) -> None:
    """Compile jobs with the cluster's catalog and create their workflows (safe to retry). Stopped part way, it
    says which workflows were created, which may have been and which were not sent (exit 130, 3 or 2)."""
    from wf.controller import api
    from wf.controller.submit import SubmitInterrupted, parse_parameters

    params = parse_parameters(parameter or [])
    if bool(jobs) == bool(from_template):
        raise InputError("name job specs, or a template with --from workflowtemplate/NAME (one of the two)")
    if from_template and no_cache:
        raise InputError("--no-cache applies to job specs: the template's steps were compiled into it")
    kube = connect(target)
    try:
        if from_template:
            submitted = [_from_template(kube, from_template, params, catalog, target, dry_run, skip_existing)]
        else:
            submitted = api.submit([str(j) for j in jobs or []], dry_run=dry_run, parameters=params,
                                   catalog=catalog, namespace=target.namespace, rate=rate, burst=max(1, int(rate * 2)),
                                   skip_existing=skip_existing, no_cache=no_cache, kube=kube)
    except SubmitInterrupted as stopped:
        _account(stopped.created, dry_run, output, stopped)
        raise
    _account(submitted, dry_run, output)
    workflows = [s.light() for s in submitted if s.kind == "Workflow"]
    scheduled = len(submitted) - len(workflows)
    del submitted
    if watch and not dry_run:
        if scheduled:
            print_line("note: scheduled jobs (CronWorkflow) are not watched; each run is a Workflow of its own",
                       err=True)
        if workflows:
            _follow(kube, workflows, namespace=target.namespace, plain=plain, catalog=catalog,
                    argo_server=argo_server)


def _follow(kube: Kube, workflows: Any, *, namespace: str | None, plain: bool, catalog: Path | None,
            argo_server: str | None, selector: str = "") -> None:
    """Watch workflows to their end on the terminal's display (the steps of one too big for its object read
    through Argo Server), then their cost and the verdict."""
    from wf.controller import api
    from wf.controller.view import make_display

    _report(api.watch(workflows, selector=selector, namespace=namespace, display=make_display(plain or None),
                      catalog=catalog, kube=kube, archive=archive_of(kube, argo_server)))


def _from_template(kube: Kube, ref: str, params: dict[str, str], catalog: Path | None, target: Target,
                   dry_run: bool, skip_existing: bool) -> Submitted:
    """`wf submit --from workflowtemplate/NAME`: one workflow, checked against the template and the catalog."""
    from wf.controller.catalog_source import resolve_catalog
    from wf.controller.templates import submit_from_template

    return submit_from_template(kube, ref, params, resolve_catalog(kube, catalog), namespace=target.namespace,
                                dry_run=dry_run, skip_existing=skip_existing)


def _account(done: list[Submitted], dry_run: bool, output: str | None,
             stopped: SubmitInterrupted | None = None) -> None:
    """What the submit did: a line per job, or one document (-o) with every job under what became of it."""
    from wf.controller.submit import accounting

    if output == Listing.name.value:  # what exists now; the rest goes to stderr with SubmitInterrupted
        for item in done:
            print_line(f"{item.kind.lower()}/{item.name}")
        return
    if output is not None:
        print_document(accounting(done, stopped), output)
        return
    for item in done:
        verb = ("validated by the API server (dry run)" if dry_run else
                "already exists (an earlier submit created it)" if item.existing else "created")
        print_line(f"{item.kind} {item.namespace}/{item.name} {verb} from {item.source}")
    if stopped is not None:
        for what, items in (("may exist (its request was on the wire)", stopped.uncertain),
                            ("not created (refused)", stopped.refused), ("not sent", stopped.not_sent)):
            for unsent in items:
                print_line(f"{unsent.kind} {unsent.namespace}/{unsent.name} {what} from {unsent.source}")


@app.command("watch")
@with_target()
def watch_command(
    names: Annotated[list[str] | None, typer.Argument(help="Workflow names.")] = None,
    selector: Annotated[
        str, typer.Option("-l", "--selector", help="Every workflow with these labels, e.g. wf.dev/batch=ID.")
    ] = "",
    plain: PlainOption = False,
    catalog: CatalogOption = None,
    argo_server: ArgoServerOption = None,
    *,
    target: Target,
) -> None:
    """Follow workflows to their end: exit 0 Succeeded, 1 Failed/Error (naming the failed steps)."""
    _follow(connect(target), names or [], selector=selector, namespace=target.namespace, plain=plain,
            catalog=catalog, argo_server=argo_server)


def _seconds(flag: str, value: str | None) -> float | None:
    """A duration option (90s, 30m, 12h, 7d) in seconds; a malformed one is bad input (exit 2)."""
    from wf.core.units import parse_duration

    if value is None:
        return None
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise InputError(f"{flag}: {exc}") from None


@app.command("wait")
@with_target()
def wait_command(
    names: Annotated[list[str], typer.Argument(help="Workflow names.")],
    timeout: Annotated[
        str | None, typer.Option("--timeout", help="Give up after this long (90s, 30m, 2h): exit 1, naming the "
                                                   "workflows still running.")
    ] = None,
    output: NamedOutput = None,
    *,
    target: Target,
) -> None:
    """Block until each workflow ends, quietly, through one watch stream: exit 0 if all Succeeded, 1 if any
    Failed or Error (naming the failed steps) or on --timeout; -o name prints workflow/NAME of each that ended."""
    from wf.controller import api
    from wf.controller.steps import TERMINAL_PHASES

    seconds = _seconds("--timeout", timeout)
    runs = api.watch(names, namespace=target.namespace, with_cost=False, timeout=seconds, kube=connect(target))
    if runs.stopped:
        raise typer.Exit(130)
    for run in runs.runs:
        if run.phase in TERMINAL_PHASES:
            print_line(f"workflow/{run.name}" if output == Named.name.value else f"{run.namespace}/{run.name}: "
                                                                                  f"{run.phase}")
    lines = []
    for run in runs.runs:
        if run.phase == "Deleted":
            lines.append(f"{run.namespace}/{run.name}: deleted while waiting")
        elif run.phase not in TERMINAL_PHASES:  # the watch ends before they do only at the timeout
            lines.append(f"{run.namespace}/{run.name}: still {run.phase} after --timeout {timeout}")
        elif not run.succeeded:
            lines.extend(_failure(run))
    if lines:
        raise WorkFailed("\n".join(lines))


def _archived_run(kube: Kube, gone: InputError, name: str, namespace: str | None, argo_server: str | None
                  ) -> dict[str, Any]:
    """The newest archived run of a workflow whose live object is `gone`; InputError saying where it looked."""
    archive = archive_of(kube, argo_server)
    if archive is None:
        raise InputError(f"{gone}; to look in Argo's archive, {NO_ARGO_SERVER}") from None
    archived = archive.run(namespace or kube.namespace, name)
    if archived is None:
        raise InputError(f"{gone}, nor in Argo's archive ({archive.where})") from None
    return archived


def _workflow_or_archived(kube: Kube, name: str, namespace: str | None, argo_server: str | None
                          ) -> tuple[dict[str, Any], bool]:
    """The live workflow (its offloaded steps put back by Argo Server, when one is known), else its newest archived
    run (the live object gone); whether it came from the archive."""
    from wf.argo.nodes import offloaded
    from wf.controller.ops import WorkflowNotFound, get_workflow

    try:
        workflow = get_workflow(kube, name, namespace)
    except WorkflowNotFound as gone:
        return _archived_run(kube, gone, name, namespace, argo_server), True
    if offloaded(workflow) and (archive := archive_of(kube, argo_server)) is not None:
        # Its steps are in Argo's database: Argo Server puts them back (without one, the view says they are away).
        workflow = archive.hydrated(namespace or kube.namespace, name) or workflow
    return workflow, False


@app.command("get")
@with_target()
def get_command(
    name: Annotated[str, typer.Argument(help="Workflow name.")],
    output: ListingOutput = None,
    catalog: CatalogOption = None,
    argo_server: ArgoServerOption = None,
    *,
    target: Target,
) -> None:
    """A workflow's steps (phase, class, node, time, retries), its attempts (where each resumed), a multi-node
    step's launcher and workers, its result and what it cost (work redone after interruptions apart); -o wide
    lists every step's attempts, also when none was retried. A run whose live object is gone is read from Argo's
    archive (through Argo Server), the same way."""
    from wf.controller.catalog_source import resolve_catalog
    from wf.controller.ops import replicas
    from wf.controller.steps import workflow_view
    from wf.controller.view import attempts_table, interruption_summary, replicas_table, workflow_lines
    from wf.controller.watch import Insight

    kube = connect(target)
    workflow, archived = _workflow_or_archived(kube, name, target.namespace, argo_server)
    if output == Listing.name.value:
        print_line(f"workflow/{workflow['metadata']['name']}")
        return
    if output in (Output.yaml.value, Output.json.value):
        print_document(workflow, output)
        return
    insight = Insight(kube, lambda: resolve_catalog(kube, str(catalog) if catalog else None))
    view = insight.refine(workflow, workflow_view(workflow))
    explanations = {}
    for row in view.steps:
        if row.pending and row.attempts and (reason := insight.explain(workflow, row)):
            explanations[row.attempts[-1].node_id] = reason
    if archived:
        print_line(f"(from Argo's archive: the live workflow is gone; uid {workflow['metadata'].get('uid')})")
    for line in workflow_lines(view, explanations):
        print_line(line)
    now = datetime.now(UTC)
    cost = insight.cost(workflow, view, now)
    wide = output == Listing.wide.value
    if wide or any(len(row.attempts) > 1 for row in view.steps):
        print_table(attempts_table(view, now, every_step=wide))
    if not archived and (found := replicas(kube, view.name, view.namespace)):
        print_table(replicas_table(view.name, found))
    if view.interruptions:
        print_line(interruption_summary(view, cost, now))
    if not view.offloaded:  # its steps are unknown here: a cost of 0 would be wrong, and the line said so
        _print_costs([(view.name, cost)])


@app.command("list")
@with_target()
def list_command(
    all_namespaces: Annotated[bool, typer.Option("-A", "--all-namespaces", help="Every namespace.")] = False,
    selector: Annotated[str, typer.Option("-l", "--selector", help="Label selector, e.g. wf.dev/job=bert.")] = "",
    output: ListingOutput = None,
    archived: Annotated[bool, typer.Option("--archived", help="The runs Argo archived (through Argo Server), "
                                                              "their live object deleted or not.")] = False,
    since: Annotated[str | None, typer.Option("--since", help="Only workflows started this long ago or "
                                                              "later (90m, 24h, 7d).")] = None,
    argo_server: ArgoServerOption = None,
    *,
    target: Target,
) -> None:
    """Workflows, newest first; -o wide adds when each started and finished and its message. --archived lists
    Argo's archive instead of the live objects."""
    from rich.table import Table

    from wf.controller.listing import list_workflows
    from wf.core.units import duration, parse_time

    seconds = _seconds("--since", since)
    now = datetime.now(UTC)
    after = now - timedelta(seconds=seconds) if seconds is not None else None
    kube = connect(target)
    if archived:
        archive = archive_of(kube, argo_server)
        if archive is None:
            raise InputError(f"--archived reads Argo's archive: {NO_ARGO_SERVER}")
        items = list(archive.runs(None if all_namespaces else target.namespace or kube.namespace, since=after,
                                  selector=selector))
        items.sort(key=lambda w: (w.get("status") or {}).get("startedAt") or "", reverse=True)
    else:
        whole = output in (Output.yaml.value, Output.json.value)  # a table or names need a few fields of each
        items = list_workflows(kube, target.namespace, all_namespaces=all_namespaces, label_selector=selector,
                               listed_only=not whole)
        if after is not None:
            items = [w for w in items if (started := parse_time((w.get("status") or {}).get("startedAt"))) is None
                     or started >= after]
    if output == Listing.name.value:
        for item in items:
            print_line(f"workflow/{item['metadata']['name']}")
        return
    if output in (Output.yaml.value, Output.json.value):
        print_document({"apiVersion": "v1", "kind": "List", "items": items}, output)
        return
    wide = output == Listing.wide.value
    columns = ["name", "phase", "progress", "age", "duration", "job"] + (["started", "finished", "message"]
                                                                        if wide else [])
    table = Table(box=None, pad_edge=False)
    for column in (["namespace"] if all_namespaces else []) + columns:
        table.add_column(column.upper(), no_wrap=column in ("namespace", "name"))
    for item in items:
        meta, status = item["metadata"], item.get("status") or {}
        created, started, finished = (parse_time(meta.get("creationTimestamp")), parse_time(status.get("startedAt")),
                                      parse_time(status.get("finishedAt")))
        row = [meta["name"], status.get("phase") or "Pending", status.get("progress") or "-",
               duration((now - created).total_seconds()) if created else "-",
               duration(((finished or now) - started).total_seconds()) if started else "-",
               (meta.get("labels") or {}).get("wf.dev/job", "-")]
        if wide:
            row += [status.get("startedAt") or "-", status.get("finishedAt") or "-", status.get("message") or "-"]
        table.add_row(*([meta.get("namespace", "")] if all_namespaces else []) + row)
    print_table(table)


@app.command("logs")
@with_target()
def logs_command(
    name: Annotated[str, typer.Argument(help="Workflow name.")],
    step_name: Annotated[str | None, typer.Argument(metavar="STEP", help="Only this step, an attempt at a time.")]
    = None,
    follow: Annotated[bool, typer.Option("-f", "--follow", help="Stream until the workflow (or the STEP, moving on "
                                                                "to each retry's pod) ends.")] = False,
    step: Annotated[str | None, typer.Option("--step", help="Only this step: every attempt's pod, each line "
                                                            "prefixed [STEP], as for the whole workflow.")] = None,
    tail: Annotated[int | None, typer.Option("--tail", min=0, help="Only the last N lines of each pod.")] = None,
    attempt: Annotated[int | None, typer.Option("--attempt", min=1, help="With STEP: this attempt (1 is the "
                                                                         "first; default: the latest).")] = None,
    argo_server: ArgoServerOption = None,
    *,
    target: Target,
) -> None:
    """Logs of a workflow's steps, through the API server. With STEP, one attempt under a header naming it, its
    pod, node and capacity: the latest, or --attempt K. A pod that is gone (an interrupted attempt, a collected or
    archived run's) shows the log Argo archived; a run whose live object is gone is read from Argo's archive."""
    from wf.controller.ops import WorkflowNotFound, log_lines, step_log_lines

    if step and step_name:
        raise InputError("name the step once: STEP (an attempt at a time) or --step (every attempt, prefixed)")
    if attempt is not None and not step_name:
        raise InputError("--attempt needs a STEP: wf logs WORKFLOW STEP --attempt K")
    kube = connect(target)
    kube.artifact_store = local_artifact_store(kube.context)

    def lines(archived: dict[str, Any] | None) -> Iterator[str]:
        run: dict[str, Any] = {"archived": archived} if archived is not None else {}
        return (step_log_lines(kube, name, target.namespace, step_name, attempt=attempt, tail=tail, follow=follow,
                               **run)
                if step_name else log_lines(kube, name, target.namespace, step=step, follow=follow, tail=tail, **run))

    printed = False
    try:
        try:
            for line in lines(None):
                print_line(line)
                printed = True
        except WorkflowNotFound as gone:  # deleted: its archived run, read the same way
            if printed:
                raise
            for line in lines(_archived_run(kube, gone, name, target.namespace, argo_server)):
                print_line(line)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


@app.command("retry")
@with_target()
def retry_command(
    name: Annotated[str, typer.Argument(help="A Failed or Error workflow.")],
    watch: Annotated[bool, typer.Option("--watch", "-w", help="Follow it to its end.")] = False,
    plain: PlainOption = False,
    catalog: CatalogOption = None,
    argo_server: ArgoServerOption = None,
    *,
    target: Target,
) -> None:
    """Run a failed workflow's failed steps again, keeping what succeeded."""
    from wf.controller.ops import retry_workflow

    kube = connect(target)
    retried = retry_workflow(kube, name, target.namespace)
    print_line(f"{retried['metadata']['namespace']}/{name} retrying its failed steps")
    if watch:
        _follow(kube, [name], namespace=target.namespace, plain=plain, catalog=catalog, argo_server=argo_server)


@app.command("rerun")
@with_target()
def rerun_command(
    name: Annotated[str, typer.Argument(help="A workflow that has ended (Succeeded, Failed or Error).")],
    from_step: Annotated[str, typer.Option("--from", help="The first step to run again; every step after it "
                                                          "(its dependents) runs again too.")],
    parameter: Annotated[
        list[str] | None, typer.Option("-p", "--parameter", help="Override a workflow parameter: key=value. Steps "
                                                                 "before --from are reused as they ran, even those "
                                                                 "that read it.")
    ] = None,
    watch: Annotated[bool, typer.Option("--watch", "-w", help="Follow the new workflow to its end.")] = False,
    plain: PlainOption = False,
    catalog: CatalogOption = None,
    argo_server: ArgoServerOption = None,
    output: NamedOutput = None,
    *,
    target: Target,
) -> None:
    """Start a new workflow that reuses the outputs of every step before --from and runs that step and what
    follows (`argo resubmit --memoized`, from a step). Steps that failed in other branches run again too."""
    from wf.controller.ops import rerun_workflow
    from wf.controller.submit import parse_parameters

    params = parse_parameters(parameter or [])
    kube = connect(target)
    created = rerun_workflow(kube, name, from_step, params, target.namespace)
    new_name, namespace = created["metadata"]["name"], created["metadata"]["namespace"]
    if output == Named.name.value:
        print_line(f"workflow/{new_name}")
    else:
        print_line(f"Workflow {namespace}/{new_name} created: {name} again from step {from_step}, reusing the "
                   "steps before it")
    if watch:
        _follow(kube, [new_name], namespace=namespace, plain=plain, catalog=catalog, argo_server=argo_server)


@app.command("stop")
@with_target()
def stop_command(name: Annotated[str, typer.Argument(help="Workflow name.")], *, target: Target) -> None:
    """Stop a running workflow (spec.shutdown=Stop): running steps end, exit handlers run."""
    from wf.controller.ops import stop_workflow

    stopped = stop_workflow(connect(target), name, target.namespace)
    print_line(f"{stopped['metadata']['namespace']}/{name} stopping")


@app.command("suspend")
@with_target()
def suspend_command(name: Annotated[str, typer.Argument(help="Workflow name.")], *, target: Target) -> None:
    """Suspend a workflow (spec.suspend, as `argo suspend`): no new step starts until `wf resume`. Running steps
    run on to their end, their retries included, and deadlines keep counting."""
    from wf.controller.ops import set_suspended

    suspended = set_suspended(connect(target), name, target.namespace, True)
    print_line(f"{suspended['metadata']['namespace']}/{name} suspended")


@app.command("resume")
@with_target()
def resume_command(name: Annotated[str, typer.Argument(help="Workflow name.")], *, target: Target) -> None:
    """Resume a suspended workflow: clear spec.suspend, so its next steps start."""
    from wf.controller.ops import set_suspended

    resumed = set_suspended(connect(target), name, target.namespace, False)
    print_line(f"{resumed['metadata']['namespace']}/{name} resumed")


@app.command("delete")
@with_target()
def delete_command(
    names: Annotated[list[str] | None, typer.Argument(help="Workflow names.")] = None,
    selector: Annotated[str, typer.Option("-l", "--selector", help="Every workflow with these labels, e.g. "
                                                                   "wf.dev/job=bert.")] = "",
    completed: Annotated[bool, typer.Option("--completed", help="Only workflows that ended.")] = False,
    older_than: Annotated[str | None, typer.Option("--older-than", help="Only workflows that ended at least this "
                                                                        "long ago (7d, 12h).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List what would be deleted; delete nothing.")] = False,
    *,
    target: Target,
) -> None:
    """Delete workflows by name, or those -l, --completed and --older-than select (together: all of them hold),
    with their pods and MPIJobs. A bare `wf delete` selects nothing and is refused."""
    from wf.controller.listing import list_workflows
    from wf.controller.ops import delete_workflow, deletion_candidates, get_workflow

    selecting = bool(selector or completed or older_than)
    if names and selecting:
        raise InputError("name workflows or select them (-l, --completed, --older-than), not both")
    if not names and not selecting:
        raise InputError("nothing selected: name workflows, or select them with -l SELECTOR, --completed or "
                         "--older-than D (--dry-run lists what would go)")
    seconds = _seconds("--older-than", older_than)
    kube = connect(target)
    ns = target.namespace or kube.namespace
    if names:  # a dry run still says which names do not exist (exit 2)
        chosen = [get_workflow(kube, name, ns)["metadata"]["name"] for name in names] if dry_run else names
    else:
        chosen = [w["metadata"]["name"] for w in deletion_candidates(
            list_workflows(kube, ns, label_selector=selector), completed=completed, older_than=seconds,
            now=datetime.now(UTC))]
        if not chosen:
            print_line(f"no workflow in {ns} matches", err=True)
    for name in chosen:
        if dry_run:
            print_line(f"{ns}/{name} would be deleted (dry run)")
        else:
            delete_workflow(kube, name, ns)
            print_line(f"{ns}/{name} deleted")

