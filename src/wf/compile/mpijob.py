"""Multi-node steps: a step with `nodes: N` becomes a Kubeflow MPIJob (v2beta1), created by an Argo resource
template.

N workers each hold one whole node of the step's accelerator class (placed by wf.compile.placement, as a one-node step
asking for every accelerator would be), one per node and all in one zone (EFA does not cross zones); a launcher
on the catalog's CPU class runs the step's command (`mpirun` over the workers).

Argo's resource templates match success and failure as Kubernetes label selectors over gjson paths into the
object (argo-workflows v4 workflow/executor/resource.go): a path cannot select an element of
`status.conditions` by its type, so the conditions read `status.replicaStatuses`, which the mpi-operator keeps
as counters. Failure requirements are ORed, and the one that matched is named in the step's message
("failure condition '{status.replicaStatuses.Worker.failed gt [0]}' evaluated true"): that is how a lost
worker (an interruption) is told from a launcher that exited non-zero (the application's failure). Argo checks
them in key order, Launcher before Worker: a poll that sees both reports the launcher.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import yaml

from wf.compile.interruptions import MPI_WORKER_FAILED, SPOT_FALLBACK_ANNOTATION
from wf.compile.placement import Placement, place_step
from wf.compile.queueing import QueueAssignment
from wf.core.constants import (
    CAPACITY_LABEL,
    CLASS_LABEL,
    JOB_LABEL,
    SIM_DURATION,
    SIM_EXIT_CODE,
    SIM_MESSAGE,
    STEP_LABEL,
    WORKFLOW_NAME_LABEL,
    ZONE_LABEL,
)
from wf.core.errors import PathKey, Problem
from wf.model.catalog import Catalog, ComputeClass
from wf.model.nodegroups import node_groups_of
from wf.spec.job import TrainingJob
from wf.spec.steps import Step

GROUP, VERSION, PLURAL = "kubeflow.org", "v2beta1", "mpijobs"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "MPIJob"
# Set by the mpi-operator on every pod it creates (pkg/apis/kubeflow/v2beta1/constants.go).
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
JOB_ROLE_LABEL = "training.kubeflow.org/job-role"
HOSTNAME_LABEL = "kubernetes.io/hostname"
# The operator takes each replica's first container; "main" is also the container `wf logs` reads.
CONTAINER = "main"

LAUNCHER_SUCCEEDED = "status.replicaStatuses.Launcher.succeeded > 0"
WORKER_FAILED = f"status.{MPI_WORKER_FAILED} > 0"
LAUNCHER_FAILED = "status.replicaStatuses.Launcher.failed > 0"
# Words of the failure message that say a worker, not the launcher, ended the attempt: an interruption sign.
WORKER_LOST_MESSAGE = MPI_WORKER_FAILED
# The simulated program's run (local cluster) is the launcher's; the resource pod ends when the MPIJob does.
_PROGRAM_SIMULATION = (SIM_DURATION, SIM_EXIT_CODE, SIM_MESSAGE)
SUCCESS_CONDITION = LAUNCHER_SUCCEEDED
FAILURE_CONDITION = f"{WORKER_FAILED}, {LAUNCHER_FAILED}"
_NAME_PREFIX_MAX = 45  # + generateName's 5 characters + "-worker-NN" stays a DNS label (63)


def launcher_class(catalog: Catalog, workers: ComputeClass) -> ComputeClass | None:
    """The catalog's first class without accelerators on the workers' architecture: the launcher only runs
    `mpirun`, and it runs the workers' image."""
    for cls in catalog.compute_classes:
        if cls.accelerator is None and cls.resolved_arch == workers.resolved_arch:
            return cls
    return None


def step_problems(job: TrainingJob, index: int, catalog: Catalog, placement: Placement | None,
                  section: str = "steps") -> list[Problem]:
    """What makes `nodes` impossible, in the developer's terms; `placement` is the step's from place_step(),
    None when that found problems (reported there)."""
    step = (job.spec.on_exit if section == "onExit" else job.spec.steps)[index]
    at: tuple[PathKey, ...] = ("spec", section, index)
    if step.nodes is None:
        if step.processes_per_node is not None:
            return [Problem.at((*at, "processesPerNode"), "processesPerNode needs nodes (a multi-node step)")]
        return []
    if section != "steps":
        return [Problem.at((*at, "nodes"), "exit handler steps run on one node; move the multi-node step to steps")]
    if step.outputs is not None:
        return [Problem.at((*at, "outputs"), "a multi-node step has no outputs: its command runs in the MPIJob's "
                                             "launcher, whose files Argo does not read; write results to storage")]
    if placement is None:
        return []  # placement named what is wrong with the class or the capacity
    cls = catalog.compute_class(placement.compute_class)
    if cls.accelerator is None:
        return [Problem.at((*at, "nodes"), f"compute class {cls.name!r} has no accelerators: nodes "
                                           "(a multi-node MPI step) takes whole accelerator nodes")]
    out: list[Problem] = []
    if step.accelerators not in (0, cls.accelerator.count):
        out.append(Problem.at((*at, "accelerators"),
                    f"a multi-node step takes whole nodes: leave accelerators out or give {cls.accelerator.count}"))
    groups = [g for g in node_groups_of(cls, catalog) if g.capacity == placement.capacity]
    largest = max((g.max_size for g in groups), default=0)
    if groups and step.nodes > largest:
        out.append(Problem.at((*at, "nodes"), f"{step.nodes} nodes do not fit in one zone of compute class "
                                              f"{cls.name!r}: its node groups hold at most {largest} nodes (maxSize)"))
    if launcher_class(catalog, cls) is None:
        out.append(Problem.at((*at, "nodes"),
                              f"the catalog has no CPU class on {cls.resolved_arch} for the MPI launcher"))
    return out


def place_replicas(job: TrainingJob, index: int, catalog: Catalog) -> tuple[Placement, Placement, str]:
    """Worker and launcher placements and the workers' zone, from the one placement of the compute class.
    Call after step_problems() and place_step() found nothing."""
    step = job.spec.steps[index]
    cls = catalog.compute_class(step.compute or job.spec.compute or catalog.default_class or "")
    cpu = launcher_class(catalog, cls)
    if cls.accelerator is None or cpu is None:
        raise ValueError(f"step {step.name!r} is not a valid multi-node step; see step_problems()")
    whole_node = step.model_copy(update={"accelerators": cls.accelerator.count})
    worker, problems = place_step(_with_step(job, index, whole_node), index, catalog)
    launcher_step = step.model_copy(update={"compute": cpu.name, "capacity": cpu.default_capacity, "accelerators": 0,
                                            "resources": type(step.resources)()})
    launcher, launcher_problems = place_step(_with_step(job, index, launcher_step), index, catalog)
    if worker is None or launcher is None:
        raise ValueError(f"multi-node step {step.name!r} cannot be placed: {problems + launcher_problems}")
    # Node groups are per zone; EFA needs every worker in one, so all go to the class's first zone.
    zone = next(g.zone for g in node_groups_of(cls, catalog) if g.capacity == worker.capacity)
    return worker, launcher, zone


def _with_step(job: TrainingJob, index: int, step: Step) -> TrainingJob:
    steps = list(job.spec.steps)
    steps[index] = step
    return job.model_copy(update={"spec": job.spec.model_copy(update={"steps": steps})})


def mpijob_template(job: TrainingJob, index: int, catalog: Catalog, render_pod: Callable[[Placement], dict[str, Any]],
                    volumes: list[dict[str, Any]], queue: QueueAssignment | None = None) -> dict[str, Any]:
    """The Argo resource template that runs steps[index] as an MPIJob.

    `render_pod` is the compiler's pod template of the step: each replica takes its container (image, env,
    mounts, capabilities), tolerations, labels and retry strategy from it, for its own placement.

    Queued (`queue`): the queue's labels go on the MPIJob, none on its pods, so Kueue's MPIJob integration
    admits launcher and workers as one workload (a podset each), never part of the gang; Argo's own resource
    pod stays a small workload of its own in the team's queue.
    """
    queue_labels = queue.pod_labels() if queue else {}
    step = job.spec.steps[index]
    assert step.nodes is not None
    worker, launcher, zone = place_replicas(job, index, catalog)
    cls = catalog.compute_class(worker.compute_class)
    assert cls.accelerator is not None

    def replica(placement: Placement, replicas: int, argv: list[str] | None) -> dict[str, Any]:
        pod = render_pod(placement)
        main = {k: v for k, v in pod["container"].items() if k != "command"}
        main["name"] = CONTAINER
        if argv:
            main["command"] = argv  # workers run the operator's default, sshd, which mpirun reaches
        # A replica's capacity is its placement's: Spot fallback (an expression over the pod template's own
        # retries) does not reach pods another controller creates.
        labels = {**{k: v for k, v in pod["metadata"]["labels"].items() if k not in queue_labels},
                  CAPACITY_LABEL: placement.capacity, WORKFLOW_NAME_LABEL: "{{workflow.name}}"}
        meta = {**{k: v for k, v in pod["metadata"].items() if k != "annotations"}, "labels": labels}
        if annotations := {k: v for k, v in (pod["metadata"].get("annotations") or {}).items()
                           if k != SPOT_FALLBACK_ANNOTATION}:
            meta["annotations"] = annotations
        spec: dict[str, Any] = {"nodeSelector": pod["nodeSelector"], "containers": [main]}
        if "tolerations" in pod:
            spec["tolerations"] = pod["tolerations"]
        if placement.host_ipc:
            spec["hostIPC"] = True
        if volumes:
            spec["volumes"] = copy.deepcopy(volumes)  # no YAML anchors in the manifest
        return {"replicas": replicas, "restartPolicy": "Never", "template": {"metadata": meta, "spec": spec}}

    workers = replica(worker, step.nodes, None)
    workers["template"]["spec"]["affinity"] = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": ZONE_LABEL, "operator": "In", "values": [zone]}]}]}},
        # One worker per node: each holds all of its node's accelerators and EFA interfaces. Per MPIJob, so
        # the workers of an attempt being cleaned up never push away the next attempt's.
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
            "topologyKey": HOSTNAME_LABEL,
            "labelSelector": {"matchLabels": {JOB_ROLE_LABEL: "worker"}},
            "matchLabelKeys": [JOB_NAME_LABEL],
        }]},
    }
    mpijob: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"generateName": f"{job.name}-{step.name}"[:_NAME_PREFIX_MAX].rstrip("-") + "-",
                     "labels": {JOB_LABEL: job.name, STEP_LABEL: step.name, WORKFLOW_NAME_LABEL: "{{workflow.name}}",
                                **queue_labels}},
        "spec": {
            "slotsPerWorker": step.processes_per_node or cls.accelerator.count,
            # No in-place restarts: a failed launcher or a lost worker ends the attempt, and Argo retries the
            # whole step on the matching budget. Workers still running then are removed.
            "runPolicy": {"backoffLimit": 0, "cleanPodPolicy": "Running"},
            "mpiImplementation": "OpenMPI",
            # mpirun fails if a worker's sshd is not up yet (accelerator images take minutes to pull): start the
            # launcher once every worker is Ready.
            "launcherCreationPolicy": "WaitForWorkersReady",
            "mpiReplicaSpecs": {"Launcher": replica(launcher, 1, list(step.command)), "Worker": workers},
        },
    }
    pod = render_pod(worker)
    metadata: dict[str, Any] = {"labels": {k: v for k, v in pod["metadata"]["labels"].items()
                                           if k not in (CLASS_LABEL, CAPACITY_LABEL)}}
    if annotations := {k: v for k, v in (pod["metadata"].get("annotations") or {}).items()
                       if k not in _PROGRAM_SIMULATION}:
        metadata["annotations"] = annotations
    template: dict[str, Any] = {
        "name": step.name,
        "metadata": metadata,
        # Argo's executor pod that creates and watches the MPIJob: on the launcher's class, never on a node
        # some accelerator pod is waiting for.
        "nodeSelector": launcher.node_selector,
        "retryStrategy": pod["retryStrategy"],
        "resource": {
            "action": "create",
            "setOwnerReference": True,
            "successCondition": SUCCESS_CONDITION,
            "failureCondition": FAILURE_CONDITION,
            "manifest": yaml.safe_dump(mpijob, sort_keys=False),
        },
    }
    if "timeout" in pod:
        template["timeout"] = pod["timeout"]
    elif "activeDeadlineSeconds" in pod:
        # Queued (compile.workflow): the deadline is the MPIJob's, which the operator counts from the job's start, not
        # the resource pod's, which runs while the job waits for quota.
        mpijob["spec"]["runPolicy"]["activeDeadlineSeconds"] = pod["activeDeadlineSeconds"]
        template["resource"]["manifest"] = yaml.safe_dump(mpijob, sort_keys=False)
    return template
