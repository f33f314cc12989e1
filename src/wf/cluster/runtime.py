"""A named local cluster: what `wf cluster up` decided, and the steps of `up` and `down`.

The processes are supervised by wf.cluster.supervise; the platform objects are put in by wf.cluster.install.
This module keeps the cluster's state between commands and runs the steps in order.

Layout of a cluster's work directory (default ~/.local/share/wf/clusters/<name>):
  kwok/clusters/<name>/   kwokctl's own state: kwok.yaml (components, args, ports), pids/, logs/, pki/
  kwokctl-config.yaml     what we asked kwokctl for (bind address, binaries, flags, stages, simulated logs)
  kubeconfig              admin kubeconfig with one context, wf-<name> (mode 0600)
  pids/, logs/            the workflow-controller's pid and log
  sim-logs/               the text kwok serves as every simulated container's log
  state.json              what `up` decided (context, merged kubeconfig path, controller and Prometheus ports,
                          node count)
  prometheus/             Prometheus' configuration, scrape credentials and TSDB (wf.cluster.prometheus)
  postgres/               Argo's archive database: its data (as root, a link to it) and Argo's password
                          (wf.cluster.postgres)
  argo-server/            Argo Server's kubeconfig (wf.cluster.argo_server)
  catalog.yaml            the catalog the nodes mirror (a later `up` without --catalog keeps it)
  real-nodes/<i>/         a real node's containerd, kubelet, CNI, relay and pod logs (wf.cluster.realnode)
  images/                 image archives `wf cluster image import` was given: every real node imports them
  artifact-store/         the S3 store's keys, with real nodes (wf.cluster.artifact_store)
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

import yaml

from wf.cluster import argo_server as local_argo_server
from wf.cluster import artifact_store as local_artifact_store
from wf.cluster import build, images, karpenter_kwok, kubeconfig, mpi, processes, realnode
from wf.cluster import kueue as local_kueue
from wf.cluster import postgres as local_postgres
from wf.cluster import prometheus as local_prometheus
from wf.cluster.readiness import wait_api_ready, wait_nodes_ready, wait_workloads_ready
from wf.cluster.relay import Forward
from wf.cluster.supervise import (
    CONTROLLER,
    KUBERNETES_SERVICE_IP,
    KUBERNETES_SERVICE_PORT,
    NODE_RECORDER,
    OWN_PROCESSES,
    SIM_EXECUTOR,
    ComponentStatus,
    ControllerPorts,
    Say,
    Supervisor,
)
from wf.core.errors import ClusterError, InputError
from wf.render.platform import CONTROLLER_NAMESPACE, WORKFLOW_NAMESPACE, workflow_namespaces

if TYPE_CHECKING:
    from wf.aws.s3 import Endpoint
    from wf.model.catalog import Catalog

DEFAULT_NAME = "local"
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


@dataclass(frozen=True)
class ClusterState:
    name: str
    context: str
    workdir: str
    kubeconfig: str  # the cluster's own admin kubeconfig
    merged_into: str | None  # the user kubeconfig that got the context, if any
    controller_health_port: int
    nodes_per_group: int
    namespaces: list[str]  # where workflows may run; the first is the context's namespace
    autoscaler: str | None = None  # "karpenter": nodes come from Karpenter's kwok provider
    mpi_operator_health_port: int | None = None
    # None in a state written by a wf whose controller served no metrics: `up` restarts the controller.
    controller_metrics_port: int | None = None
    recorder_metrics_port: int | None = None  # wf's metrics, which the node facts recorder serves
    prometheus_port: int | None = None
    postgres_port: int | None = None  # Argo's archive and offloaded node status
    argo_server_port: int | None = None  # the archive's API
    real_nodes: int = 0  # nodes whose pods really run (wf.cluster.realnode)
    registry: bool = True  # whether real nodes pull from registries (False: every pull fails on 127.0.0.1)
    artifact_store_port: int | None = None  # the S3 store of real nodes' pods (wf.cluster.artifact_store)

    @property
    def argo_server_url(self) -> str | None:
        """Where this cluster's Argo Server answers (what `wf list --archived` and `wf get` of an archived run read)."""
        return local_argo_server.url(self.argo_server_port) if self.argo_server_port else None

    @property
    def prometheus_url(self) -> str | None:
        """Where this cluster's Prometheus answers (its HTTP API: what `wf report` queries)."""
        return local_prometheus.url(self.prometheus_port) if self.prometheus_port else None

    @property
    def artifact_store_url(self) -> str | None:
        """Where real nodes' pods' S3 store answers on the host (its address only: its keys stay in its folder)."""
        return local_artifact_store.url(self.artifact_store_port) if self.artifact_store_port else None

    def artifact_store(self) -> Endpoint | None:
        """Where wf reads what real nodes' pods archived (their logs), when the cluster has real nodes."""
        if self.artifact_store_port is None:
            return None
        return local_artifact_store.LocalArtifactStore(Path(self.workdir)).endpoint(self.artifact_store_port)

    def controller_ports(self) -> ControllerPorts | None:
        if self.controller_metrics_port is None:
            return None
        return ControllerPorts(health=self.controller_health_port, metrics=self.controller_metrics_port)


def data_home() -> Path:
    override = os.environ.get("WF_DATA_HOME")
    if override:
        return Path(override)
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "wf"


def context_name(name: str) -> str:
    return f"wf-{name}"


def state_of_context(context: str) -> ClusterState | None:
    """The state of the local cluster whose context this is (`wf-<name>`), None for any other context or a
    cluster whose state cannot be read: where a command finds the cluster's Prometheus and Argo Server."""
    name = context.partition("-")[2]
    if not name or context_name(name) != context:
        return None
    try:
        state = LocalCluster(name).state()
    except (InputError, OSError, ValueError, TypeError):  # not a cluster's name, or a state file it cannot read
        return None
    return state if state is not None and state.context == context else None


def cluster_namespaces(catalog: Catalog, previous: Sequence[str], given: Sequence[str], *,
                       catalog_namespaces: bool, queues: bool) -> list[str]:
    """Where the cluster's workflows may run, `wf` first (the context's namespace): what it had, what `up` names,
    and, unless declined, every namespace the catalog names (its teams', its artifact store's), so that a job of
    the catalog's teams submits as it would on the platform. Kueue's queues live in the teams' namespaces: with
    `queues` they cannot be declined. InputError (nothing started) for a name that is no namespace."""
    named = workflow_namespaces(catalog)
    out = list(dict.fromkeys([WORKFLOW_NAMESPACE, *previous, *given, *(named if catalog_namespaces else ())]))
    bad = [n for n in out if not _DNS_LABEL.fullmatch(n)]
    if bad:
        raise InputError(f"namespace(s) {', '.join(bad)}: must be DNS-1123 labels (lower-case, digits, '-')")
    teams = [ns for team in catalog.queues.teams for ns in team.namespaces] if catalog.queues else []
    if queues and (missing := [ns for ns in teams if ns not in out]):
        raise InputError(f"--queues runs each team's queue in its namespaces ({', '.join(missing)}), which "
                         "--no-team-namespaces declines: drop one of the two")
    return out


class LocalCluster:
    """One named local cluster and its work directory."""

    def __init__(self, name: str = DEFAULT_NAME, root: Path | None = None) -> None:
        if not _DNS_LABEL.fullmatch(name) or not name[0].isalpha():
            raise InputError(f"cluster name {name!r}: use lower-case letters, digits and '-', starting with a letter")
        self.name = name
        self.workdir = (root or data_home() / "clusters") / name
        self.supervisor = Supervisor(name, self.workdir)
        self.kubeconfig = self.supervisor.kubeconfig
        self.state_file = self.workdir / "state.json"
        self.catalog_file = self.workdir / "catalog.yaml"

    # ---- state -------------------------------------------------------------------------------------
    def exists(self) -> bool:
        return self.supervisor.exists()

    def state(self) -> ClusterState | None:
        try:
            return ClusterState(**json.loads(self.state_file.read_text()))
        except FileNotFoundError:
            return None

    def _save_state(self, state: ClusterState) -> None:
        self.state_file.write_text(json.dumps(asdict(state), indent=2))

    def status(self) -> list[ComponentStatus]:
        """Every managed process: pid, port, log file and whether it runs (a dead one is reported, not hidden)."""
        if not self.exists():
            return []
        state = self.state()
        health_port = state.controller_health_port if state else None
        out = [*self.supervisor.control_plane(), self.supervisor.controller(health_port)]
        out += [self.supervisor.own(SIM_EXECUTOR),
                self.supervisor.own(NODE_RECORDER, state.recorder_metrics_port if state else None)]
        if state and state.autoscaler:
            out.append(self._autoscaler_status())
        queues = self._kueue()
        if (kueue_state := queues.state()) is not None:
            out.append(ComponentStatus(name="kueue", pid=queues.pid(), port=kueue_state.webhook_port,
                                       log=str(queues.log), running=queues.running()))
        pid = processes.read_pid(mpi.pid_file(self.workdir))
        out.append(ComponentStatus(name=mpi.OPERATOR, pid=pid, port=state.mpi_operator_health_port if state else None,
                                   log=str(mpi.log_file(self.workdir)), running=mpi.is_running(self.workdir)))
        database = self._postgres()
        out.append(ComponentStatus(name=local_postgres.NAME, pid=database.pid(),
                                   port=state.postgres_port if state else None, log=str(database.log),
                                   running=database.running()))
        archive = self._argo_server()
        out.append(ComponentStatus(name=local_argo_server.NAME, pid=archive.pid(),
                                   port=state.argo_server_port if state else None, log=str(archive.log),
                                   running=archive.running()))
        store = self._artifact_store()
        if state and state.artifact_store_port:
            out.append(ComponentStatus(name=local_artifact_store.NAME, pid=store.pid(),
                                       port=state.artifact_store_port, log=str(store.log), running=store.running()))
        metrics = self._prometheus()
        out.append(ComponentStatus(name=local_prometheus.NAME, pid=metrics.pid(),
                                   port=state.prometheus_port if state else None, log=str(metrics.log),
                                   running=metrics.running()))
        for node in self._real_nodes(state.real_nodes if state else 0):
            label = node.node_name() or f"real node {node.index}"
            out += [ComponentStatus(name=f"{component} ({label})", pid=pid, port=port, log=str(log), running=running)
                    for component, pid, port, log, running in node.processes()]
        return out

    def _real_nodes(self, count: int) -> list[realnode.RealNode]:
        return [realnode.RealNode(self.workdir, i) for i in range(count)]

    def _autoscaler_status(self) -> ComponentStatus:
        pid = processes.read_pid(karpenter_kwok.pid_file(self.workdir))
        return ComponentStatus(
            name=karpenter_kwok.NAME,
            pid=pid,
            port=None,
            log=str(karpenter_kwok.log_file(self.workdir)),
            running=processes.is_running(pid, build.binary_path(karpenter_kwok.BINARY)),
        )

    def _kueue(self) -> local_kueue.LocalKueue:
        return local_kueue.LocalKueue(self.workdir, self.kubeconfig)

    def _artifact_store(self) -> local_artifact_store.LocalArtifactStore:
        return local_artifact_store.LocalArtifactStore(self.workdir)

    def _prometheus(self) -> local_prometheus.LocalPrometheus:
        return local_prometheus.LocalPrometheus(self.workdir, self.kubeconfig)

    def _postgres(self) -> local_postgres.LocalPostgres:
        return local_postgres.LocalPostgres(self.workdir)

    def _argo_server(self) -> local_argo_server.LocalArgoServer:
        return local_argo_server.LocalArgoServer(self.workdir, self.kubeconfig)

    # ---- up ----------------------------------------------------------------------------------------
    def up(
        self,
        *,
        nodes_per_group: int | None = None,
        namespaces: Sequence[str] = (),
        catalog_path: str | Path | None = None,
        merge_into: Path | None = None,
        say: Say = lambda _: None,
        build_progress: build.Progress | None = None,
        timeout: float = 180.0,
        autoscaler: str | None = None,
        queues: bool | None = None,
        catalog_namespaces: bool = True,
        real_nodes: int | None = None,
        registry: bool | None = None,
    ) -> ClusterState:
        """Create the cluster, or repair a dead component of an existing one; then make sure the platform
        objects, nodes and the controller are there. Idempotent: on an existing cluster, what is not given
        stays as it was (node count, catalog) and namespaces are only ever added (`cluster_namespaces`)."""
        from wf.cluster.install import apply_objects, install

        previous = self.state()
        autoscaler = autoscaler or (previous.autoscaler if previous else None)
        if autoscaler not in (None, karpenter_kwok.NAME):
            raise InputError(f"--autoscaler {autoscaler}: the local cluster offers only {karpenter_kwok.NAME}")
        if nodes_per_group is None:
            # With an autoscaler, nodes come when pods need them.
            nodes_per_group = previous.nodes_per_group if previous else (0 if autoscaler else 1)
        if nodes_per_group < 0:
            raise InputError("--nodes-per-group must be 0 or more")
        real_nodes = (previous.real_nodes if previous else 0) if real_nodes is None else real_nodes
        registry = (previous.registry if previous else True) if registry is None else registry
        if real_nodes < 0:
            raise InputError("--real-nodes must be 0 or more")
        if real_nodes and (missing := realnode.missing_requirement()):
            raise ClusterError(missing)
        catalog = self._catalog(catalog_path)  # a bad catalog fails before anything starts
        if queues is None:  # as before: Kueue keeps running on a cluster that has it
            queues = self._kueue().enabled()
        if queues and catalog.queues is None:
            raise InputError(f"--queues needs teams: the catalog {catalog.source} has no `queues:` section")
        namespaces = cluster_namespaces(catalog, previous.namespaces if previous else (), namespaces,
                                        catalog_namespaces=catalog_namespaces, queues=queues)
        build.build_all(progress=build_progress)
        if optional := [*([autoscaler] if autoscaler else []), *([local_kueue.NAME] if queues else []),
                        *(realnode.COMPONENTS if real_nodes else [])]:
            build.build_all(optional, progress=build_progress)
        self.workdir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.catalog_file.write_text(catalog.to_yaml())
        if self.exists():
            self.supervisor.repair(say)
        else:
            self.supervisor.create(say)
        self._write_kubeconfig()
        wait_api_ready(self.kubeconfig, timeout, say, while_waiting=lambda: self.supervisor.repair(say))
        # Before Argo: its controller and server connect to their database as they start.
        database = self._postgres()
        database_port = database.ensure(previous.postgres_port if previous else None, say)
        # Real nodes' pods archive their logs and pass artifacts through Argo's executor: a store for them.
        store = self._artifact_store()
        store_port = None
        if real_nodes:
            store_port = store.ensure(previous.artifact_store_port if previous else None,
                                      catalog.artifacts.s3 if catalog.artifacts else None, say)
        else:
            store.stop(say)
        say("installing Argo CRDs, RBAC, catalog and simulated nodes")
        install(self.kubeconfig, catalog, nodes_per_group, namespaces, database.database(database_port),
                store.in_cluster() if real_nodes else None)
        apply_objects(self.kubeconfig, [database.secret(), *(store.objects(namespaces) if real_nodes else [])])
        # A controller started before the database was where it is now keeps its old connection settings.
        moved = previous is None or previous.postgres_port != database_port
        ports = self.supervisor.ensure_controller(None if moved or previous is None else previous.controller_ports(),
                                                  nodes_per_group, say)
        self.supervisor.ensure_own(SIM_EXECUTOR, say)
        recorder_port = self.supervisor.ensure_recorder(previous.recorder_metrics_port if previous else None, say)
        if autoscaler:
            say("installing Karpenter's CRDs and wf's NodePools; starting Karpenter's kwok provider")
            apply_objects(self.kubeconfig, karpenter_kwok.objects(catalog))
            if not self._autoscaler_status().running:
                karpenter_kwok.start(self.workdir, self.kubeconfig, catalog)
        mpi_port = previous.mpi_operator_health_port if previous else None
        if not mpi.is_running(self.workdir) or mpi_port is None:
            say(f"starting {mpi.OPERATOR}")
            mpi_port = mpi.ensure_operator(self.workdir, self.kubeconfig, CONTROLLER_NAMESPACE)
        state = ClusterState(
            name=self.name,
            context=context_name(self.name),
            workdir=str(self.workdir),
            kubeconfig=str(self.kubeconfig),
            merged_into=str(merge_into) if merge_into else (previous.merged_into if previous else None),
            controller_health_port=ports.health,
            nodes_per_group=nodes_per_group,
            namespaces=namespaces,
            autoscaler=autoscaler,
            mpi_operator_health_port=mpi_port,
            controller_metrics_port=ports.metrics,
            recorder_metrics_port=recorder_port,
            prometheus_port=previous.prometheus_port if previous else None,
            postgres_port=database_port,
            argo_server_port=previous.argo_server_port if previous else None,
            artifact_store_port=store_port,
            registry=registry,
        )
        self._save_state(state)
        try:
            wait_workloads_ready(
                self.kubeconfig, ports.health, namespaces, timeout, say,
                while_waiting=lambda: self.supervisor.repair(say),
            )
        except ClusterError as exc:
            raise ClusterError(f"{exc}\n{self._log_tails()}") from None
        kueue_metrics = None
        if queues:
            kueue_state = self._kueue().ensure(catalog, say)
            kueue_metrics = (kueue_state.metrics_port, self._kueue().cert_dir / "ca.crt")
        argo_server_port = self._argo_server().ensure(state.argo_server_port, say, restart=moved)
        state = replace(state, argo_server_port=argo_server_port)
        # Last: it scrapes the others where they listen now.
        prometheus_port = self._prometheus().ensure(ports.metrics, recorder_port, kueue_metrics,
                                                    state.prometheus_port, say)
        state = replace(state, prometheus_port=prometheus_port)
        self._save_state(state)
        state = self._ensure_real_nodes(state, previous.real_nodes if previous else 0, real_nodes, catalog, timeout,
                                        say)
        if merge_into:
            kubeconfig.merge(self._kubeconfig_entry(), merge_into)
            say(f"context {state.context} merged into {merge_into}")
        return state

    def _ensure_real_nodes(self, state: ClusterState, before: int, wanted: int, catalog: Catalog, timeout: float,
                           say: Say) -> ClusterState:
        """Start the real nodes not running (all of a node, its kubelet or containerd dead, is started again),
        stop those beyond `wanted`; the state records them as they come, so `down` finds a half-started one."""
        from wf.cluster.install import delete_nodes

        group = realnode.real_node_group(catalog)
        pki = self.supervisor.kwok_cluster_dir / "pki"
        for node in self._real_nodes(before)[wanted:]:
            node.stop(say)
            if name := node.node_name():
                delete_nodes(self.kubeconfig, [name])
        state = replace(state, real_nodes=max(before, wanted))
        self._save_state(state)
        for node in self._real_nodes(wanted):
            running = all(alive for *_, alive in node.processes())
            if not running:
                node.stop(say)
            node.allow_registries(state.registry)  # before its kubelet takes pods; read at each pull, no restart
            if not running:
                node.start(cluster_kubeconfig=self.kubeconfig, kwok_pki=pki, group=group,
                           forwards=self._service_forwards(state), say=say, timeout=timeout)
                for archive in sorted(self._user_images.glob("*.tar")):
                    say(f"importing {archive.name} into real node {node.index}")
                    node.import_image(archive)
        wait_nodes_ready(self.kubeconfig, [realnode.node_name(group, i) for i in range(wanted)], timeout, say)
        state = replace(state, real_nodes=wanted)
        self._save_state(state)
        return state

    @property
    def _user_images(self) -> Path:
        return self.workdir / "images"

    def import_images(self, archives: Sequence[Path], say: Say = lambda _: None) -> list[str]:
        """Keep image archives with the cluster and import them into every real node (each one `up` starts
        later too): the images' names, as pods name them."""
        state = self.state()
        if state is None or not state.real_nodes:
            raise ClusterError(f"cluster {self.name} has no real nodes, whose pods alone run images "
                               f"(wf cluster up --name {self.name} --real-nodes 1)")
        kept = [images.keep_archive(a, self._user_images) for a in archives]
        for node in self._real_nodes(state.real_nodes):
            for archive, _ in kept:
                say(f"importing {archive.name} into real node {node.index}")
                node.import_image(archive)
        return [name for _, names in kept for name in names]

    def _service_forwards(self, state: ClusterState) -> list[Forward]:
        """The Services a real node's pods reach through its relay, each to its listener on the host: the API
        server (what the `kubernetes` Service stands for) and the artifact store."""
        server = yaml.safe_load(self.kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
        api_port = urlparse(server).port
        if api_port is None:
            raise ClusterError(f"{self.kubeconfig}: the API server's address {server} names no port")
        out = [Forward(KUBERNETES_SERVICE_IP, KUBERNETES_SERVICE_PORT, api_port)]
        if state.artifact_store_port is not None:
            out.append(Forward(local_artifact_store.SERVICE_IP, local_artifact_store.SERVICE_PORT,
                               state.artifact_store_port))
        return out

    def _log_tails(self, lines: int = 5) -> str:
        """The last lines of each control-plane log: what a readiness timeout's reader needs first (a component
        that keeps failing to start says why there, and `repair` restarts it silently)."""
        out = []
        for component in self.supervisor.control_plane():
            try:
                tail = Path(component.log).read_text(errors="replace").splitlines()[-lines:]
            except OSError:
                continue
            out.append(f"{component.name} ({'running' if component.running else 'not running'}, {component.log}):")
            out.extend(f"  {line[:300]}" for line in tail)
        return "\n".join(out)

    def _catalog(self, path: str | Path | None) -> Catalog:
        """The catalog given, else the one this cluster was last brought up with, else the default one."""
        from wf.model.catalog import Catalog, load_catalog

        if path is None and self.catalog_file.is_file():
            return Catalog.from_yaml_text(self.catalog_file.read_text(), str(self.catalog_file))
        return load_catalog(path)

    def _kubeconfig_entry(self) -> dict[str, Any]:
        """Our context (wf-<name>, namespace wf) from kwokctl's admin kubeconfig, credentials inlined."""
        admin = self.supervisor.kwok_cluster_dir / "kubeconfig.yaml"
        return kubeconfig.embedded_entry(admin, context_name(self.name), WORKFLOW_NAMESPACE)

    def _write_kubeconfig(self) -> None:
        kubeconfig.write_standalone(self._kubeconfig_entry(), self.kubeconfig)

    # ---- down --------------------------------------------------------------------------------------
    def down(self, say: Say = lambda _: None) -> None:
        """Stop every process this cluster started (by recorded pid), drop its context, remove its state."""
        if not self.workdir.exists():
            say(f"cluster {self.name} does not exist")
            return
        state = self.state()
        for node in self._real_nodes(state.real_nodes if state else 0):
            node.stop(say)  # first: its pods would otherwise outlive the cluster
        queues = self._kueue()
        if pid := queues.pid():
            say(f"stopping kueue (pid {pid})")
            queues.stop()
        self.supervisor.stop_all(
            [
                (local_prometheus.NAME, self._prometheus().pid_file, build.binary_path(local_prometheus.NAME)),
                (karpenter_kwok.NAME, karpenter_kwok.pid_file(self.workdir), build.binary_path(karpenter_kwok.BINARY)),
                (local_argo_server.NAME, self._argo_server().pid_file, build.binary_path(local_argo_server.BINARY)),
                (CONTROLLER, self.supervisor.controller_pid_file, build.binary_path(CONTROLLER)),
                *((name, self.supervisor.own_pid_file(name), Path(sys.executable)) for name in OWN_PROCESSES),
                (local_artifact_store.NAME, self._artifact_store().pid_file, Path(sys.executable)),
                (mpi.OPERATOR, mpi.pid_file(self.workdir), mpi.binary()),
                # After Argo, its only client: with no session left, its SIGTERM (a "smart" shutdown) is quick.
                (local_postgres.NAME, self._postgres().pid_file, self._postgres().binary),
            ],
            say,
        )
        self._postgres().remove_data()  # as root it lives outside the cluster's directory
        if state and state.merged_into:
            kubeconfig.remove(state.context, Path(state.merged_into))
        shutil.rmtree(self.workdir)
        say(f"cluster {self.name} removed")

