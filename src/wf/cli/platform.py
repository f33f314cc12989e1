"""`wf platform render` and `wf platform check`: the bundle a real cluster needs besides its nodes, rendered from
the catalog, and a live cluster compared with it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from wf.cli.options import (
    PROMETHEUS_ENV,
    ArgoServerOption,
    CatalogOption,
    ReportOutput,
    archive_of,
    local_prometheus,
    with_target,
)
from wf.cli.output import print_line, print_report
from wf.controller.client import Target, connect
from wf.core.constants import NODE_RECORDER_METRICS_PORT
from wf.core.errors import ClusterError, InputError, WorkFailed

if TYPE_CHECKING:
    from wf.model.catalog import Catalog

app = typer.Typer()
platform_app = typer.Typer(help="The platform a cluster needs (Argo, Kueue, MPI operator, device plugins, "
                                "autoscaler, namespaces, roles, ConfigMaps), from the catalog.", no_args_is_help=True)
app.add_typer(platform_app, name="platform")

DirOption = Annotated[Path, typer.Option("-f", "--dir", file_okay=False,
                                         help="Directory to write the bundle to (its kustomization.yaml and one "
                                              "file per concern).")]
AccountOption = Annotated[str | None, typer.Option(
    "--aws-account-id", help="AWS account of cluster-autoscaler's IAM role <cluster>-cluster-autoscaler "
                             "(for catalogs whose cluster.autoscaler is cluster-autoscaler).")]


def _load(path: Path | None) -> tuple[Catalog, Callable[[InputError], InputError]]:
    """The catalog, and how to give a rendering's findings about it their file and line."""
    from wf.core.loader import load_mapping
    from wf.model.catalog import catalog_from_document, catalog_path, no_catalog

    found = catalog_path(path)
    if found is None:
        raise no_catalog()
    document = load_mapping(found)

    def locate(error: InputError) -> InputError:
        return InputError([document.locate(p) if p.path else p for p in error.problems])

    return catalog_from_document(document), locate


@platform_app.command("render")
def render(catalog: CatalogOption = None, directory: DirOption = Path("platform"),
           aws_account_id: AccountOption = None,
           argo_database: Annotated[str | None, typer.Option(
               "--argo-database", help="HOST[:PORT] of the PostgreSQL (RDS) Argo keeps its workflow archive and "
                                       "offloaded node status in; its credentials: Secret argo/wf-argo-database "
                                       "(keys username, password).")] = None) -> None:
    """Write the platform bundle: review it with `kubectl kustomize DIR`, apply it with
    `kubectl apply --server-side -k DIR`."""
    from wf.cluster.install import pinned_versions
    from wf.render import platform
    from wf.render.eksctl import display_path

    database = platform.parse_database(argo_database, "--argo-database") if argo_database else None
    loaded, locate = _load(catalog)
    try:
        files = platform.render(loaded, pinned_versions(), aws_account_id, display_path(loaded.source), database)
    except InputError as exc:
        raise locate(exc) from None
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (directory / name).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot write the bundle: {exc.strerror}", file=directory) from None
    print_line(f"wrote {len(files)} files to {directory}; review: kubectl kustomize {directory}; "
               f"apply: kubectl apply --server-side -k {directory}", err=True)


@platform_app.command("check")
@with_target(namespaced=False)
def check(catalog: CatalogOption = None, output: ReportOutput = "text",
          prometheus: Annotated[str | None, typer.Option(
              "--prometheus", envvar=PROMETHEUS_ENV, show_envvar=True,
              help="The cluster's Prometheus (http://host:9090): does it scrape Argo's controller and Kueue? "
                   "[default: the local cluster's, for a context of `wf cluster up`; else not asked]")] = None,
          *, target: Target) -> None:
    """Compare the cluster with the catalog: node groups, device plugins, Argo, Kueue, the MPI operator, queues,
    namespaces, roles, ConfigMaps, the metrics Prometheus scrapes. Exit 0 when it matches, 1 with findings (each
    with its fix)."""
    import os

    from wf.cluster.install import pinned_versions
    from wf.controller.platform_check import read_live, read_scrapes
    from wf.controller.report import prometheus_url
    from wf.lint.platform import compare, scraped
    from wf.render import platform

    given = PROMETHEUS_ENV if prometheus and os.environ.get(PROMETHEUS_ENV) == prometheus else "--prometheus"
    asked = (prometheus_url(prometheus, given), given) if prometheus else None  # a bad URL fails before the cluster
    loaded, locate = _load(catalog)
    kube = connect(target)
    versions = pinned_versions()
    try:
        expected = platform.expected(loaded, versions)
    except InputError as exc:
        raise locate(exc) from None
    live = read_live(kube, expected)
    if live.local is not None:
        expected = platform.local_expected(loaded, versions)
    asked = asked or local_prometheus(kube.context)
    scrapes = read_scrapes(*asked, scraped(expected, live)) if asked else None
    findings = compare(loaded, expected, live, scrapes)
    if output == "json":
        print_report({"context": kube.context, "prometheus": scrapes.url if scrapes else None,
                      "findings": [f.to_json() for f in findings]})
    else:
        for finding in findings:
            print_line(str(finding))
        kind = "the local cluster" if live.local is not None else "the cluster"
        if scrapes is None:
            print_line(f"Prometheus not asked: give --prometheus (or {PROMETHEUS_ENV}) to check that it scrapes "
                       f"{', '.join(s.job for s in scraped(expected, live))}", err=True)
        print_line(f"{kind} ({kube.context}) matches the catalog" if not findings
                   else f"{len(findings)} findings on {kind} ({kube.context})", err=True)
    if findings:
        raise WorkFailed(f"{len(findings)} platform findings")


_METRICS_ADDRESS = f"127.0.0.1:{NODE_RECORDER_METRICS_PORT}"


@platform_app.command("record-nodes")
@with_target(namespaced=False)
def record_nodes(as_user: Annotated[str | None, typer.Option(
                     "--as", help="Act as this user, as `kubectl --as` (the credentials need the impersonate verb): "
                                  "the local cluster runs the recorder as its service account.")] = None,
                 metrics_address: Annotated[str, typer.Option(
                     "--metrics-address", metavar="HOST:PORT",
                     help="Serve wf's metrics (README, Metrics) for Prometheus on GET /metrics here: the platform "
                          "bundle's Deployment listens on its pod's address.")] = _METRICS_ADDRESS,
                 argo_server: ArgoServerOption = None,
                 *, target: Target) -> None:
    """Keep, on each workflow, the instance type, capacity and zone of every node its pods are bound to, so
    `wf get` and `wf report` price attempts whose nodes are gone; mark a multi-node step's MPIJob that lost a
    worker (`wf-worker-lost`: an interruption, not the program's failure); count each ended workflow into wf's
    metrics. Runs until stopped (the platform bundle's wf-node-recorder Deployment; inside a pod without a
    kubeconfig it uses the pod's service account)."""
    import logging

    from wf.controller.catalog_source import cluster_catalog
    from wf.controller.metrics import Exporter
    from wf.controller.node_recorder import RECORD_LANES, Counting, Forbidden
    from wf.controller.node_recorder import record_nodes as record

    host, port = _address(metrics_address, "--metrics-address")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    kube = connect(target, connections=RECORD_LANES + 2)  # the writers' and the two streams'
    api = kube.impersonating(as_user) if as_user else None
    exporter = Exporter()
    try:
        serving = exporter.serve(host, port)
    except OSError as exc:
        raise ClusterError(f"wf platform record-nodes: cannot serve metrics on {metrics_address}: {exc}") from None
    logging.getLogger("wf.node-recorder").info("serving wf's metrics on http://%s:%d/metrics", host, serving)
    catalog = _CatalogOfCluster(lambda: cluster_catalog(kube))
    try:
        record(kube, api, Counting(exporter, catalog.get, lambda: archive_of(kube, argo_server)))
    except Forbidden as exc:
        raise ClusterError(f"wf platform record-nodes ({kube.context}): {exc}") from None


def _address(value: str, option: str) -> tuple[str, int]:
    """HOST:PORT (HOST may be empty: every address) as (host, port); InputError naming `option` otherwise."""
    host, _, port = value.rpartition(":")
    if not port.isdigit() or int(port) > 65535:
        raise InputError(f"{option} {value!r}: expected HOST:PORT, e.g. 127.0.0.1:{NODE_RECORDER_METRICS_PORT}")
    return host or "0.0.0.0", int(port)  # noqa: S104 - an empty host asks for every address


# How long the recorder counts with the catalog it read before it reads it again (a team added meanwhile counts
# as no team until then).
CATALOG_SECONDS = 300.0


class _CatalogOfCluster:
    """The catalog installed in the cluster, read again at most every CATALOG_SECONDS (teams come and go); the
    last one read while the cluster has none or refuses it, and the default catalog before any."""

    def __init__(self, read: Callable[[], Catalog | None]) -> None:
        self._read, self._at = read, float("-inf")
        self._catalog: Catalog | None = None

    def get(self) -> Catalog:
        import logging
        import time

        from wf.model.catalog import load_catalog

        if time.monotonic() - self._at >= CATALOG_SECONDS:
            try:
                self._catalog = self._read() or self._catalog
                self._at = time.monotonic()  # after a failure, the next count reads it again
            except ClusterError as exc:
                logging.getLogger("wf.node-recorder").warning("reading the cluster's catalog: %s; its teams are as "
                                                              "last read", exc)
        if self._catalog is None:
            self._catalog = load_catalog()
        return self._catalog
