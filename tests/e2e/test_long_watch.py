"""A watch that lasts: it follows a workflow across a connection that goes silent (a stalled proxy: open, carrying
nothing, as a dead peer behind a NAT looks) and across the API server's restart, to the workflow's end."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from wf.controller.client import Kube, Target, connect
from wf.controller.stream import KubeTransport
from wf.controller.view import PlainDisplay
from wf.controller.watch import WatchOutcome, watch_workflows
from wf.core.constants import SIM_DURATION

from .conftest import ClusterHandle
from .test_controller_e2e import job_file, step

pytestmark = pytest.mark.cluster

SILENCE = 3.0  # the test's bound for a silent watch (wf's is SILENCE_SECONDS)


class StallingProxy:
    """A TCP proxy on 127.0.0.1 to `target`. `stall()` freezes the connections open at that moment: they stay
    open and carry nothing either way, while new connections pass. Stops by itself after `lifetime` seconds."""

    def __init__(self, target: tuple[str, int], lifetime: float = 300.0) -> None:
        self.target = target
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(0.5)
        self.port = self.server.getsockname()[1]
        self.deadline = time.monotonic() + lifetime
        self.closed = threading.Event()
        self._lock = threading.Lock()
        self._connections: list[tuple[socket.socket, socket.socket, threading.Event]] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed.is_set() and time.monotonic() < self.deadline:
            try:
                client, _ = self.server.accept()
            except TimeoutError:
                continue
            except OSError:
                break
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:  # the API server is down: the client sees the connection end
                client.close()
                continue
            frozen = threading.Event()
            with self._lock:
                self._connections.append((client, upstream, frozen))
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink, frozen), daemon=True).start()
        self.close()

    def _pump(self, source: socket.socket, sink: socket.socket, frozen: threading.Event) -> None:
        source.settimeout(0.5)
        while not self.closed.is_set():
            if frozen.is_set():
                time.sleep(0.2)
                continue
            try:
                data = source.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                break
            if not data:
                break
            try:
                sink.sendall(data)
            except OSError:
                break
        for end in (source, sink):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)

    def stall(self) -> int:
        with self._lock:
            for _, _, frozen in self._connections:
                frozen.set()
            return len(self._connections)

    def close(self) -> None:
        self.closed.set()
        with contextlib.suppress(OSError):
            self.server.close()
        with self._lock:
            for client, upstream, _ in self._connections:
                client.close()
                upstream.close()


def _through(handle: ClusterHandle, proxy: StallingProxy, path: Path) -> Kube:
    config = yaml.safe_load(handle.kubeconfig.read_text())
    cluster = next(c for c in config["contexts"] if c["name"] == handle.context)["context"]["cluster"]
    for entry in config["clusters"]:
        if entry["name"] == cluster:
            entry["cluster"]["server"] = f"https://127.0.0.1:{proxy.port}"
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return connect(Target(kubeconfig=str(path), context=handle.context))


def _until(what: str, check: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout:.0f}s: {what}"
        time.sleep(0.2)


def test_a_watch_outlives_a_silent_connection_and_an_api_server_restart(
    local_cluster: ClusterHandle, kube: Kube, tmp_path: Path
) -> None:
    import wf

    (submitted,) = wf.submit(str(job_file(tmp_path, "long", [step("slow", **{SIM_DURATION: "60s"})])), kube=kube)
    address = urlsplit(kube.server)
    proxy = StallingProxy((address.hostname or "127.0.0.1", address.port or 443))
    proxied = _through(local_cluster, proxy, tmp_path / "proxied-kubeconfig")

    def transport(namespace: str, labels: str, fields: str) -> KubeTransport:
        made = KubeTransport.workflows(proxied, namespace, labels, fields)
        made.silence = SILENCE
        return made

    shown = io.StringIO()
    result: dict[str, Any] = {}

    def follow() -> None:
        try:
            result["outcome"] = watch_workflows(proxied, [("wf", submitted.name)], display=PlainDisplay(shown),
                                                with_cost=False, transport_factory=transport)
        except BaseException as exc:  # noqa: BLE001 - the test reports it
            result["error"] = exc

    watcher = threading.Thread(target=follow, daemon=True)
    watcher.start()
    try:
        _until("the watch is open", lambda: "slow: Running" in shown.getvalue(), 90)
        assert proxy.stall() >= 1
        _until("the silent watch is noticed", lambda: "no event or bookmark" in shown.getvalue(), SILENCE * 10)

        apiserver = next(c for c in local_cluster.cluster.status() if c.name == "kube-apiserver")
        os.kill(apiserver.pid, signal.SIGKILL)
        time.sleep(5)  # the watch is cut and reconnecting fails meanwhile
        local_cluster.cluster.up(merge_into=local_cluster.kubeconfig)  # repairs the dead API server only

        watcher.join(timeout=240)
        assert not watcher.is_alive(), shown.getvalue()
        assert "error" not in result, (result, shown.getvalue())
        outcome: WatchOutcome = result["outcome"]
        assert outcome.succeeded, shown.getvalue()
        stats = outcome.stats["wf"]
        assert stats.silences >= 1 and stats.reconnects >= 1, stats
        assert "lost the API server" in shown.getvalue() and "connected again" in shown.getvalue()
    finally:
        proxy.close()
        proxied.api_client.close()
