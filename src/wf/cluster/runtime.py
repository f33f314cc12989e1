"""Run the local cluster: kwokctl's binary runtime for the control plane and kwok, plus Argo's
workflow-controller as a process of our own.

kwokctl generates the PKI and the component flags (for the versions it supports) and starts etcd,
kube-apiserver, kube-controller-manager, kube-scheduler and kwok-controller, recording a pid and a log per
component under the cluster's work directory. We read that record back for `status`, repair dead components
through `kwokctl start cluster` (which starts only what is not running), and stop every process ourselves by
pid on `down`, so exactly what was started is stopped.

Layout of a cluster's work directory (default ~/.local/share/wf/clusters/<name>):
  kwok/clusters/<name>/   kwokctl's own state: kwok.yaml (components, args, ports), pids/, logs/, pki/
  kwokctl-config.yaml     what we asked kwokctl for (bind address, binaries, stages, simulated logs)
  kubeconfig              admin kubeconfig with one context, wf-<name> (mode 0600)
  pids/, logs/            the workflow-controller's pid and log
  sim-logs/               the text kwok serves as every simulated container's log
  state.json              what `up` decided (context, merged kubeconfig path, controller port, node count)
  catalog.yaml            the catalog the nodes mirror (a later `up` without --catalog keeps it)
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from wf.cluster import build, kubeconfig, mpi, processes
from wf.cluster.install import CONTROLLER_NAMESPACE, WORKFLOW_NAMESPACE
from wf.errors import ClusterError, InputError

if TYPE_CHECKING:
    from wf.catalog import Catalog

DEFAULT_NAME = "local"
CONTROLLER = "workflow-controller"
# Nothing is pulled under kwok; the image name only has to look like Argo's.
EXECUTOR_IMAGE = f"quay.io/argoproj/argoexec:v{build.ARGO_VERSION}"
STAGES_FILE = Path(__file__).with_name("kwok-stages.yaml")
# kwokctl's component names in the order processes must stop (dependents first).
STOP_ORDER = ("kwok-controller", "kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd")

Say = Callable[[str], None]
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_PORT_OPTIONS = (
    "kubeApiserverPort", "etcdPort", "etcdPeerPort", "kubeControllerManagerPort", "kubeSchedulerPort",
    "kwokControllerPort",
)


@dataclass(frozen=True)
class ComponentStatus:
    name: str
    pid: int | None
    port: int | None
    log: str
    running: bool


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
    mpi_operator_health_port: int | None = None


def data_home() -> Path:
    override = os.environ.get("WF_DATA_HOME")
    if override:
        return Path(override)
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "wf"


def context_name(name: str) -> str:
    return f"wf-{name}"


class LocalCluster:
    """One named local cluster and its work directory."""

    def __init__(self, name: str = DEFAULT_NAME, root: Path | None = None) -> None:
        if not _DNS_LABEL.fullmatch(name) or not name[0].isalpha():
            raise InputError(f"cluster name {name!r}: use lower-case letters, digits and '-', starting with a letter")
        self.name = name
        self.workdir = (root or data_home() / "clusters") / name
        self.kwok_workdir = self.workdir / "kwok"
        self.kwok_cluster_dir = self.kwok_workdir / "clusters" / name
        self.kubeconfig = self.workdir / "kubeconfig"
        self.state_file = self.workdir / "state.json"
        self.catalog_file = self.workdir / "catalog.yaml"
        self.controller_pid_file = self.workdir / "pids" / f"{CONTROLLER}.pid"
        self.controller_log = self.workdir / "logs" / f"{CONTROLLER}.log"

    # ---- state -------------------------------------------------------------------------------------
    def exists(self) -> bool:
        return (self.kwok_cluster_dir / "kwok.yaml").is_file()

    def state(self) -> ClusterState | None:
        try:
            return ClusterState(**json.loads(self.state_file.read_text()))
        except FileNotFoundError:
            return None

    def _save_state(self, state: ClusterState) -> None:
        self.state_file.write_text(json.dumps(asdict(state), indent=2))

    def _kwok_components(self) -> list[dict[str, Any]]:
        saved = self.kwok_cluster_dir / "kwok.yaml"
        for doc in yaml.safe_load_all(saved.read_text()):
            if doc and doc.get("kind") == "KwokctlConfiguration":
                return list(doc.get("components") or [])
        raise ClusterError(f"{saved}: no KwokctlConfiguration found; remove {self.workdir} and run `up` again")

    def status(self) -> list[ComponentStatus]:
        """Every managed process: pid, port, log file and whether it runs (a dead one is reported, not hidden)."""
        if not self.exists():
            return []
        out = []
        for comp in self._kwok_components():
            binary = Path(comp["binary"])
            stem = binary.name
            workdir = Path(comp.get("workDir") or self.kwok_cluster_dir)
            pid = processes.read_pid(workdir / "pids" / f"{stem}.pid")
            port = _serving_port(comp.get("ports") or [])
            out.append(
                ComponentStatus(
                    name=comp["name"],
                    pid=pid,
                    port=port,
                    log=str(workdir / "logs" / f"{stem}.log"),
                    running=processes.is_running(pid, binary),
                )
            )
        state = self.state()
        pid = processes.read_pid(self.controller_pid_file)
        out.append(
            ComponentStatus(
                name=CONTROLLER,
                pid=pid,
                port=state.controller_health_port if state else None,
                log=str(self.controller_log),
                running=processes.is_running(pid, build.binary_path(CONTROLLER)),
            )
        )
        pid = processes.read_pid(mpi.pid_file(self.workdir))
        out.append(ComponentStatus(name=mpi.OPERATOR, pid=pid, port=state.mpi_operator_health_port if state else None,
                                   log=str(mpi.log_file(self.workdir)), running=mpi.is_running(self.workdir)))
        return out

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
    ) -> ClusterState:
        """Create the cluster, or repair a dead component of an existing one; then make sure the platform
        objects, nodes and the controller are there. Idempotent: on an existing cluster, what is not given
        stays as it was (node count, catalog) and namespaces are only ever added."""
        from wf.cluster.install import install

        previous = self.state()
        if nodes_per_group is None:
            nodes_per_group = previous.nodes_per_group if previous else 1
        if nodes_per_group < 0:
            raise InputError("--nodes-per-group must be 0 or more")
        namespaces = list(dict.fromkeys([WORKFLOW_NAMESPACE, *(previous.namespaces if previous else ()), *namespaces]))
        bad = [n for n in namespaces if not _DNS_LABEL.fullmatch(n)]
        if bad:
            raise InputError(f"namespace(s) {', '.join(bad)}: must be DNS-1123 labels (lower-case, digits, '-')")
        catalog = self._catalog(catalog_path)  # a bad catalog fails before anything starts
        build.build_all(progress=build_progress)
        self.workdir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.catalog_file.write_text(catalog.to_yaml())
        if self.exists():
            self._repair_control_plane(say)
        else:
            self._create_control_plane(say)
        self._write_kubeconfig()
        _wait_ready(self.kubeconfig, timeout, say)
        say("installing Argo CRDs, RBAC, catalog and simulated nodes")
        install(self.kubeconfig, catalog, nodes_per_group, namespaces)
        port = self._ensure_controller(previous, say)
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
            controller_health_port=port,
            nodes_per_group=nodes_per_group,
            namespaces=namespaces,
            mpi_operator_health_port=mpi_port,
        )
        self._save_state(state)
        _wait_workloads_ready(self.kubeconfig, port, namespaces, timeout, say)
        if merge_into:
            kubeconfig.merge(self._kubeconfig_entry(), merge_into)
            say(f"context {state.context} merged into {merge_into}")
        return state

    def _catalog(self, path: str | Path | None) -> Catalog:
        """The catalog given, else the one this cluster was last brought up with, else the default one."""
        from wf.catalog import Catalog, load_catalog

        if path is None and self.catalog_file.is_file():
            return Catalog.from_yaml_text(self.catalog_file.read_text(), str(self.catalog_file))
        return load_catalog(path)

    def _kwokctl(self, args: list[str], say: Say, what: str) -> None:
        log = self.workdir / "logs" / "kwokctl.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "KWOK_WORKDIR": str(self.kwok_workdir)}
        argv = [str(build.binary_path("kwokctl")), *args]
        say(what)
        with log.open("a") as out:
            out.write(f"$ {' '.join(argv)}\n")
            out.flush()
            proc = subprocess.run(argv, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            raise ClusterError(f"kwokctl failed ({what}, exit {proc.returncode}); see {log}")

    def _create_control_plane(self, say: Say) -> None:
        config = self.workdir / "kwokctl-config.yaml"
        config.write_text(yaml.safe_dump_all(self._kwokctl_config(), sort_keys=False))
        self._kwokctl(
            [
                "create", "cluster",
                "--name", self.name,
                "--runtime", "binary",
                "--config", str(config),
                # kwokctl would otherwise edit ~/.kube/config; we merge our own context instead.
                "--kubeconfig", str(self.workdir / "kwokctl.kubeconfig"),
                "--wait", "2m",
            ],
            say,
            "starting etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok",
        )

    def _kwokctl_config(self) -> list[dict[str, Any]]:
        sim_log = self.workdir / "sim-logs" / "container.log"
        sim_log.parent.mkdir(parents=True, exist_ok=True)
        sim_log.write_text(_SIMULATED_LOG)
        options = {
            "bindAddress": processes.LOOPBACK,
            "kubeApiserverBinary": str(build.binary_path("kube-apiserver")),
            "kubeControllerManagerBinary": str(build.binary_path("kube-controller-manager")),
            "kubeSchedulerBinary": str(build.binary_path("kube-scheduler")),
            "kubectlBinary": str(build.binary_path("kubectl")),
            "etcdBinary": str(build.binary_path("etcd")),
            "kwokControllerBinary": str(build.binary_path("kwok")),
            # kwokctl would scan down from port 32767, so two clusters created at the same moment (parallel
            # test sessions) pick the same ports; ports the OS hands out at random do not collide.
            **{option: processes.free_port() for option in _PORT_OPTIONS},
            "kubeVersion": f"v{build.KUBERNETES_VERSION}",
            "etcdVersion": build.ETCD_VERSION,
        }
        kwokctl = {
            "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
            "kind": "KwokctlConfiguration",
            "options": options,
            # The API server reaches kwok's kubelet endpoint (pod logs) at the node's InternalIP.
            "componentsPatches": [
                {"name": "kwok-controller", "extraArgs": [{"key": "node-ip", "value": processes.LOOPBACK}]}
            ],
        }
        stages = [d for d in yaml.safe_load_all(STAGES_FILE.read_text()) if d]
        logs = {
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "ClusterLogs",
            "metadata": {"name": "simulated-containers"},
            "spec": {"selector": {}, "logs": [{"containers": [], "logsFile": str(sim_log), "follow": False}]},
        }
        return [kwokctl, *stages, logs]

    def _repair_control_plane(self, say: Say) -> None:
        dead = [c for c in self.status() if c.name != CONTROLLER and not c.running]
        if not dead:
            return
        for comp in self._kwok_components():
            if comp["name"] in {c.name for c in dead}:
                # kwokctl trusts a pid file whose pid answers signal 0 (a zombie does); drop stale ones.
                workdir = Path(comp.get("workDir") or self.kwok_cluster_dir)
                (workdir / "pids" / f"{Path(comp['binary']).name}.pid").unlink(missing_ok=True)
        self._kwokctl(
            ["start", "cluster", "--name", self.name],
            say,
            "restarting " + ", ".join(c.name for c in dead),
        )

    def _kubeconfig_entry(self) -> dict[str, Any]:
        """Our context (wf-<name>, namespace wf) from kwokctl's admin kubeconfig, credentials inlined."""
        admin = self.kwok_cluster_dir / "kubeconfig.yaml"
        return kubeconfig.embedded_entry(admin, context_name(self.name), WORKFLOW_NAMESPACE)

    def _write_kubeconfig(self) -> None:
        kubeconfig.write_standalone(self._kubeconfig_entry(), self.kubeconfig)

    def _ensure_controller(self, previous: ClusterState | None, say: Say) -> int:
        binary = build.binary_path(CONTROLLER)
        pid = processes.read_pid(self.controller_pid_file)
        if previous and processes.is_running(pid, binary):
            return previous.controller_health_port
        port = processes.free_port()
        say(f"starting Argo {CONTROLLER}")
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.workdir),
            "LEADER_ELECTION_DISABLE": "true",
            # Argo's own local dev mode requeues every second; the default (10s) only slows tests down.
            "DEFAULT_REQUEUE_TIME": "1s",
            "WF_HEALTH_ADDR": f"{processes.LOOPBACK}:{port}",
        }
        argv = [
            str(binary),
            "--kubeconfig", str(self.kubeconfig),
            "--namespace", CONTROLLER_NAMESPACE,
            "--executor-image", EXECUTOR_IMAGE,
            "--configmap", "workflow-controller-configmap",
        ]
        processes.start(argv, env=env, log_file=self.controller_log, pid_file=self.controller_pid_file, cwd=self.workdir)
        return port

    # ---- down --------------------------------------------------------------------------------------
    def down(self, say: Say = lambda _: None) -> None:
        """Stop every process this cluster started (by recorded pid), drop its context, remove its state."""
        if not self.workdir.exists():
            say(f"cluster {self.name} does not exist")
            return
        state = self.state()
        pid = processes.read_pid(self.controller_pid_file)
        if pid:
            say(f"stopping {CONTROLLER} (pid {pid})")
            # Its state lives in the API server, so a short grace is safe; on SIGTERM it otherwise spends
            # ~10s draining queues that nobody will read.
            processes.stop(pid, build.binary_path(CONTROLLER), grace_seconds=2)
        if pid := mpi.stop_operator(self.workdir):
            say(f"stopped {mpi.OPERATOR} (pid {pid})")
        if self.exists():
            by_name = {c["name"]: c for c in self._kwok_components()}
            order = [n for n in STOP_ORDER if n in by_name] + [n for n in by_name if n not in STOP_ORDER]
            for name in order:
                comp = by_name[name]
                workdir = Path(comp.get("workDir") or self.kwok_cluster_dir)
                pid = processes.read_pid(workdir / "pids" / f"{Path(comp['binary']).name}.pid")
                if pid:
                    say(f"stopping {name} (pid {pid})")
                    processes.stop(pid, Path(comp["binary"]))
        if state and state.merged_into:
            kubeconfig.remove(state.context, Path(state.merged_into))
        shutil.rmtree(self.workdir)
        say(f"cluster {self.name} removed")


def _accounts(core: Any, namespace: str) -> set[str]:
    return {sa.metadata.name for sa in core.list_namespaced_service_account(namespace).items}


def _serving_port(ports: list[dict[str, Any]]) -> int | None:
    """The port clients use (etcd also lists its peer port)."""
    ordered = sorted(ports, key=lambda p: p.get("name") not in ("https", "http"))
    for port in ordered:
        value = port.get("hostPort") or port.get("port")
        if value:
            return int(value)
    return None


_SIMULATED_LOG = (
    "1970-01-01T00:00:00.000000000Z stdout F [wf local cluster] this container is simulated by kwok: "
    "no process ran.\n"
    "1970-01-01T00:00:00.000000000Z stdout F [wf local cluster] its status (exit code, duration) comes from "
    "the pod's sim.wf.dev/* annotations.\n"
)


def _wait_ready(kubeconfig_path: Path, timeout: float, say: Say) -> None:
    """Wait until the API server answers /readyz with our credentials."""
    from kubernetes import config as kconfig

    say("waiting for the API server")
    api_client = kconfig.new_client_from_config(config_file=str(kubeconfig_path))
    deadline = time.monotonic() + timeout
    last = ""
    try:
        while time.monotonic() < deadline:
            try:
                api_client.call_api("/readyz", "GET", auth_settings=["BearerToken"], _preload_content=False, _request_timeout=5)
                return
            except Exception as exc:  # connection refused, 500 while starting: keep polling
                last = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            time.sleep(0.3)
    finally:
        api_client.close()
    raise ClusterError(f"API server not ready after {timeout:.0f}s: {last}")


def _wait_workloads_ready(
    kubeconfig_path: Path, controller_port: int, namespaces: Sequence[str], timeout: float, say: Say
) -> None:
    """Nodes Ready (kwok), the workflow namespace's service account (controller-manager), Argo healthy."""
    import urllib.request

    from kubernetes import client as kclient
    from kubernetes import config as kconfig

    say("waiting for nodes, service accounts and the workflow controller")
    api_client = kconfig.new_client_from_config(config_file=str(kubeconfig_path))
    core = kclient.CoreV1Api(api_client)
    deadline = time.monotonic() + timeout
    waiting = ""
    try:
        while time.monotonic() < deadline:
            not_ready = [
                n.metadata.name
                for n in core.list_node().items
                if not any(c.type == "Ready" and c.status == "True" for c in (n.status.conditions or []))
            ]
            # The controller-manager creates each namespace's `default` account; pods need it to exist.
            missing = [
                f"{ns}/{name}"
                for ns in namespaces
                for name in sorted({"default", "wf-workflow"} - _accounts(core, ns))
            ]
            try:
                with urllib.request.urlopen(f"http://{processes.LOOPBACK}:{controller_port}/healthz", timeout=2) as r:
                    healthy = r.status == 200
            except OSError:
                healthy = False
            if not not_ready and not missing and healthy:
                return
            waiting = f"nodes not ready: {len(not_ready)}; missing service accounts: {missing}; controller healthy: {healthy}"
            time.sleep(0.3)
    finally:
        api_client.close()
    raise ClusterError(f"cluster not ready after {timeout:.0f}s ({waiting})")
