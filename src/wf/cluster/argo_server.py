"""Argo Server on the local cluster: the API of Argo's workflow archive (wf.cluster.postgres), which `wf list
--archived` and `wf get` of a run whose live object is gone read (wf.controller.archive).

`argo server` (the CLI built with the controller, wf.cluster.build) listens on 127.0.0.1 only (a build patch: it
has no flag for the address) and without TLS (`--secure=false`: loopback). It runs in Argo's `server` auth mode as
the service account `wf-argo-server`, which may read workflows, their templates and Argo's configuration (the
ConfigMap, and the database Secret by name) and change nothing: whoever reaches the port reads the archive of this
cluster, as anyone on the machine can read its Prometheus. Argo's `client` mode (the caller's own token) is what the
platform's Argo Server uses (wf.render.platform); the local cluster's admin credentials are client certificates,
which are not a token to hand on.

Layout under the cluster's work directory:
  argo-server/kubeconfig   the service account's token and the API server's CA (mode 0600), its context's
                           namespace Argo's
  pids/argo-server.pid, logs/argo-server.log
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import yaml

from wf.cluster import build, processes
from wf.cluster.supervise import Say
from wf.render.platform import (
    ARGO_CONFIGMAP,
    CONTROLLER_NAMESPACE,
    argo_server_cluster_rules,
    argo_server_namespace_rules,
)

NAME = "argo-server"
BINARY = "argo"
ACCOUNT = "wf-argo-server"
TOKEN_SECONDS = 30 * 24 * 3600  # every `up` writes a new one


def url(port: int) -> str:
    return f"http://{processes.LOOPBACK}:{port}"


def account_objects() -> list[dict[str, Any]]:
    """The service account Argo Server runs as, with the platform's Argo Server's rights (wf.render.platform):
    reads what it serves and its own configuration, nothing more."""
    meta = {"name": ACCOUNT}
    namespaced = {**meta, "namespace": CONTROLLER_NAMESPACE}
    binding = {"subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": CONTROLLER_NAMESPACE}]}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": namespaced},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": meta,
         "rules": argo_server_cluster_rules()},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": meta,
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": ACCOUNT}, **binding},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": namespaced,
         "rules": argo_server_namespace_rules()},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": namespaced,
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": ACCOUNT}, **binding},
    ]


def service_account_kubeconfig(admin: dict[str, Any], token: str) -> dict[str, Any]:
    """A kubeconfig for the account: the admin kubeconfig's server and CA, the token, Argo's namespace."""
    cluster = admin["clusters"][0]["cluster"]
    return {
        "apiVersion": "v1", "kind": "Config", "current-context": ACCOUNT,
        "clusters": [{"name": "local", "cluster": {key: cluster[key]
                                                   for key in ("server", "certificate-authority-data")}}],
        "users": [{"name": ACCOUNT, "user": {"token": token}}],
        "contexts": [{"name": ACCOUNT, "context": {"cluster": "local", "user": ACCOUNT,
                                                   "namespace": CONTROLLER_NAMESPACE}}],
    }


class LocalArgoServer:
    """The Argo Server process of one local cluster."""

    def __init__(self, workdir: Path, kubeconfig: Path) -> None:
        self.dir = workdir / NAME
        self.admin_kubeconfig = kubeconfig
        self.kubeconfig = self.dir / "kubeconfig"
        self.pid_file = workdir / "pids" / f"{NAME}.pid"
        self.log = workdir / "logs" / f"{NAME}.log"

    def pid(self) -> int | None:
        return processes.read_pid(self.pid_file)

    def running(self) -> bool:
        return processes.is_running(self.pid(), build.binary_path(BINARY))

    def ensure(self, previous_port: int | None, say: Say, restart: bool = False, timeout: float = 60.0) -> int:
        """Start Argo Server unless it runs (or `restart`: the database moved); returns its port."""
        pid = self.pid()
        if pid is not None and self.running():
            if previous_port is not None and not restart:
                return previous_port
            self.stop()
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._write_kubeconfig()
        port = processes.free_port()
        say(f"starting Argo Server (the workflow archive's API) on {url(port)}")
        argv = [str(build.binary_path(BINARY)), "server", "--kubeconfig", str(self.kubeconfig),
                "--port", str(port), "--secure=false", "--auth-mode=server", "--configmap", ARGO_CONFIGMAP,
                "--loglevel", "warn"]
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.dir),
               "WF_SERVER_ADDR": f"{processes.LOOPBACK}:{port}"}
        pid = processes.start(argv, env=env, log_file=self.log, pid_file=self.pid_file, cwd=self.dir)
        # /api/v1/version answers once the server serves its API (the archive's database connected).
        processes.wait_http_ready(NAME, f"{url(port)}/api/v1/version", self.log, timeout, pid)
        return port

    def _write_kubeconfig(self) -> None:
        from kubernetes import client

        from wf.cluster.install import apply_objects
        from wf.controller.client import Target, connect

        apply_objects(self.admin_kubeconfig, account_objects())
        kube = connect(Target(kubeconfig=str(self.admin_kubeconfig)))
        try:
            request = client.AuthenticationV1TokenRequest(
                spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=TOKEN_SECONDS))
            token = kube.core.create_namespaced_service_account_token(ACCOUNT, CONTROLLER_NAMESPACE, request)
        finally:
            kube.api_client.close()
        admin = yaml.safe_load(self.admin_kubeconfig.read_text())
        text = yaml.safe_dump(service_account_kubeconfig(admin, token.status.token), sort_keys=False)
        fd, tmp = tempfile.mkstemp(dir=self.dir, prefix=".kubeconfig.")  # 0600 from the start
        with os.fdopen(fd, "w") as out:
            out.write(text)
        os.replace(tmp, self.kubeconfig)

    def stop(self) -> None:
        pid = self.pid()
        if pid:
            processes.stop(pid, build.binary_path(BINARY), grace_seconds=2)
