"""The local cluster's stand-in for Argo's executor: the output reporting of the `wait` container, and what
`argoexec resource` does in the pod of a resource template. Under kwok nothing runs in a pod, so this process
does both. Pods on real nodes (wf.cluster.realnode) have Argo's own executor and are left alone (RealNodes).

Outputs. On a real cluster the wait container of a pod whose template declares outputs reads the files the step
wrote, uploads artifacts and reports the values to the controller as a WorkflowTaskResult named after the node
id, labelled with the workflow and `report-outputs-completed` (Argo v4 workflow/executor/taskresult.go); until
that arrives the controller keeps the node Running (workflow/controller/operator.go). When such a pod has
Succeeded this process reports:

- a parameter takes its value from the pod's `sim.wf.dev/outputs` annotation (a JSON object, NAME -> value;
  values that are not strings are written as JSON, so a list becomes the JSON list a fan-out reads), else from
  the parameter's `valueFrom.default`, else the empty string;
- an artifact is reported at the key the artifact repository's layout gives it; nothing is uploaded.

Logs. When the template's archive location says `archiveLogs` (the artifact repository's, wf.compile.artifacts),
Argo's wait container uploads the main container's log as the `main-logs` artifact once the pod ends, also a
failed or evicted one, and reports it with the outputs. This process does the same when a pod has ended (or is
being deleted, as an evicted pod is): it reads the log through the API server and keeps it in the twin's artifact
store (wf.controller.archived_logs: a ConfigMap per object), then reports the artifact in the pod's
WorkflowTaskResult, so `wf logs` of a step whose pod is gone reads it there as it reads S3 on EKS. A kubelet keeps
a running pod being deleted until its wait container has done so; the simulated kubelet keeps it until this process
marks it (SIM_LOGS_KEPT), or to the end of its grace period: without that, an evicted pod could be gone before its
log was read.

Resources. A resource template's pod runs `argoexec resource ACTION` (cmd/argoexec/commands/resource.go): it
creates the template's manifest (into which the controller already put the Workflow's owner reference when
`setOwnerReference` is set), then reads the object every RESOURCE_STATE_CHECK_INTERVAL (5s) until the success or
failure condition holds (wf.cluster.resource_conditions), and exits 0 or 1 with Argo's error as its termination message.
When a resource pod is Running this process does the same, and ends the pod through the simulated kubelet's
own mechanism: the exit code, message and a zero duration as `sim.wf.dev/*` annotations, which the kwok stages
(wf/cluster/kwok-stages.yaml) turn into the terminated containers, and which hold every other stage off a
resource pod. The created object's name is kept on the pod, so a restarted executor resumes the wait instead of
creating a second object. Only `create` of a namespaced kind is simulated: what wf compiles. A resource pod
whose node is gone is played no further: argoexec went with the machine, and what becomes of the pod is the pod
GC's and Argo's to say.

Init containers. A multi-node step's resource pod first runs an init container (wf.compile.kinds.mpijob
release_container) that deletes the MPIJob an earlier attempt left: `kubectl delete --ignore-not-found
--cascade=foreground --wait --timeout=T` as Argo's executor. The simulated kubelet holds such a pod Pending (the
kwok stages) while this process does what kubectl does: delete the object with the cascade's propagation, NotFound
ignored, then read it every second until the object of the deleted UID is gone, for at most T (kubectl pkg/cmd/wait
IsDeleted); then `sim.wf.dev/init: done` lets the pod run, or `failed` with exit code 1 and kubectl's output as the
container's message fails it.

Checkpoints. A workflow pod annotated `sim.wf.dev/checkpoints: N` models a program that saves N checkpoints
evenly over its work (`sim.wf.dev/duration`, the whole step's) in the location its step's checkpoint gives it
(WF_CHECKPOINT_URI or WF_CHECKPOINT_DIR, the same for every attempt). When such a pod is Running and its WF_RESUME
is "true" this process looks up the furthest checkpoint an earlier attempt left in that location, in the workflow's
checkpoint ledger (wf.controller.checkpoints: the twin's artifact store, a ConfigMap), as a program keeping the
contract does (told not to resume, it starts over), and ends the pod with exit 0 once the work left after it is
done, as it ends resource pods. A pod that ends before (its node lost) leaves its last checkpoint: the
one it passed on its way, recorded for the next attempt; a step without a location keeps nothing and starts over.
Signals are not simulated, so no checkpoint is saved on SIGTERM.

MPIJob replicas. A checkpointed multi-node step's program is its launcher's (mpirun's): the launcher carries
`sim.wf.dev/checkpoints` and is played as above, its ledger record under the name of Argo's resource pod that created
its MPIJob (what `wf get` reads by the attempt). mpirun fails within seconds when a rank's daemon goes with its node;
the simulated launcher does the same: when a worker stops running while its launcher runs (its pod deleted, being
deleted or failed, or its Node deleted: the rule of wf.controller.gangs, fed as the node recorder feeds it), this
process fails the launcher with Open MPI's message for a lost daemon. The mark that makes the attempt an
interruption is the node recorder's (wf.controller.node_recorder, as on EKS), not this process's: the launcher fails
once the MPIJob carries it (read every MARK_POLL_SECONDS), so Argo's next read of the MPIJob finds the mark whatever
else it finds, or after MARK_WAIT_SECONDS without it, as mpirun waits for no one (the attempt then reads as the
program's failure, as it would on EKS: logged). Replicas are watched in one stream of their own, so a launcher's end
is read before the operator's cleanup of its workers, which is no loss.

Lost pods. A pod Running when its node was deleted is deleted by the pod GC once its node has stayed away for
its quarantine (40-60 s). When a node of the same name is created before that (a new machine under the old name),
nothing deletes it and kwok would play its program on: this process marks such a pod `sim.wf.dev/lost` and the kwok
stages fail it as the new machine's kubelet does, every container ContainerStatusUnknown with exit code 137.

Run by `wf cluster up` with the cluster's admin kubeconfig: python -m wf.cluster.executor --kubeconfig PATH
"""

from __future__ import annotations

import argparse
import json
import logging
import queue
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from wf.cluster.resource_conditions import ConditionError, Conditions, Verdict
from wf.compile.checkpoints import DIR_ENV, RESUME_ENV, URI_ENV
from wf.compile.kinds.mpijob import JOB_NAME_LABEL, JOB_ROLE_LABEL
from wf.controller.archived_logs import log_artifact, twin_object
from wf.controller.checkpoints import (
    AttemptRecord,
    Saved,
    last_checkpoint,
    ledger_name,
    parse_ledger,
    write_ledger,
)
from wf.controller.gangs import Gangs, LostWorker
from wf.controller.lanes import Lanes
from wf.core.constants import (
    ARGO_EXECUTOR_TOKEN_VOLUME,
    ARGO_MAIN_CONTAINER,
    ARGO_NODE_ID_ANNOTATION,
    ARGO_REPORT_OUTPUTS_COMPLETED_LABEL,
    ARGO_WORKFLOW_LABEL,
    DOMAIN,
    MPI_WORKER_LOST_ANNOTATION,
    MPIJOB,
    MPIJOB_LABEL,
    REAL_NODE_LABEL,
    SIM_CHECKPOINTS,
    SIM_DURATION,
    SIM_EXIT_CODE,
    SIM_INIT,
    SIM_LOGS_KEPT,
    SIM_LOST,
    SIM_MESSAGE,
    SIM_OUTPUTS,
    WORKFLOW,
    WORKFLOW_NAME_LABEL,
    WORKFLOW_TASK_RESULT,
)

if TYPE_CHECKING:
    from wf.controller.client import Kube

OUTPUTS_ANNOTATION = SIM_OUTPUTS
TEMPLATE_ENV = "ARGO_TEMPLATE"
# The object a resource pod created ("<API path>"), so a restarted executor waits on it rather than create another.
RESOURCE_ANNOTATION = f"sim.{DOMAIN}/resource"
CHECK_INTERVAL_ENV = "RESOURCE_STATE_CHECK_INTERVAL"
DEFAULT_CHECK_INTERVAL = 5.0  # Argo's default (workflow/executor/resource.go)
RETRY_SECONDS = 2.0  # before a checkpointed pod's event is handled again after an API error
# Threads that play checkpointing programs, each for the workflows that hash to it: a day's 8,000 programs in one
# thread waited minutes behind each other's API calls (each start and end is one to three), holding the day up.
CHECKPOINT_LANES = 16
# Threads that report ended pods' outputs and archived logs, as every pod's wait container does its own: with every
# log archived, a full-size day's 8,000 reports (a log read, the log's object, the task result) in the pod stream's
# thread went at 20-60 a minute, and Argo waits for each report before it ends the step.
REPORT_LANES = 8
# The annotation by which Kubernetes ties a service-account token Secret to its account.
TOKEN_ACCOUNT_ANNOTATION = "kubernetes.io/service-account.name"
# What mpirun prints when a rank's node goes and the daemon it started there through SSH with it: Open MPI's help
# text for a lost daemon (open-mpi/ompi orte/mca/errmgr/base/help-errmgr-base.txt, section [node-died]; 4.x words
# its first line "ORTE has lost communication with a remote daemon."), with the worker's pod name as the hostname
# (the operator makes it the pod's hostname and the hostfile's entry). mpirun then ends the job and exits non-zero.
MPIRUN_LOST_DAEMON = """ORTE has lost communication with its daemon located on node:

  hostname:  {hostname}

This is usually due to either a failure of the TCP network
connection to the node, or possibly an internal failure of
the daemon itself. We cannot recover from this failure, and
therefore will terminate the job."""
MPIRUN_EXIT_CODE = "1"  # the twin's: any non-zero exit fails the launcher's Job alike
# How long the twin's mpirun, having lost a rank, waits for the node recorder's mark before it fails anyway: the
# recorder sees the same pod and node events and marks within a second; real mpirun takes seconds to notice a lost
# daemon (its TCP connection's end), and the e2e test wants the launcher failed within 10 s of the loss.
MARK_WAIT_SECONDS = 5.0
MARK_POLL_SECONDS = 0.2

log = logging.getLogger("wf.cluster.executor")


def executor_account(pod: dict[str, Any], token_account: Callable[[str, str], str]) -> str:
    """The service account Argo's executor authenticates as in `pod`: the owner of the token Secret Argo mounts
    for its own containers (`token_account(namespace, secret)` reads it), else the pod's own account."""
    spec = pod.get("spec") or {}
    namespace = (pod.get("metadata") or {}).get("namespace", "")
    for volume in spec.get("volumes") or []:
        secret = (volume.get("secret") or {}).get("secretName") if volume.get("name") == ARGO_EXECUTOR_TOKEN_VOLUME \
            else None
        if secret:
            return token_account(namespace, secret)
    return str(spec.get("serviceAccountName") or "default")


class ExecutorClients:
    """API clients acting as each pod's executor account, so the twin's executor is held to the rights the
    platform's RBAC gives Argo's executor (manifests/rbac.yaml), no more: a missing verb fails the step here as it
    would on EKS. Impersonation by the cluster's admin credentials; what the twin does as the kubelet (the
    annotations kwok's stages read) keeps the admin's own rights."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.api = kube.api_client
        self.clients: dict[str, Any] = {}
        self.accounts: dict[tuple[str, str], str] = {}
        self.lock = threading.Lock()

    def for_pod(self, pod: dict[str, Any]) -> Any:
        namespace = (pod.get("metadata") or {}).get("namespace", "")
        user = f"system:serviceaccount:{namespace}:{executor_account(pod, self._token_account)}"
        with self.lock:
            if user not in self.clients:  # timed out like every call: a report hung on a dead peer hangs its lane
                self.clients[user] = self.kube.impersonating(user)
            return self.clients[user]

    def _token_account(self, namespace: str, secret: str) -> str:
        from kubernetes.client import CoreV1Api

        key = (namespace, secret)
        if key not in self.accounts:
            annotations = CoreV1Api(self.api).read_namespaced_secret(secret, namespace).metadata.annotations or {}
            self.accounts[key] = annotations.get(TOKEN_ACCOUNT_ANNOTATION, "")
        return self.accounts[key]


def ended(pod: dict[str, Any]) -> bool:
    """The pod's containers are done, or going (deleted with a grace period: an eviction, a drain)."""
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed") or \
        bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def archived_log_location(pod: dict[str, Any]) -> dict[str, Any] | None:
    """The `main-logs` artifact Argo's wait container would upload for `pod` (ended, its template's archive location
    saying archiveLogs); None otherwise."""
    location = (_template(pod) or {}).get("archiveLocation") or {}
    if not ended(pod) or not location.get("archiveLogs"):
        return None
    meta = pod.get("metadata") or {}
    return log_artifact(location, _key_prefix(meta))


def _key_prefix(meta: dict[str, Any]) -> str:
    return f"{meta.get('namespace')}/{(meta.get('labels') or {}).get(ARGO_WORKFLOW_LABEL)}/{meta.get('name')}"


def task_result(pod: dict[str, Any], logs: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The WorkflowTaskResult the executor would create for `pod` (API-shaped dict): its declared outputs once it
    Succeeded, and `logs`, its archived log's artifact; None when there is nothing to report."""
    succeeded = (pod.get("status") or {}).get("phase") == "Succeeded"
    meta = pod.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    template = _template(pod)
    declared = ((template or {}).get("outputs") or {}) if succeeded else {}
    if not declared.get("parameters") and not declared.get("artifacts") and logs is None \
            or ARGO_NODE_ID_ANNOTATION not in annotations:
        return None
    given = _annotated_values(annotations.get(OUTPUTS_ANNOTATION))
    outputs: dict[str, Any] = {}
    if declared.get("parameters"):
        outputs["parameters"] = [
            {"name": p["name"], "value": _text(given[p["name"]]) if p["name"] in given
             else str((p.get("valueFrom") or {}).get("default", ""))}
            for p in declared["parameters"]]
    if declared.get("artifacts") or logs is not None:
        prefix = _key_prefix(meta)
        outputs["artifacts"] = [
            {"name": a["name"], "path": a.get("path", ""), "s3": {"key": f"{prefix}/{a['name']}.tgz"}}
            for a in declared.get("artifacts") or []] + ([logs] if logs is not None else [])
    return {
        "apiVersion": WORKFLOW_TASK_RESULT.api_version,
        "kind": WORKFLOW_TASK_RESULT.kind,
        "metadata": {
            "name": annotations[ARGO_NODE_ID_ANNOTATION],
            "namespace": meta.get("namespace"),
            "labels": {ARGO_WORKFLOW_LABEL: (meta.get("labels") or {}).get(ARGO_WORKFLOW_LABEL, ""),
                       ARGO_REPORT_OUTPUTS_COMPLETED_LABEL: "true"},
            "ownerReferences": [r for r in meta.get("ownerReferences") or [] if r.get("kind") == WORKFLOW.kind],
        },
        "outputs": outputs,
    }


def _template(pod: dict[str, Any]) -> dict[str, Any] | None:
    """The template Argo hands its executor in ARGO_TEMPLATE (on the init and wait containers)."""
    spec = pod.get("spec") or {}
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        for env in container.get("env") or []:
            if env.get("name") == TEMPLATE_ENV and env.get("value"):
                try:
                    value = json.loads(env["value"])
                except ValueError:
                    return None
                return value if isinstance(value, dict) else None
    return None


def _annotated_values(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    try:
        values = json.loads(text)
    except ValueError:
        log.warning("%s is not JSON; the outputs take their defaults", OUTPUTS_ANNOTATION)
        return {}
    return values if isinstance(values, dict) else {}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


@dataclass(frozen=True)
class ResourceAction:
    """What `argoexec resource` would do in a Running resource pod that has no verdict yet."""

    pod: str
    namespace: str  # the pod's
    action: str
    flags: tuple[str, ...]  # kubectl's, after the action
    manifest: dict[str, Any]
    conditions: Conditions | ConditionError
    interval: float  # seconds between reads of the object
    created: str | None  # API path of the object an earlier run created
    pod_object: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)  # whose executor acts

    @property
    def collection(self) -> str:
        """The API path the manifest is created at (kubectl's default namespace in the pod is the pod's)."""
        meta = self.manifest.get("metadata") or {}
        return collection_path(str(self.manifest.get("apiVersion", "")), str(self.manifest.get("kind", "")),
                               meta.get("namespace") or self.namespace)


def resource_action(pod: dict[str, Any]) -> ResourceAction | None:
    """The resource action of `pod`, or None when the pod is not a Running resource pod awaiting its verdict."""
    meta = pod.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    if ((pod.get("status") or {}).get("phase") != "Running" or meta.get("deletionTimestamp")
            or SIM_EXIT_CODE in annotations):
        return None
    resource = (_template(pod) or {}).get("resource")
    if not isinstance(resource, dict):
        return None
    try:
        conditions: Conditions | ConditionError = Conditions.of(resource)
    except ConditionError as exc:
        conditions = exc
    try:
        manifest = yaml.safe_load(resource.get("manifest") or "")
    except yaml.YAMLError:
        manifest = None  # created as {}, which the API server refuses with its own words
    return ResourceAction(pod=meta.get("name", ""), namespace=meta.get("namespace", ""),
                          action=str(resource.get("action", "")),
                          flags=tuple(str(flag) for flag in resource.get("flags") or ()),
                          manifest=manifest if isinstance(manifest, dict) else {},
                          conditions=conditions, interval=_check_interval(pod),
                          created=annotations.get(RESOURCE_ANNOTATION), pod_object=pod)


def collection_path(api_version: str, kind: str, namespace: str | None) -> str:
    """The API path of a kind's objects as Argo's executor infers it (inferObjectSelfLink: gengo's lower-case
    plural namer, no discovery)."""
    prefix = "api" if "/" not in api_version else "apis"
    scope = f"namespaces/{namespace}/" if namespace else ""
    return f"/{prefix}/{api_version}/{scope}{_plural(kind).lower()}"


def _plural(kind: str) -> str:
    """k8s.io/gengo namer.pluralNamer.Name without exceptions."""
    if len(kind) < 2:
        return kind
    last, before = kind[-1], kind[-2]
    if last in "sxz" or (last == "h" and before in "cs"):
        return kind + "es"
    if last == "y":
        return kind[:-1] + "ies" if before in "bcdfghjklmnpqrstvwxyz" else kind + "s"
    if last == "e" and before == "f":
        return kind[:-2] + "ves"
    if last == "f":
        return kind[:-1] + "ves"
    return kind + "s"


@dataclass(frozen=True)
class Release:
    """What `kubectl delete` does in a pod's release init container (wf.compile.kinds.mpijob.release_container), the
    one init container this process plays: delete the object, NotFound ignored, with the cascade's propagation, then
    wait until the object of the deleted UID is gone, for at most the timeout (kubectl pkg/cmd/wait IsDeleted)."""

    pod: str
    namespace: str  # the pod's
    path: str  # the object's API path
    resource: str  # its plural, as kubectl names it in its timeout error
    name: str
    propagation: str
    timeout: float  # seconds
    refused: str = ""  # why its kubectl arguments are not simulated: the container fails with that
    pod_object: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)  # whose executor acts


_CASCADES = {"background": "Background", "foreground": "Foreground", "orphan": "Orphan"}
DELETE_WAIT = 168 * 3600.0  # kubectl delete --wait's timeout when none is given: a week


def release_action(pod: dict[str, Any]) -> Release | None:
    """The release `pod`'s init container is to run now (the pod scheduled, Pending, not released yet), or None."""
    from wf.compile.kinds.mpijob import RELEASE_CONTAINER

    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    container = next((c for c in spec.get("initContainers") or [] if c.get("name") == RELEASE_CONTAINER), None)
    if (container is None or (pod.get("status") or {}).get("phase") != "Pending" or not spec.get("nodeName")
            or meta.get("deletionTimestamp") or SIM_INIT in (meta.get("annotations") or {})):
        return None
    args = [str(a) for a in container.get("args") or []]
    refused = Release(meta.get("name", ""), meta.get("namespace", ""), "", "", "", "", 0.0,
                      f"sim executor: kubectl {' '.join(args)} is not simulated (only delete RESOURCE.VERSION.GROUP "
                      "NAME --ignore-not-found --wait, with --namespace, --cascade, --timeout)", pod)
    if len(args) < 3 or args[0] != "delete" or args[1].count(".") < 2:
        return refused
    plural, version, group = args[1].split(".", 2)
    flags = dict(arg.partition("=")[::2] for arg in args[3:])
    cascade, timeout = flags.pop("--cascade", "background"), _seconds(flags.pop("--timeout", "0s"))
    namespace = flags.pop("--namespace", "") or meta.get("namespace", "")
    if flags.pop("--ignore-not-found", None) is None or flags.pop("--wait", "true") not in ("", "true") or flags \
            or cascade not in _CASCADES or timeout is None:
        return refused
    return Release(pod=meta.get("name", ""), namespace=meta.get("namespace", ""),
                   path=f"/apis/{group}/{version}/namespaces/{namespace}/{plural}/{args[2]}",
                   resource=plural, name=args[2], propagation=_CASCADES[cascade], timeout=timeout or DELETE_WAIT,
                   pod_object=pod)


def verdict_annotations(verdict: Verdict) -> dict[str, str]:
    """How the simulated kubelet is told to end a resource pod now, as argoexec would exit."""
    return {SIM_EXIT_CODE: "0" if verdict.succeeded else "1", SIM_DURATION: "0s", SIM_MESSAGE: verdict.message}


_DURATION_PART = re.compile(r"([0-9]*\.?[0-9]+)(ns|us|µs|ms|s|m|h)")
_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def _seconds(text: str) -> float | None:
    """A Go duration in seconds, None if it is not one."""
    if text and re.fullmatch(f"(?:{_DURATION_PART.pattern})+", text):
        return sum(float(n) * _DURATION_UNITS[u] for n, u in _DURATION_PART.findall(text))
    return None


def _main_env(pod: dict[str, Any]) -> dict[str, str]:
    for container in (pod.get("spec") or {}).get("containers") or []:
        if container.get("name") == ARGO_MAIN_CONTAINER:
            return {str(e.get("name")): str(e.get("value") or "") for e in container.get("env") or []}
    return {}


def _check_interval(pod: dict[str, Any]) -> float:
    """RESOURCE_STATE_CHECK_INTERVAL of the main container (a Go duration), else Argo's default."""
    seconds = _seconds(_main_env(pod).get(CHECK_INTERVAL_ENV, ""))
    return DEFAULT_CHECK_INTERVAL if seconds is None else seconds


@dataclass(frozen=True)
class CheckpointedRun:
    """A Running pod whose simulated program checkpoints: what it must do, and from where it started."""

    pod: str
    namespace: str
    workflow: str
    owners: tuple[dict[str, Any], ...]  # the Workflow's owner reference, for the ledger
    location: str | None  # None: the step has no checkpoint location, so nothing survives the attempt
    resume: bool  # WF_RESUME: a program looks for a checkpoint only when told to (else it starts over)
    work_seconds: float  # the whole step's work
    checkpoints: int  # saved evenly over the work
    started: float  # epoch seconds the program started
    resumed: Saved = Saved()
    node: str = ""  # where it runs: the program stops when that node goes
    # The attempt's pod, whose name keys the ledger (what `wf get` reads by Argo's node): the pod itself, or for an
    # MPIJob's launcher ("" until found) Argo's resource pod that created the MPIJob `mpijob`.
    attempt: str = ""
    mpijob: str = ""

    @property
    def ends(self) -> float:
        """When the work left after the resumed checkpoint is done."""
        return self.started + self.work_seconds * (1 - self.resumed.progress)

    def ended_at(self, now: float, cut_short: bool = False) -> AttemptRecord | None:
        """The record of the attempt ending at `now` (interrupted before `ends`, or done): its last checkpoint is the
        furthest it passed, the run time that holds is kept, and how long it ran. A program without a checkpoint
        location has a record only when cut short (location "": all it ran is redone); a finished one needs none."""
        ran = max(0.0, min(now, self.ends) - self.started)
        if self.location is None:
            return AttemptRecord("", Saved(), Saved(), 0.0, ran) if cut_short else None
        progress = min(1.0, self.resumed.progress + ran / self.work_seconds)
        reached = int(progress * self.checkpoints + 1e-9)
        saved = Saved(reached, reached / self.checkpoints) if reached / self.checkpoints > self.resumed.progress \
            else self.resumed
        return AttemptRecord(self.location, self.resumed, saved,
                             (saved.progress - self.resumed.progress) * self.work_seconds, ran)


def checkpointed_run(pod: dict[str, Any]) -> CheckpointedRun | None:
    """The checkpointing program a Running workflow pod simulates (resumed from nothing yet), or None when the pod
    is no such pod, already has its end, or is going."""
    meta = pod.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    status = pod.get("status") or {}
    if (status.get("phase") != "Running" or meta.get("deletionTimestamp") or SIM_EXIT_CODE in annotations
            or not str(annotations.get(SIM_CHECKPOINTS, "")).isdigit() or int(annotations[SIM_CHECKPOINTS]) < 1):
        return None
    env = _main_env(pod)
    labels = meta.get("labels") or {}
    started = next((c.get("state", {}).get("running", {}).get("startedAt") for c in status.get("containerStatuses")
                    or [] if c.get("name") == ARGO_MAIN_CONTAINER), None) or status.get("startTime")
    if not started:
        return None
    return CheckpointedRun(
        pod=meta.get("name", ""), namespace=meta.get("namespace", ""), workflow=workflow_of(pod),
        owners=tuple(r for r in meta.get("ownerReferences") or [] if r.get("kind") == WORKFLOW.kind),
        location=env.get(URI_ENV) or env.get(DIR_ENV) or None,
        resume=env.get(RESUME_ENV) == "true",
        work_seconds=max(_seconds(str(annotations.get(SIM_DURATION, ""))) or 1.0, 1e-3),
        checkpoints=int(annotations[SIM_CHECKPOINTS]),
        started=datetime.fromisoformat(str(started).replace("Z", "+00:00")).timestamp(),
        node=(pod.get("spec") or {}).get("nodeName") or "",
        attempt=meta.get("name", "") if ARGO_WORKFLOW_LABEL in labels else "",
        mpijob=labels.get(JOB_NAME_LABEL, "") if ARGO_WORKFLOW_LABEL not in labels else "")


def workflow_of(pod: dict[str, Any]) -> str:
    """The workflow a pod runs for: Argo's label on Argo's pods, wf's on those an MPIJob of the workflow made."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return str(labels.get(ARGO_WORKFLOW_LABEL) or labels.get(WORKFLOW_NAME_LABEL) or "")


def ended_at(pod: dict[str, Any], now: float, node_gone: float | None = None) -> float:
    """When a pod stopped running: its node's loss (`node_gone`, when this process saw the Node deleted), its
    deletion, or the pod GC's or a kubelet's disruption, whichever came first; else `now`. A pod whose node vanished
    is deleted by the pod GC only 40-60 s later (its quarantine): its program did not run, nor checkpoint, then."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    stamps = [meta.get("deletionTimestamp"), *(c.get("lastTransitionTime") for c in status.get("conditions") or []
                                               if c.get("type") == "DisruptionTarget")]
    moments = [datetime.fromisoformat(str(s).replace("Z", "+00:00")).timestamp() for s in stamps if s]
    if node_gone is not None:
        moments.append(node_gone)
    return min(moments, default=now)


def lane_of(lanes: Lanes[Any], pod: dict[str, Any]) -> queue.SimpleQueue[Any]:
    """The lane of a pod's workflow."""
    return lanes.of((pod.get("metadata") or {}).get("namespace", ""), workflow_of(pod))


# A pod event as the lanes carry it: the pod, and whether it was deleted.
PodEvent = tuple[dict[str, Any], bool]


class CheckpointPlayer:
    """Plays the checkpointing programs of Running pods: resumes each told to (WF_RESUME) from its location's last
    checkpoint, ends it when its work is done, records what an interrupted one left. The ledger's reads and writes
    happen off the pod stream, in CHECKPOINT_LANES threads; every event of one workflow's pods goes to the same
    lane, in the order of the pod events, and a program's end that its timer finds due is queued in its workflow's
    lane behind the events already received, so a pod deleted before its program finished is recorded as cut short
    before the retry that follows it (same workflow, same location) reads the ledger."""

    def __init__(self, api: Any, clock: Callable[[], float] = time.time, lanes: int = CHECKPOINT_LANES) -> None:
        from kubernetes.client import CoreV1Api

        self.core = CoreV1Api(api)
        self.clock = clock
        self.runs: dict[str, CheckpointedRun] = {}  # pod uid -> its program, until the pod ends
        self.done: set[str] = set()  # uids this process ended
        self.changed = threading.Condition()
        # Per lane: pod events, and the uids of runs whose work the timer found done.
        self.lanes: Lanes[PodEvent | str] = Lanes(lanes, self._play, "checkpoint ledger")
        self.due: set[str] = set()  # uids queued as done, not yet played
        self.nodes_gone: dict[str, float] = {}  # node name -> when this process saw it deleted
        threading.Thread(target=self._timer, name="checkpointed programs", daemon=True).start()

    def node_gone(self, name: str, when: float) -> None:
        """A Node was deleted (the pod stream's DELETED of its pods comes later, after the pod GC's quarantine)."""
        with self.changed:
            self.nodes_gone[name] = when

    def _lost_at(self, run: CheckpointedRun) -> float | None:
        """When the run's node was deleted under it (the caller holds `changed`): a deletion before the program
        started was of an earlier node of that name (`--replace recreate` brings the same names back)."""
        gone = self.nodes_gone.get(run.node)
        return gone if gone is not None and gone >= run.started else None

    def observe(self, pod: dict[str, Any], deleted: bool = False) -> None:
        """Queue the pod's event when it may concern a checkpointing program (cheap: the stream's thread)."""
        meta = pod.get("metadata") or {}
        with self.changed:
            tracked = meta.get("uid", "") in self.runs
        if tracked or SIM_CHECKPOINTS in (meta.get("annotations") or {}):
            lane_of(self.lanes, pod).put((pod, deleted))

    def _play(self, item: PodEvent | str) -> None:
        if isinstance(item, str):
            self.finish(item)
            return
        pod, deleted = item
        try:
            self.handle(pod, deleted)
        except Exception:  # the API server's trouble: a pod not played stays Running, so play it again soon
            log.exception("checkpointed pod %s; trying again", (pod.get("metadata") or {}).get("name"))
            threading.Timer(RETRY_SECONDS, lane_of(self.lanes, pod).put, args=((pod, deleted),)).start()

    def handle(self, pod: dict[str, Any], deleted: bool = False) -> None:
        uid = (pod.get("metadata") or {}).get("uid", "")
        with self.changed:
            run = self.runs.get(uid)
        if run is not None:
            if deleted or checkpointed_run(pod) is None:  # ended: done, failed, or going with its node
                with self.changed:
                    lost = self._lost_at(run)
                end = ended_at(pod, self.clock(), lost)
                # Ended by us when its work was done, unless the pod had gone before that (an event we had not
                # read yet): then it was cut short like any other.
                cut_short = uid not in self.done or end < run.ends
                if cut_short and (record := run.ended_at(end, cut_short=True)) is not None:
                    self._record(run, record)  # tracked until recorded: an API error plays the event again
                    log.info("checkpointed pod %s/%s interrupted: %s kept", run.namespace, run.pod, record.saved)
                with self.changed:
                    self.runs.pop(uid, None)
                    self.done.discard(uid)
            return
        if deleted or uid in self.done or (run := checkpointed_run(pod)) is None:
            return
        if not run.attempt:
            run = self._attempt_of(run)
        if (location := run.location) is not None:
            records = self._ledger(run)
            # This process restarted while the pod ran: its record, not ended. An ended one of that name is an
            # earlier attempt's: a `wf retry`'s new attempt takes the name of the pod it replaces.
            own = record if (record := records.get(run.attempt)) is not None and record.saved is None else None
            run = replace(run, resumed=own.resumed if own else
                          last_checkpoint(records, location) if run.resume else Saved())
            if own is None:
                self._record(run, AttemptRecord(location, run.resumed))
        log.info("checkpointed pod %s/%s runs %s", run.namespace, run.pod, run.resumed)
        with self.changed:
            self.runs[uid] = run
            self.changed.notify()

    def _timer(self) -> None:
        while True:
            with self.changed:
                waiting = {uid: run for uid, run in self.runs.items() if uid not in self.done and uid not in self.due}
                due = [uid for uid, run in waiting.items() if run.ends <= self.clock()]
                if not due:
                    soonest = min((run.ends for run in waiting.values()), default=self.clock() + 60)
                    self.changed.wait(max(0.05, soonest - self.clock()))
                    continue
                self.due.update(due)
                lanes = [self.lanes.of(waiting[uid].namespace, waiting[uid].workflow) for uid in due]
            for uid, lane in zip(due, lanes, strict=True):
                lane.put(uid)

    def finish(self, uid: str) -> None:
        """End the program of `uid`, whose work is done, unless an earlier event ended it (the ledger's thread)."""
        with self.changed:
            self.due.discard(uid)
            run = self.runs.get(uid)
            if run is None or uid in self.done:
                return
            self.done.add(uid)
            lost = self._lost_at(run)
        if lost is not None and lost < run.ends:
            return  # its node went before its work was done: the pod's deletion records it cut short
        try:
            if (record := run.ended_at(run.ends)) is not None:
                self._record(run, record)
            self._end(run)
        except Exception:  # the pod is left Running: the next event of it plays it again
            log.exception("ending checkpointed pod %s/%s", run.namespace, run.pod)
            with self.changed:
                self.done.discard(uid)
                self.runs.pop(uid, None)

    def _attempt_of(self, run: CheckpointedRun) -> CheckpointedRun:
        """A launcher's run keyed by its attempt: the Running resource pod of Argo's that created its MPIJob (one at a
        time: the next attempt's waits Pending until this MPIJob is gone), owned by the workflow. Without it (gone
        with its node meanwhile) the program runs from the start and keeps nothing, as a step without a location."""
        selector = f"{MPIJOB_LABEL}={run.mpijob}"
        pods = self.core.list_namespaced_pod(run.namespace, label_selector=selector).items
        argo = next((p for p in pods if p.status.phase == "Running" and not p.metadata.deletion_timestamp), None)
        if argo is None:
            return replace(run, attempt=run.pod, location=None)
        owners = tuple({"apiVersion": r.api_version, "kind": r.kind, "name": r.name, "uid": r.uid}
                       for r in argo.metadata.owner_references or [] if r.kind == WORKFLOW.kind)
        return replace(run, attempt=argo.metadata.name, owners=owners)

    def _end(self, run: CheckpointedRun) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            self.core.patch_namespaced_pod(run.pod, run.namespace, {"metadata": {"annotations": {
                SIM_EXIT_CODE: "0", SIM_DURATION: "0s"}}})
        except ApiException as exc:
            if exc.status != 404:
                raise

    def _ledger(self, run: CheckpointedRun) -> Mapping[str, AttemptRecord]:
        from kubernetes.client.exceptions import ApiException

        try:
            data = self.core.read_namespaced_config_map(ledger_name(run.workflow), run.namespace).data
        except ApiException as exc:
            if exc.status == 404:
                return {}
            raise
        return parse_ledger(data).attempts

    def _record(self, run: CheckpointedRun, record: AttemptRecord) -> None:
        """One key per attempt in the ledger: concurrent attempts of one workflow never overwrite each other."""
        write_ledger(self.core, run.namespace, run.workflow, {run.attempt: record.encode()}, lambda: run.owners)


class RealNodes:
    """The real nodes (REAL_NODE_LABEL, wf.cluster.realnode): their pods really run, with Argo's own init and wait
    containers reporting outputs and archiving logs, so this process leaves those pods alone."""

    def __init__(self, names: set[str] | None = None) -> None:
        self.names = set(names or ())
        self.lock = threading.Lock()

    def observe(self, kind: str, node: dict[str, Any]) -> None:
        meta = node.get("metadata") or {}
        with self.lock:
            if kind != "DELETED" and REAL_NODE_LABEL in (meta.get("labels") or {}):
                self.names.add(meta.get("name", ""))
            else:
                self.names.discard(meta.get("name", ""))

    def runs(self, pod: dict[str, Any]) -> bool:
        with self.lock:
            return (pod.get("spec") or {}).get("nodeName") in self.names


class LostPods:
    """The pods that were Running on a node when it was deleted, so that a node created again under that name (a
    new machine under the old name, as `benchmarks/scale.py --replace recreate` does) does not carry on their
    programs: the pod GC deletes only pods whose node stays away, and kwok, playing the new node's kubelet, would
    play them on. A real kubelet finds the containers it never ran gone and fails them (ContainerStatusUnknown);
    `node_back` names the pods to mark for the kwok stage that does so (SIM_LOST)."""

    def __init__(self) -> None:
        self.running: dict[str, dict[str, tuple[str, str]]] = {}  # node -> pod uid -> (namespace, name)
        self.orphans: dict[str, dict[str, tuple[str, str]]] = {}  # the same, for nodes deleted since
        self.lock = threading.Lock()

    def observe(self, pod: dict[str, Any], deleted: bool = False) -> None:
        meta = pod.get("metadata") or {}
        node, uid = (pod.get("spec") or {}).get("nodeName"), meta.get("uid", "")
        if not node:
            return
        with self.lock:
            if not deleted and (pod.get("status") or {}).get("phase") == "Running":
                if uid not in self.orphans.get(node, {}):
                    self.running.setdefault(node, {})[uid] = (meta.get("namespace", ""), meta.get("name", ""))
                return
            for pods in (self.running.get(node), self.orphans.get(node)):
                if pods is not None:
                    pods.pop(uid, None)

    def node_gone(self, name: str) -> None:
        with self.lock:
            self.orphans.setdefault(name, {}).update(self.running.pop(name, {}))

    def node_back(self, name: str) -> list[tuple[str, str]]:
        """The pods (namespace, name) that ran on the deleted node `name`, now that a node of that name exists."""
        with self.lock:
            return list(self.orphans.pop(name, {}).values())


def worker_lost_mark(objects: Any, loss: LostWorker) -> str | None:
    """The lost-worker mark on the loss's MPIJob (a CustomObjectsApi): its text, "" while there is none, None when
    the MPIJob is gone; "" too when it cannot be read just now (the next read may)."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    try:
        mpijob = objects.get_namespaced_custom_object(MPIJOB.group, MPIJOB.version, loss.namespace, MPIJOB.plural,
                                                      loss.mpijob)
    except ApiException as exc:
        return None if exc.status == 404 else ""
    except (HTTPError, OSError):
        return ""
    return str(((mpijob.get("metadata") or {}).get("annotations") or {}).get(MPI_WORKER_LOST_ANNOTATION) or "")


def mpirun_fails(core: Any, objects: Any, loss: LostWorker, wait: float = MARK_WAIT_SECONDS,
                 sleep: Callable[[float], object] = time.sleep, clock: Callable[[], float] = time.monotonic) -> None:
    """The twin's mpirun losing a rank: its launcher failed with Open MPI's words (a CoreV1Api) once the node recorder
    has marked the MPIJob (read with a CustomObjectsApi), or after `wait` without the mark."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    deadline = clock() + wait
    while (mark := worker_lost_mark(objects, loss)) == "" and clock() < deadline:
        sleep(MARK_POLL_SECONDS)
    if mark is None:
        return  # the MPIJob is gone (its workflow stopped): nothing runs mpirun any more
    if not mark:
        log.warning("MPIJob %s/%s lost worker %s, not marked after %.0fs (is the node recorder running?): its "
                    "launcher fails anyway, and Argo may read the program's failure", loss.namespace, loss.mpijob,
                    loss.worker, wait)
    try:
        core.patch_namespaced_pod(loss.launcher, loss.namespace, {"metadata": {"annotations": {
            SIM_EXIT_CODE: MPIRUN_EXIT_CODE, SIM_MESSAGE: MPIRUN_LOST_DAEMON.format(hostname=loss.worker),
            SIM_DURATION: "0s"}}})
        log.info("MPIJob %s/%s lost worker %s (%s): launcher %s fails", loss.namespace, loss.mpijob, loss.worker,
                 loss.reason, loss.launcher)
    except ApiException as exc:
        if exc.status != 404:  # 404: the launcher went meanwhile
            log.warning("MPIJob %s/%s lost worker %s: %s %s", loss.namespace, loss.mpijob, loss.worker, exc.status,
                        exc.reason)
    except (HTTPError, OSError) as exc:  # the API server away: the attempt ends when Argo reads a failure
        log.warning("MPIJob %s/%s lost worker %s: %s", loss.namespace, loss.mpijob, loss.worker, exc)


class _Refused(Exception):
    """The API server refused the call for good; the text is the step's message."""


class _ApiError(Exception):
    """What the API server answered a call it refused (not for a while); the text is kubectl's wording of it
    (StandardErrorMessage)."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"Error from server ({reason}): {message}")
        self.status, self.reason, self.message = status, reason, message


class _Transient(Exception):
    """An API call to repeat later (server unreachable, 5xx, throttled)."""


class ResourceExecutor:
    """Plays a resource pod's release init container while the pod is Pending, then `argoexec resource` while it is
    Running, each in a thread of its own until done."""

    def __init__(self, api: Any, executors: ExecutorClients) -> None:
        self.api = api
        self.executors = executors
        self.active: dict[tuple[str, str], threading.Event] = {}  # (pod uid, stage) -> set when no longer waited for
        self.lock = threading.Lock()

    def observe(self, pod: dict[str, Any], deleted: bool = False) -> None:
        uid = (pod.get("metadata") or {}).get("uid", "")
        release = None if deleted else release_action(pod)
        action = None if deleted else resource_action(pod)
        for stage, work, target in (("release", release, self._release), ("resource", action, self._run)):
            with self.lock:
                if work is None:
                    if (stop := self.active.pop((uid, stage), None)) is not None:
                        stop.set()
                    continue
                if (uid, stage) in self.active:
                    continue
                stop = self.active[(uid, stage)] = threading.Event()
            name = f"{stage} {(pod.get('metadata') or {}).get('name')}"
            threading.Thread(target=target, args=(work, stop), name=name, daemon=True).start()

    def _release(self, release: Release, stop: threading.Event) -> None:
        """Run the init container's kubectl delete --wait; let the simulated kubelet run the pod, or fail it with
        kubectl's exit code and its last words (the container's FallbackToLogsOnError message)."""
        failure: str | None = release.refused or None
        if failure is None:
            try:
                failure = self._delete_and_wait(release, stop)
            except Exception as exc:  # a thread's death would leave the pod Pending forever
                log.exception("releasing for pod %s/%s", release.namespace, release.pod)
                failure = f"sim executor: {exc}"
        if stop.is_set() or (failure is None and self._node_gone(release)):
            return
        done = {SIM_INIT: "done"} if failure is None else {SIM_INIT: "failed", SIM_EXIT_CODE: "1", SIM_MESSAGE: failure}
        self._annotate(release.namespace, release.pod, done)
        log.info("pod %s/%s released: %s", release.namespace, release.pod, failure or "ok")

    def _delete_and_wait(self, release: Release, stop: threading.Event) -> str | None:
        """kubectl delete --ignore-not-found --wait: None once the object is gone, else kubectl's failure; also None
        when the pod no longer waits (stopped, or its node gone)."""
        uid = None
        while True:
            try:
                deleted = json.loads(self._call(release.pod_object, "DELETE", release.path,
                                                {"propagationPolicy": release.propagation}))
                # The object being deleted (foreground), or a Status naming it (gone at once).
                uid = (deleted.get("metadata") or {}).get("uid") or (deleted.get("details") or {}).get("uid")
                break
            except _ApiError as exc:
                if exc.status == 404:
                    return None  # nothing an earlier attempt left
                return str(exc)
            except _Transient as exc:
                log.warning("deleting %s: %s; trying again", release.path, exc)
                if stop.wait(1.0) or self._node_gone(release):
                    return None
        deadline = time.monotonic() + release.timeout
        while not stop.is_set():
            try:
                found = json.loads(self._call(release.pod_object, "GET", release.path, None))
                if uid and (found.get("metadata") or {}).get("uid") != uid:
                    return None  # gone; another of that name since
            except _ApiError as exc:
                if exc.status == 404:
                    return None
                return str(exc)
            except _Transient as exc:
                log.info("reading %s: %s; reading again", release.path, exc)
            if time.monotonic() >= deadline:  # kubectl's output: the deletion's line, then its error
                group = release.path.split("/")[2]
                return (f'{release.resource.removesuffix("s")}.{group} "{release.name}" deleted\n'
                        f"error: timed out waiting for the condition on {release.resource}/{release.name}")
            if stop.wait(1.0) or self._node_gone(release):
                return None
        return None

    def _run(self, action: ResourceAction, stop: threading.Event) -> None:
        try:
            verdict = self._play(action, stop)
        except Exception as exc:  # a thread's death would leave the pod Running forever
            log.exception("resource pod %s/%s", action.namespace, action.pod)
            verdict = Verdict(False, f"sim executor: {exc}")
        if verdict is not None and not stop.is_set():
            self._annotate(action.namespace, action.pod, verdict_annotations(verdict))
            log.info("resource pod %s/%s: %s", action.namespace, action.pod, verdict.message or "succeeded")

    def _play(self, action: ResourceAction, stop: threading.Event) -> Verdict | None:
        if action.action != "create" or action.flags:
            return Verdict(False, f"sim executor: resource action {' '.join([action.action, *action.flags])!r} is "
                                  "not simulated (only create)")
        if isinstance(action.conditions, ConditionError):
            return Verdict(False, str(action.conditions))
        path = action.created
        while path is None:
            if stop.is_set() or self._node_gone(action):
                return None
            try:
                path = self._create(action)
            except _Transient as exc:
                log.warning("creating the object of %s/%s: %s; trying again", action.namespace, action.pod, exc)
                stop.wait(1.0)
            except _Refused as exc:
                return Verdict(False, str(exc))
        self._annotate(action.namespace, action.pod, {RESOURCE_ANNOTATION: path})
        if not action.conditions.waits:
            return Verdict(True, "")
        while not stop.is_set() and not self._node_gone(action):
            try:
                verdict = action.conditions.judge(self._read(action, path))
            except _Transient as exc:
                log.info("reading %s: %s; reading again", path, exc)
                verdict = None
            except _Refused as exc:
                return Verdict(False, str(exc))
            if verdict is not None:
                return verdict
            stop.wait(action.interval)
        return None

    def _create(self, action: ResourceAction) -> str:
        """kubectl create -f: the created object's API path."""
        try:
            created = json.loads(self._call(action.pod_object, "POST", action.collection, action.manifest))
        except _ApiError as exc:  # kubectl create names the file it read (AddSourceToErr); Argo passes it on
            raise _Refused(f'no more retries Error from server ({exc.reason}): error when creating '
                           f'"/tmp/manifest.yaml": {exc.message}') from None
        return f"{action.collection}/{created['metadata']['name']}"

    def _read(self, action: ResourceAction, path: str) -> str:
        try:
            return self._call(action.pod_object, "GET", path, None)
        except _ApiError as exc:
            if exc.status == 404:
                raise _Refused("The resource has been deleted while its status was still being checked. "
                               f"Will not be retried: {exc.message}") from None
            raise _Refused(f'no more retries Error from server ({exc.reason}): error when reading '
                           f'"/tmp/manifest.yaml": {exc.message}') from None

    def _node_gone(self, work: ResourceAction | Release) -> bool:
        """Whether the node the pod ran on is gone, and kubectl or argoexec with it (the simulation's own word, as
        the cluster's admin)."""
        from kubernetes.client import CoreV1Api
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        node = (work.pod_object.get("spec") or {}).get("nodeName")
        if not node:
            return False
        try:
            CoreV1Api(self.api).read_node(node, _request_timeout=30)
        except ApiException as exc:
            if exc.status != 404:
                return False
            log.info("pod %s/%s: node %s is gone, and its executor with it", work.namespace, work.pod, node)
            return True
        except (HTTPError, OSError):
            return False
        return False

    def _call(self, pod: dict[str, Any], method: str, path: str, body: dict[str, Any] | None) -> str:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            api = self.executors.for_pod(pod)  # as Argo's executor in that pod: its account's rights
            response = api.call_api(path, method, body=body, auth_settings=["BearerToken"],
                                         header_params={"Accept": "application/json",
                                                        "Content-Type": "application/json"},
                                         _preload_content=False, _request_timeout=30)
        except ApiException as exc:
            if exc.status in (429,) or (exc.status or 0) >= 500:
                raise _Transient(f"{exc.status} {exc.reason}") from None
            status = _status(exc.body)
            raise _ApiError(exc.status or 0, str(status.get("reason") or exc.reason),
                            str(status.get("message") or exc.reason)) from None
        except (HTTPError, OSError) as exc:
            raise _Transient(str(exc)) from None
        data = response[0].data if isinstance(response, tuple) else response.data
        return str(data.decode() if isinstance(data, bytes) else data)

    def _annotate(self, namespace: str, pod: str, annotations: dict[str, str]) -> None:
        from kubernetes.client import CoreV1Api
        from kubernetes.client.exceptions import ApiException

        try:
            CoreV1Api(self.api).patch_namespaced_pod(pod, namespace, {"metadata": {"annotations": annotations}})
        except ApiException as exc:
            if exc.status != 404:  # the pod is gone (the workflow stopped): nothing to end
                raise


def _status(body: Any) -> dict[str, Any]:
    """The Status object the API server answered a refused call with ({} if none)."""
    try:
        status = json.loads(body)
    except (TypeError, ValueError):
        return {}
    return status if isinstance(status, dict) else {}


def serve(kubeconfig: Path) -> None:
    """Watch workflow pods in every namespace: report the outputs of those that Succeeded, once each, play
    the resource action of Running resource pods and the checkpointing programs; and the Nodes, whose deletion
    stops the programs on them. The watch is wf's own (wf.controller.stream: resumes, relists
    on 410, backs off while the API server is away) and reads pods as JSON: at a day's scale, 8,000 pods
    changing several times each, the client's model objects cost this process a core and a gigabyte."""
    from kubernetes.client import CoreV1Api, CustomObjectsApi
    from kubernetes.client.exceptions import ApiException

    from wf.controller.client import Target, connect, pod_log
    from wf.controller.stream import KubeTransport, watch_forever

    # The pod stream, the checkpoint and report lanes and the resource pods' threads call at once.
    kube = connect(Target(kubeconfig=str(kubeconfig)), connections=2 * CHECKPOINT_LANES + REPORT_LANES)
    api = kube.api_client
    core = CoreV1Api(api)
    executors = ExecutorClients(kube)
    resources = ResourceExecutor(api, executors)
    programs = CheckpointPlayer(api)
    lost = LostPods()
    gangs = Gangs()
    objects = CustomObjectsApi(api)
    # Known before the first pod is seen: a pod of a real node must never get a simulated report.
    real = RealNodes({n.metadata.name for n in core.list_node(label_selector=REAL_NODE_LABEL).items})
    reported: set[str] = set()

    def archive_log(pod: dict[str, Any]) -> dict[str, Any] | None:
        """Keep the ended pod's log in the twin's store, as the wait container uploads it; its artifact, or None
        when its template archives no logs or the log cannot be read (the pod went meanwhile)."""
        if (artifact := archived_log_location(pod)) is None:
            return None
        meta = pod["metadata"]
        try:
            text = pod_log(core, meta["name"], meta["namespace"], container=ARGO_MAIN_CONTAINER)
            core.create_namespaced_config_map(meta["namespace"], twin_object(meta["namespace"], artifact["s3"]["key"],
                                                                             text))
        except ApiException as exc:
            if exc.status != 409:  # 409: kept before (this process restarted)
                log.warning("archiving the log of %s/%s: %s %s", meta["namespace"], meta["name"], exc.status,
                            exc.reason)
                return None  # reported without it: Argo's wait container reports no log it could not upload
        return artifact

    def report(pod: dict[str, Any]) -> None:
        uid = (pod.get("metadata") or {}).get("uid", "")
        if uid in reported:
            return
        succeeded = (pod.get("status") or {}).get("phase") == "Succeeded"
        if not ended(pod) or (not succeeded and archived_log_location(pod) is None):
            return  # nothing to report yet (an ended pod without outputs or logs is dropped just below)
        if (result := task_result(pod, archive_log(pod))) is None:
            return
        meta = result["metadata"]
        custom = CustomObjectsApi(executors.for_pod(pod))  # Argo's wait container reports as the executor account
        try:
            custom.create_namespaced_custom_object(WORKFLOW_TASK_RESULT.group, WORKFLOW_TASK_RESULT.version,
                                                   meta["namespace"], WORKFLOW_TASK_RESULT.plural, result)
        except ApiException as exc:
            if exc.status != 409:
                raise
            custom.patch_namespaced_custom_object(WORKFLOW_TASK_RESULT.group, WORKFLOW_TASK_RESULT.version,
                                                  meta["namespace"], WORKFLOW_TASK_RESULT.plural, meta["name"], result)
        reported.add(uid)
        log.info("reported outputs of %s/%s (node %s)", meta["namespace"], pod["metadata"]["name"], meta["name"])

    def let_go(pod: dict[str, Any]) -> None:
        """A running pod being deleted, its log kept (or not to be had): the simulated kubelet may remove it now,
        as a real one does once the wait container has uploaded the log and ended."""
        meta = pod["metadata"]
        if not meta.get("deletionTimestamp") or (pod.get("status") or {}).get("phase") != "Running" \
                or SIM_LOGS_KEPT in (meta.get("annotations") or {}) or archived_log_location(pod) is None:
            return
        try:
            core.patch_namespaced_pod(meta["name"], meta["namespace"],
                                      {"metadata": {"annotations": {SIM_LOGS_KEPT: "true"}}})
        except ApiException as exc:
            if exc.status != 404:  # 404: gone already (its grace period ended)
                raise

    def report_event(event: PodEvent) -> None:
        pod, deleted = event
        if deleted:
            reported.discard(pod["metadata"].get("uid", ""))
            return
        try:
            report(pod)
            let_go(pod)
        except Exception:  # the API server's trouble: Argo waits for the report, so make it again soon
            log.exception("reporting the outputs of %s; trying again", pod["metadata"].get("name"))
            threading.Timer(RETRY_SECONDS, lane_of(reports, pod).put, args=(event,)).start()

    reports: Lanes[PodEvent] = Lanes(REPORT_LANES, report_event, "outputs reporter")

    def handle(kind: str, pod: dict[str, Any]) -> None:
        if real.runs(pod):
            return
        deleted = kind == "DELETED"
        resources.observe(pod, deleted)
        programs.observe(pod, deleted)
        lost.observe(pod, deleted)
        lane_of(reports, pod).put((pod, deleted))

    def mpirun_lost(losses: list[LostWorker]) -> None:
        """Each loss's mpirun fails in a thread of its own, which waits for the node recorder's mark."""
        for loss in losses:
            threading.Thread(target=mpirun_fails, args=(core, objects, loss), name=f"mpirun {loss.launcher}",
                             daemon=True).start()

    def replica(kind: str, pod: dict[str, Any]) -> None:
        """An MPIJob's launcher or worker: a launcher may play a checkpointing program; a worker that stops while its
        launcher runs fails that launcher's mpirun."""
        deleted = kind == "DELETED"
        programs.observe(pod, deleted)
        lost.observe(pod, deleted)
        mpirun_lost(gangs.observe(pod, deleted))

    def node_event(kind: str, node: dict[str, Any]) -> None:
        real.observe(kind, node)
        name = node["metadata"]["name"]
        if kind == "DELETED":
            programs.node_gone(name, time.time())
            lost.node_gone(name)
            mpirun_lost(gangs.node_gone(name))
            return
        for namespace, pod in lost.node_back(name):
            try:
                core.patch_namespaced_pod(pod, namespace, {"metadata": {"annotations": {SIM_LOST: "true"}}})
                log.info("pod %s/%s: its node %s is a new machine now, which never ran it", namespace, pod, name)
            except ApiException as exc:
                if exc.status != 404:  # 404: gone meanwhile, nothing left to end
                    log.warning("marking pod %s/%s lost: %s %s", namespace, pod, exc.status, exc.reason)

    threading.Thread(target=watch_forever, args=("nodes", lambda: KubeTransport(core.list_node), node_event, log),
                     name="nodes", daemon=True).start()
    # One watch for every MPIJob replica, so a launcher's end is read before the operator's cleanup of its workers.
    threading.Thread(target=watch_forever, args=("MPIJob replicas", lambda: KubeTransport(
        core.list_pod_for_all_namespaces, label_selector=JOB_ROLE_LABEL), replica, log), name="replicas",
                     daemon=True).start()
    watch_forever("pods", lambda: KubeTransport(core.list_pod_for_all_namespaces,
                                                label_selector=ARGO_WORKFLOW_LABEL), handle, log)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m wf.cluster.executor", description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", type=Path, required=True)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    serve(args.kubeconfig)


if __name__ == "__main__":
    main()
