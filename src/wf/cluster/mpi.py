"""The local cluster's Kubeflow mpi-operator: its CRD (from the built module, see build.py) and its controller,
run as a process of ours like Argo's workflow-controller, so multi-node steps (MPIJobs) run locally.

The operator elects a leader through a Lease in CONTROLLER_NAMESPACE (it has no switch to turn that off), and
serves its health check on the loopback port that our build patch reads from WF_HEALTH_ADDR.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from wf.cluster import build, processes
from wf.core.errors import ClusterError

OPERATOR = "mpi-operator"


def _component() -> build.Component:
    return next(c for c in build.components() if c.name == OPERATOR)


def crd_manifests() -> list[dict[str, Any]]:
    """The MPIJob CRD that the built operator version ships (manifests/base of its module)."""
    comp = _component()
    path = comp.asset(build.cache_dir(), comp.assets[0])
    try:
        return [d for d in yaml.safe_load_all(path.read_text()) if d]
    except FileNotFoundError:
        raise ClusterError(f"{path} is missing: run `wf cluster build {OPERATOR}`") from None


def pid_file(workdir: Path) -> Path:
    return workdir / "pids" / f"{OPERATOR}.pid"


def log_file(workdir: Path) -> Path:
    return workdir / "logs" / f"{OPERATOR}.log"


def binary() -> Path:
    return build.binary_path(OPERATOR)


def is_running(workdir: Path) -> bool:
    return processes.is_running(processes.read_pid(pid_file(workdir)), binary())


def ensure_operator(workdir: Path, kubeconfig: Path, lock_namespace: str, timeout: float = 60.0) -> int:
    """(Re)start the operator and wait until it serves its health check. Returns the health port."""
    stop_operator(workdir)  # one whose port was not recorded (an `up` that died half-way) is replaced
    port = processes.free_port()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(workdir),
        "WF_HEALTH_ADDR": f"{processes.LOOPBACK}:{port}",
    }
    argv = [
        str(binary()),
        "--kubeConfig", str(kubeconfig),
        "--lock-namespace", lock_namespace,
        # Every namespace (the default); the local cluster's own client limits, not a shared API server's.
        "--kube-api-qps", "50",
        "--kube-api-burst", "100",
    ]
    pid = processes.start(argv, env=env, log_file=log_file(workdir), pid_file=pid_file(workdir), cwd=workdir)
    processes.wait_http_ready(OPERATOR, f"http://{processes.LOOPBACK}:{port}/healthz", log_file(workdir), timeout,
                              pid)
    return port


def stop_operator(workdir: Path) -> int | None:
    """Stop the operator this cluster started (by its recorded pid); the pid, if there was one."""
    pid = processes.read_pid(pid_file(workdir))
    if pid:
        # Its state lives in the API server; a short grace is enough.
        processes.stop(pid, binary(), grace_seconds=2)
    return pid
