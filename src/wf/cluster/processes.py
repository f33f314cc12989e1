"""Start, check and stop the local cluster's processes by pid, and pick free loopback ports.

A pid file alone is not proof: pids are reused and, where PID 1 does not reap orphans, a killed process
lingers as a zombie that still answers signal 0. A pid counts as ours and running only if it is alive, not a
zombie, and runs the binary we expect.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import random
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from wf.core.errors import ClusterError

LOOPBACK = "127.0.0.1"


# Listening ports come from below the kernel's ephemeral range. A port the OS hands out for `bind(0)` is an
# ephemeral one, which any client connection made before our process binds it may take as its own local
# port (a busy cluster beside us opens thousands): the component then cannot listen, and a restart picks the
# same port again. Ports below the range are never taken that way.
_LOWEST_PORT = 10_000
_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_handed_out: set[int] = set()  # ports this process already chose, not bound yet by whoever will listen on them


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on or connects from right now, outside the ephemeral range
    and not handed out before by this process; random, so two clusters started at once do not collide."""
    try:
        highest = int(_EPHEMERAL_RANGE.read_text().split()[0]) - 1
    except (OSError, ValueError, IndexError):
        highest = 32_767  # Linux's default range starts at 32768
    for _ in range(200):
        port = random.randint(_LOWEST_PORT, max(highest, _LOWEST_PORT + 1000))
        if port in _handed_out:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((LOOPBACK, port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise OSError("no free TCP port on 127.0.0.1 below the ephemeral range")


def reused_port(previous: int | None) -> int:
    """`previous` while nothing listens on it (so what was configured with it stays true), else a free port."""
    if previous:
        with socket.socket() as sock:
            try:
                sock.bind((LOOPBACK, previous))
            except OSError:
                return free_port()
        return previous
    return free_port()


def read_pid(pid_file: Path) -> int | None:
    try:
        return int(pid_file.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def is_running(pid: int | None, binary: Path | None = None) -> bool:
    """True if `pid` is a live, non-zombie process (running `binary`, when given)."""
    if not pid:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    # The state letter follows the parenthesised command name, which may itself contain spaces.
    state = stat.rsplit(")", 1)[1].split()[0]
    if state in ("Z", "X"):
        _reap(pid)
        return False
    if binary is None:
        return True
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return False
    return os.path.realpath(exe.removesuffix(" (deleted)")) == os.path.realpath(binary)


def _reap(pid: int) -> None:
    # Only succeeds when the process is our child (e.g. the test session started it); harmless otherwise.
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def as_user(user: str | None) -> dict[str, Any]:
    """subprocess keyword arguments that run a program as `user` (its primary group, no supplementary groups),
    switched in the child before exec; none for None (as ourselves)."""
    if user is None:
        return {}
    account = pwd.getpwnam(user)
    return {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}


def start(argv: Sequence[str], *, env: Mapping[str, str], log_file: Path, pid_file: Path, cwd: Path,
          user: str | None = None) -> int:
    """Start a detached process (own session, so a terminal's Ctrl-C does not reach it); record its pid. With
    `user`, it runs as that account (see `as_user`); the log file is still opened, and owned, by us."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    pid_file.parent.mkdir(parents=True, exist_ok=True)
    with log_file.open("ab") as log:
        proc = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            **as_user(user),
        )
    pid_file.write_text(str(proc.pid))
    return proc.pid


def stop(pid: int, binary: Path | None = None, *, grace_seconds: float = 10.0) -> None:
    """SIGTERM, then SIGKILL after the grace period; only if the pid still runs the expected binary."""
    if not is_running(pid, binary):
        return
    _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_seconds
    while time.monotonic() < deadline:
        if not is_running(pid):
            return
        time.sleep(0.05)
    _signal(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while is_running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
    _reap(pid)


def wait_http_ready(name: str, url: str, log: Path, timeout: float, pid: int | None = None) -> None:
    """Until `url` (a component's readiness endpoint on loopback) answers 200; a process `pid` that exits first
    fails at once. Either way the message points at the component's log."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        if pid is not None and not is_running(pid):
            raise ClusterError(f"{name} exited at start; see {log}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError as exc:
            last = f" ({exc})"
        time.sleep(0.2)
    raise ClusterError(f"{name} not ready after {timeout:.0f}s{last}; see {log}")
