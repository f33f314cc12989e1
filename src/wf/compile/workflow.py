"""JobSpec + Catalog -> an Argo manifest (plain dict): Workflow, WorkflowTemplate or CronWorkflow.

Built as dicts in one pass over the steps (linear; hera's context-manager builder is quadratic), valid for
Argo v4.0 and v3.7 alike.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from typing import Any, Literal

from wf.argo.defaults import self_contained
from wf.compile import artifacts, cache, checkpoints
from wf.compile.hardening import CONTAINER_HARDENING, added_capabilities, pod_security
from wf.compile.interruptions import (
    APPLICATION_ANNOTATION,
    INTERRUPTION_ANNOTATION,
    ON_DEMAND,
    RETRY_EXPRESSIONS,
    SPOT_FALLBACK_ANNOTATION,
    STOP_HOOK,
    capacity_expression,
    retry_expression,
)
from wf.compile.kinds import kind_of
from wf.compile.placement import Placement
from wf.compile.queueing import QueueAssignment, assign_queue
from wf.core.constants import (
    ARGO_KINDS,
    ARGO_MAIN_CONTAINER,
    CAPACITY_LABEL,
    CLASS_LABEL,
    EKS_SKIP_CONTAINERS_ANNOTATION,
    EXECUTOR_ACCOUNT,
    JOB_LABEL,
    STEP_LABEL,
)
from wf.core.errors import InputError, Problem
from wf.core.units import parse_duration
from wf.jobspec import references
from wf.jobspec.job import TrainingJob
from wf.jobspec.references import Reference
from wf.jobspec.steps import Count, SecretRef, Step, Volume
from wf.model.catalog import Catalog

Kind = Literal["Workflow", "WorkflowTemplate", "CronWorkflow"]
# Entry and wrapper templates carry an upper-case letter, which step names (DNS-1123 labels) never do, so they
# can't collide with a step's template.
ENTRYPOINT = "Main"
EXIT_HANDLER = "Exit"
ATTEMPTS_SUFFIX = "-Attempts"
ITEMS_SUFFIX = "-Items"
FAN_OUT_ITEMS = "items"  # the Items wrapper's input holding a fan-out's JSON list
# Platform defaults: delete succeeded pods after a grace period to keep `wf logs` useful, keep finished
# workflows for a day (failed ones a week) so `wf get` can explain them.
POD_GC = {"strategy": "OnPodSuccess", "deleteDelayDuration": "10m"}
TTL = {"secondsAfterSuccess": 86400, "secondsAfterFailure": 7 * 86400}
# `cap` bounds each wait. Not `maxDuration`: Argo counts that from the FIRST attempt's start, retries nothing
# once it has passed and hands the retried pod that deadline (ARGO_DEADLINE), so a long step interrupted
# after 10 minutes would not be retried, and a retry of one interrupted sooner would be killed at minute 10.
# Argo waits out a retry's backoff BEFORE it evaluates the expression, so every application failure passes
# through the interruption backoff first: keep it short (a replacement pod waits Pending for capacity anyway).
INTERRUPTION_BACKOFF = {"duration": "5s", "factor": 2, "cap": "2m"}
APPLICATION_BACKOFF = {"duration": "10s", "factor": 2, "cap": "5m"}


def compile_job(
    job: TrainingJob, catalog: Catalog, *, kind: Kind | None = None, namespace: str | None = None,
) -> dict[str, Any]:
    """The Argo manifest for `job`; InputError (with lines when the job came from a file) if it can't place.
    `namespace`: where it will be submitted when the job names none (its team's queue depends on it).

    The same inputs give the same manifest, byte for byte (GitOps diffs and `kubectl diff` settle): what is
    unique to one submission, its `wf.dev/submission` label, is added when it is submitted (wf.controller.submit)."""
    placements: dict[str, Placement] = {}
    problems: list[Problem] = []
    producers = {s.name: s for _, s in job.spec.step_entries()}
    for path, step in job.spec.step_entries():
        problems += cache.problems(job, path, step, references.step_inputs(step), producers)
        placement, found = kind_of(step).place(job, int(path[2]), catalog, str(path[1]))
        if placement is not None:
            placements[step.name] = placement
            problems += checkpoints.problems(job, path, step, placement, catalog)
        problems += found
        if step.outputs and step.outputs.artifacts and catalog.artifacts is None:
            problems.append(Problem.at((*path, "outputs", "artifacts"),
                                       "the catalog names no artifact store (its `artifacts:`): "
                                       "artifacts have nowhere to go"))
    queue, found = assign_queue(catalog, job.spec.team, job.metadata.namespace or namespace, job.spec.priority)
    problems += found
    account = job.spec.service_account
    target = queue.namespace if queue else job.metadata.namespace or namespace
    if account is not None and not catalog.allows_step_account(account, target):
        problems.append(Problem.at(("spec", "serviceAccount"),
                                   f"steps get the API token of the account they run as: the catalog's "
                                   f"stepServiceAccounts does not allow {account!r} in namespace {target or 'any'}"))
    if problems:
        raise InputError([_locate(job, p) for p in problems])
    kind = kind or ("CronWorkflow" if job.spec.schedule else "Workflow")
    if kind == "CronWorkflow" and not job.spec.schedule:
        raise InputError([_locate(job, Problem.at(("spec", "schedule"),
                                                  "a CronWorkflow needs a schedule (cron syntax)"))])
    namespace = queue.namespace if queue else job.metadata.namespace or namespace
    spec = _workflow_spec(job, placements, catalog, queue, namespace)
    if kind == "WorkflowTemplate":
        spec = self_contained(spec)  # other workflows may run its templates one by one (templateRef)
    labels = {**job.metadata.labels, JOB_LABEL: job.name}
    metadata: dict[str, Any] = {}
    if kind == "Workflow":
        metadata["generateName"] = f"{job.name}-"
    else:
        metadata["name"] = job.name
    if namespace:
        metadata["namespace"] = namespace
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
    return {"apiVersion": ARGO_KINDS[kind].api_version, "kind": kind, "metadata": metadata, "spec": body}


def _locate(job: TrainingJob, problem: Problem) -> Problem:
    doc = job.document
    return doc.locate(problem) if doc else problem.in_file(job.source)


def _workflow_spec(job: TrainingJob, placements: dict[str, Placement], catalog: Catalog,
                   queue: QueueAssignment | None, namespace: str | None) -> dict[str, Any]:
    templates: list[dict[str, Any]] = [{"name": ENTRYPOINT, "dag": {"tasks": []}}]
    tasks = templates[0]["dag"]["tasks"]
    exit_tasks: list[dict[str, Any]] = []
    if job.spec.on_exit:
        templates.append({"name": EXIT_HANDLER, "dag": {"tasks": exit_tasks}})
    producers = {s.name: s for _, s in job.spec.step_entries()}
    volumes = _volumes(job, catalog)  # once: every multi-node step's replicas mount them all
    for dag, steps in ((tasks, job.spec.steps), (exit_tasks, job.spec.on_exit)):
        for step in steps:
            dag.append(_step(job, catalog, step, placements[step.name], producers, templates, volumes, queue))
    spec: dict[str, Any] = {
        "entrypoint": ENTRYPOINT,
        # What every template shares, written once: Argo merges it into each template (strategic merge patch,
        # the template's own fields winning; workflow/controller/operator.go, mergedTemplateDefaultsInto).
        "templateDefaults": {
            # Argo's schema requires a container's image: the job's, which each step's container names anyway.
            # The stop hook marks an attempt the kubelet stopped from outside (wf.compile.interruptions).
            "container": {"image": _default_image(job), "securityContext": copy.deepcopy(CONTAINER_HARDENING),
                          "lifecycle": copy.deepcopy(STOP_HOOK)},
        },
        "workflowMetadata": {"annotations": dict(RETRY_EXPRESSIONS)},
        "templates": templates, "podGC": dict(POD_GC), "ttlStrategy": dict(TTL)}
    if job.spec.on_exit:
        spec["onExit"] = EXIT_HANDLER
    if job.spec.parallelism:
        spec["parallelism"] = job.spec.parallelism
    if job.spec.parameters:
        spec["arguments"] = {"parameters": [{"name": k, "value": v} for k, v in job.spec.parameters.items()]}
    if job.spec.timeout is not None:
        spec["activeDeadlineSeconds"] = parse_duration(job.spec.timeout)
    service_account = job.spec.service_account
    store_account = catalog.artifacts.service_accounts.get(namespace or "") if catalog.artifacts else None
    hands_on = any(s.outputs and s.outputs.artifacts for _, s in job.spec.step_entries())
    if catalog.artifacts and (hands_on or store_account):
        # Argo's init and wait containers move artifacts through the repository and the wait container archives
        # every pod's log there (`archiveLogs`), with the namespace's role; the program gets that role only when
        # it writes checkpoints to the bucket itself (`_program_credentials`).
        spec["artifactRepositoryRef"] = dict(artifacts.REPOSITORY_REF)
    service_account = service_account or store_account
    if service_account:
        spec["serviceAccountName"] = service_account
    # Argo's containers get the executor's token; the step's own container gets none unless the job named an
    # account (which the catalog allows, see _account_problems): then it gets that account's.
    spec["executor"] = {"serviceAccountName": EXECUTOR_ACCOUNT}
    if job.spec.service_account is None:
        spec["automountServiceAccountToken"] = False
    spec["securityContext"] = pod_security()
    if volumes:
        spec["volumes"] = volumes
    return spec


def _default_image(job: TrainingJob) -> str:
    """The job's image, else its first step's (a job without one names an image on every step)."""
    return job.spec.image or next(s.image for _, s in job.spec.step_entries() if s.image)


def _volumes(job: TrainingJob, catalog: Catalog) -> list[dict[str, Any]]:
    """The pod volumes of the job's steps: the job's own, then the catalog's that steps keep checkpoints on."""
    return [_volume(v) for v in job.spec.volumes] + [
        {"name": name, "persistentVolumeClaim": {"claimName": v.claim}}
        for name, v in checkpoints.volumes(job, catalog).items()]


def _is_artifact(ref: Reference, producers: dict[str, Step]) -> bool:
    return ref.kind == "output" and ref.name in producers[ref.step].declared.artifacts


def _arguments(refs: list[Reference], producers: dict[str, Step], source: Callable[[Reference, bool], str]
               ) -> dict[str, Any]:
    """Arguments handing `refs` to a template; `source(ref, is_artifact)` says where each value comes from."""
    if not refs:
        return {}
    parameters = [{"name": r.input_name, "value": source(r, False)} for r in refs if not _is_artifact(r, producers)]
    artifact_args = [{"name": r.input_name, "from": source(r, True)} for r in refs if _is_artifact(r, producers)]
    out: dict[str, Any] = {}
    if parameters:
        out["parameters"] = parameters
    if artifact_args:
        out["artifacts"] = artifact_args
    return out


def _from_dag(ref: Reference, artifact: bool) -> str:
    """A value as the calling DAG task sees it."""
    if ref.kind == "item":
        return _braced(f"item.{ref.name}" if ref.name else "item")
    return _braced(f"tasks.{ref.step}.outputs.{'artifacts' if artifact else 'parameters'}.{ref.name}")


def _from_inputs(ref: Reference, artifact: bool) -> str:
    """A value a wrapper template received and passes on."""
    return _braced(f"inputs.{'artifacts' if artifact else 'parameters'}.{ref.input_name}")


def _declared_inputs(refs: list[Reference], producers: dict[str, Step], with_paths: bool) -> dict[str, Any]:
    if not refs:
        return {}
    out = _arguments(refs, producers, lambda r, a: "")
    for parameter in out.get("parameters", []):
        del parameter["value"]
    for artifact in out.get("artifacts", []):
        ref = next(r for r in refs if r.input_name == artifact["name"])
        del artifact["from"]
        if with_paths:
            artifact["path"] = ref.artifact_path
    return out


def _step(job: TrainingJob, catalog: Catalog, step: Step, placement: Placement, producers: dict[str, Step],
          templates: list[dict[str, Any]], volumes: list[dict[str, Any]], queue: QueueAssignment | None
          ) -> dict[str, Any]:
    """The DAG task running `step`, appending the templates behind it: its kind's template (wf.compile.kinds: the
    pod, or the resource template creating a multi-node step's MPIJob; interruptions retried inside), the
    application-retry wrapper, and for a capped fan-out the wrapper that holds the loop and its cap."""
    refs = references.step_inputs(step)
    if (item := checkpoints.item_reference(job, step)) and item.input_name not in {r.input_name for r in refs}:
        refs.append(item)
    checkpointed = checkpoints.checkpoint_of(job, step) is not None
    template = step.name
    wrappers: list[dict[str, Any]] = []
    retries = job.spec.retries if step.retries is None else step.retries
    if retries:
        template = step.name + ATTEMPTS_SUFFIX
        wrappers.append(_wrapper(template, step, refs, producers, {
            "retryStrategy": {"limit": retries, "expression": retry_expression(APPLICATION_ANNOTATION),
                              "backoff": dict(APPLICATION_BACKOFF)}}, checkpointed))
    loop = _loop(step)
    task: dict[str, Any] = {"name": step.name, "template": template}
    if loop and step.parallelism:
        # Argo caps concurrency per template, so the items run as the children of a template of their own.
        outer_refs = [r for r in refs if r.kind != "item"]
        inner: dict[str, Any] = {"name": step.name, "template": template, **loop}
        if "withParam" in loop:
            inner["withParam"] = _braced(f"inputs.parameters.{FAN_OUT_ITEMS}")
        inner_args = _arguments(refs, producers, lambda r, a: _from_dag(r, a) if r.kind == "item" else
                                _from_inputs(r, a))
        if inner_args:
            inner["arguments"] = inner_args
        declared = _declared_inputs(outer_refs, producers, with_paths=False)
        arguments = _arguments(outer_refs, producers, _from_dag)
        if "withParam" in loop:
            declared.setdefault("parameters", []).append({"name": FAN_OUT_ITEMS})
            arguments.setdefault("parameters", []).append({"name": FAN_OUT_ITEMS, "value": loop["withParam"]})
        items: dict[str, Any] = {"name": step.name + ITEMS_SUFFIX, "parallelism": step.parallelism}
        if declared:
            items["inputs"] = declared
        items["dag"] = {"tasks": [inner]}
        wrappers.insert(0, items)
        task["template"] = items["name"]
    else:
        task.update(loop)
        arguments = _arguments(refs, producers, _from_dag)
    if arguments:
        task["arguments"] = arguments
    if step.needs:
        task["dependencies"] = list(step.needs)
    if step.when is not None:
        task["when"] = _rewrite(step.when, lambda r: _from_dag(r, False))
    rendered = kind_of(step).render(job, step, catalog, placement,
                                    lambda p: _pod_template(job, catalog, step, p, refs, producers, queue),
                                    volumes, queue)
    if (memoize := cache.memoize(job, step, refs, producers, catalog)) is not None:
        rendered["memoize"] = memoize
    templates += wrappers
    templates.append(rendered)
    return task


def _loop(step: Step) -> dict[str, Any]:
    items = step.for_each
    if items is None:
        return {}
    if isinstance(items, list):
        return {"withItems": list(items)}
    if isinstance(items, Count):
        return {"withSequence": {"count": str(items.count)}}
    return {"withParam": _rewrite(items.strip(), lambda r: _from_dag(r, False))}


def _wrapper(name: str, step: Step, refs: list[Reference], producers: dict[str, Step], extra: dict[str, Any],
             checkpointed: bool) -> dict[str, Any]:
    """A DAG template around the step's pod that passes its inputs down and its outputs up; to a checkpointed
    step's pod also the application retry it runs in (the pod's own `retries` count only its interruptions)."""
    inner: dict[str, Any] = {"name": step.name, "template": step.name}
    arguments = _arguments(refs, producers, _from_inputs)
    if checkpointed:
        arguments.setdefault("parameters", []).append(
            {"name": checkpoints.APPLICATION_ATTEMPT_INPUT, "value": "{{retries}}"})
    if arguments:
        inner["arguments"] = arguments
    template: dict[str, Any] = {"name": name, **extra}
    if declared := _declared_inputs(refs, producers, with_paths=False):
        template["inputs"] = declared
    outputs: dict[str, Any] = {}
    if step.declared.parameters:
        outputs["parameters"] = [
            {"name": o, "valueFrom": {"parameter": _braced(f"tasks.{step.name}.outputs.parameters.{o}")}}
            for o in step.declared.parameters]
    if step.declared.artifacts:
        outputs["artifacts"] = [{"name": o, "from": _braced(f"tasks.{step.name}.outputs.artifacts.{o}")}
                                for o in step.declared.artifacts]
    if outputs:
        template["outputs"] = outputs
    template["dag"] = {"tasks": [inner]}
    return template


def _braced(expression: str) -> str:
    return "{{" + expression + "}}"


def _rewrite(text: str, replacement: Callable[[Reference], str]) -> str:
    """`text` with each item and step-output reference replaced; workflow references stay for Argo."""
    if "{{" not in text:
        return text
    def sub(match: re.Match[str]) -> str:
        ref = references.parse(match.group(0))
        return replacement(ref) if ref is not None and ref.kind in ("item", "output") else match.group(0)
    return references.PATTERN.sub(sub, text)


def _pod_template(job: TrainingJob, catalog: Catalog, step: Step, placement: Placement, refs: list[Reference],
                  producers: dict[str, Step], queue: QueueAssignment | None) -> dict[str, Any]:
    def local(ref: Reference) -> str:
        return _local(ref, producers)

    capacity = placement.capacity
    pod_patch: dict[str, Any] = {}
    if placement.host_ipc:
        pod_patch["hostIPC"] = True
    annotations = dict(step.annotations) | _program_credentials(job, step, catalog)
    if placement.on_demand_after is not None:
        # Spot fallback: Argo evaluates `retries` in the template before it creates each attempt's pod, and
        # podSpecPatch overrides the nodeSelector's capacity; the pod's label follows so it tells where it ran.
        capacity = capacity_expression(placement.capacity, ON_DEMAND, placement.on_demand_after)
        pod_patch["nodeSelector"] = {CAPACITY_LABEL: capacity}
        annotations[SPOT_FALLBACK_ANNOTATION] = str(placement.on_demand_after)
    labels = {**job.metadata.labels, **step.labels, JOB_LABEL: job.name, STEP_LABEL: step.name,
              CLASS_LABEL: placement.compute_class, CAPACITY_LABEL: capacity}
    if queue:
        # Kueue's plain-pod integration gates each pod until the team's ClusterQueue admits it.
        labels |= queue.pod_labels()
    metadata: dict[str, Any] = {"labels": labels}
    if annotations:
        metadata["annotations"] = annotations
    container: dict[str, Any] = {
        "image": step.image or job.spec.image,
        "command": [_rewrite(arg, local) for arg in step.command] if refs else list(step.command),
        "resources": {"requests": placement.requests, "limits": placement.limits},
    }
    env = _env({**job.spec.env, **({k: _rewrite(v, local) if isinstance(v, str) else v for k, v in step.env.items()}
                                   if refs else step.env)}) + checkpoints.container_env(job, step, catalog)
    if env:
        container["env"] = env
    if env_from := checkpoints.container_env_from(job, step, catalog):
        container["envFrom"] = env_from
    if step.working_dir:
        container["workingDir"] = step.working_dir
    mounts = [{"name": v.name, "mountPath": v.mount_path, **({"readOnly": True} if v.read_only else {})}
              for v in job.spec.volumes] + checkpoints.volume_mounts(job, step, catalog)
    if mounts:
        container["volumeMounts"] = mounts
    if (grace := checkpoints.grace_seconds(job, step)) is not None:
        # The program saves on SIGTERM; the kubelet kills it this long after (lint keeps it inside Spot's notice).
        pod_patch["terminationGracePeriodSeconds"] = grace
    if added := added_capabilities(placement):
        container["securityContext"] = added  # merged by Argo with the templateDefaults' CONTAINER_HARDENING
    template: dict[str, Any] = {
        "name": step.name,
        "metadata": metadata,
        "nodeSelector": placement.node_selector,
        "retryStrategy": {
            "limit": placement.interruption_retries,
            "expression": retry_expression(INTERRUPTION_ANNOTATION),
            "backoff": dict(INTERRUPTION_BACKOFF),
        },
    }
    declared = _declared_inputs(refs, producers, with_paths=True)
    if checkpoints.checkpoint_of(job, step) is not None:
        # Set by the step's application-retry wrapper, when it has one.
        declared.setdefault("parameters", []).append({"name": checkpoints.APPLICATION_ATTEMPT_INPUT, "default": "0"})
    if declared:
        template["inputs"] = declared
    if outputs := _outputs(step):
        template["outputs"] = outputs
    template["container"] = container
    if placement.tolerations:
        template["tolerations"] = placement.tolerations
    if step.timeout is not None and queue:
        # Argo fails a Pending node once `timeout` has passed since the node started, and a pod gated by
        # Kueue is Pending: a long queue would time the step out. The pod's activeDeadlineSeconds counts
        # from the kubelet's start of the pod, after admission and scheduling, so queueing is not run time.
        template["activeDeadlineSeconds"] = parse_duration(step.timeout)
    elif step.timeout is not None:
        # Template `timeout` counts Pending time too: a step that can't schedule fails instead of waiting forever.
        template["timeout"] = f"{parse_duration(step.timeout)}s"
    if pod_patch:
        template["podSpecPatch"] = json.dumps(pod_patch, separators=(",", ":"))
    return _with_literal_braces(template, job, step)


def _program_credentials(job: TrainingJob, step: Step, catalog: Catalog) -> dict[str, str]:
    """The annotation keeping the pod's AWS identity (the namespace's artifact role, for Argo's containers) from
    the step's program, unless the program writes its checkpoints to the bucket or runs as an account the job
    named for it."""
    if catalog.artifacts is None or job.spec.service_account is not None or \
            checkpoints.writes_artifact_store(job, step):
        return {}
    return {EKS_SKIP_CONTAINERS_ANNOTATION: ARGO_MAIN_CONTAINER}


# Argo reads each `{{` as a tag in every pass it makes over a template (its workflow's variables, then its inputs,
# unresolved tags kept for the next), so a `{{` made by the first pass is read again by the second. A literal
# `{{` (written `{{='{{'}}`) therefore reaches the pod from the last pass: a brace as the template's input, its
# reference twice.
LBRACE_INPUT = "lbrace"  # no '_' and not 'item': never the name of a reference's input (Reference.input_name)


def _with_literal_braces(template: dict[str, Any], job: TrainingJob, step: Step) -> dict[str, Any]:
    texts = [text for _, text in references.sites(step)] + [v for v in job.spec.env.values() if isinstance(v, str)]
    if not any(references.LITERAL_BRACES in text for text in texts):
        return template
    braces = _braced(f"inputs.parameters.{LBRACE_INPUT}") * 2
    out: dict[str, Any] = json.loads(json.dumps(template).replace(references.LITERAL_BRACES, braces))
    out.setdefault("inputs", {}).setdefault("parameters", []).append({"name": LBRACE_INPUT, "default": "{"})
    return out


def _local(ref: Reference, producers: dict[str, Step]) -> str:
    """In the container: an input parameter's value, or the path an artifact was downloaded to."""
    return ref.artifact_path if _is_artifact(ref, producers) else _braced(f"inputs.parameters.{ref.input_name}")


def _outputs(step: Step) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if step.outputs is None:
        return out
    if step.declared.parameters:
        out["parameters"] = [{"name": n, "valueFrom": {"path": p}} for n, p in step.declared.parameters.items()]
    if step.declared.artifacts:
        out["artifacts"] = [{"name": n, "path": p} for n, p in step.declared.artifacts.items()]
    return out


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
