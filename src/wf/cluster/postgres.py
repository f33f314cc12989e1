"""PostgreSQL on the local cluster: Argo's workflow archive and offloaded node status (its `persistence`), as on
a real platform's RDS, from the machine's PostgreSQL server package (Debian's `postgresql`), a process on loopback.

PostgreSQL refuses to run as root. Run by root (a container, a CI machine), it runs as the package's `postgres`
account, switched to by the process launcher (wf.cluster.processes.as_user); run by anyone else, as that user.
The account must be able to reach its data directory, and a root-owned cluster directory usually sits where it
cannot (root's home, mode 0700): as root, the data directory is in the account's home, where the package keeps
its own clusters (/var/lib/postgresql/wf/<cluster>-<hash>), linked from the cluster's directory and removed with
it; otherwise it is in the cluster's directory itself.

It listens on 127.0.0.1 only, at a port `up` picks (the previous one while it is free, so Argo's configuration
stays true), with its Unix socket in the data directory (mode 0700: only its account reaches it, with peer
authentication, to create Argo's role). Argo connects over TCP as the role `argo` with a password (SCRAM), which
the cluster keeps in its directory (mode 0600) and in the Secret the controller and Argo Server read by reference.

Layout under the cluster's work directory:
  postgres/data        the data directory (as root: a link to it)
  postgres/password    the `argo` role's password (mode 0600); written once the role exists
  pids/postgres.pid, logs/postgres.log
"""

from __future__ import annotations

import base64
import functools
import getpass
import hashlib
import os
import pwd
import secrets
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from wf.cluster import processes
from wf.cluster.supervise import Say
from wf.core.errors import ClusterError
from wf.render.platform import ARGO_DATABASE_NAME, ARGO_DATABASE_SECRET, CONTROLLER_NAMESPACE, ArgoDatabase

NAME = "postgres"
SERVER_ROOT = Path("/usr/lib/postgresql")  # Debian's layout: one <major version>/bin per installed server
ACCOUNT = "postgres"  # the system account the package creates
ROLE = "argo"
# Passed as server options rather than written into postgresql.conf, so `up` owns them whatever initdb wrote.
_SETTINGS = {
    "listen_addresses": processes.LOOPBACK,
    "unix_socket_permissions": "0700",
    # A simulated cluster's history: a commit need not wait for the disk (a crash may lose the last second of
    # archive writes, never corrupt them), which keeps Argo's node-status writes off the two shared cores' I/O.
    "synchronous_commit": "off",
    "shared_buffers": "32MB",
    "max_connections": "50",
}


def server_binaries(root: Path = SERVER_ROOT) -> Path:
    """The bin directory of the newest PostgreSQL server installed; ClusterError saying how to install one."""
    found = []
    for candidate in root.glob("*/bin"):
        if (candidate / "postgres").is_file() and (candidate / "initdb").is_file():
            try:
                found.append((float(candidate.parent.name), candidate))
            except ValueError:
                continue
    if not found:
        raise ClusterError(f"the local cluster keeps Argo's workflow archive in PostgreSQL, and no PostgreSQL server "
                           f"is installed ({root}/<version>/bin/postgres not found): install it with "
                           "`sudo apt-get install postgresql` (Debian, Ubuntu)")
    return max(found)[1]


def _account() -> str | None:
    """Whom the server runs as: the package's account when we are root (PostgreSQL refuses root), else us."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(ACCOUNT)
    except KeyError:
        raise ClusterError(f"PostgreSQL refuses to run as root and there is no `{ACCOUNT}` account to run it as: "
                           "install the server with `apt-get install postgresql`, which creates it") from None
    return ACCOUNT


class LocalPostgres:
    """The PostgreSQL process of one local cluster."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.dir = workdir / NAME
        self.link = self.dir / "data"
        self.password_file = self.dir / "password"
        self.pid_file = workdir / "pids" / f"{NAME}.pid"
        self.log = workdir / "logs" / f"{NAME}.log"

    @functools.cached_property
    def account(self) -> str | None:
        return _account()

    @property
    def data_dir(self) -> Path:
        if self.account is None:
            return self.link
        home = Path(pwd.getpwnam(self.account).pw_dir)
        tag = hashlib.sha256(str(self.workdir.resolve()).encode()).hexdigest()[:8]
        return home / "wf" / f"{self.workdir.name}-{tag}"

    def pid(self) -> int | None:
        return processes.read_pid(self.pid_file)

    @property
    def binary(self) -> Path:
        """The server's program: what a pid of ours must run (a path no process runs when none is installed)."""
        try:
            return server_binaries() / "postgres"
        except ClusterError:
            return SERVER_ROOT / "postgres"

    def running(self) -> bool:
        return processes.is_running(self.pid(), self.binary)

    def database(self, port: int) -> ArgoDatabase:
        return ArgoDatabase(host=processes.LOOPBACK, port=port, ssl=False)

    def secret(self) -> dict[str, Any]:
        """The `argo` role's credentials where Argo's persistence reads them by reference."""
        values = {"username": ROLE, "password": self.password_file.read_text().strip()}
        return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                "metadata": {"name": ARGO_DATABASE_SECRET, "namespace": CONTROLLER_NAMESPACE},
                "data": {key: base64.b64encode(value.encode()).decode() for key, value in values.items()}}

    def ensure(self, previous_port: int | None, say: Say, timeout: float = 60.0) -> int:
        """Initialise the server once (data directory, Argo's role and database), start it unless it runs on
        `previous_port`; returns its port."""
        bin_dir = server_binaries()
        pid = self.pid()
        if pid is not None and processes.is_running(pid, bin_dir / "postgres"):
            if previous_port is not None:
                return previous_port
            self.stop()  # one whose port nobody recorded (an `up` that died half-way)
        fresh = not self.password_file.is_file()  # the role is made last: without its password, start afresh
        if fresh:
            self._initdb(bin_dir, say)
        port = processes.reused_port(previous_port)
        say(f"starting PostgreSQL {bin_dir.parent.name} on {processes.LOOPBACK}:{port}")
        data = self.data_dir
        argv = [str(bin_dir / "postgres"), "-D", str(data), "-p", str(port),
                "-c", f"unix_socket_directories={data}",
                *(arg for key, value in _SETTINGS.items() for arg in ("-c", f"{key}={value}"))]
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": str(data)}
        pid = processes.start(argv, env=env, log_file=self.log, pid_file=self.pid_file, cwd=data, user=self.account)
        self._wait_ready(bin_dir, pid, port, timeout)
        if fresh:
            self._create_role(bin_dir, port)
        return port

    def _initdb(self, bin_dir: Path, say: Say) -> None:
        say(f"initialising PostgreSQL's data directory for Argo's archive ({self.data_dir})")
        self.remove_data()
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        data = self.data_dir
        shutil.rmtree(data, ignore_errors=True)  # left by an `up` that died before making Argo's role
        data.mkdir(parents=True, mode=0o700)
        if self.account is not None:
            account = pwd.getpwnam(self.account)
            for path in (data.parent, data):
                os.chown(path, account.pw_uid, account.pw_gid)
            self.link.symlink_to(data, target_is_directory=True)
        argv = [str(bin_dir / "initdb"), "-D", str(data), "-U", self._superuser(), "-E", "UTF8", "--locale=C.UTF-8",
                "--auth-local=peer", "--auth-host=scram-sha-256", "--no-instructions"]
        self._run(argv, "initdb")

    def _superuser(self) -> str:
        return self.account or getpass.getuser()

    def _run(self, argv: list[str], what: str, stdin: str = "") -> None:
        """A PostgreSQL client program as the server's account; its output goes to the server's log."""
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as log:
            proc = subprocess.run(argv, input=stdin.encode(), stdout=log, stderr=subprocess.STDOUT, check=False,
                                  cwd=self.data_dir, env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
                                  **processes.as_user(self.account))
        if proc.returncode != 0:
            raise ClusterError(f"PostgreSQL's {what} failed (exit {proc.returncode}); see {self.log}")

    def _create_role(self, bin_dir: Path, port: int) -> None:
        """Argo's role (a login with a password, no other privilege) and its database, through the socket as the
        superuser; the SQL goes through stdin, so the password never appears in a process's arguments."""
        password = secrets.token_urlsafe(24)  # letters, digits, '-' and '_': nothing to quote
        sql = (f"CREATE ROLE {ROLE} LOGIN PASSWORD '{password}';\n"
               f"CREATE DATABASE {ARGO_DATABASE_NAME} OWNER {ROLE};\n")
        argv = [str(bin_dir / "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", str(self.data_dir), "-p", str(port),
                "-U", self._superuser(), "-d", "postgres", "-f", "-"]
        self._run(argv, "creation of Argo's role and database", stdin=sql)
        fd = os.open(self.password_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(password + "\n")

    def _wait_ready(self, bin_dir: Path, pid: int, port: int, timeout: float) -> None:
        """pg_isready answers 0 once the server accepts connections on the port."""
        deadline = time.monotonic() + timeout
        argv = [str(bin_dir / "pg_isready"), "-q", "-h", processes.LOOPBACK, "-p", str(port)]
        while time.monotonic() < deadline:
            if not processes.is_running(pid):
                raise ClusterError(f"{NAME} exited at start; see {self.log}")
            if subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              check=False).returncode == 0:
                return
            time.sleep(0.2)
        raise ClusterError(f"{NAME} not ready after {timeout:.0f}s; see {self.log}")

    def stop(self) -> None:
        pid = self.pid()
        if pid:
            processes.stop(pid, self.binary, grace_seconds=5)

    def remove_data(self) -> None:
        """The data directory, wherever it is (the cluster's `down` removes the rest of its directory)."""
        if self.link.is_symlink():
            target = self.link.resolve()
            self.link.unlink()
            shutil.rmtree(target, ignore_errors=True)
        else:
            shutil.rmtree(self.link, ignore_errors=True)
