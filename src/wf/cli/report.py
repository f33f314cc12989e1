"""`wf report`: per team and compute class, what ran in a window, how it ended, what it cost, how the teams used
their quotas, waited and were interrupted; as a table, a JSON document or one self-contained HTML page."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from wf.cli.options import (
    PROMETHEUS_ENV,
    ArgoServerOption,
    CatalogOption,
    FileOption,
    Invocation,
    Page,
    PageOutput,
    archive_of,
    local_prometheus,
    with_target,
)
from wf.cli.output import emit, print_line, print_table
from wf.controller.client import Target, connect
from wf.core.errors import InputError, WorkFailed, did_you_mean, listing

if TYPE_CHECKING:
    from wf.compile.node_facts import NodeFacts
    from wf.controller.archive import Archive
    from wf.controller.checkpoints import Ledger
    from wf.controller.client import Kube
    from wf.controller.report import Facts, Report
    from wf.model.catalog import Catalog

app = typer.Typer()
PAGE = 10  # workflows per list request: a page of whole objects is what the report holds at once


@app.command("report")
@with_target(namespaced=False)
def report_command(
    ctx: typer.Context,
    since: Annotated[str, typer.Option("--since", help="The window: workflows started this long ago or later "
                                                       "(90m, 24h, 7d).")] = "24h",
    team: Annotated[str | None, typer.Option("--team", help="One team (default: every team, which needs the right "
                                                            "to list workflows in every namespace).")] = None,
    prometheus: Annotated[str | None, typer.Option(
        "--prometheus", envvar=PROMETHEUS_ENV, show_envvar=True,
        help="A Prometheus that scrapes Kueue and Argo's controller (http://host:9090): each team's queue waits "
             "from Kueue's histogram, and Argo's counts of wf's metrics beside the cluster's [default: the local "
             "cluster's, for a context of `wf cluster up`].")] = None,
    output: PageOutput = Page.table.value,
    file: FileOption = None,
    catalog: CatalogOption = None,
    argo_server: ArgoServerOption = None,
    *,
    target: Target,
) -> None:
    """Per team and compute class: workflows and their outcomes, node-hours, On-Demand and Spot cost, card-hours
    against the quota, queue waits, interruptions, Spot fallbacks and work redone. Exit 1 when nothing ran."""
    from wf.controller.catalog_source import resolve_catalog
    from wf.controller.report import build_report, prometheus_url, read_prometheus, window

    # A malformed --since or --prometheus fails before the cluster is asked.
    span = window(since, datetime.now(UTC))
    from_env = getattr(ctx.get_parameter_source("prometheus"), "name", None) == "ENVIRONMENT"  # typer's own click
    given = PROMETHEUS_ENV if from_env else "--prometheus"
    source = (prometheus_url(prometheus, given), given) if prometheus else None
    kube = connect(target)
    resolved = resolve_catalog(kube, str(catalog) if catalog else None)
    namespaces = _namespaces(resolved, team)
    source = source or local_prometheus(kube.context)
    # Prometheus before the workflows: one unreachable (exit 3) or not Prometheus (exit 2) fails before the long part.
    reading = read_prometheus(source[0], span, source[1]) if source else None
    history = archive_of(kube, argo_server)
    report = build_report(_workflows(kube, namespaces, history, span.start), _facts(kube, resolved, team), resolved,
                          span, team, reading)
    if not report.runs:
        where = f"team {team}'s namespaces ({listing(namespaces or [])})" if team else "any namespace"
        raise WorkFailed(f"no workflow started in {where} in the last {since} ({kube.context}); "
                         "nothing to report (a longer --since?)")
    if output == Page.json.value:
        emit(report.dumps(), file)
    elif output == Page.html.value:
        hand_over(report, file, replace_process=isinstance(ctx.obj, Invocation) and ctx.obj.own_process)
    else:
        _print_text(report, file)


def hand_over(report: Report, file: Path | None, *, replace_process: bool) -> None:
    """`-o html`: the report's digest to a private file, and the page drawn from it by the drawing program
    (wf.cli.report_page) in a process that replaces this one, when wf is the process's program: the Kubernetes
    client's modules leave memory before matplotlib's come, and the command's peak is the larger half's, not their
    sum (issue 24). In-process callers (tests) draw here, through the same program's function."""
    import atexit
    import contextlib
    import os
    import sys
    import sysconfig
    import tempfile

    import wf
    from wf.cli.report_page import write_page

    try:
        handle, path = tempfile.mkstemp(prefix="wf-report-", suffix=".json")  # 0600: the teams' costs and names
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(report.digest().dumps())
    except OSError as exc:
        raise WorkFailed(f"cannot write the report's digest for its page: {exc}") from None
    if replace_process and sys.executable:
        # -P: not the working directory first on sys.path (`wf` never had it there: no ./json.py shadows a module).
        argv = [sys.executable, "-P", "-m", "wf.cli.report_page", path, *(["--file", str(file)] if file else [])]
        env = dict(os.environ)
        source = str(Path(wf.__file__).resolve().parent.parent)
        if source not in {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}:
            # wf from a source tree (an editable install, PYTHONPATH, sys.path): the same wf draws the page.
            env["PYTHONPATH"] = os.pathsep.join(p for p in (source, env.get("PYTHONPATH")) if p)
        atexit._run_exitfuncs()  # as at exit: the kubeconfig's and the EKS CA's temporary files go
        sys.stdout.flush()
        sys.stderr.flush()
        with contextlib.suppress(OSError):  # an interpreter that cannot be started again: draw here instead
            os.execve(sys.executable, argv, env)
    write_page(Path(path), file)


def _namespaces(catalog: Catalog, team: str | None) -> list[str] | None:
    """The team's namespaces; None (every namespace) without --team. An unknown team is bad input (exit 2)."""
    if team is None:
        return None
    teams = [t.name for t in catalog.queues.teams] if catalog.queues else []
    if team not in teams:
        raise InputError(f"--team: unknown team {team!r}{did_you_mean(team, teams)}; the catalog's teams: "
                         f"{listing(teams)}", file=catalog.source)
    return list(catalog.queues.team(team).namespaces) if catalog.queues else []


def _workflows(kube: Kube, namespaces: list[str] | None, archive: Archive | None,
               started_after: datetime) -> Iterator[dict[str, Any]]:
    """Every workflow of the namespaces (None: of every namespace), PAGE at a time: 250 workflows of 32 steps are
    30 MB of JSON, three times that as objects, and the report keeps only a digest of each. With the run history
    (Argo Server): the steps of workflows too big for their object put back, then the runs started after
    `started_after` whose live object is gone (Argo's TTL), whole."""
    from wf.argo.nodes import offloaded
    from wf.controller.listing import iter_workflows

    pages = ([iter_workflows(kube, all_namespaces=True, page=PAGE)] if namespaces is None else
             [iter_workflows(kube, namespace, page=PAGE) for namespace in namespaces])
    seen: set[str] = set()
    for page in pages:
        for workflow in page:
            metadata = workflow.get("metadata") or {}
            seen.add(metadata.get("uid") or "")
            if archive is not None and offloaded(workflow):
                workflow = archive.hydrated(metadata.get("namespace", ""), metadata.get("name", "")) or workflow
            yield workflow
    if archive is None:
        return
    for namespace in [None] if namespaces is None else namespaces:
        for listed in archive.runs(namespace, since=started_after):
            # A run Argo archived while its object lives on (every finished one) was read above.
            uid = (listed.get("metadata") or {}).get("uid") or ""
            if uid not in seen and (whole := archive.whole(listed)):
                seen.add(uid)
                yield whole


def _facts(kube: Kube, catalog: Catalog, team: str | None) -> Facts:
    """What `wf get` reads beside a workflow, read once for all of them where it can be: every node (one list,
    not a read per node), the teams' Kueue workloads; and each workflow's checkpoint ledger as it is read."""
    from kubernetes.client.exceptions import ApiException

    from wf.compile.node_facts import node_facts
    from wf.controller.checkpoints import Ledger, read_ledger
    from wf.controller.client import api_errors, lookup_errors
    from wf.controller.queue import QueueReader
    from wf.controller.report import Facts
    from wf.controller.stream import KubeTransport

    nodes: dict[str, NodeFacts | None] = {}
    with api_errors(kube, "listing nodes"):
        try:
            # A page at a time, as JSON, like the workflows: a platform's 3,000 nodes need not be held as models.
            nodes = {n["metadata"]["name"]: node_facts(n) for page, _ in KubeTransport(kube.core.list_node).pages()
                     for n in page}
        except ApiException as exc:
            if exc.status != 403:  # a team's role may not list nodes: costs stay unknown, as `wf get` says then
                raise

    def ledger(namespace: str, name: str) -> Ledger:
        try:
            return read_ledger(kube, namespace, name)
        except lookup_errors():
            return Ledger()  # as `wf get`: a ledger out of reach leaves what it adds untold

    workloads = None
    if catalog.queues is not None:
        reader = QueueReader(kube)
        read = [reader.workloads(t) for t in catalog.queues.teams if team in (None, t.name)]
        workloads = None if any(w is None for w in read) else [w for found in read for w in found or []]
    return Facts({name: facts for name, facts in nodes.items() if facts is not None}, ledger, workloads)


def _print_text(report: Report, file: Path | None) -> None:
    """The lines as a table (a team's total under its classes, the total last), then the assumptions."""
    import io

    from rich.console import Console
    from rich.table import Table

    from wf.cli.report_page import cells, headers

    table = Table(title=f"workflows started in the last {report.window.since} (cost: estimate)",
                  title_justify="left")
    for header in headers():
        table.add_column(header, justify="left" if header in ("team", "class") else "right")
    for line in report.lines:
        table.add_row(*cells(line), style="bold" if line.compute_class == "*" else None)
    notes = "".join([f"{report.comparison}\n" if report.comparison else "",
                     *(f"  assumption: {a}\n" for a in report.assumptions)])
    if file is None:
        print_table(table)
        print_line(notes.rstrip("\n"))
        return
    text = io.StringIO()
    print_table(table, Console(file=text, width=80, emoji=False))
    emit(text.getvalue() + notes, file)
