"""The catalog's artifact store as Argo sees it: a ConfigMap holding the S3 artifact repository (installed in
every namespace where workflows run), the reference compiled workflows carry, and the namespace's service
account, whose IAM role (IRSA or EKS Pod Identity) reaches the bucket: no keys anywhere."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from wf.core.constants import ARGO_DEFAULT_ARTIFACT_REPOSITORY_ANNOTATION
from wf.model.catalog import ArtifactStore

CONFIGMAP = "wf-artifact-repositories"
KEY = "s3"
REPOSITORY_REF = {"configMap": CONFIGMAP, "key": KEY}
# The keys of a KeyedEndpoint's Secret: the environment's names, so a program takes the Secret whole (envFrom).
ACCESS_KEY = "AWS_ACCESS_KEY_ID"
SECRET_KEY = "AWS_SECRET_ACCESS_KEY"
ENDPOINT_KEY = "AWS_ENDPOINT_URL_S3"  # the store's URL, which only the program reads (Argo's is the repository's)


@dataclass(frozen=True)
class KeyedEndpoint:
    """An S3-compatible store other than AWS's, at `address` (IP:PORT, plain HTTP), reached with the keys of the
    Secret `secret` in the workflow's namespace: the local cluster's (wf.cluster.artifact_store), where pods have
    no web identity to take."""

    address: str
    secret: str


def repository(store: ArtifactStore, endpoint: KeyedEndpoint | None = None) -> dict[str, Any]:
    """Argo's ArtifactRepository: `useSDKCreds` makes the executor take the pod's web identity (with `endpoint`,
    the Secret's keys instead, which Argo mounts into its own containers only); `archiveLogs` makes the wait
    container upload the main container's log as the `main-logs` artifact, so `wf logs` of a step whose pod is
    gone (an interrupted attempt, an archived run) still answers."""
    s3 = store.s3
    located: dict[str, Any] = {"bucket": s3.bucket, "region": s3.region}
    if endpoint is None:
        access: dict[str, Any] = {"endpoint": f"s3.{s3.region}.amazonaws.com", "keyFormat": s3.key_format,
                                  "useSDKCreds": True}
    else:
        access = {"endpoint": endpoint.address, "insecure": True, "keyFormat": s3.key_format,
                  "accessKeySecret": {"name": endpoint.secret, "key": ACCESS_KEY},
                  "secretKeySecret": {"name": endpoint.secret, "key": SECRET_KEY}}
    return {"archiveLogs": True, "s3": {**located, **access}}


def repository_configmap(store: ArtifactStore, namespace: str, endpoint: KeyedEndpoint | None = None
                         ) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": CONFIGMAP, "namespace": namespace,
                         "annotations": {ARGO_DEFAULT_ARTIFACT_REPOSITORY_ANNOTATION: KEY}},
            "data": {KEY: yaml.safe_dump(repository(store, endpoint), sort_keys=False)}}


LIFECYCLE_FILE = "s3-lifecycle.json"


def lifecycle_configuration(store: ArtifactStore) -> dict[str, Any]:
    """The bucket's lifecycle rule removing checkpoints `keepDays` after they were written (S3 counts from each
    object's last write, so a run's checkpoints go that long after its last save), for `aws s3api
    put-bucket-lifecycle-configuration`. Chosen over a cleanup step on exit: it also removes the checkpoints of
    runs that were deleted, stopped or never finished, and needs no credentials in the workflow."""
    policy = store.checkpoints
    return {"Rules": [{"ID": "wf-checkpoints", "Filter": {"Prefix": f"{policy.prefix}/"}, "Status": "Enabled",
                       "Expiration": {"Days": policy.keep_days},
                       "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1}}]}
