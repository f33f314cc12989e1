"""What the benchmarks without a cluster share: an API server's answers on 127.0.0.1, run in a process of its own,
a kubeconfig pointing at it, a command measured whole from outside by GNU time, and wf's sources byte-compiled
first, as an installed package's are.

    from fakeapi import ApiHandler, byte_compiled, measure, served, write_kubeconfig

The server runs in a process of its own because a child forked from a big parent starts with the parent's
high-water mark (Linux keeps the larger of the two across the exec); GNU time (`/usr/bin/time -v`, Debian's `time`
package) forks the measured command from its own small process and reads its peak RSS, wall and CPU time from
wait4, which also keeps the high-water mark across an exec (`wf report -o html` execs its drawing half).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import yaml

GNU_TIME = "/usr/bin/time"


class ApiHandler(BaseHTTPRequestHandler):
    """The Kubernetes API server's (and Argo Server's) way of answering: JSON bodies, HTTP/1.1 kept alive, chunked
    watch responses, TCP_NODELAY as Go's net/http sets it. A subclass answers GETs in `get`."""

    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        url = urlparse(self.path)
        self.get(url.path, {k: v[0] for k, v in parse_qs(url.query).items()})

    def get(self, path: str, query: dict[str, str]) -> None:
        self.not_found(path)

    def send_json(self, code: int, body: Any) -> None:
        self.send_bytes(code, json.dumps(body).encode())

    def send_bytes(self, code: int, data: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def send_page(self, kind: str, api_version: str, items: Sequence[bytes], query: dict[str, str]) -> None:
        """A list the way the API server pages it: `limit` items (each its JSON, encoded once as the API server's
        watch cache keeps them) from the `continue` token on."""
        start, limit = int(query.get("continue") or 0), int(query.get("limit") or 10**9)
        more = start + limit < len(items)
        metadata = {"resourceVersion": "1", **({"continue": str(start + limit)} if more else {})}
        head = json.dumps({"apiVersion": api_version, "kind": kind, "metadata": metadata})[:-1].encode()
        self.send_bytes(200, head + b', "items": [' + b", ".join(items[start:start + limit]) + b"]}")

    def send_stream(self, lines: Iterator[bytes]) -> None:
        """A watch: one event a chunk, as the API server sends them."""
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for line in lines:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
        self.wfile.write(b"0\r\n\r\n")

    def not_found(self, path: str) -> None:
        self.send_json(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound",
                             "message": f"{path} not found", "code": 404})


def start(handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
    """Serve `handler` on a port of 127.0.0.1 the OS picks, in daemon threads."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def serve_until_stdin_closes(handler: type[BaseHTTPRequestHandler]) -> None:
    """The server process's life: print the port, serve until the benchmark closes our stdin."""
    server = start(handler)
    print(server.server_port, flush=True)
    sys.stdin.read()
    server.shutdown()


@contextmanager
def served(argv: Sequence[str]) -> Iterator[int]:
    """Run `argv` (a script's --serve mode: `serve_until_stdin_closes`) as the API server's process; its port."""
    server = subprocess.Popen([sys.executable, *argv], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        yield int(server.stdout.readline())  # type: ignore[union-attr]
    finally:
        server.stdin.close()  # type: ignore[union-attr]
        server.wait(timeout=60)


def write_kubeconfig(path: Path, port: int, namespace: str | None = None) -> Path:
    """A kubeconfig whose current context `bench` is the server on 127.0.0.1:`port`."""
    context: dict[str, Any] = {"cluster": "bench", "user": "bench", **({"namespace": namespace} if namespace else {})}
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "bench",
        "clusters": [{"name": "bench", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "bench", "user": {"token": "bench"}}],
        "contexts": [{"name": "bench", "context": context}],
    }))
    return path


@dataclass(frozen=True)
class Measured:
    """One command, as GNU time saw it."""

    wall_seconds: float
    peak_rss_mb: float  # MB of 2**20 bytes, as GNU time's kbytes / 1024
    cpu_seconds: float
    exit_code: int
    stdout: bytes
    stderr: bytes


def _gnu_time(report: str) -> dict[str, str]:
    """GNU time -v's `name: value` lines."""
    fields = {}
    for line in report.splitlines():
        name, _, value = line.strip().rpartition(": ")
        if name:
            fields[name] = value
    return fields


def _clock(text: str) -> float:
    """GNU time's elapsed wall clock, `[h:]m:ss.cc`, in seconds."""
    seconds = 0.0
    for part in text.split(":"):
        seconds = seconds * 60 + float(part)
    return seconds


def measure(argv: Sequence[str], env: dict[str, str] | None = None) -> Measured:
    """Run `argv` under `/usr/bin/time -v` and read its wall time, peak RSS and CPU; stdout and stderr kept."""
    if not os.access(GNU_TIME, os.X_OK):
        raise SystemExit(f"{GNU_TIME} not found: install GNU time (Debian: apt-get install time)")
    with tempfile.NamedTemporaryFile("r", prefix="wf-bench-time-") as timed:
        child = subprocess.run([GNU_TIME, "-v", "-o", timed.name, *argv], env=env, stdin=subprocess.DEVNULL,
                               capture_output=True, check=False)
        fields = _gnu_time(timed.read())
    return Measured(wall_seconds=_clock(fields["Elapsed (wall clock) time (h:mm:ss or m:ss)"]),
                    peak_rss_mb=int(fields["Maximum resident set size (kbytes)"]) / 1024,
                    cpu_seconds=float(fields["User time (seconds)"]) + float(fields["System time (seconds)"]),
                    exit_code=child.returncode, stdout=child.stdout, stderr=child.stderr)


def byte_compiled(src: str) -> dict[str, str]:
    """Compile the modules under `src` as pip compiles an installed package's (hera's in site-packages are), and
    the environment for the measured commands: without PYTHONDONTWRITEBYTECODE, a process that compiled wf's
    modules on every start would time Python's compiler, not wf."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([sys.executable, "-m", "compileall", "-q", src], env=env, check=True, stdout=subprocess.DEVNULL)
    return env
