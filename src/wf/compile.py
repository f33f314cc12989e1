"""JobSpec + Catalog -> an Argo manifest (plain dict): Workflow, WorkflowTemplate or CronWorkflow.

Built as dicts in one pass over the steps (linear; hera's context-manager builder is quadratic), valid for
Argo v4.0 and v3.7 alike.
"""

from __future__ import annotations

import json
import uuid
from functools import partial
from typing import Any, Literal

from wf.catalog import Catalog
from wf.errors import InputError, Problem
from wf.labels import CAPACITY_LABEL, CLASS_LABEL, JOB_LABEL, STEP_LABEL, SUBMISSION_LABEL
from wf.loader import format_path
from wf.mpijob import mpijob_template, step_problems
from wf.placement import APPLICATION_EXPRESSION, INTERRUPTION_EXPRESSION, Placement, place_step
from wf.spec import SecretRef, Step, TrainingJob, Volume
from wf.units import parse_duration

Kind = Literal["Workflow", "WorkflowTemplate", "CronWorkflow"]
API_VERSION = "argoproj.io/v1alpha1"
# Entry and wrapper templates carry an upper-case letter, which step names (DNS-1123 labels) never do, so they
# can't collide with a step's template.
ENTRYPOINT = "Main"
ATTEMPTS_SUFFIX = "-Attempts"
# Platform defaults: delete succeeded pods after a grace period to keep `wf logs` useful, keep finished
# workflows for a day (failed ones a week) so `wf get` can explain them.
POD_GC = {"strategy": "OnPodSuccess", "deleteDelayDuration": "10m"}
TTL = {"secondsAfterSuccess": 86400, "secondsAfterFailure": 7 * 86400}
HOST_IPC_PATCH = json.dumps({"hostIPC": True})
# `cap` bounds each wait. Not `maxDuration`: Argo counts that from the FIRST attempt's start, retries nothing
# once it has passed and hands the retried pod that deadline (ARGO_DEADLINE), so a long step interrupted
# after 10 minutes would not be retried, and a retry of one interrupted sooner would be killed at minute 10.
# Argo waits out a retry's backoff BEFORE it evaluates the expression, so every application failure passes
# through the interruption backoff first: keep it short (a replacement pod waits Pending for capacity anyway).
INTERRUPTION_BACKOFF = {"duration": "5s", "factor": 2, "cap": "2m"}
APPLICATION_BACKOFF = {"duration": "10s", "factor": 2, "cap": "5m"}


def compile_job(
    job: TrainingJob, catalog: Catalog, *, kind: Kind | None = None, submission: str | None = None
) -> dict[str, Any]:
    """The Argo manifest for `job`; InputError (with lines when the job came from a file) if it can't place."""
    placements, problems = [], []
    for i in range(len(job.spec.steps)):
        placement, found = place_step(job, i, catalog)
        placements.append(placement)
        problems += found + step_problems(job, i, catalog, placement)
    if problems:
        raise InputError([_problem(job, path, message) for path, message in problems])
    kind = kind or ("CronWorkflow" if job.spec.schedule else "Workflow")
    if kind == "CronWorkflow" and not job.spec.schedule:
        raise InputError([_problem(job, ("spec", "schedule"), "a CronWorkflow needs a schedule (cron syntax)")])
    spec = _workflow_spec(job, placements, catalog)  # type: ignore[arg-type]
    labels = {**job.metadata.labels, JOB_LABEL: job.name}
    metadata: dict[str, Any] = {}
    if kind == "Workflow":
        metadata["generateName"] = f"{job.name}-"
        labels[SUBMISSION_LABEL] = submission or str(uuid.uuid4())
    else:
        metadata["name"] = job.name
    if job.metadata.namespace:
        metadata["namespace"] = job.metadata.namespace
    metadata["labels"] = labels
    if kind == "CronWorkflow":
        body = {
            "schedules": [job.spec.schedule],
            "concurrencyPolicy": "Forbid",
            "workflowMetadata": {"labels": {**job.metadata.labels, JOB_LABEL: job.name}},
            "workflowSpec": spec,
        }
    else:
        body = spec
    return {"apiVersion": API_VERSION, "kind": kind, "metadata": metadata, "spec": body}


def _problem(job: TrainingJob, path: tuple, message: str) -> Problem:
    doc = job.document
    return doc.problem(path, message) if doc else Problem(job.source, None, format_path(path), message)


def _workflow_spec(job: TrainingJob, placements: list[Placement], catalog: Catalog) -> dict[str, Any]:
    templates: list[dict[str, Any]] = [{"name": ENTRYPOINT, "dag": {"tasks": []}}]
    tasks = templates[0]["dag"]["tasks"]
    for i, (step, placement) in enumerate(zip(job.spec.steps, placements)):
        task: dict[str, Any] = {"name": step.name, "template": step.name}
        if step.needs:
            task["dependencies"] = list(step.needs)
        retries = job.spec.retries if step.retries is None else step.retries
        if retries:
            task["template"] = step.name + ATTEMPTS_SUFFIX
            templates.append(_attempts(step, retries))
        tasks.append(task)
        if step.nodes is None:
            templates.append(_pod_template(job, step, placement))
        else:
            templates.append(mpijob_template(job, i, catalog, partial(_pod_template, job, step),
                                             [_volume(v) for v in job.spec.volumes]))
    spec: dict[str, Any] = {"entrypoint": ENTRYPOINT, "templates": templates, "podGC": dict(POD_GC),
                            "ttlStrategy": dict(TTL)}
    if job.spec.parameters:
        spec["arguments"] = {"parameters": [{"name": k, "value": v} for k, v in job.spec.parameters.items()]}
    if job.spec.timeout is not None:
        spec["activeDeadlineSeconds"] = parse_duration(job.spec.timeout)
    if job.spec.service_account:
        spec["serviceAccountName"] = job.spec.service_account
    if job.spec.volumes:
        spec["volumes"] = [_volume(v) for v in job.spec.volumes]
    return spec


def _attempts(step: Step, retries: int) -> dict[str, Any]:
    """Application retries wrap the pod's template, so interruptions (retried inside) never spend them."""
    return {
        "name": step.name + ATTEMPTS_SUFFIX,
        "retryStrategy": {"limit": retries, "expression": APPLICATION_EXPRESSION, "backoff": dict(APPLICATION_BACKOFF)},
        "dag": {"tasks": [{"name": step.name, "template": step.name}]},
    }


def _pod_template(job: TrainingJob, step: Step, placement: Placement) -> dict[str, Any]:
    labels = {**job.metadata.labels, **step.labels, JOB_LABEL: job.name, STEP_LABEL: step.name,
              CLASS_LABEL: placement.compute_class, CAPACITY_LABEL: placement.capacity}
    metadata: dict[str, Any] = {"labels": labels}
    if step.annotations:
        metadata["annotations"] = dict(step.annotations)
    container: dict[str, Any] = {
        "image": step.image or job.spec.image,
        "command": list(step.command),
        "resources": {"requests": placement.requests, "limits": placement.limits},
    }
    env = _env({**job.spec.env, **step.env})
    if env:
        container["env"] = env
    if step.working_dir:
        container["workingDir"] = step.working_dir
    if job.spec.volumes:
        container["volumeMounts"] = [
            {"name": v.name, "mountPath": v.mount_path, **({"readOnly": True} if v.read_only else {})}
            for v in job.spec.volumes
        ]
    if placement.capabilities:
        container["securityContext"] = {"capabilities": {"add": list(placement.capabilities)}}
    template: dict[str, Any] = {
        "name": step.name,
        "metadata": metadata,
        "nodeSelector": placement.node_selector,
        "retryStrategy": {
            "limit": placement.interruption_retries,
            "expression": INTERRUPTION_EXPRESSION,
            "backoff": dict(INTERRUPTION_BACKOFF),
        },
        "container": container,
    }
    if placement.tolerations:
        template["tolerations"] = placement.tolerations
    if step.timeout is not None:
        # Template `timeout` counts Pending time too: a step that can't schedule fails instead of waiting forever.
        template["timeout"] = f"{parse_duration(step.timeout)}s"
    if placement.host_ipc:
        template["podSpecPatch"] = HOST_IPC_PATCH
    return template


def _volume(volume: Volume) -> dict[str, Any]:
    if volume.claim is not None:
        claim: dict[str, Any] = {"claimName": volume.claim}
        if volume.read_only:
            claim["readOnly"] = True
        return {"name": volume.name, "persistentVolumeClaim": claim}
    empty: dict[str, Any] = {}
    if volume.empty_dir and volume.empty_dir.medium:
        empty["medium"] = volume.empty_dir.medium
    if volume.empty_dir and volume.empty_dir.size_limit is not None:
        empty["sizeLimit"] = str(volume.empty_dir.size_limit)
    return {"name": volume.name, "emptyDir": empty}


def _env(env: dict[str, str | SecretRef]) -> list[dict[str, Any]]:
    return [
        {"name": k, "valueFrom": {"secretKeyRef": {"name": v.secret, "key": v.key}}} if isinstance(v, SecretRef)
        else {"name": k, "value": v}
        for k, v in env.items()
    ]
