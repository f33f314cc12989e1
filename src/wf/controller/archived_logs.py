"""Logs Argo archived: the `main-logs` artifact that the wait container of a pod uploads when the artifact
repository says `archiveLogs` (wf.compile.artifacts), at `<the template's archive location key>/main.log`, and
reports as an output of the pod's node. `wf logs` reads it when the pod is gone: an interrupted attempt's, a
finished run's collected pods, an archived run's.

On EKS the object is in S3 (the artifact's bucket, read with the caller's AWS credentials, wf.aws.s3). On the local
cluster the simulated executor (wf.cluster.executor) plays the wait container of simulated pods and keeps each log
in the twin's artifact store: a ConfigMap per object in the pod's namespace, named after a hash of its key, not
owned by the workflow (an archived run's logs outlive it, as the bucket's objects do; `wf cluster down` removes
them with the cluster). A real node's pods have Argo's own wait container upload theirs to the cluster's S3 store
(wf.cluster.artifact_store), read at its host-side address (`Kube.artifact_store`).
"""

from __future__ import annotations

import hashlib
from typing import Any, Final

from wf.controller.client import Kube
from wf.core.constants import TWIN_ARTIFACT_KEY_ANNOTATION, TWIN_ARTIFACT_LABEL

MAIN_LOGS: Final = "main-logs"  # Argo's name for the main container's log artifact
LOG_FILE: Final = "main.log"
TWIN_PREFIX: Final = "wf-artifact-"
TWIN_CONTENT: Final = "content"


def twin_name(key: str) -> str:
    return TWIN_PREFIX + hashlib.sha256(key.encode()).hexdigest()[:40]


def twin_object(namespace: str, key: str, content: str) -> dict[str, Any]:
    """The twin's copy of the object at `key`."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": twin_name(key), "namespace": namespace, "labels": {TWIN_ARTIFACT_LABEL: "true"},
                         "annotations": {TWIN_ARTIFACT_KEY_ANNOTATION: key}},
            "data": {TWIN_CONTENT: content}}


def log_artifact(archive_location: dict[str, Any], pod_key: str) -> dict[str, Any]:
    """The `main-logs` artifact as the wait container reports it: the template's archive location with the key
    `<its key>/main.log` (v4.0.7 workflow/executor/executor.go saveArtifactFromFile)."""
    s3 = dict(archive_location.get("s3") or {})
    s3["key"] = f"{(s3.get('key') or pod_key).rstrip('/')}/{LOG_FILE}"
    return {"name": MAIN_LOGS, "s3": s3}


def workflow_repository(workflow: dict[str, Any]) -> dict[str, Any]:
    """The artifact repository the workflow's pods used, as the controller resolved it ({} when none)."""
    ref = (workflow.get("status") or {}).get("artifactRepositoryRef") or {}
    return dict(ref.get("artifactRepository") or {})


def archived_log_artifact(node: dict[str, Any], repository: dict[str, Any] | None = None
                          ) -> dict[str, Any] | None:
    """The node's `main-logs` artifact, if its pod's log was archived. Argo reports only the key of an artifact kept
    in the workflow's repository (v4.0.7 Artifact.Relocate): its bucket and region come from `repository`."""
    for artifact in ((node.get("outputs") or {}).get("artifacts") or []):
        if artifact.get("name") == MAIN_LOGS and (artifact.get("s3") or {}).get("key"):
            located = {k: v for k, v in ((repository or {}).get("s3") or {}).items() if k in ("bucket", "region")}
            return {**artifact, "s3": {**located, **artifact["s3"]}}
    return None


def read_archived_log(kube: Kube, namespace: str, artifact: dict[str, Any]) -> str | None:
    """The archived log's text: the twin's copy when the cluster has one (the local cluster), else the S3 object;
    None when neither holds it."""
    from kubernetes.client.exceptions import ApiException

    s3 = artifact["s3"]
    try:
        configmap = kube.core.read_namespaced_config_map(twin_name(s3["key"]), namespace)
        return str((configmap.data or {}).get(TWIN_CONTENT, ""))
    except ApiException as exc:
        if exc.status not in (403, 404):  # 404: no twin here; 403: a role that may not read ConfigMaps (EKS)
            raise
    if not s3.get("bucket"):
        return None
    from wf.aws.s3 import read_object

    body = read_object(s3["bucket"], s3["key"], s3.get("region"), kube.artifact_store)
    return None if body is None else body.decode("utf-8", "replace")
