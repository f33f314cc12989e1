"""Kueue on the local cluster: its CRDs, a process on loopback, and the admission webhooks that gate pods.

Kueue admits plain pods through a mutating webhook (which adds the `kueue.x-k8s.io/admission` scheduling
gate) and validating ones, and a multi-node step's MPIJob through its MPIJob webhooks (which create it
suspended; Kueue resumes it once launcher and workers are admitted together). In a real cluster the API
server reaches them through a Service with a certificate Kueue manages itself; here the API server calls
https://127.0.0.1:<port> directly, so we generate a CA and a serving certificate for 127.0.0.1, point the
webhook configurations at that URL with the CA as caBundle, and turn Kueue's own certificate management off.
Only the webhooks wf's work needs are registered (pods and MPIJobs, limited to the teams' namespaces;
workloads), so a stopped Kueue can never block pods anywhere else.

Layout under the cluster's work directory:
  kueue/config.yaml   Kueue's Configuration (wf.render.kueue.configuration plus the loopback addresses)
  kueue/certs/        ca.crt, tls.crt, tls.key (webhook and metrics serving), regenerated on each start
  kueue/state.json    the health, webhook and metrics ports of the running process
  pids/kueue.pid, logs/kueue.log
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from wf.cluster import build, processes
from wf.core.constants import KUEUE_LOCAL_QUEUE, KUEUE_QUEUE_LABEL, MPIJOB, WORKLOAD
from wf.core.errors import ClusterError
from wf.model.catalog import Catalog
from wf.render import kueue, platform, team_roles

NAME = "kueue"
NAMESPACE = platform.KUEUE_NAMESPACE
MUTATING = "wf-kueue-mutating"
GATE = "kueue.x-k8s.io/admission"  # the scheduling gate Kueue's pod webhook adds until admission
VALIDATING = "wf-kueue-validating"
# (name, path, kind, resources, operations, teams' namespaces only): the webhooks of Kueue's own manifests that
# wf needs (kubebuilder markers of pkg/controller/jobs/pod and jobs/mpijob, v0.17.0).
_WEBHOOKS = (
    ("mpod.kb.io", "/mutate--v1-pod", MUTATING, ("", "v1", "pods"), ("CREATE",), True),
    ("vpod.kb.io", "/validate--v1-pod", VALIDATING, ("", "v1", "pods"), ("CREATE", "UPDATE"), True),
    ("mmpijob.kb.io", "/mutate-kubeflow-org-v2beta1-mpijob", MUTATING, (MPIJOB.group, MPIJOB.version, MPIJOB.plural),
     ("CREATE",), True),
    ("vmpijob.kb.io", "/validate-kubeflow-org-v2beta1-mpijob", VALIDATING,
     (MPIJOB.group, MPIJOB.version, MPIJOB.plural), ("CREATE", "UPDATE"), True),
    ("mworkload.kb.io", "/mutate-kueue-x-k8s-io-v1beta2-workload", MUTATING,
     (WORKLOAD.group, WORKLOAD.version, WORKLOAD.plural), ("CREATE",), False),
    ("vworkload.kb.io", "/validate-kueue-x-k8s-io-v1beta2-workload", VALIDATING,
     (WORKLOAD.group, WORKLOAD.version, WORKLOAD.plural, f"{WORKLOAD.plural}/status"), ("CREATE", "UPDATE"), False),
)


def component() -> build.Component:
    return next(c for c in build.components() if c.name == NAME)


def crd_manifests() -> list[dict[str, Any]]:
    comp = component()
    directory = comp.asset(build.cache_dir(), comp.assets[0])
    files = sorted(directory.glob("*.yaml"))
    if not files:
        raise ClusterError(f"Kueue's CRDs are missing from {directory}: run `wf cluster build kueue`")
    return [doc for f in files for doc in yaml.safe_load_all(f.read_text()) if doc]


@dataclass(frozen=True)
class KueueState:
    health_port: int
    webhook_port: int
    # HTTPS with the certificate in certs/, for callers the API server authenticates (TokenReview) and
    # authorizes (GET /metrics): wf.cluster.prometheus.
    metrics_port: int


class LocalKueue:
    """The Kueue process of one local cluster."""

    def __init__(self, workdir: Path, kubeconfig: Path) -> None:
        self.dir = workdir / "kueue"
        self.kubeconfig = kubeconfig
        self.config_file = self.dir / "config.yaml"
        self.cert_dir = self.dir / "certs"
        self.state_file = self.dir / "state.json"
        self.pid_file = workdir / "pids" / f"{NAME}.pid"
        self.log = workdir / "logs" / f"{NAME}.log"

    def enabled(self) -> bool:
        return self.state_file.is_file()

    def state(self) -> KueueState | None:
        try:
            return KueueState(**json.loads(self.state_file.read_text()))
        except (FileNotFoundError, TypeError):  # TypeError: the state of a Kueue an older wf started
            return None

    def pid(self) -> int | None:
        return processes.read_pid(self.pid_file)

    def running(self) -> bool:
        return processes.is_running(self.pid(), build.binary_path(NAME))

    def ensure(self, catalog: Catalog, say: Any, timeout: float = 120.0) -> KueueState:
        """Install Kueue's CRDs, start Kueue unless it runs, register its webhooks, then apply the catalog's
        queues. The webhooks are registered only once Kueue answers: with failurePolicy Fail, a team pod
        created while they point at nothing would be refused."""
        from kubernetes.dynamic import DynamicClient

        from wf.cluster.install import apply, pinned_versions, wait_crds_established
        from wf.controller.client import Target, connect

        api_client = connect(Target(kubeconfig=str(self.kubeconfig))).api_client
        try:
            client = DynamicClient(api_client)
            say("installing Kueue's CRDs")
            for manifest in [_namespace(NAMESPACE), *crd_manifests()]:
                apply(client, manifest)
            wait_crds_established(client, WORKLOAD.group)
            state = self.state()
            if state is not None and self.running() and self._config_text(catalog, state) != self._written_config():
                say("restarting Kueue: the catalog's teams changed")  # Kueue reads its configuration once
                self.stop()
            if state is None or not self.running():
                self.stop()  # one running without a state we can read, e.g. from an older wf
                state = self._start(catalog, say)
            # /readyz answers once the webhook server serves (Kueue's readiness check includes it).
            processes.wait_http_ready("Kueue", f"http://{processes.LOOPBACK}:{state.health_port}/readyz", self.log,
                                      timeout)
            say("registering Kueue's webhooks, the teams' queues and roles")
            for manifest in webhook_configurations(catalog, state.webhook_port, self.ca_bundle()):
                apply(client, manifest)
            _wait_gating(api_client, kueue.queues_of(catalog).teams[0].namespaces[0], timeout)
            for manifest in [*kueue.objects(catalog), *team_roles.objects(catalog)]:
                apply(client, manifest)
            # The configuration the process runs with, where Kueue's Deployment reads it on a real cluster, and the
            # record that Kueue runs here as a process: what `wf platform check` reads.
            apply(client, platform.kueue_configmap(local_configuration(catalog, state, self.cert_dir)))
            apply(client, platform.local_marker(pinned_versions(), kueue_running=True))
        finally:
            api_client.close()
        return state

    def _start(self, catalog: Catalog, say: Any) -> KueueState:
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        state = KueueState(health_port=processes.free_port(), webhook_port=processes.free_port(),
                           metrics_port=processes.free_port())
        write_certificates(self.cert_dir)
        self.config_file.write_text(self._config_text(catalog, state))
        say("starting Kueue")
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.dir),
            "KUBECONFIG": str(self.kubeconfig),
            "WF_KUEUE_METRICS_CERT_DIR": str(self.cert_dir),
        }
        argv = [str(build.binary_path(NAME)), "--config", str(self.config_file)]
        processes.start(argv, env=env, log_file=self.log, pid_file=self.pid_file, cwd=self.dir)
        self.state_file.write_text(json.dumps(asdict(state)))
        return state

    def _config_text(self, catalog: Catalog, state: KueueState) -> str:
        return yaml.safe_dump(local_configuration(catalog, state, self.cert_dir), sort_keys=False)

    def _written_config(self) -> str:
        try:
            return self.config_file.read_text()
        except FileNotFoundError:
            return ""

    def ca_bundle(self) -> bytes:
        return (self.cert_dir / "ca.crt").read_bytes()

    def stop(self) -> None:
        pid = self.pid()
        if pid:
            processes.stop(pid, build.binary_path(NAME), grace_seconds=2)


def _namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def local_configuration(catalog: Catalog, state: KueueState, cert_dir: Path) -> dict[str, Any]:
    """wf's Kueue configuration, served on loopback: webhooks and metrics with our certificate, no leader
    election (one process), no visibility API server (it would need an APIService)."""
    return {
        **kueue.configuration(catalog),
        "namespace": NAMESPACE,
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "webhook": {"host": processes.LOOPBACK, "port": state.webhook_port, "certDir": str(cert_dir)},
        "health": {"healthProbeBindAddress": f"{processes.LOOPBACK}:{state.health_port}"},
        "metrics": {"bindAddress": f"{processes.LOOPBACK}:{state.metrics_port}"},
        "featureGates": {"VisibilityOnDemand": False},
    }


def webhook_configurations(catalog: Catalog, port: int, ca_bundle: bytes) -> list[dict[str, Any]]:
    import base64

    namespaces = sorted({ns for team in kueue.queues_of(catalog).teams for ns in team.namespaces})
    by_kind: dict[str, list[dict[str, Any]]] = {MUTATING: [], VALIDATING: []}
    for name, path, kind, (group, version, *resources), operations, teams_only in _WEBHOOKS:
        hook: dict[str, Any] = {
            "name": name,
            "admissionReviewVersions": ["v1"],
            "clientConfig": {"url": f"https://{processes.LOOPBACK}:{port}{path}",
                             "caBundle": base64.b64encode(ca_bundle).decode()},
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "timeoutSeconds": 10,
            "rules": [{"apiGroups": [group], "apiVersions": [version], "operations": list(operations),
                       "resources": list(resources)}],
        }
        if teams_only:
            hook["namespaceSelector"] = {"matchExpressions": [
                {"key": kueue.NAMESPACE_NAME_LABEL, "operator": "In", "values": namespaces}]}
        by_kind[kind].append(hook)
    return [
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
         "metadata": {"name": MUTATING}, "webhooks": by_kind[MUTATING]},
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
         "metadata": {"name": VALIDATING}, "webhooks": by_kind[VALIDATING]},
    ]


def write_certificates(directory: Path, days: int = 30) -> None:
    """A fresh CA and a serving certificate for 127.0.0.1 signed by it: ca.crt, tls.crt, tls.key."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "wf local Kueue CA")])
    ca = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, processes.LOOPBACK)]))
        .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(processes.LOOPBACK))]),
                       critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    (directory / "ca.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (directory / "tls.crt").write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    key_file = directory / "tls.key"
    key_file.touch(mode=0o600)
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))


def _wait_gating(api_client: Any, namespace: str, timeout: float) -> None:
    """Until a team pod comes back from a dry-run create with Kueue's scheduling gate: the API server loads new
    webhook configurations a moment after they are written, and a pod created before would skip the queue."""
    from kubernetes import client as kclient
    from kubernetes.client.exceptions import ApiException

    core = kclient.CoreV1Api(api_client)
    probe = {"metadata": {"generateName": "wf-kueue-probe-", "labels": {KUEUE_QUEUE_LABEL: KUEUE_LOCAL_QUEUE}},
             "spec": {"containers": [{"name": "probe", "image": "probe",
                                      "resources": {"requests": {"cpu": "1m"}}}]}}
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        try:
            pod = core.create_namespaced_pod(namespace, probe, dry_run="All")
            if any(g.name == GATE for g in pod.spec.scheduling_gates or []):
                return
            last = "the pod came back without Kueue's scheduling gate"
        except ApiException as exc:
            last = f"{exc.status} {exc.reason}"
        time.sleep(0.2)
    raise ClusterError(f"Kueue's pod webhook is not in effect after {timeout:.0f}s ({last})")
