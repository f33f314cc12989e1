"""Prometheus on the local cluster: a process on loopback scraping Argo's workflow-controller, wf's node facts
recorder (wf's metrics), the API server and, when the cluster runs it, Kueue, every few seconds, so a report can ask
it what happened.

Argo's metrics and the recorder's are plain HTTP on loopback. The API server's and Kueue's are HTTPS and want a
caller the API server authenticates and authorizes for GET /metrics (Kueue asks it through TokenReview and
SubjectAccessReview): Prometheus presents the token of the `wf-prometheus` service account, which may read
/metrics and nothing else, rather than the cluster's admin credentials. The token lasts 30 days and every `up`
writes a new one; Prometheus reads the file at each scrape.

Layout under the cluster's work directory:
  prometheus/prometheus.yml   the configuration (rewritten by `up`; a running Prometheus reloads it on SIGHUP)
  prometheus/token            the service account's token (mode 0600)
  prometheus/apiserver-ca.crt the CA of the API server's serving certificate (from the admin kubeconfig)
  prometheus/data/            the TSDB, kept for RETENTION
  pids/prometheus.pid, logs/prometheus.log
"""

from __future__ import annotations

import base64
import os
import re
import signal
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from wf.cluster import build, processes
from wf.cluster.supervise import Say
from wf.core.constants import CATALOG_NAMESPACE
from wf.core.errors import ClusterError
from wf.render import scrape
from wf.render.platform import ARGO_METRICS, KUEUE_METRICS, NODE_RECORDER_METRICS, metrics_reader

NAME = "prometheus"
# A report after a short local run wants its few minutes at a fine grain; scrapes on loopback are cheap.
SCRAPE_INTERVAL = "5s"
SCRAPE_TIMEOUT = "4s"
# A local cluster lives for hours, a test session for minutes: two days keeps any run's data and bounds the disk.
RETENTION = "2d"
ACCOUNT = "wf-prometheus"
ACCOUNT_NAMESPACE = CATALOG_NAMESPACE
TOKEN_SECONDS = 30 * 24 * 3600
# The API server's metrics (its `default/kubernetes` Service on a cluster): the local cluster scrapes it too, beside
# the platform's sources (wf.render.platform.metrics_sources), for the API's own load.
APISERVER = scrape.Source(job="kube-apiserver", component="kube-apiserver", namespace="default", service="kubernetes",
                          port="https", labels={"component": "apiserver", "provider": "kubernetes"}, authorized=True)


@dataclass(frozen=True)
class Targets:
    """What Prometheus scrapes, all on loopback."""

    controller_metrics_port: int  # Argo's workflow-controller, plain HTTP
    recorder_metrics_port: int  # wf's node facts recorder (wf's own metrics), plain HTTP
    apiserver: str  # host:port of the API server, HTTPS
    kueue_metrics_port: int | None = None  # Kueue's metrics, HTTPS; None: the cluster runs no Kueue
    kueue_ca: Path | None = None  # the CA of Kueue's serving certificate


def url(port: int) -> str:
    return f"http://{processes.LOOPBACK}:{port}"


def account_objects() -> list[dict[str, Any]]:
    """The service account Prometheus scrapes as: GET on /metrics (the API server's, Kueue's), nothing else, as
    a real cluster's Prometheus gets (wf.render.platform.metrics_reader)."""
    subject = {"name": ACCOUNT, "namespace": ACCOUNT_NAMESPACE}
    return [{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": subject}, *metrics_reader(subject)]


def configuration(directory: Path, targets: Targets) -> dict[str, Any]:
    """prometheus.yml: the scrape jobs (a real cluster's, wf.render.scrape, on loopback: Argo's metrics as plain
    HTTP, the others verified against their CAs), and the TSDB's retention (the flag for it is deprecated)."""
    token = str(directory / "token")

    def on(address: str) -> dict[str, Any]:
        return {"static_configs": [{"targets": [address]}]}

    jobs: list[dict[str, Any]] = [
        scrape.scrape_job(ARGO_METRICS, on(f"{processes.LOOPBACK}:{targets.controller_metrics_port}"), tls=None,
                   token_file=token),
        scrape.scrape_job(NODE_RECORDER_METRICS, on(f"{processes.LOOPBACK}:{targets.recorder_metrics_port}"),
                          tls=None, token_file=token),
        scrape.scrape_job(APISERVER, on(targets.apiserver), tls={"ca_file": str(directory / "apiserver-ca.crt")},
                   token_file=token),
    ]
    if targets.kueue_metrics_port is not None and targets.kueue_ca is not None:
        jobs.append(scrape.scrape_job(KUEUE_METRICS, on(f"{processes.LOOPBACK}:{targets.kueue_metrics_port}"),
                               tls={"ca_file": str(targets.kueue_ca)}, token_file=token))
    return {
        "global": {"scrape_interval": SCRAPE_INTERVAL, "scrape_timeout": SCRAPE_TIMEOUT},
        "storage": {"tsdb": {"retention": {"time": RETENTION}}},
        "scrape_configs": jobs,
    }


def apiserver_of(kubeconfig: dict[str, Any]) -> tuple[str, bytes]:
    """The API server's host:port and its CA (PEM), from a kubeconfig with inlined credentials."""
    cluster = kubeconfig["clusters"][0]["cluster"]
    server = urlsplit(cluster["server"])
    if server.scheme != "https" or not server.hostname or not server.port:
        raise ClusterError(f"the cluster's kubeconfig names {cluster['server']!r}, not https://HOST:PORT")
    return f"{server.hostname}:{server.port}", base64.b64decode(cluster["certificate-authority-data"])


class LocalPrometheus:
    """The Prometheus process of one local cluster."""

    def __init__(self, workdir: Path, kubeconfig: Path) -> None:
        self.dir = workdir / NAME
        self.kubeconfig = kubeconfig
        self.config_file = self.dir / "prometheus.yml"
        self.data_dir = self.dir / "data"
        self.pid_file = workdir / "pids" / f"{NAME}.pid"
        self.log = workdir / "logs" / f"{NAME}.log"

    def pid(self) -> int | None:
        return processes.read_pid(self.pid_file)

    def running(self) -> bool:
        return processes.is_running(self.pid(), build.binary_path(NAME))

    def ensure(self, controller_metrics_port: int, recorder_metrics_port: int, kueue: tuple[int, Path] | None,
               previous_port: int | None, say: Say, timeout: float = 60.0) -> int:
        """Write the credentials and the configuration; start Prometheus unless it runs, else have it reload a
        changed configuration (a restarted controller or Kueue listens on a new port). Returns its port."""
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        apiserver = self._write_credentials()
        kueue_port, kueue_ca = kueue if kueue else (None, None)
        targets = Targets(controller_metrics_port, recorder_metrics_port, apiserver, kueue_port, kueue_ca)
        text = yaml.safe_dump(configuration(self.dir, targets), sort_keys=False)
        pid = self.pid()
        if pid is not None and self.running():
            if previous_port is not None:
                if text != self._written_config():
                    say("reloading Prometheus: a scraped component moved")
                    self.config_file.write_text(text)
                    _reload(pid, previous_port, self.log, timeout)
                return previous_port
            self.stop()  # one whose port nobody recorded (an `up` that died half-way)
        self.config_file.write_text(text)
        port = processes.free_port()
        say(f"starting Prometheus on {url(port)}")
        argv = [
            str(build.binary_path(NAME)),
            f"--config.file={self.config_file}",
            f"--web.listen-address={processes.LOOPBACK}:{port}",
            f"--storage.tsdb.path={self.data_dir}",
        ]
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.dir)}
        pid = processes.start(argv, env=env, log_file=self.log, pid_file=self.pid_file, cwd=self.dir)
        # /-/ready answers once the TSDB is open and the configuration loaded.
        processes.wait_http_ready(NAME, f"{url(port)}/-/ready", self.log, timeout, pid)
        return port

    def _written_config(self) -> str:
        try:
            return self.config_file.read_text()
        except FileNotFoundError:
            return ""

    def _write_credentials(self) -> str:
        """The service account and a fresh token of it, the API server's CA; returns the API server's address."""
        from kubernetes import client

        from wf.cluster.install import apply_objects
        from wf.controller.client import Target, connect

        apiserver, ca = apiserver_of(yaml.safe_load(self.kubeconfig.read_text()))
        apply_objects(self.kubeconfig, account_objects())
        kube = connect(Target(kubeconfig=str(self.kubeconfig)))
        try:
            request = client.AuthenticationV1TokenRequest(
                spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=TOKEN_SECONDS))
            token = kube.core.create_namespaced_service_account_token(ACCOUNT, ACCOUNT_NAMESPACE, request)
        finally:
            kube.api_client.close()
        _write_private(self.dir / "token", token.status.token.encode())
        (self.dir / "apiserver-ca.crt").write_bytes(ca)
        return apiserver

    def stop(self) -> None:
        pid = self.pid()
        if pid:
            processes.stop(pid, build.binary_path(NAME), grace_seconds=2)


def _write_private(path: Path, data: bytes) -> None:
    """Write-then-rename (Prometheus reads the file at every scrape, never half of it); mkstemp makes it 0600."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _get(port: int, path: str) -> tuple[int, str]:
    with urllib.request.urlopen(f"{url(port)}{path}", timeout=2) as response:
        return int(response.status), response.read().decode()


_RELOAD = re.compile(r"^prometheus_config_last_reload_(successful|success_timestamp_seconds) (\S+)$", re.M)


def _reload(pid: int, port: int, log: Path, timeout: float) -> None:
    """SIGHUP, then wait for Prometheus' own word that it loaded the configuration (its reload metrics)."""
    asked = time.time()
    os.kill(pid, signal.SIGHUP)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            values = {name: float(value) for name, value in _RELOAD.findall(_get(port, "/metrics")[1])}
        except OSError:
            values = {}
        if values.get("successful") == 0:
            raise ClusterError(f"{NAME} refused its new configuration; see {log}")
        # The timestamp has whole seconds at times: a reload in the second of the signal counts.
        if values.get("success_timestamp_seconds", 0) >= int(asked):
            return
        time.sleep(0.2)
    raise ClusterError(f"{NAME} did not reload its configuration within {timeout:.0f}s; see {log}")
