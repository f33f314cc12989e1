"""Checkpoints that survive a reclaim: where a step keeps them, what its program is told, and what the catalog's
stores can hold.

A checkpointed step's location is the same for every attempt of the step and its own per fan-out item: in the
catalog's artifact store, `s3://BUCKET/PREFIX/NAMESPACE/WORKFLOW/STEP[/PATH][/ITEM]`, or on a shared volume the
catalog names, `MOUNT/NAMESPACE/WORKFLOW/STEP[/PATH][/ITEM]`; ITEM is a hash of the fan-out item (an item may hold
any text, a path must not). The program reads it from the environment with the attempt's numbers, and on Spot gets
a SIGTERM grace period that fits inside the two-minute interruption notice to save before the node goes.
"""

from __future__ import annotations

from typing import Any, Final

from wf.compile.placement import Placement
from wf.core.constants import ARTIFACT_STORE_SECRET, RETRIED_ANNOTATION
from wf.core.errors import PathKey, Problem
from wf.core.units import parse_duration
from wf.jobspec.job import TrainingJob
from wf.jobspec.references import Reference
from wf.jobspec.steps import ARTIFACT_STORE, Checkpoint, Step
from wf.model.catalog import Catalog, CheckpointVolume

URI_ENV: Final = "WF_CHECKPOINT_URI"  # the artifact store's location, an s3:// URI
DIR_ENV: Final = "WF_CHECKPOINT_DIR"  # a shared volume's location, a directory
RESUME_ENV: Final = "WF_RESUME"  # "true" on every attempt after the step's first, and on every one after a `wf retry`
ATTEMPT_ENV: Final = "WF_ATTEMPT"  # the attempt's index among those its interruptions caused (Argo's `retries`)
APPLICATION_ATTEMPT_ENV: Final = "WF_APPLICATION_ATTEMPT"  # the application retry it belongs to
# The pod template's input carrying the application retry's index from its `-Attempts` wrapper (0 without one).
# Not a name a reference's input can take: those start with `item` or hold a '_'.
APPLICATION_ATTEMPT_INPUT: Final = "application-attempt"
ITEM: Final = Reference("{{item}}", "item")
# EC2's Spot interruption notice, less what the drain itself takes before the pod's SIGTERM (Karpenter's or the
# node termination handler's reaction to the notice, the eviction call): the longest grace period that still
# ends before the instance does.
SPOT_NOTICE_SECONDS: Final = 120
DRAIN_LATENCY_SECONDS: Final = 15
MAX_SPOT_GRACE_SECONDS: Final = SPOT_NOTICE_SECONDS - DRAIN_LATENCY_SECONDS
VOLUME_PREFIX: Final = "wf-checkpoints-"  # the pod volume of a catalog's checkpoint volume
# WF_RESUME's expression. `retries` (the attempt's index among its interruptions) and the application retry's index
# restart at 0 after a `wf retry`, whose Retry nodes are new, so the retry's mark on the workflow counts too. Argo
# re-reads the workflow's annotations each time it operates on it (setGlobalParameters), but an expression gets them
# as nested maps split at every dot of the key (`workflow.annotations['wf.dev/retried']` is never there), so it
# looks for the key in `workflow.annotations.json` (all of them as JSON, always set): `"KEY":`, quotes and colon,
# is a key, never inside a value (JSON escapes a value's quotes). "true" also for a step the retry runs for the
# first time: its location is empty, as after a first attempt that died before its first save.
RESUME_EXPRESSION: Final = (
    f"{{{{=asInt(retries) + asInt(inputs.parameters['{APPLICATION_ATTEMPT_INPUT}']) > 0"
    f" || workflow.annotations.json contains '\"{RETRIED_ANNOTATION}\":' ? 'true' : 'false'}}}}")


def checkpoint_of(job: TrainingJob, step: Step) -> Checkpoint | None:
    """The step's checkpoint: its own, else the job's."""
    return step.checkpoint if step.checkpoint is not None else job.spec.checkpoint


def problems(job: TrainingJob, path: tuple[PathKey, ...], step: Step, placement: Placement, catalog: Catalog
             ) -> list[Problem]:
    """What makes the checkpoint of the step at `path` impossible: a store the catalog lacks or the class can't
    reach, a grace period longer than the Spot notice."""
    checkpoint = checkpoint_of(job, step)
    if checkpoint is None:
        return []
    at = (*path, "checkpoint") if step.checkpoint is not None else ("spec", "checkpoint")
    out: list[Problem] = []
    store = catalog.artifacts
    if store is None:
        out.append(Problem.at((*at, "store"), "the catalog names no artifact store (its `artifacts:`): "
                                              "checkpoints have nowhere to go"))
    elif checkpoint.store != ARTIFACT_STORE:
        volumes = store.checkpoints.volumes
        volume = volumes.get(checkpoint.store)
        if volume is None:
            known = ", ".join([ARTIFACT_STORE, *volumes])
            out.append(Problem.at((*at, "store"), f"unknown checkpoint store {checkpoint.store!r}; the catalog "
                                                  f"has: {known}"))
        elif volume.compute_classes is not None and placement.compute_class not in volume.compute_classes:
            out.append(Problem.at((*at, "store"), f"volume {checkpoint.store!r} is not reachable from compute class "
                                                  f"{placement.compute_class!r}; it serves "
                                                  f"{', '.join(volume.compute_classes)}"))
    grace = parse_duration(checkpoint.grace_period)
    if placement.capacity == "spot" and grace > MAX_SPOT_GRACE_SECONDS:
        out.append(Problem.at((*at, "gracePeriod"),
                              f"{grace:g}s does not fit inside Spot's {SPOT_NOTICE_SECONDS}s interruption notice: "
                              f"at most {MAX_SPOT_GRACE_SECONDS}s leaves the drain its {DRAIN_LATENCY_SECONDS}s"))
    return out


def item_reference(job: TrainingJob, step: Step) -> Reference | None:
    """The fan-out item a step's template needs whether or not its command reads it (passed in like any item the
    command reads): a checkpointed step's location and a multi-node step's MPIJob name are the item's own."""
    if step.for_each is None or (checkpoint_of(job, step) is None and step.nodes is None):
        return None
    return ITEM


def volume(catalog: Catalog, checkpoint: Checkpoint) -> tuple[str, CheckpointVolume] | None:
    """The pod volume name and the catalog's volume a checkpoint is kept on (None: the artifact store)."""
    if checkpoint.store == ARTIFACT_STORE or catalog.artifacts is None:
        return None
    return VOLUME_PREFIX + checkpoint.store, catalog.artifacts.checkpoints.volumes[checkpoint.store]


def writes_artifact_store(job: TrainingJob, step: Step) -> bool:
    """Whether the step's program writes its checkpoints to the bucket itself (so it needs the bucket's role)."""
    checkpoint = checkpoint_of(job, step)
    return checkpoint is not None and checkpoint.store == ARTIFACT_STORE


def volumes(job: TrainingJob, catalog: Catalog) -> dict[str, CheckpointVolume]:
    """Every catalog volume the job's steps keep checkpoints on, by pod volume name."""
    out: dict[str, CheckpointVolume] = {}
    for _, step in job.spec.step_entries():
        checkpoint = checkpoint_of(job, step)
        if checkpoint is not None and (found := volume(catalog, checkpoint)) is not None:
            out.setdefault(*found)
    return out


def container_env(job: TrainingJob, step: Step, catalog: Catalog) -> list[dict[str, Any]]:
    """The environment telling the program where its checkpoints are and which attempt this is."""
    checkpoint = checkpoint_of(job, step)
    if checkpoint is None or catalog.artifacts is None:
        return []
    parts = ["{{workflow.namespace}}", "{{workflow.name}}", step.name, *([checkpoint.path] if checkpoint.path else [])]
    if item_reference(job, step) is not None:
        # Any text can be an item: a hash keeps it one path segment (no '/', no '..').
        parts.append(f"{{{{=sprig.trunc(16, sprig.sha1sum(inputs.parameters['{ITEM.input_name}']))}}}}")
    found = volume(catalog, checkpoint)
    if found is None:
        s3 = catalog.artifacts.s3
        location = {"name": URI_ENV, "value": "/".join([f"s3://{s3.bucket}", catalog.artifacts.checkpoints.prefix,
                                                        *parts])}
    else:
        location = {"name": DIR_ENV, "value": "/".join([found[1].mount_path.rstrip("/"), *parts])}
    return [
        location,
        {"name": RESUME_ENV, "value": RESUME_EXPRESSION},
        {"name": ATTEMPT_ENV, "value": "{{retries}}"},
        {"name": APPLICATION_ATTEMPT_ENV, "value": f"{{{{inputs.parameters.{APPLICATION_ATTEMPT_INPUT}}}}}"},
    ]


def container_env_from(job: TrainingJob, step: Step, catalog: Catalog) -> list[dict[str, Any]]:
    """For a program that writes its checkpoints to the artifact store: the namespace's Secret naming a store
    other than AWS's (endpoint and keys), taken whole if it exists. The local cluster makes it; on EKS there is
    none and the pod's role reaches the bucket, so the same workflow runs on both."""
    if catalog.artifacts is None or not writes_artifact_store(job, step):
        return []
    return [{"secretRef": {"name": ARTIFACT_STORE_SECRET, "optional": True}}]


def volume_mounts(job: TrainingJob, step: Step, catalog: Catalog) -> list[dict[str, Any]]:
    checkpoint = checkpoint_of(job, step)
    found = volume(catalog, checkpoint) if checkpoint is not None else None
    return [{"name": found[0], "mountPath": found[1].mount_path}] if found else []


def grace_seconds(job: TrainingJob, step: Step) -> int | None:
    """The pod's terminationGracePeriodSeconds: the checkpoint's grace period (None: not checkpointed)."""
    checkpoint = checkpoint_of(job, step)
    return int(parse_duration(checkpoint.grace_period)) if checkpoint is not None else None
