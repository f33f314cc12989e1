"""Supervise the local cluster's processes: start, check, repair and stop them.

kwokctl's binary runtime starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler and
kwok-controller (it generates the PKI and the flags for the versions it supports) and records a pid and a
log per component under the cluster's work directory. We read that record back for `status`, repair dead
components through `kwokctl start cluster` (which starts only what is not running), start Argo's
workflow-controller (and, on request, Karpenter's kwok provider) ourselves, and stop every process by pid,
so exactly what was started is stopped.

The flags come from wf.cluster.tuning (sized for thousands of nodes and pods on two cores).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from wf.argo.size import ARGO_MAX_WORKFLOW_SIZE_ENV
from wf.cluster import build, images, processes
from wf.cluster.tuning import CONTROLLER_ARGS, GO_RUNTIME_ENV, KWOK_OPTIONS, KWOKCTL_OPTIONS, TUNING, requeue_time
from wf.core.constants import CATALOG_NAMESPACE, REAL_NODE_LABEL
from wf.core.errors import ClusterError
from wf.render.platform import CONTROLLER_NAMESPACE
from wf.render.platform import NODE_RECORDER as NODE_RECORDER_ACCOUNT

Say = Callable[[str], None]

CONTROLLER = "workflow-controller"
# Reports the outputs of simulated pods as Argo's executor would (wf/sim_executor.py).
SIM_EXECUTOR = "sim-executor"
# Keeps each workflow's nodes for its cost and marks MPIJobs that lost a worker (wf.controller.node_recorder), as the
# platform bundle's Deployment does.
NODE_RECORDER = "node-recorder"
# wf's own processes beside the control plane, each started with the cluster's admin kubeconfig: what follows
# `python`. The recorder acts as the bundle's account, so the local cluster runs it with the rights EKS gives it.
OWN_PROCESSES = {
    SIM_EXECUTOR: ["-m", "wf.cluster.executor"],
    NODE_RECORDER: ["-m", "wf", "platform", "record-nodes",
                    f"--as=system:serviceaccount:{CATALOG_NAMESPACE}:{NODE_RECORDER_ACCOUNT}"],
}
# Nothing is pulled under kwok; a real node has it imported (wf.cluster.images).
EXECUTOR_IMAGE = images.ARGOEXEC
STAGES_FILE = Path(__file__).with_name("kwok-stages.yaml")
# kwokctl's component names in the order processes must stop (dependents first).
STOP_ORDER = ("kwok-controller", "kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd")
# The Services' cluster IPs, set rather than left to the API server's deprecated default (10.0.0.0/24, which is also
# kwok's range for simulated pod IPs). Only a real node's pods ever reach one: its relay serves them inside the
# node's network namespace (wf.cluster.relay).
SERVICE_CIDR = "10.96.0.0/16"
KUBERNETES_SERVICE_IP = "10.96.0.1"  # the `kubernetes` Service's: the range's first address
KUBERNETES_SERVICE_PORT = 443
_PORT_OPTIONS = (
    "kubeApiserverPort", "etcdPort", "etcdPeerPort", "kubeControllerManagerPort", "kubeSchedulerPort",
    "kwokControllerPort",
)

@dataclass(frozen=True)
class ControllerPorts:
    """The workflow-controller's loopback listeners (our build patches both addresses, see wf.cluster.build)."""

    health: int
    metrics: int  # Argo's Prometheus metrics, plain HTTP


@dataclass(frozen=True)
class ComponentStatus:
    name: str
    pid: int | None
    port: int | None
    log: str
    running: bool


class Supervisor:
    """The processes of one local cluster, rooted at its work directory."""

    def __init__(self, name: str, workdir: Path) -> None:
        self.name = name
        self.workdir = workdir
        self.kwok_workdir = workdir / "kwok"
        self.kwok_cluster_dir = self.kwok_workdir / "clusters" / name
        self.kubeconfig = workdir / "kubeconfig"
        self.controller_pid_file = workdir / "pids" / f"{CONTROLLER}.pid"
        self.controller_log = workdir / "logs" / f"{CONTROLLER}.log"

    def exists(self) -> bool:
        return (self.kwok_cluster_dir / "kwok.yaml").is_file()

    # ---- the control plane (kwokctl) ---------------------------------------------------------------
    def _kwok_components(self) -> list[dict[str, Any]]:
        saved = self.kwok_cluster_dir / "kwok.yaml"
        for doc in yaml.safe_load_all(saved.read_text()):
            if doc and doc.get("kind") == "KwokctlConfiguration":
                return list(doc.get("components") or [])
        raise ClusterError(f"{saved}: no KwokctlConfiguration found; remove {self.workdir} and run `up` again")

    def _pid_file(self, comp: dict[str, Any]) -> Path:
        workdir = Path(comp.get("workDir") or self.kwok_cluster_dir)
        return workdir / "pids" / f"{Path(comp['binary']).name}.pid"

    def control_plane(self) -> list[ComponentStatus]:
        if not self.exists():
            return []
        out = []
        for comp in self._kwok_components():
            binary = Path(comp["binary"])
            workdir = Path(comp.get("workDir") or self.kwok_cluster_dir)
            pid = processes.read_pid(self._pid_file(comp))
            out.append(
                ComponentStatus(
                    name=comp["name"],
                    pid=pid,
                    port=serving_port(comp.get("ports") or []),
                    log=str(workdir / "logs" / f"{binary.name}.log"),
                    running=processes.is_running(pid, binary),
                )
            )
        return out

    def controller(self, port: int | None) -> ComponentStatus:
        pid = processes.read_pid(self.controller_pid_file)
        return ComponentStatus(
            name=CONTROLLER,
            pid=pid,
            port=port,
            log=str(self.controller_log),
            running=processes.is_running(pid, build.binary_path(CONTROLLER)),
        )

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

    def create(self, say: Say) -> None:
        config = self.workdir / "kwokctl-config.yaml"
        config.write_text(yaml.safe_dump_all(self.kwokctl_config(), sort_keys=False))
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

    def kwokctl_config(self) -> list[dict[str, Any]]:
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
            "kubeVersion": f"v{build.KUBERNETES_RELEASE}",
            **KWOKCTL_OPTIONS,
            "etcdVersion": build.ETCD_RELEASE,
            # Pods on a real node reach the API server at the `kubernetes` Service's address (in-cluster config):
            # its certificate must name it.
            "kubeApiserverCertSANs": [KUBERNETES_SERVICE_IP],
        }
        flags = {name: dict(values) for name, values in TUNING.items()}
        # The API server reaches kwok's kubelet endpoint (pod logs) at the node's InternalIP.
        flags.setdefault("kwok-controller", {})["node-ip"] = processes.LOOPBACK
        # kwok plays every node but real ones (wf.cluster.realnode), whose kubelet would fight it.
        flags["kwok-controller"]["manage-nodes-with-label-selector"] = f"!{REAL_NODE_LABEL}"
        # The API server reaches a real node's kubelet (logs, exec) as the cluster's admin; kwok ignores it.
        pki = self.kwok_cluster_dir / "pki"
        # Only at a node's InternalIP (127.0.0.1 for every node here): its default tries the Hostname first,
        # which would send a DNS query for the node's name off the machine.
        flags.setdefault("kube-apiserver", {}).update(
            {"kubelet-client-certificate": str(pki / "admin.crt"), "kubelet-client-key": str(pki / "admin.key"),
             "kubelet-preferred-address-types": "InternalIP", "service-cluster-ip-range": SERVICE_CIDR})
        # kwokctl's binary runtime passes --manage-all-nodes=true, which a selector conflicts with: replace it.
        overrides = {"kwok-controller": [{"key": "manage-all-nodes", "value": "false", "override": True}]}
        patches = [
            {"name": name,
             "extraArgs": [*({"key": k, "value": v} for k, v in values.items()), *overrides.get(name, [])],
             **({"extraEnvs": [{"name": k, "value": v} for k, v in env.items()]}
                if (env := GO_RUNTIME_ENV.get(name)) else {})}
            for name, values in flags.items()
        ]
        kwokctl = {
            "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
            "kind": "KwokctlConfiguration",
            "options": options,
            "componentsPatches": patches,
        }
        kwok = {
            "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
            "kind": "KwokConfiguration",
            "options": dict(KWOK_OPTIONS),
        }
        stages = [d for d in yaml.safe_load_all(STAGES_FILE.read_text()) if d]
        logs = {
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "ClusterLogs",
            "metadata": {"name": "simulated-containers"},
            "spec": {"selector": {}, "logs": [{"containers": [], "logsFile": str(sim_log), "follow": False}]},
        }
        return [kwokctl, kwok, *stages, logs]

    def repair(self, say: Say) -> None:
        """Start again whatever is dead. `up` calls this while it waits for the cluster too: a component that
        was still shutting down when `up` began (a plain `kill` gives kube-apiserver seconds of graceful stop)
        counts as running until it exits, and is started again then."""
        dead = [c for c in self.control_plane() if not c.running]
        if not dead:
            return
        names = {c.name for c in dead}
        for comp in self._kwok_components():
            if comp["name"] in names:
                # kwokctl trusts a pid file whose pid answers signal 0 (a zombie does); drop stale ones.
                self._pid_file(comp).unlink(missing_ok=True)
        self._kwokctl(["start", "cluster", "--name", self.name], say, "restarting " + ", ".join(sorted(names)))

    # ---- Argo's controller -------------------------------------------------------------------------
    def ensure_controller(self, previous: ControllerPorts | None, nodes_per_group: int, say: Say) -> ControllerPorts:
        """The controller's ports: the previous ones if it still runs, else a new process's. One running with
        ports nobody recorded (an `up` that died half-way, or a wf that did not serve metrics) is replaced."""
        binary = build.binary_path(CONTROLLER)
        pid = processes.read_pid(self.controller_pid_file)
        if pid is not None and processes.is_running(pid, binary):
            if previous is not None:
                return previous
            processes.stop(pid, binary, grace_seconds=2)
        ports = ControllerPorts(health=processes.free_port(), metrics=processes.free_port())
        say(f"starting Argo {CONTROLLER}")
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.workdir),
            "LEADER_ELECTION_DISABLE": "true",
            "DEFAULT_REQUEUE_TIME": requeue_time(nodes_per_group),
            **GO_RUNTIME_ENV[CONTROLLER],
            "WF_HEALTH_ADDR": f"{processes.LOOPBACK}:{ports.health}",
            "WF_METRICS_ADDR": f"{processes.LOOPBACK}:{ports.metrics}",
            # Argo's own knob, passed on when set: a smaller status limit makes a fan-out of hundreds of items
            # compress and then offload its steps to the database, as 10,000 items do at Argo's 1 MiB default.
            **{k: v for k, v in os.environ.items() if k == ARGO_MAX_WORKFLOW_SIZE_ENV},
        }
        argv = [
            str(binary),
            "--kubeconfig", str(self.kubeconfig),
            "--namespace", CONTROLLER_NAMESPACE,
            "--executor-image", EXECUTOR_IMAGE,
            "--configmap", "workflow-controller-configmap",
            # At info it logs several lines per pod (70,000 in the scale benchmark's first two minutes), on
            # the cores the simulated cluster needs; warnings and errors still reach the log.
            "--loglevel", "warn",
            *CONTROLLER_ARGS,
        ]
        processes.start(argv, env=env, log_file=self.controller_log, pid_file=self.controller_pid_file,
                        cwd=self.workdir)
        return ports

    # ---- wf's own processes: the simulated executor, the node facts recorder ------------------------------
    def own_pid_file(self, name: str) -> Path:
        return self.workdir / "pids" / f"{name}.pid"

    def own(self, name: str, port: int | None = None) -> ComponentStatus:
        """One of wf's own processes; `port`: where it serves, as the cluster's state says (the recorder's metrics)."""
        pid = processes.read_pid(self.own_pid_file(name))
        return ComponentStatus(name=name, pid=pid, port=port, log=str(self.workdir / "logs" / f"{name}.log"),
                               running=processes.is_running(pid, Path(sys.executable)))

    def ensure_own(self, name: str, say: Say, extra: Sequence[str] = ()) -> None:
        """Start one of wf's own processes, with `extra` arguments, unless it runs."""
        if (status := self.own(name)).running:
            return
        say(f"starting {name}")
        env = {k: v for k, v in os.environ.items() if k in ("PATH", "PYTHONPATH", "HOME")}
        argv = [sys.executable, *OWN_PROCESSES[name], "--kubeconfig", str(self.kubeconfig), *extra]
        processes.start(argv, env=env, log_file=Path(status.log), pid_file=self.own_pid_file(name), cwd=self.workdir)

    def ensure_recorder(self, previous_port: int | None, say: Say) -> int:
        """The node facts recorder's metrics port (its /metrics, for Prometheus): the previous one if it still runs,
        else a new process's. One running where nobody recorded is replaced."""
        status = self.own(NODE_RECORDER)
        if status.running and status.pid is not None:
            if previous_port is not None:
                return previous_port
            processes.stop(status.pid, Path(sys.executable), grace_seconds=2)
        port = processes.free_port()
        self.ensure_own(NODE_RECORDER, say, [f"--metrics-address={processes.LOOPBACK}:{port}"])
        return port

    # ---- stop --------------------------------------------------------------------------------------
    def stop_all(self, extra: Sequence[tuple[str, Path, Path]], say: Say) -> None:
        """Stop `extra` (name, pid file, binary: our own processes, dependents of the control plane), then
        the control plane, dependents first."""
        for name, pid_file, binary in extra:
            pid = processes.read_pid(pid_file)
            if pid:
                say(f"stopping {name} (pid {pid})")
                # Their state lives in the API server, so a short grace is safe; on SIGTERM Argo otherwise
                # spends ~10s draining queues that nobody will read.
                processes.stop(pid, binary, grace_seconds=2)
        if not self.exists():
            return
        by_name = {c["name"]: c for c in self._kwok_components()}
        order = [n for n in STOP_ORDER if n in by_name] + [n for n in by_name if n not in STOP_ORDER]
        for name in order:
            comp = by_name[name]
            pid = processes.read_pid(self._pid_file(comp))
            if pid:
                say(f"stopping {name} (pid {pid})")
                processes.stop(pid, Path(comp["binary"]))


def serving_port(ports: list[dict[str, Any]]) -> int | None:
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
