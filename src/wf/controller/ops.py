"""Operations on existing workflows through the Kubernetes API alone (no Argo server): get, logs, retry, stop,
suspend, resume, delete (listing them: `listing`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from wf.argo.nodes import packed_status, workflow_nodes
from wf.compile.kinds.mpijob import JOB_NAME_LABEL as MPI_JOB_LABEL
from wf.compile.kinds.mpijob import JOB_ROLE_LABEL as MPI_ROLE_LABEL
from wf.controller.archived_logs import workflow_repository
from wf.controller.client import Kube, api_errors, pod_log
from wf.controller.resubmit import carried_nodes, reopen_spec, rerun_plan
from wf.controller.steps import (
    FAILED_PHASES,
    TERMINAL_PHASES,
    Attempt,
    StepRow,
    pod_name,
    templates_by_name,
    workflow_view,
)
from wf.core.constants import (
    ARGO_COMPLETED_LABEL,
    ARGO_MAIN_CONTAINER,
    ARGO_NODE_NAME_ANNOTATION,
    ARGO_PHASE_LABEL,
    ARGO_RESUBMITTED_FROM_LABEL,
    ARGO_WORKFLOW_LABEL,
    CAPACITY_LABEL,
    JOB_LABEL,
    RETRIED_ANNOTATION,
    STEP_LABEL,
    WORKFLOW,
    WORKFLOW_NAME_LABEL,
    ApiKind,
)
from wf.core.errors import InputError
from wf.core.units import parse_time

RETRY_CONFLICTS = 5  # reads and PUTs of a retried workflow the controller keeps writing meanwhile
POD_GONE_WAIT_SECONDS = 60
FOLLOW_DRAIN_SECONDS = 3.0


class WorkflowNotFound(InputError):
    """No live workflow of that name: it never existed, or it ended and was deleted (Argo's archive may hold it)."""


def get_workflow(kube: Kube, name: str, namespace: str | None = None) -> dict[str, Any]:
    from kubernetes.client.exceptions import ApiException

    ns = namespace or kube.namespace
    with api_errors(kube, f"reading workflow {name}", ns):
        try:
            return kube.custom.get_namespaced_custom_object(WORKFLOW.group, WORKFLOW.version, ns, WORKFLOW.plural, name)
        except ApiException as exc:
            if exc.status == 404:
                raise WorkflowNotFound(f"no workflow {name!r} in namespace {ns} ({kube.context})") from None
            raise


def stop_workflow(kube: Kube, name: str, namespace: str | None = None) -> dict[str, Any]:
    """Ask Argo's controller to stop: running steps are stopped, exit handlers still run (`argo stop`)."""
    ns = namespace or kube.namespace
    workflow = get_workflow(kube, name, ns)
    if (workflow.get("status") or {}).get("phase") in TERMINAL_PHASES:
        raise InputError(f"workflow {name} has already ended ({workflow['status']['phase']})")
    with api_errors(kube, f"stopping workflow {name}", ns):
        stopped = kube.custom.patch_namespaced_custom_object(
            WORKFLOW.group, WORKFLOW.version, ns, WORKFLOW.plural, name, {"spec": {"shutdown": "Stop"}})
        _clean_up(kube, name, ns)
        return stopped


def _clean_up(kube: Kube, name: str, ns: str) -> None:
    """What each step kind names for a stopped workflow (wf.compile.kinds): Argo stops only its own pods."""
    from kubernetes.client.exceptions import ApiException

    from wf.compile.kinds import KINDS

    for cleanup in (c for kind in KINDS for c in kind.cleanup(name)):
        try:
            kube.custom.delete_collection_namespaced_custom_object(
                cleanup.kind.group, cleanup.kind.version, ns, cleanup.kind.plural,
                label_selector=cleanup.label_selector, propagation_policy="Background")
        except ApiException as exc:
            if exc.status != 404:  # 404: the kind is not installed on this cluster, so nothing to remove
                raise


def delete_object(kube: Kube, kind: ApiKind, name: str, namespace: str | None) -> str:
    """Delete one of Argo's objects in the background: what it owns goes with it (a workflow's pods, a
    CronWorkflow's workflows). Returns its namespace."""
    from kubernetes.client.exceptions import ApiException

    ns = namespace or kube.namespace
    with api_errors(kube, f"deleting {kind.kind} {name}", ns):
        try:
            kube.custom.delete_namespaced_custom_object(kind.group, kind.version, ns, kind.plural, name,
                                                        propagation_policy="Background")
        except ApiException as exc:
            if exc.status != 404:
                raise
            raise InputError(f"no {kind.kind} {name!r} in namespace {ns} ({kube.context})") from None
    return ns


def delete_workflow(kube: Kube, name: str, namespace: str | None = None) -> None:
    """Delete a workflow, and what its step kinds created beside Argo's pods (as `stop_workflow` does)."""
    ns = delete_object(kube, WORKFLOW, name, namespace)
    with api_errors(kube, f"deleting what workflow {name} created", ns):
        _clean_up(kube, name, ns)


def deletion_candidates(workflows: list[dict[str, Any]], *, completed: bool, older_than: float | None,
                        now: datetime) -> list[dict[str, Any]]:
    """The workflows `wf delete` selects (pure): with `completed`, those that ended; with `older_than` (seconds),
    those that ended at least that long ago (`argo delete --older`: a running workflow is never old)."""
    chosen = []
    for item in workflows:
        status = item.get("status") or {}
        if (completed or older_than is not None) and status.get("phase") not in TERMINAL_PHASES:
            continue
        if older_than is not None:
            finished = parse_time(status.get("finishedAt"))
            if finished is None or (now - finished).total_seconds() < older_than:
                continue
        chosen.append(item)
    return chosen


def set_suspended(kube: Kube, name: str, namespace: str | None, suspended: bool) -> dict[str, Any]:
    """`argo suspend` / `argo resume` on spec.suspend: suspended, Argo starts no new step (running pods run on);
    resumed, it goes on. wf compiles no suspend templates, so there are no suspended nodes to resume."""
    ns = namespace or kube.namespace
    workflow = get_workflow(kube, name, ns)
    if (phase := (workflow.get("status") or {}).get("phase")) in TERMINAL_PHASES:
        raise InputError(f"workflow {name} has already ended ({phase})")
    return patch_suspend(kube, WORKFLOW, name, ns, suspended)


def patch_suspend(kube: Kube, kind: ApiKind, name: str, namespace: str, suspended: bool) -> dict[str, Any]:
    """Set or clear spec.suspend of a Workflow or CronWorkflow; a merge patch's null removes the field, as
    `argo resume` / `argo cron resume` leave it."""
    verb = "suspending" if suspended else "resuming"
    with api_errors(kube, f"{verb} {kind.kind} {name}", namespace):
        return kube.custom.patch_namespaced_custom_object(kind.group, kind.version, namespace, kind.plural, name,
                                                          {"spec": {"suspend": True if suspended else None}})


def retry_plan(workflow: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The workflow reset for a retry and the pods to delete first (pure).

    What `argo retry` does (workflow/util FormulateRetryWorkflow; Kubeflow Pipelines does the same through
    the API): keep what succeeded; drop every failed, errored or omitted step with all it contains, so the
    controller runs it afresh with a fresh retry budget; set failed DAG/Steps nodes on the way back to
    Running (wf.controller.resubmit.carried_nodes); clear the workflow's end (phase Running, message, finishedAt,
    completed label, shutdown). The nodes are written back as Argo's own retry writes them (hydrated, then
    packed as the controller packs them). Unlike Argo's, it counts the retry in the workflow's RETRIED_ANNOTATION.
    """
    import copy

    metadata = workflow.get("metadata") or {}
    status = workflow.get("status") or {}
    phase = status.get("phase")
    if phase not in FAILED_PHASES:
        raise InputError(f"workflow {metadata.get('name')} is {phase or 'not started'}; "
                         "only Failed or Error workflows can be retried")
    kept, dropped = carried_nodes(workflow, workflow_nodes(workflow))
    ended = ("nodes", "compressedNodes", "message", "finishedAt", "conditions")  # the nodes: `kept`, copied
    new = copy.deepcopy({**workflow, "status": {k: v for k, v in status.items() if k not in ended}})
    new["status"]["phase"] = "Running"
    labels = new["metadata"].setdefault("labels", {})
    labels[ARGO_COMPLETED_LABEL] = "false"
    labels[ARGO_PHASE_LABEL] = "Running"
    # The steps run again start new Retry nodes, whose attempts count from 0: this mark tells their programs to look
    # for the checkpoints the attempts before the retry saved (wf.compile.checkpoints.RESUME_EXPRESSION).
    annotations = new["metadata"].setdefault("annotations", {})
    retried = str(annotations.get(RETRIED_ANNOTATION, ""))
    annotations[RETRIED_ANNOTATION] = str(int(retried) + 1 if retried.isdigit() else 1)
    reopen_spec(new.setdefault("spec", {}))

    new["status"] = packed_status(new, kept)
    view = workflow_view(workflow)
    by_id = {a.node_id: a for row in view.steps for a in row.attempts}
    pods = [pod_name(workflow, by_id[node_id]) for node_id in dropped if node_id in by_id]
    return new, sorted(pods)


def retry_workflow(kube: Kube, name: str, namespace: str | None = None,
                   sleep: Callable[[float], None] = time.sleep) -> dict[str, Any]:
    """Retry a Failed/Error workflow in place: delete the failed steps' pods, then reset its status."""
    from kubernetes.client.exceptions import ApiException

    ns = namespace or kube.namespace
    workflow = get_workflow(kube, name, ns)
    with api_errors(kube, f"retrying workflow {name}", ns):
        for conflicts in range(RETRY_CONFLICTS):
            new = _release_failed_steps(kube, name, ns, workflow, sleep)
            try:
                # Optimistic concurrency: the PUT carries the resourceVersion we read, so a concurrent change fails.
                return kube.custom.replace_namespaced_custom_object(WORKFLOW.group, WORKFLOW.version, ns,
                                                                    WORKFLOW.plural, name, new)
            except ApiException as exc:
                # The controller (its archiving, a late task result) wrote the workflow after we read it: plan the
                # retry again from what it holds now.
                if exc.status != 409 or conflicts == RETRY_CONFLICTS - 1:
                    raise
            workflow = get_workflow(kube, name, ns)
    raise AssertionError("unreachable: the last conflict is raised above")


def _release_failed_steps(kube: Kube, name: str, ns: str, workflow: dict[str, Any],
                          sleep: Callable[[float], None]) -> dict[str, Any]:
    """The retried workflow planned from `workflow`, once the pods of the steps it runs again are gone."""
    from kubernetes.client.exceptions import ApiException

    new, pods = retry_plan(workflow)
    for pod in pods:
        try:
            kube.core.delete_namespaced_pod(pod, ns)
        except ApiException as exc:
            if exc.status != 404:
                raise
    # Pod names are derived from node names, so a new attempt reuses the old pod's name: if the old pod
    # were still there the controller would adopt its failure. Wait until they are gone.
    deadline = time.monotonic() + POD_GONE_WAIT_SECONDS
    remaining = set(pods)
    while remaining and time.monotonic() < deadline:
        present = {p.metadata.name for p in kube.core.list_namespaced_pod(
            ns, label_selector=f"{ARGO_WORKFLOW_LABEL}={name}").items}
        remaining &= present
        if remaining:
            sleep(1.0)
    if remaining:
        raise InputError(f"pods {', '.join(sorted(remaining))} of {name} are still being deleted; try again shortly")
    return new


def rerun_workflow(kube: Kube, name: str, step: str, parameters: dict[str, str] | None = None,
                   namespace: str | None = None) -> dict[str, Any]:
    """A new workflow that reuses the finished workflow's steps before `step` and runs `step` and what follows
    (wf.controller.resubmit.rerun_plan), named here like a submitted one and created once whatever the network
    does (a retried POST's 409 is read back, wf.controller.submit.create)."""
    import uuid

    from wf.controller.submit import client_name, create

    workflow = get_workflow(kube, name, namespace or kube.namespace)
    submission = str(uuid.uuid4())
    prefix = ((workflow["metadata"].get("labels") or {}).get(JOB_LABEL) or name) + "-"
    new = rerun_plan(workflow, step, parameters or {}, name=client_name(prefix, submission), submission=submission,
                     now=datetime.now(UTC))
    return create(kube, new)


@dataclass(frozen=True)
class Replica:
    """A pod a multi-node step's MPIJob runs: its launcher or a worker, where it runs and on what capacity."""

    step: str
    job: str  # the MPIJob: one per attempt
    role: str  # launcher | worker
    pod: str
    node: str | None
    capacity: str | None  # what it asked for (after any Spot fallback)
    phase: str


def replicas(kube: Kube, name: str, namespace: str | None = None) -> list[Replica]:
    """The launchers and workers of the workflow's MPIJobs that still exist (the operator removes running
    workers when their MPIJob ends), oldest first."""
    ns = namespace or kube.namespace
    pods = kube.core.list_namespaced_pod(ns, label_selector=f"{WORKFLOW_NAME_LABEL}={name}").items
    pods.sort(key=lambda pod: (pod.metadata.creation_timestamp or datetime.min.replace(tzinfo=UTC), pod.metadata.name))
    return [Replica((p.metadata.labels or {}).get(STEP_LABEL, "-"), (p.metadata.labels or {}).get(MPI_JOB_LABEL, "-"),
                    (p.metadata.labels or {}).get(MPI_ROLE_LABEL, "-"), p.metadata.name, p.spec.node_name,
                    (p.metadata.labels or {}).get(CAPACITY_LABEL), p.status.phase or "Pending") for p in pods]


def _pods_by_step(kube: Kube, name: str, ns: str, step: str | None) -> list[tuple[str, Any]]:
    pods = [pod for selector in (ARGO_WORKFLOW_LABEL, WORKFLOW_NAME_LABEL)  # Argo's pods; MPI launchers and workers
            for pod in kube.core.list_namespaced_pod(ns, label_selector=f"{selector}={name}").items]
    out = []
    for pod in pods:
        labels = pod.metadata.labels or {}
        node_name = (pod.metadata.annotations or {}).get(ARGO_NODE_NAME_ANNOTATION, pod.metadata.name)
        step_name = labels.get(STEP_LABEL) or node_name.rsplit(".", 1)[-1]
        if step and step_name != step:
            continue
        out.append((step_name, pod))
    out.sort(key=lambda sp: sp[1].metadata.creation_timestamp or datetime.min.replace(tzinfo=UTC))
    return out


@dataclass(frozen=True)
class ShownAttempt:
    """The attempt of a step whose log is shown: which of how many, and where it ran."""

    step: str
    number: int  # 1-based, in the order the attempts started
    of: int  # the step's attempts so far
    pod: str
    attempt: Attempt

    @property
    def header(self) -> str:
        where = [f"pod {self.pod}", f"node {self.attempt.host}" if self.attempt.host else "no node yet"]
        where += [self.attempt.capacity] if self.attempt.capacity else []
        return f"== step {self.step}, attempt {self.number} of {self.of} ({', '.join(where)})"


def of_step(row: str, step: str) -> bool:
    """Whether a step row (`train`, or a fan-out item's `train(1:lr:0.1)`, as Argo names its nodes) is `step`'s."""
    return row == step or (row.startswith(step) and row[len(step):].startswith("("))


def _step_row(workflow: dict[str, Any], step: str) -> StepRow | None:
    """The step's row; None for a step of the spec's DAGs that has not started; InputError for no step."""
    rows = {row.name: row for row in workflow_view(workflow).steps}
    if step in rows:
        return rows[step]
    if items := [name for name in rows if of_step(name, step)]:
        raise InputError(f"step {step} of {workflow['metadata']['name']} fans out: name one of its items "
                         f"({', '.join(items)})")
    tasks = {task.get("name") for template in templates_by_name(workflow).values()
             for task in (template.get("dag") or {}).get("tasks") or []}
    if step in tasks:
        return None
    raise InputError(f"workflow {workflow['metadata']['name']} has no step {step!r} "
                     f"(steps: {', '.join(rows) or 'none started yet'})")


def choose_attempt(workflow: dict[str, Any], step: str, number: int | None = None) -> ShownAttempt | None:
    """The step's attempt `number` (1-based), else its latest; None while it has none (pure)."""
    row = _step_row(workflow, step)
    if row is None or not row.attempts:
        return None
    if number is not None and not 1 <= number <= len(row.attempts):
        raise InputError(f"step {step} of {workflow['metadata']['name']} has {len(row.attempts)} attempt(s) so far; "
                         f"--attempt takes 1 to {len(row.attempts)}")
    index = (number or len(row.attempts)) - 1
    attempt = row.attempts[index]
    return ShownAttempt(step, index + 1, len(row.attempts), pod_name(workflow, attempt), attempt)


def step_log_lines(kube: Kube, name: str, namespace: str | None, step: str, *, attempt: int | None = None,
                   tail: int | None = None, follow: bool = False, poll_seconds: float = 2.0,
                   sleep: Callable[[float], None] = time.sleep, archived: dict[str, Any] | None = None
                   ) -> Iterator[str]:
    """One step's log, an attempt at a time, each under a header saying which attempt it is and where it ran.
    Without `attempt`, the latest; with follow, each attempt to its end, then the next one's when a retry starts,
    until the step ends (or, with `attempt`, that attempt does). `archived`: the run as Argo archived it, its live
    object gone (it has ended: following it shows what it ran)."""
    ns = namespace or kube.namespace
    shown: set[str] = set()
    while True:
        workflow = archived if archived is not None else get_workflow(kube, name, ns)
        chosen = choose_attempt(workflow, step, attempt)
        row = _step_row(workflow, step)
        if chosen is not None and chosen.attempt.node_id not in shown:
            if not follow or archived is not None:
                yield chosen.header
                node = workflow_nodes(workflow).get(chosen.attempt.node_id)
                yield from _attempt_log(kube, ns, chosen.pod, tail, node, workflow_repository(workflow))
                return
            if chosen.attempt.phase != "Pending":  # no container to read yet
                shown.add(chosen.attempt.node_id)
                yield chosen.header
                yield from _follow_attempt(kube, name, ns, chosen, tail, poll_seconds)
                continue
        elif chosen is None and row is not None and row.cached:
            raise InputError(f"step {step} of {name} ran no pod: its result came from the step cache "
                             "(`wf submit --no-cache` runs it again)")
        elif chosen is None and row is not None and row.phase in TERMINAL_PHASES and \
                (original := (workflow["metadata"].get("labels") or {}).get(ARGO_RESUBMITTED_FROM_LABEL)):
            raise InputError(f"step {step} of {name} ran no pod: `wf rerun` reused its result from {original} "
                             f"(`wf logs {original} {step}` shows that run)")
        elif chosen is None and not follow:
            raise InputError(f"step {step} of {name} has not started; --follow waits for it")
        elif chosen is not None and (attempt is not None or (row is not None and row.phase in TERMINAL_PHASES)):
            return
        if workflow_view(workflow).done:  # what it ran was shown; a step it never started has nothing to show
            return
        sleep(poll_seconds)


def _attempt_log(kube: Kube, ns: str, pod: str, tail: int | None, node: dict[str, Any] | None = None,
                 repository: dict[str, Any] | None = None) -> Iterator[str]:
    """The pod's log; once the pod is gone, the log Argo archived for its node (`main-logs`), if any."""
    from kubernetes.client.exceptions import ApiException

    with api_errors(kube, f"reading the log of pod {pod}", ns):
        try:
            text = pod_log(kube.core, pod, ns, container=ARGO_MAIN_CONTAINER, tail_lines=tail)
        except ApiException as exc:
            if exc.status not in (400, 404):
                raise
            if exc.status == 404 and (archived := _archived_log(kube, ns, node, tail, repository)) is not None:
                yield f"(pod {pod} is gone: its log as Argo archived it)"
                yield from archived
                return
            yield f"(no log from pod {pod}: {exc.reason})"  # not started yet, or deleted without an archived log
            return
    yield from text.splitlines()


def _archived_log(kube: Kube, ns: str, node: dict[str, Any] | None, tail: int | None,
                  repository: dict[str, Any] | None = None) -> list[str] | None:
    """The lines of the node's archived log (its last `tail`); None when its log was not archived."""
    from wf.controller.archived_logs import archived_log_artifact, read_archived_log

    artifact = archived_log_artifact(node or {}, repository)
    text = read_archived_log(kube, ns, artifact) if artifact is not None else None
    if text is None:
        return None
    lines = text.splitlines()
    return lines[-tail:] if tail else ([] if tail == 0 else lines)


def _follow_attempt(kube: Kube, name: str, ns: str, shown: ShownAttempt, tail: int | None,
                    poll_seconds: float) -> Iterator[str]:
    """The attempt's log as it is written, until its node ends (then what is still in flight, briefly)."""
    from queue import Empty, Queue

    lines: Queue[str | None] = Queue()

    def read() -> None:
        try:
            response = kube.core.read_namespaced_pod_log(
                shown.pod, ns, container=ARGO_MAIN_CONTAINER, follow=True, tail_lines=tail, _preload_content=False,
                _request_timeout=(10, None))
            from kubernetes.watch.watch import iter_resp_lines

            for line in iter_resp_lines(response):
                lines.put(line)
        except Exception as exc:  # a pod deleted meanwhile (an interruption), or a log not yet available
            lines.put(f"(no log from pod {shown.pod}: {getattr(exc, 'reason', exc)})")
        finally:
            lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    reading, ended_at = True, None
    next_poll = time.monotonic() + poll_seconds
    while True:
        # A follow stream may outlive its container (kwok's does): after the end, drain briefly, then move on.
        drained = not reading or time.monotonic() - (ended_at or 0.0) > FOLLOW_DRAIN_SECONDS
        if ended_at is not None and lines.empty() and drained:
            return
        try:
            line = lines.get(timeout=0.5)
            if line is None:
                reading = False
            else:
                yield line
        except Empty:
            pass
        if ended_at is None and (not reading or time.monotonic() >= next_poll):
            next_poll = time.monotonic() + poll_seconds
            current = choose_attempt(get_workflow(kube, name, ns), shown.step, shown.number)
            if current is None or current.attempt.phase in TERMINAL_PHASES:
                ended_at = time.monotonic()


def log_lines(kube: Kube, name: str, namespace: str | None = None, *, step: str | None = None,
              follow: bool = False, tail: int | None = None, poll_seconds: float = 2.0,
              archived: dict[str, Any] | None = None) -> Iterator[str]:
    """Lines of the workflow's pods' main containers (each pod's last `tail`), each prefixed with its step, then
    the logs Argo archived of attempts whose pods are gone; with follow, until the workflow ends, picking up pods as
    their steps start. `archived`: the run as Argo archived it, its live object gone (every log is an archived one)."""
    from queue import Empty, Queue

    ns = namespace or kube.namespace
    workflow = archived if archived is not None else get_workflow(kube, name, ns)
    one_pass = not follow or archived is not None  # one step after another, archived logs included
    # The step view, built once for both uses (a big fan-out's is the costly part); a plain follow needs none.
    rows = workflow_view(workflow).steps if step or one_pass else ()
    if step and not any(of_step(row.name, step) for row in rows):
        _step_row(workflow, step)  # no such step: its error (a step not started yet: its pods will come)
    lines: Queue[str | None] = Queue()
    started: set[str] = set()
    active = [0]
    lock = threading.Lock()

    def read(step_name: str, pod: Any) -> None:
        try:
            response = kube.core.read_namespaced_pod_log(
                pod.metadata.name, ns, container=ARGO_MAIN_CONTAINER, follow=True, tail_lines=tail,
                _preload_content=False, _request_timeout=(10, None))
            from kubernetes.watch.watch import iter_resp_lines

            for line in iter_resp_lines(response):
                lines.put(f"[{step_name}] {line}")
        except Exception as exc:  # a pod deleted meanwhile, or a log not yet available
            lines.put(f"[{step_name}] (no log from pod {pod.metadata.name}: {getattr(exc, 'reason', exc)})")
        finally:
            with lock:
                active[0] -= 1
            lines.put(None)

    def start_new() -> None:
        for step_name, pod in _pods_by_step(kube, name, ns, step):
            phase = pod.status.phase if pod.status else None
            if pod.metadata.name in started or phase == "Pending":
                continue
            started.add(pod.metadata.name)
            with lock:
                active[0] += 1
            threading.Thread(target=read, args=(step_name, pod), daemon=True).start()

    with api_errors(kube, f"reading logs of {name}", ns):
        if one_pass:  # one step after another, so the output reads in order
            listed = set()
            for step_name, pod in _pods_by_step(kube, name, ns, step) if archived is None else ():
                from kubernetes.client.exceptions import ApiException

                listed.add(pod.metadata.name)
                try:
                    text = pod_log(kube.core, pod.metadata.name, ns, container=ARGO_MAIN_CONTAINER, tail_lines=tail)
                except ApiException as exc:
                    if exc.status in (400, 404):  # not started yet, or deleted meanwhile
                        yield f"[{step_name}] (no log from pod {pod.metadata.name}: {exc.reason})"
                        continue
                    raise
                for logged in text.splitlines():
                    yield f"[{step_name}] {logged}"
            nodes = workflow_nodes(workflow)
            for row in rows:  # attempts whose pods are gone: their archived logs
                for gone in (a for a in row.attempts if (not step or of_step(row.name, step))
                             and pod_name(workflow, a) not in listed):
                    for archived_line in _archived_log(kube, ns, nodes.get(gone.node_id), tail,
                                                       workflow_repository(workflow)) or []:
                        yield f"[{row.name}] {archived_line}"
            return
        start_new()
        ended_at: float | None = None  # when the workflow was seen ended
        next_poll = time.monotonic() + poll_seconds
        while True:
            with lock:
                idle = active[0] == 0
            # A follow stream may outlive its container (kwok's does): after the end, drain briefly, then stop.
            if ended_at is not None and lines.empty() and (idle or time.monotonic() - ended_at > FOLLOW_DRAIN_SECONDS):
                return
            try:
                queued = lines.get(timeout=0.5)
                if queued is not None:
                    yield queued
            except Empty:
                pass
            if ended_at is None and time.monotonic() >= next_poll:
                next_poll = time.monotonic() + poll_seconds
                start_new()
                if (get_workflow(kube, name, ns).get("status") or {}).get("phase") in TERMINAL_PHASES:
                    start_new()  # pods of the last steps may have started since the previous look
                    ended_at = time.monotonic()
