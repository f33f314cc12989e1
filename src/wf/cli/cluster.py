"""`wf cluster build|up|down|status|image import`: the local cluster's commands."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer

from wf.cli.options import CatalogOption, Format, ReportOutput
from wf.cli.output import console, print_line, print_report, print_table
from wf.core.errors import ClusterError

if TYPE_CHECKING:
    from rich.table import Table

    from wf.cluster.build import Component

T = TypeVar("T")


class Runtime(str, Enum):
    kwok = "kwok"
    kind = "kind"


NameOption = Annotated[str, typer.Option("--name", help="Cluster name; its context is wf-<name>.")]

app = typer.Typer()
cluster_app = typer.Typer(help="The local cluster: a real control plane, simulated node groups and Argo's controller.",
                          no_args_is_help=True)
app.add_typer(cluster_app, name="cluster")
image_app = typer.Typer(help="Images for the local cluster's real nodes, which reach no registry.",
                        no_args_is_help=True)
cluster_app.add_typer(image_app, name="image")


class BuildProgress:
    """One line per component with its current step and elapsed time, refreshed every second."""

    def __init__(self, only: list[str] | None = None) -> None:
        self.console = console(err=True)
        self.only = only
        self.steps: dict[str, str] = {}
        self.started: dict[str, float] = {}
        self.finished: dict[str, float] = {}

    def __call__(self, comp: Component, step: str, elapsed: float) -> None:
        self.started.setdefault(comp.name, time.monotonic() - elapsed)
        self.steps[comp.name] = step
        if step in ("done", "cached"):
            self.finished[comp.name] = elapsed
        if not self.console.is_terminal:
            # Logs (CI) get one line per step rather than a redrawn table.
            print_line(f"{comp.name} {comp.version}: {step} ({elapsed:.0f}s)", err=True)

    def render(self) -> Table:
        from rich.table import Table

        from wf.cluster.build import components

        table = Table.grid(padding=(0, 2))
        for comp in components():
            if self.only and comp.name not in self.only:
                continue
            step = self.steps.get(comp.name, "waiting")
            if comp.name in self.finished:
                elapsed = self.finished[comp.name]
            elif comp.name in self.started:
                elapsed = time.monotonic() - self.started[comp.name]
            else:
                elapsed = 0.0
            table.add_row(f"{comp.name} {comp.version}", step, f"{elapsed:5.0f}s")
        return table

    def run(self, work: Callable[[], T]) -> T:
        """Run `work()` with the live table shown (on a terminal) and return its result."""
        if not self.console.is_terminal:
            return work()
        from rich.live import Live

        with Live(self.render(), console=self.console, refresh_per_second=2) as live:
            stop = threading.Event()

            def tick() -> None:
                while not stop.wait(1.0):
                    live.update(self.render())

            ticker = threading.Thread(target=tick, daemon=True)
            ticker.start()
            try:
                return work()
            finally:
                stop.set()
                ticker.join()
                live.update(self.render())


@cluster_app.command("build")
def build_cmd(
    component: Annotated[list[str] | None, typer.Argument(
        help="Only these components (default: those every cluster runs; the optional ones, such as kueue, karpenter "
             "or kubelet, only when named).")] = None,
) -> None:
    """Build the pinned binaries from Go modules into ~/.cache/wf (skips what is already built)."""
    from wf.cluster import build as buildmod

    progress = BuildProgress(component or None)
    results = progress.run(lambda: buildmod.build_all(component or None, progress=progress))
    for result in results:
        where = result.component.bin_dir(buildmod.cache_dir())
        verb = f"built in {result.seconds:.0f}s" if result.built else "cached"
        print_line(f"{result.component.name} {result.component.version}: {verb} -> {where}", err=True)


@cluster_app.command("up")
def up_cmd(
    name: NameOption = "local",
    nodes_per_group: Annotated[
        int | None,
        typer.Option("--nodes-per-group", min=0,
                     help="Simulated nodes per node group [default: as before, else 1]."),
    ] = None,
    team_namespace: Annotated[
        list[str] | None,
        typer.Option("--team-namespace",
                     help="Another namespace where workflows may run (repeatable), besides wf and the catalog's."),
    ] = None,
    no_team_namespaces: Annotated[
        bool,
        typer.Option("--no-team-namespaces",
                     help="Do not create the namespaces the catalog names (its teams', its artifact store's); "
                          "those a cluster has keep."),
    ] = False,
    catalog: CatalogOption = None,
    runtime: Annotated[
        Runtime, typer.Option("--runtime", help="kwok (processes, default) or kind (needs Docker).")
    ] = Runtime.kwok,
    autoscaler: Annotated[
        str | None,
        typer.Option("--autoscaler", help="karpenter: nodes provisioned on demand by Karpenter's kwok provider "
                                          "from wf's NodePools, instead of a fixed count [default: as before, "
                                          "else none]."),
    ] = None,
    queues: Annotated[
        bool | None,
        typer.Option("--queues/--no-queues",
                     help="Run Kueue with the catalog's teams and quotas [default: as before, else off]."),
    ] = None,
    real_nodes: Annotated[
        int | None,
        typer.Option("--real-nodes", min=0,
                     help="Real nodes (kubelet, containerd, runc on this machine; Linux, root) in a cpu class's "
                          "node group, whose pods really run [default: as before, else 0]."),
    ] = None,
    registry: Annotated[
        bool | None,
        typer.Option("--registry/--no-registry",
                     help="Whether real nodes pull images they lack from registries; with --no-registry every "
                          "pull fails at once on 127.0.0.1 (a machine without registry access, tests) [default: "
                          "as before, else on]."),
    ] = None,
) -> None:
    """Start the local cluster (or repair a dead component of a running one) and merge its context.

    Without --catalog, a cluster brought up before keeps the catalog it had.
    """
    from wf.cluster.kubeconfig import user_kubeconfig_path
    from wf.cluster.runtime import LocalCluster

    cluster_ = LocalCluster(name)
    if runtime is Runtime.kind:
        from wf.cluster.kind import up_with_kind
        from wf.model.catalog import load_catalog

        nodes = 1 if nodes_per_group is None else nodes_per_group
        config = up_with_kind(load_catalog(catalog), nodes, name, cluster_.workdir)
        print_line(f"kind cluster wf-{name} created from {config}", err=True)
        return
    started = time.monotonic()
    progress = BuildProgress()
    state = progress.run(
        lambda: cluster_.up(
            nodes_per_group=nodes_per_group,
            namespaces=team_namespace or (),
            catalog_path=catalog,
            merge_into=user_kubeconfig_path(),
            say=lambda msg: print_line(msg, err=True),
            build_progress=progress,
            autoscaler=autoscaler,
            queues=queues,
            catalog_namespaces=not no_team_namespaces,
            real_nodes=real_nodes,
            registry=registry,
        )
    )
    print_line(f"cluster {name} is up in {time.monotonic() - started:.0f}s: context {state.context} (namespace wf), "
               f"workflows may run in {', '.join(state.namespaces)}; `wf cluster status --name {name}` lists its "
               "processes", err=True)
    print_line(f"Prometheus: {state.prometheus_url}", err=True)
    print_line(f"Argo Server (the workflow archive): {state.argo_server_url}", err=True)


@cluster_app.command("down")
def down_cmd(name: NameOption = "local") -> None:
    """Stop every process of the local cluster, remove its context and its state."""
    from wf.cluster.runtime import LocalCluster

    LocalCluster(name).down(say=lambda msg: print_line(msg, err=True))


@cluster_app.command("status")
def status_cmd(
    name: NameOption = "local",
    output: ReportOutput = Format.text.value,
) -> None:
    """Each process of the local cluster: pid, port, log file and whether it runs. Exit 1 if any is down."""
    from rich.table import Table

    from wf.cluster.runtime import LocalCluster
    from wf.core.errors import WorkFailed

    cluster_ = LocalCluster(name)
    components = cluster_.status()
    if output == Format.json.value:
        state = cluster_.state()
        print_report({
            "name": name,
            "exists": cluster_.exists(),
            "context": state.context if state else None,
            "kubeconfig": state.kubeconfig if state else None,
            "prometheus": state.prometheus_url if state else None,
            "argoServer": state.argo_server_url if state else None,
            # What `up` made it: simulated nodes per node group, who adds nodes, the real nodes and their pulls.
            "nodesPerGroup": state.nodes_per_group if state else None,
            "autoscaler": state.autoscaler if state else None,
            "realNodes": state.real_nodes if state else None,
            "registry": state.registry if state else None,
            "artifactStore": state.artifact_store_url if state else None,
            "components": [asdict(c) for c in components],
        })
    elif components:
        table = Table("component", "pid", "port", "running", "log")
        for c in components:
            table.add_row(c.name, str(c.pid or "-"), str(c.port or "-"), "yes" if c.running else "NO", c.log)
        print_table(table)
    if not components:
        raise ClusterError(f"cluster {name} does not exist (wf cluster up --name {name})")
    if not all(c.running for c in components):
        raise WorkFailed(f"cluster {name}: not running: " + ", ".join(c.name for c in components if not c.running))



@image_app.command("import")
def image_import_cmd(
    archives: Annotated[list[Path], typer.Argument(
        help="Image archives: `docker save` or `podman save` output, or an OCI archive whose images are named "
             "(buildah push IMAGE oci-archive:FILE:NAME).", exists=True, dir_okay=False, readable=True)],
    name: NameOption = "local",
) -> None:
    """Import image archives into every real node of the local cluster, and into each one a later `up` starts;
    pods name the images as the archives do (docker.io/library/ for a bare name)."""
    from wf.cluster.runtime import LocalCluster

    for image in LocalCluster(name).import_images(archives, say=lambda msg: print_line(msg, err=True)):
        print_line(image)
