"""A multi-node step: a step with `nodes: N` becomes a Kubeflow MPIJob (v2beta1), created by an Argo resource
template.

N workers each hold one whole node of the step's accelerator class (placed once by wf.compile.placement, as a
one-node step asking for every accelerator would be), one per node and all in one zone (EFA does not cross zones); a
launcher on the catalog's CPU class runs the step's command (`mpirun` over the workers). Queued, Kueue admits
launcher and workers as one workload; `wf get` reads the step back from its workers; `wf stop` deletes the
workflow's MPIJobs, whose pods Argo does not own.

Argo's resource templates match success and failure as Kubernetes label selectors over gjson paths into the
object (argo-workflows v4 workflow/executor/resource.go): a path cannot select an element of
`status.conditions` by its type, so the conditions read `status.replicaStatuses`, which the mpi-operator keeps
as counters, and the MPIJob's own annotations. Failure requirements are ORed, and the one that matched is named in
the step's message ("failure condition '{status.replicaStatuses.Worker.failed gt [0]}' evaluated true"): that is
how a lost worker (an interruption) is told from a launcher that exited non-zero (the application's failure). Argo
checks them in key order: a poll that sees several reports the first.

A lost worker. When a worker's node goes, mpirun loses the rank's daemon and fails within seconds, and the
launcher's Job with it: `Launcher.failed`, like any program that exits non-zero. The operator's status keeps no
trace of the worker by then (v0.6.0 updateMPIJobStatus: a failed pod counts in `Worker.failed` only while it is
listed, the pod GC or a drain deletes it at once, getOrCreateWorker creates it again under its name, and once the
launcher's Job has finished the workers' counters are reset). So the node recorder, which watches the pods and
Nodes (wf.controller.node_recorder: the platform bundle's Deployment on EKS, a process on the local cluster), marks
the MPIJob when one of its workers stops running while its launcher runs (MPI_WORKER_LOST_ANNOTATION,
wf.controller.gangs), as a rule before mpirun has failed, and the first failure requirement,
`metadata.annotations.wf-worker-lost`, sorts before every `status.*` one: an attempt whose worker was lost names
the mark, an interruption sign, whichever the poll saw first; a mark alone ends an attempt whose mpirun has not
failed yet. The local cluster's simulated launcher fails once the mark is there (wf.cluster.executor). A worker
whose instance vanished unannounced (its Node and pod still there when mpirun fails), or lost while the recorder is
down, leaves no mark in time: that attempt is the program's failure unless a poll saw `Worker.failed` (README,
"What Argo's retry expression cannot see").

One gang at a time. Every attempt of one run of the step (interruption retries and application retries alike)
names the same MPIJob (mpijob_name(): per workflow, step and fan-out item), and before argoexec creates it, an init
container of Argo's resource pod (release_container()) runs `kubectl delete --ignore-not-found --cascade=foreground
--wait` on that name, as Argo's executor (with the token Argo mounts for its own containers, the Secret
wf-mpijob-executor.service-account-token, which the template mounts under a volume of its own):

- foreground propagation keeps the MPIJob until the garbage collector has deleted every dependent that blocks its
  owner's deletion, transitively in foreground (kubernetes v1.36 pkg/controller/garbagecollector
  attemptToDeleteItem): the workers and the launcher Job carry the operator's controller reference (mpi-operator
  v0.6.0 newWorker, newLauncherJob: NewControllerRef, blockOwnerDeletion), the launcher pod its Job's;
- `--wait` returns once the object of the deleted UID is gone (kubectl pkg/cmd/wait IsDeleted, with get, list and
  watch, which wf-mpijob-executor holds: forbidden, kubectl would not wait at all), for at most RELEASE_TIMEOUT;
- Argo appends the template's init containers to the pod it makes (workflow/controller/workflowpod.go
  addInitContainers), so argoexec's main container starts after it: the next MPIJob exists only once every pod of
  the previous one is gone, its grace period spent, and cannot exist sooner, having the same name. The first
  attempt finds nothing to delete.

Nothing else would do it. `kubectl replace --force` deletes, waits and creates in one command but prints the
deletion's line before the created object (k8s.io/kubectl v0.33.1, which argoexec v4.0.7 runs in-process:
pkg/cmd/delete deleteResource, PrintObj unless Quiet, which no flag sets), and argoexec parses that output as one
JSON object (workflow/executor/resource.go ExecResource). The operator never
deletes an MPIJob (v0.6.0 passes runPolicy.ttlSecondsAfterFinished to the launcher Job only, so `create` of a fixed
name alone would meet AlreadyExists for as long as the workflow lives); a lost worker does not
even end its MPIJob (updateMPIJobStatus counts `Worker.failed`; only the launcher's end sets completionTime and
cleans workers up, and a deleted worker is created again); Kueue frees an MPIJob's quota when it finishes, not when
its pods are gone; a Steps or DAG wrapper [release, create] carrying the retry would lose `lastRetry.message`, by
which interruptions are told from the program's failures (a failed Steps node says "child '...' failed", a DAG
node nothing). A release that outlasts RELEASE_TIMEOUT (a node that stays NotReady keeps its pods Terminating
until its Node object goes) fails the attempt with kubectl's "timed out waiting for the condition" in the init
container's message, the program's failure to retry (no interruption sign). A retry after Argo's own resource pod
was lost while its MPIJob ran deletes that MPIJob and starts over (from the step's checkpoint): no attempt adopts a
gang it did not create.

A lost launcher. The launcher is a batch Job whose pod, lost with its node, fails the Job like mpirun exiting
non-zero: both are `Launcher.failed`, and the MPIJob's Failed condition differs only by whether the pod was still
listed when the operator wrote it (updateMPIJobFailedStatus: "BackoffLimitExceeded" or
"BackoffLimitExceeded/<pod reason>"; a label value can't hold '/', and the race makes it no sign). So the
launcher runs On-Demand (launcher_capacity) and asks to share the node of Argo's resource pod that created its
MPIJob (a preferred pod affinity to MPIJOB_LABEL, which only that pod carries and only while it runs: the
kube-scheduler sees no Succeeded or Failed pod, pkg/scheduler/scheduler.go): when that node goes, Argo's own pod
goes with it, and Argo reads its loss with the interruption signs (wf.compile.interruptions). Preferred, so a full
node never strands a gang: a launcher placed elsewhere (no room there, or a pool so large that the scheduler stopped
at 100 feasible nodes without scoring that one: pkg/scheduler/schedule_one.go numFeasibleNodesToFind) and then
lost reads as the program's failure.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from decimal import Decimal
from functools import lru_cache
from typing import Any

import yaml

from wf.argo.manifest import manifest_text
from wf.compile import checkpoints
from wf.compile.checkpoints import ITEM, item_reference
from wf.compile.hardening import container_security, pod_security
from wf.compile.interruptions import MPI_WORKER_FAILED, MPI_WORKER_LOST, ON_DEMAND
from wf.compile.kinds.base import Cleanup, Demand, PodRenderer
from wf.compile.placement import Placement, place_pod, place_step
from wf.compile.queueing import QueueAssignment
from wf.compile.readback import CompiledPlacement, read_placement
from wf.compile.schedulability import pod_requests
from wf.core.constants import (
    ARGO_EXECUTOR_TOKEN_PATH,
    ARGO_EXECUTOR_TOKEN_SECRET,
    ARGO_MAIN_CONTAINER,
    CAPACITY_LABEL,
    CLASS_LABEL,
    JOB_LABEL,
    MPIJOB,
    MPIJOB_EXECUTOR_ACCOUNT,
    MPIJOB_LABEL,
    SIM_CHECKPOINTS,
    SIM_DURATION,
    SIM_EXIT_CODE,
    SIM_MESSAGE,
    STEP_LABEL,
    WORKFLOW_NAME_LABEL,
    ZONE_LABEL,
)
from wf.core.errors import PathKey, Problem
from wf.jobspec.job import TrainingJob
from wf.jobspec.steps import Step
from wf.model.catalog import Catalog, ComputeClass
from wf.model.nodegroups import node_groups_of

# Set by the mpi-operator on every pod it creates (pkg/apis/kubeflow/v2beta1/constants.go).
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
JOB_ROLE_LABEL = "training.kubeflow.org/job-role"
HOSTNAME_LABEL = "kubernetes.io/hostname"
# Argo's variable for the workflow's service account, its default included (workflow/common/common.go).
WORKFLOW_SERVICE_ACCOUNT = "{{workflow.serviceAccountName}}"

LAUNCHER_SUCCEEDED = "status.replicaStatuses.Launcher.succeeded > 0"
WORKER_FAILED = f"status.{MPI_WORKER_FAILED} > 0"
WORKER_LOST = MPI_WORKER_LOST  # the key exists: the MPIJob was marked
LAUNCHER_FAILED = "status.replicaStatuses.Launcher.failed > 0"
# Words of the failure message that say a lost worker, not the program, ended the attempt: an interruption sign.
WORKER_LOST_MESSAGE = MPI_WORKER_LOST
# The simulated program's run (local cluster) is the launcher's; the resource pod ends when the MPIJob does.
_PROGRAM_SIMULATION = (SIM_DURATION, SIM_EXIT_CODE, SIM_MESSAGE, SIM_CHECKPOINTS)
SUCCESS_CONDITION = LAUNCHER_SUCCEEDED
FAILURE_CONDITION = f"{WORKER_LOST}, {WORKER_FAILED}, {LAUNCHER_FAILED}"
_HASH_LENGTH = 10
_NAME_PREFIX_MAX = 39  # + "-" + the hash + "-worker-NN" stays a DNS label (63)
# The init container of Argo's resource pod that deletes the step run's MPIJob an earlier attempt left, with its pods:
# kubectl of the cluster's minor version (the official image has no shell; its entrypoint is kubectl).
RELEASE_CONTAINER = "wf-release"
# Its token, the executor's: Argo refuses a template's mount of its own `exec-sa-token` volume (it adds that volume
# after checking the template's mounts against the template's and workflow's volumes: workflowpod.go
# addVolumeReferences, "volume ... not found in workflow spec"), so the template names the same Secret itself.
RELEASE_TOKEN_VOLUME = "wf-release-token"
KUBECTL_IMAGE = "registry.k8s.io/kubectl:v{version}.0"
# How long an attempt waits for the previous attempt's gang to be gone before it gives up.
RELEASE_TIMEOUT = "30m"


def launcher_class(catalog: Catalog, workers: ComputeClass) -> ComputeClass | None:
    """The catalog's first class without accelerators on the workers' architecture: the launcher only runs
    `mpirun`, and it runs the workers' image."""
    for cls in catalog.compute_classes:
        if cls.accelerator is None and cls.resolved_arch == workers.resolved_arch:
            return cls
    return None


def launcher_capacity(launcher: ComputeClass) -> str:
    """Where the launcher (and Argo's resource pod beside it) runs: its loss ends the whole gang's attempt, so
    On-Demand where its class offers it, which Spot reclaims never take."""
    return ON_DEMAND if ON_DEMAND in launcher.capacity else launcher.default_capacity


def mpijob_name(job: TrainingJob, step: Step) -> str:
    """The name of the MPIJob one run of `step` runs, as an Argo expression: the same for each of its attempts, its
    own per workflow and fan-out item (a hash of them after a readable prefix)."""
    prefix = f"{job.name}-{step.name}"[:_NAME_PREFIX_MAX].rstrip("-")
    key = f"workflow.name + '/{step.name}'"
    if item_reference(job, step) is not None:
        key += f" + '/' + inputs.parameters['{ITEM.input_name}']"
    return f"{prefix}-{{{{=sprig.trunc({_HASH_LENGTH}, sprig.sha1sum({key}))}}}}"


def release_container(name: str, cluster_version: str) -> dict[str, Any]:
    """The init container deleting the MPIJob `name` (an earlier attempt's) and waiting until it and its pods are gone,
    as Argo's executor in the pod: with the token Argo mounts for its own containers (wf-mpijob-executor's, the
    template's RELEASE_TOKEN_VOLUME)."""
    return {
        "name": RELEASE_CONTAINER,
        "image": KUBECTL_IMAGE.format(version=cluster_version),
        "args": ["delete", f"{MPIJOB.plural}.{MPIJOB.version}.{MPIJOB.group}", name,
                 "--namespace={{workflow.namespace}}", "--ignore-not-found", "--cascade=foreground", "--wait",
                 f"--timeout={RELEASE_TIMEOUT}"],
        "volumeMounts": [{"name": RELEASE_TOKEN_VOLUME, "mountPath": ARGO_EXECUTOR_TOKEN_PATH, "readOnly": True}],
        "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
        # kubectl writes its error to stderr: Argo's message for the attempt then carries it.
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }


def _problems(job: TrainingJob, index: int, catalog: Catalog, placement: Placement | None,
              section: str) -> list[Problem]:
    """What makes `nodes` impossible, in the developer's terms; `placement` is the step's from place_step(),
    None when that found problems (reported there)."""
    step = (job.spec.on_exit if section == "onExit" else job.spec.steps)[index]
    assert step.nodes is not None
    at: tuple[PathKey, ...] = ("spec", section, index)
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
    launcher = launcher_class(catalog, cls)
    if launcher is None:
        out.append(Problem.at((*at, "nodes"),
                              f"the catalog has no CPU class on {cls.resolved_arch} for the MPI launcher"))
        return out
    # The launcher mounts the step's checkpoint volume with the workers (the command's wrapper may read it).
    checkpoint = checkpoints.checkpoint_of(job, step)
    store = catalog.artifacts.checkpoints.volumes if catalog.artifacts else {}
    volume = store.get(checkpoint.store) if checkpoint is not None else None
    if checkpoint is not None and volume is not None and volume.compute_classes is not None \
            and launcher.name not in volume.compute_classes:
        out.append(Problem.at((*at, "checkpoint", "store") if step.checkpoint else ("spec", "checkpoint", "store"),
                              f"volume {checkpoint.store!r} is not reachable from compute class {launcher.name!r}, "
                              f"where the MPI launcher runs and mounts it; it serves "
                              f"{', '.join(volume.compute_classes)}"))
    return out


@lru_cache(maxsize=256)  # `wf get` and the watch read the same few manifests on every event
def _parse(manifest: str) -> Any:
    try:
        return yaml.load(manifest, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError:
        return None  # the Argo schema check reports the manifest


def _mpijob(template: dict[str, Any]) -> dict[str, Any] | None:
    """The MPIJob a resource template creates, else None."""
    resource = template.get("resource")
    manifest = resource.get("manifest") if isinstance(resource, dict) else None
    job = _parse(manifest) if isinstance(manifest, str) else None
    return job if isinstance(job, dict) and job.get("kind") == MPIJOB.kind else None


def _replicas(job: dict[str, Any]) -> dict[str, Any]:
    specs = (job.get("spec") or {}).get("mpiReplicaSpecs") or {}
    return {role: spec for role, spec in specs.items() if isinstance(spec, dict)}


def replica_templates(template: dict[str, Any]) -> list[tuple[str, int, dict[str, Any]]]:
    """The pod templates of the MPIJob a resource template creates, each with its role as its pods' JOB_ROLE_LABEL
    says it (launcher, worker) and its replica count (none for any other template): what one attempt of the step
    runs."""
    job = _mpijob(template)
    return [(role.lower(), int(spec.get("replicas") or 1), spec.get("template") or {})
            for role, spec in _replicas(job).items()] if job is not None else []


class MultiNodeStep:
    def matches(self, step: Step) -> bool:
        return step.nodes is not None

    def matches_template(self, template: dict[str, Any]) -> bool:
        return _mpijob(template) is not None

    def place(self, job: TrainingJob, index: int, catalog: Catalog, section: str
              ) -> tuple[Placement | None, list[Problem]]:
        """The workers' placement: the step's class and capacity, sized to whole nodes."""
        placement, problems = place_step(job, index, catalog, section)
        problems += _problems(job, index, catalog, placement, section)
        if placement is None or problems:
            return None, problems
        cls = catalog.compute_class(placement.compute_class)
        assert cls.accelerator is not None
        step = job.spec.steps[index]
        return place_pod(catalog, cls, placement.capacity, step.resources, cls.accelerator.count,
                         ("spec", section, index))

    def render(self, job: TrainingJob, step: Step, catalog: Catalog, placement: Placement, pod: PodRenderer,
               volumes: list[dict[str, Any]], queue: QueueAssignment | None) -> dict[str, Any]:
        """The Argo resource template that runs `step` as an MPIJob; `placement` is the workers' (place()).

        `pod` is the compiler's pod template of the step: each replica takes its container (image, env, mounts,
        capabilities), tolerations, labels and retry strategy from it, for its own placement.

        Queued (`queue`): the queue's labels go on the MPIJob, none on its pods, so Kueue's MPIJob integration
        admits launcher and workers as one workload (a podset each), never part of the gang; Argo's own resource
        pod stays a small workload of its own in the team's queue.
        """
        return _template(job, step, catalog, placement, pod, volumes, queue)

    def demand(self, template: dict[str, Any]) -> list[Demand]:
        """A queued MPIJob: every replica of it, summed per class and capacity, admitted as one workload."""
        job = _mpijob(template)
        if job is None or read_placement(job).queue is None:
            return []
        summed: dict[tuple[str, tuple[str, ...]], dict[str, Decimal]] = {}
        for replica in _replicas(job).values():
            pod = replica.get("template") or {}
            placed = read_placement(pod)
            if placed.compute_class is None:
                continue
            spec = pod.get("spec") or {}
            requests, _ = pod_requests(list(spec.get("containers") or []), list(spec.get("initContainers") or []))
            total = summed.setdefault((placed.compute_class, placed.capacities), {})
            for name, amount in requests.items():
                total[name] = total.get(name, Decimal(0)) + amount * int(replica.get("replicas") or 1)
        return [Demand(cls, capacities, requests) for (cls, capacities), requests in summed.items()]

    def read_back(self, template: dict[str, Any]) -> CompiledPlacement:
        """The workers' class, capacity and Spot fallback (counted over the resource template's retries, like a
        pod step's over its pod's), in the MPIJob's queue, with the launcher's capacity beside them."""
        job = _mpijob(template)
        if job is None:
            return CompiledPlacement()
        replicas = _replicas(job)
        workers = read_placement((replicas.get("Worker") or {}).get("template"))
        others = tuple((role.lower(), read_placement(spec.get("template")).capacity)
                       for role, spec in replicas.items() if role != "Worker")
        return replace(workers, queue=read_placement(job).queue, role="worker", others=others)

    def cleanup(self, workflow: str) -> list[Cleanup]:
        """Argo stops its own pods, not the launcher and workers the mpi-operator made (their MPIJob is owned by
        the workflow, so only deleting the workflow would remove them)."""
        return [Cleanup(MPIJOB, f"{WORKFLOW_NAME_LABEL}={workflow}")]


MPIJOB_STEP = MultiNodeStep()


def _template(job: TrainingJob, step: Step, catalog: Catalog, worker: Placement, render_pod: PodRenderer,
              volumes: list[dict[str, Any]], queue: QueueAssignment | None) -> dict[str, Any]:
    queue_labels = queue.pod_labels() if queue else {}
    assert step.nodes is not None
    cls = catalog.compute_class(worker.compute_class)
    cpu = launcher_class(catalog, cls)
    assert cls.accelerator is not None and cpu is not None  # place() found no problems
    launcher, problems = place_pod(catalog, cpu, launcher_capacity(cpu))
    if launcher is None:
        raise ValueError(f"multi-node step {step.name!r}: no launcher fits the compute class {cpu.name!r}: {problems}")
    # Node groups are per zone; EFA needs every worker in one, so all go to the class's first zone (with a Spot
    # fallback, the first that has On-Demand nodes too).
    groups = node_groups_of(cls, catalog)
    zones = [g.zone for g in groups if g.capacity == worker.capacity]
    fallback_zones = {g.zone for g in groups if g.capacity == ON_DEMAND} if worker.on_demand_after else set(zones)
    zone = next((z for z in zones if z in fallback_zones), zones[0])

    def replica(placement: Placement, replicas: int, runs_command: bool) -> dict[str, Any]:
        pod = render_pod(placement)
        main = {k: v for k, v in pod["container"].items() if k != "command"}
        main["securityContext"] = container_security(placement)  # whole: the workflow's templateDefaults stop at Argo
        main["name"] = ARGO_MAIN_CONTAINER  # the operator takes the first; `wf logs` reads Argo's main container
        if runs_command:
            # As the pod template has it: its references read the template's inputs. Workers run the operator's
            # default, sshd, which mpirun reaches.
            main["command"] = pod["container"]["command"]
        # The capacity label holds the Spot fallback's expression when the placement has one. No podSpecPatch
        # reaches pods another controller creates, so the selector is that expression too: Argo substitutes the
        # manifest for each attempt, with `retries` counting the resource template's interruptions.
        capacity = pod["metadata"]["labels"][CAPACITY_LABEL]
        labels = {**{k: v for k, v in pod["metadata"]["labels"].items() if k not in queue_labels},
                  WORKFLOW_NAME_LABEL: "{{workflow.name}}"}
        meta = {**{k: v for k, v in pod["metadata"].items() if k != "annotations"}, "labels": labels}
        # The simulated executor plays a checkpointing program where it runs: in the launcher (mpirun), not in the
        # workers (the SSH servers mpirun starts its ranks through).
        if annotations := {k: v for k, v in (pod["metadata"].get("annotations") or {}).items()
                           if runs_command or k != SIM_CHECKPOINTS}:
            meta["annotations"] = annotations
        # The operator leaves a replica's account to its template: the workflow's, as Argo's pods run, and like
        # theirs without its API token unless the job named the account for its program.
        spec: dict[str, Any] = {"serviceAccountName": WORKFLOW_SERVICE_ACCOUNT,
                                **({} if job.spec.service_account else {"automountServiceAccountToken": False}),
                                "nodeSelector": {**pod["nodeSelector"], CAPACITY_LABEL: capacity},
                                "securityContext": pod_security(), "containers": [main]}
        if "tolerations" in pod:
            spec["tolerations"] = pod["tolerations"]
        if placement.host_ipc:
            spec["hostIPC"] = True
        if (grace := checkpoints.grace_seconds(job, step)) is not None:
            spec["terminationGracePeriodSeconds"] = grace  # every replica saves on SIGTERM
        if volumes:
            spec["volumes"] = copy.deepcopy(volumes)  # no YAML anchors in the manifest
        return {"replicas": replicas, "restartPolicy": "Never", "template": {"metadata": meta, "spec": spec}}

    workers = replica(worker, step.nodes, False)
    workers["template"]["spec"]["affinity"] = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": ZONE_LABEL, "operator": "In", "values": [zone]}]}]}},
        # One worker per node: each holds all of its node's accelerators and EFA interfaces. Per MPIJob: another
        # step's workers are no concern of these.
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
            "topologyKey": HOSTNAME_LABEL,
            "labelSelector": {"matchLabels": {JOB_ROLE_LABEL: "worker"}},
            "matchLabelKeys": [JOB_NAME_LABEL],
        }]},
    }
    name = mpijob_name(job, step)
    launcher_replica = replica(launcher, 1, True)
    # On the node of Argo's pod that created the MPIJob, where there is room: that node's loss is then Argo's pod's,
    # an interruption Argo reads (see the module's docstring).
    launcher_replica["template"]["spec"]["affinity"] = {"podAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": {
            "topologyKey": HOSTNAME_LABEL, "labelSelector": {"matchLabels": {MPIJOB_LABEL: name}}}}]}}
    mpijob: dict[str, Any] = {
        "apiVersion": MPIJOB.api_version,
        "kind": MPIJOB.kind,
        "metadata": {"name": name,
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
            "mpiReplicaSpecs": {"Launcher": launcher_replica, "Worker": workers},
        },
    }
    pod = render_pod(worker)
    metadata: dict[str, Any] = {"labels": {**{k: v for k, v in pod["metadata"]["labels"].items()
                                              if k not in (CLASS_LABEL, CAPACITY_LABEL)}, MPIJOB_LABEL: name}}
    if annotations := {k: v for k, v in (pod["metadata"].get("annotations") or {}).items()
                       if k not in _PROGRAM_SIMULATION}:
        metadata["annotations"] = annotations
    template: dict[str, Any] = {
        "name": step.name,
        "metadata": metadata,
        # Argo's executor pod that creates and watches the MPIJob: on the launcher's class and capacity, never on a
        # node some accelerator pod is waiting for.
        "nodeSelector": launcher.node_selector,
        # The only pod whose token may create and delete MPIJobs: the step's other pods' executor cannot.
        "executor": {"serviceAccountName": MPIJOB_EXECUTOR_ACCOUNT},
        "retryStrategy": pod["retryStrategy"],
        # The manifest reads them: the replicas' environment (a checkpointed step's application retry), the
        # MPIJob's name (the fan-out item).
        **({"inputs": {"parameters": pod["inputs"]["parameters"]}}
           if (pod.get("inputs") or {}).get("parameters") else {}),
        # One gang at a time: the MPIJob an earlier attempt left is gone, pods and all, before argoexec runs.
        "initContainers": [release_container(name, catalog.cluster.version)],
        "volumes": [{"name": RELEASE_TOKEN_VOLUME, "secret": {
            "secretName": ARGO_EXECUTOR_TOKEN_SECRET.format(account=MPIJOB_EXECUTOR_ACCOUNT)}}],
        "resource": {
            "action": "create",
            "setOwnerReference": True,
            "successCondition": SUCCESS_CONDITION,
            "failureCondition": FAILURE_CONDITION,
            "manifest": manifest_text(mpijob),
        },
    }
    if "timeout" in pod:
        template["timeout"] = pod["timeout"]
    elif "activeDeadlineSeconds" in pod:
        # Queued (compile.workflow): the deadline is the MPIJob's, which the operator counts from the job's start, not
        # the resource pod's, which runs while the job waits for quota.
        mpijob["spec"]["runPolicy"]["activeDeadlineSeconds"] = pod["activeDeadlineSeconds"]
        template["resource"]["manifest"] = manifest_text(mpijob)
    return template
