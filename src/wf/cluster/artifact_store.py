"""The local cluster's S3-compatible artifact store, where Argo's own wait containers on real nodes upload their
pods' logs and artifacts and its init containers download inputs: moto's server (moto[server], a Python process
on 127.0.0.1), chosen over MinIO by measurement (benchmarks/README.md: MinIO serves no tagged Go module version
and its build would eat most of the real nodes' cold-build budget; moto's server is ready in ~2 s in ~90 MB).

Started by `up` only when the cluster has real nodes (simulated pods keep their logs in the twin's store,
wf.controller.archived_logs). It holds the catalog's bucket, in memory: a restart of the server (a `up` repairing
it) empties it, as the cluster's history would be on a fresh platform bucket.

How each side reaches it:
  pods       at SERVICE_IP:SERVICE_PORT, the cluster IP of the Service `wf-artifact-store`, which the real node's
             relay (wf.cluster.relay) serves inside its network namespace and forwards here; the artifact
             repository (wf.compile.artifacts.KeyedEndpoint) names that address and the Secret `wf-artifact-store`
             of each workflow namespace (ARTIFACT_STORE_SECRET), whose keys Argo mounts into its own containers;
             the same Secret, taken whole as environment, tells the programs that keep checkpoints in the store
             where it is (AWS_ENDPOINT_URL_S3) and its keys, as a pod's role does on EKS
  wf         at http://127.0.0.1:PORT with the same keys (`endpoint`), when it reads an archived log

Layout under the cluster's work directory:
  artifact-store/keys.json   the store's access and secret key (mode 0600), made once
  pids/artifact-store.pid, logs/artifact-store.log
"""

from __future__ import annotations

import json
import secrets
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from wf.aws.s3 import Endpoint
from wf.cluster import processes
from wf.cluster.supervise import Say
from wf.compile.artifacts import ACCESS_KEY, ENDPOINT_KEY, SECRET_KEY, KeyedEndpoint
from wf.core.constants import ARTIFACT_STORE_SECRET
from wf.core.errors import ClusterError
from wf.model.catalog import S3Store
from wf.render.platform import CONTROLLER_NAMESPACE

NAME = "artifact-store"
SERVICE = ARTIFACT_STORE_SECRET  # the Service naming the store, the same name as each namespace's Secret
# keys.json's own names, kept apart from the Secret's so the file of a cluster made earlier still reads.
_FILE_KEYS = ("accessKey", "secretKey")
# A fixed cluster IP from the lower band of the Service range (wf.cluster.supervise.SERVICE_CIDR), which the API
# server hands out only when asked for it by name, so no other Service takes it first.
SERVICE_IP = "10.96.0.10"
SERVICE_PORT = 9000


def url(port: int) -> str:
    """Where the store answers on the host."""
    return f"http://{processes.LOOPBACK}:{port}"


class LocalArtifactStore:
    """The store of one local cluster: its process, keys and the objects that tell pods where it is."""

    def __init__(self, workdir: Path) -> None:
        self.dir = workdir / "artifact-store"
        self.keys_file = self.dir / "keys.json"
        self.pid_file = workdir / "pids" / f"{NAME}.pid"
        self.log = workdir / "logs" / f"{NAME}.log"

    def pid(self) -> int | None:
        return processes.read_pid(self.pid_file)

    def running(self) -> bool:
        return processes.is_running(self.pid(), Path(sys.executable))

    def keys(self) -> tuple[str, str]:
        """The access and secret key, made on first use."""
        if not self.keys_file.is_file():
            self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            self.keys_file.touch(mode=0o600)
            access, secret = _FILE_KEYS
            self.keys_file.write_text(json.dumps({access: secrets.token_hex(10), secret: secrets.token_urlsafe(30)}))
        keys = json.loads(self.keys_file.read_text())
        return str(keys[_FILE_KEYS[0]]), str(keys[_FILE_KEYS[1]])

    def endpoint(self, port: int) -> Endpoint:
        """Where wf, on the host, reads the store."""
        access, secret = self.keys()
        return Endpoint(url=url(port), access_key=access, secret_key=secret)

    @staticmethod
    def in_cluster() -> KeyedEndpoint:
        """Where pods on real nodes reach the store, as the artifact repository names it."""
        return KeyedEndpoint(address=f"{SERVICE_IP}:{SERVICE_PORT}", secret=ARTIFACT_STORE_SECRET)

    def objects(self, namespaces: Sequence[str]) -> list[dict[str, Any]]:
        """The Service holding the store's cluster IP (no selector: the relay is its backend), and the keys'
        Secret in every workflow namespace."""
        access, secret = self.keys()
        service = {"apiVersion": "v1", "kind": "Service",
                   "metadata": {"name": SERVICE, "namespace": CONTROLLER_NAMESPACE},
                   "spec": {"clusterIP": SERVICE_IP, "ports": [{"name": "s3", "port": SERVICE_PORT}]}}
        keys = [{"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                 "metadata": {"name": ARTIFACT_STORE_SECRET, "namespace": ns},
                 "stringData": {ACCESS_KEY: access, SECRET_KEY: secret,
                                ENDPOINT_KEY: f"http://{SERVICE_IP}:{SERVICE_PORT}"}} for ns in namespaces]
        return [service, *keys]

    def ensure(self, previous_port: int | None, bucket: S3Store | None, say: Say, timeout: float = 60.0) -> int:
        """Start the server unless it runs on `previous_port`; make sure the catalog's bucket exists. Its port."""
        pid = self.pid()
        if pid is not None and self.running():
            if previous_port is not None:
                self._make_bucket(previous_port, bucket)
                return previous_port
            self.stop(say)  # one whose port nobody recorded (an `up` that died half-way)
        port = processes.reused_port(previous_port)  # the real nodes' relays forward to it
        say(f"starting the artifact store (moto's S3 server) on {processes.LOOPBACK}:{port}")
        argv = [sys.executable, "-m", "moto.server", "--host", processes.LOOPBACK, "--port", str(port)]
        env = {"PATH": "/usr/bin:/bin", "HOME": str(self.dir)}
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        pid = processes.start(argv, env=env, log_file=self.log, pid_file=self.pid_file, cwd=self.dir)
        # moto's own management API answers once the server serves.
        processes.wait_http_ready(NAME, f"http://{processes.LOOPBACK}:{port}/moto-api/data.json", self.log,
                                  timeout, pid)
        self._make_bucket(port, bucket)
        return port

    def _make_bucket(self, port: int, bucket: S3Store | None) -> None:
        if bucket is None:
            return
        import boto3
        from botocore.exceptions import BotoCoreError, ClientError

        endpoint = self.endpoint(port)
        client = boto3.session.Session(region_name=bucket.region).client(
            "s3", endpoint_url=endpoint.url, aws_access_key_id=endpoint.access_key,
            aws_secret_access_key=endpoint.secret_key)
        # Outside us-east-1, S3 wants the region said again in the request.
        where = {} if bucket.region == "us-east-1" else {
            "CreateBucketConfiguration": {"LocationConstraint": bucket.region}}
        try:
            client.create_bucket(Bucket=bucket.bucket, **where)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                raise ClusterError(f"creating bucket {bucket.bucket} in the artifact store: {exc}") from None
        except BotoCoreError as exc:
            raise ClusterError(f"creating bucket {bucket.bucket} in the artifact store: {exc}") from None

    def stop(self, say: Say) -> None:
        pid = self.pid()
        if pid and self.running():
            say(f"stopping {NAME} (pid {pid})")
            processes.stop(pid, Path(sys.executable), grace_seconds=2)
        self.pid_file.unlink(missing_ok=True)
