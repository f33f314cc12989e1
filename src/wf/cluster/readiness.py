"""Wait until the local cluster answers: the API server, then nodes, service accounts and Argo's controller."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from wf.cluster import processes
from wf.core.errors import ClusterError

Say = Callable[[str], None]


# How often a wait hands over to `while_waiting` (e.g. restarting a component that exited meanwhile).
TICK_SECONDS = 2.0


def wait_api_ready(
    kubeconfig_path: Path, timeout: float, say: Say, while_waiting: Callable[[], None] = lambda: None
) -> None:
    """Wait until the API server answers /readyz with our credentials, calling `while_waiting` every tick."""
    from wf.controller.client import Target, connect

    say("waiting for the API server")
    api_client = connect(Target(kubeconfig=str(kubeconfig_path))).api_client
    deadline = time.monotonic() + timeout
    last = ""
    next_tick = time.monotonic() + TICK_SECONDS
    try:
        while time.monotonic() < deadline:
            if time.monotonic() >= next_tick:
                while_waiting()
                next_tick = time.monotonic() + TICK_SECONDS
            try:
                api_client.call_api("/readyz", "GET", auth_settings=["BearerToken"], _preload_content=False,
                                    _request_timeout=5)
                return
            except Exception as exc:  # connection refused, 500 while starting: keep polling
                last = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            time.sleep(0.3)
    finally:
        api_client.close()
    raise ClusterError(f"API server not ready after {timeout:.0f}s: {last}")


def wait_workloads_ready(
    kubeconfig_path: Path,
    controller_port: int,
    namespaces: Sequence[str],
    timeout: float,
    say: Say,
    while_waiting: Callable[[], None] = lambda: None,
) -> None:
    """Nodes Ready (kwok), the workflow namespaces' service accounts (controller-manager), Argo healthy."""
    import urllib.request

    from kubernetes import client as kclient

    from wf.controller.client import Target, connect

    say("waiting for nodes, service accounts and the workflow controller")
    api_client = connect(Target(kubeconfig=str(kubeconfig_path))).api_client
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
            while_waiting()
            waiting = (f"nodes not ready: {len(not_ready)}; missing service accounts: {missing}; "
                       f"controller healthy: {healthy}")
            time.sleep(0.3)
    finally:
        api_client.close()
    raise ClusterError(f"cluster not ready after {timeout:.0f}s ({waiting})")


def _accounts(core: Any, namespace: str) -> set[str]:
    return {sa.metadata.name for sa in core.list_namespaced_service_account(namespace).items}


def wait_nodes_ready(kubeconfig_path: Path, names: Sequence[str], timeout: float, say: Say) -> None:
    """Until each named node (a real one, whose kubelet registers it) exists and is Ready."""
    from kubernetes import client as kclient

    from wf.controller.client import Target, connect

    if not names:
        return
    say(f"waiting for real node(s) {', '.join(names)} to be Ready")
    api_client = connect(Target(kubeconfig=str(kubeconfig_path))).api_client
    core = kclient.CoreV1Api(api_client)
    deadline = time.monotonic() + timeout
    pending = list(names)
    try:
        while time.monotonic() < deadline:
            ready = {n.metadata.name for n in core.list_node().items
                     if any(c.type == "Ready" and c.status == "True" for c in (n.status.conditions or []))}
            pending = [n for n in names if n not in ready]
            if not pending:
                return
            time.sleep(0.5)
    finally:
        api_client.close()
    raise ClusterError(f"real node(s) not Ready after {timeout:.0f}s: {', '.join(pending)}")
