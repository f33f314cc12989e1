"""Operations on existing workflows through the Kubernetes API alone (no Argo server): get, list, logs,
retry, stop, delete."""

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
from wf.controller.client import Kube, api_errors
from wf.controller.steps import (
    FAILED_PHASES,
    TERMINAL_PHASES,
    containment,
    contents,
    members,
    pod_name,
    workflow_view,
)
from wf.core.constants import (
    ARGO_COMPLETED_LABEL,
    ARGO_NODE_NAME_ANNOTATION,
    ARGO_PHASE_LABEL,
    ARGO_WORKFLOW_LABEL,
    CAPACITY_LABEL,
    STEP_LABEL,
    WORKFLOW,
    WORKFLOW_NAME_LABEL,
)
from wf.core.errors import InputError

MAIN_CONTAINER = "main"
POD_GONE_WAIT_SECONDS = 60
FOLLOW_DRAIN_SECONDS = 3.0


def get_workflow(kube: Kube, name: str, namespace: str | None = None) -> dict[str, Any]:
    from kubernetes.client.exceptions import ApiException

    ns = namespace or kube.namespace
    with api_errors(kube, f"reading workflow {name}", ns):
        try:
            return kube.custom.get_namespaced_custom_object(WORKFLOW.group, WORKFLOW.version, ns, WORKFLOW.plural, name)
        except ApiException as exc:
            if exc.status == 404:
                raise InputError(f"no workflow {name!r} in namespace {ns} ({kube.context})") from None
            raise


def list_workflows(kube: Kube, namespace: str | None = None, *, all_namespaces: bool = False,
                   label_selector: str = "") -> list[dict[str, Any]]:
    items = list(iter_workflows(kube, namespace, all_namespaces=all_namespaces, label_selector=label_selector))
    items.sort(key=lambda w: w["metadata"].get("creationTimestamp", ""), reverse=True)
    return items


def iter_workflows(kube: Kube, namespace: str | None = None, *, all_namespaces: bool = False,
                   label_selector: str = "", page: int = 500) -> Iterator[dict[str, Any]]:
    """Workflows a page at a time, in the API server's order: a caller that keeps a digest of each (`wf report`)
    holds one page of whole objects, not all of them."""
    ns = namespace or kube.namespace
    token = None
    with api_errors(kube, "listing workflows", None if all_namespaces else ns):
        while True:
            kwargs: dict[str, Any] = {"limit": page, "label_selector": label_selector}
            if token:
                kwargs["_continue"] = token
            if all_namespaces:
                listed = kube.custom.list_cluster_custom_object(WORKFLOW.group, WORKFLOW.version, WORKFLOW.plural,
                                                                **kwargs)
            else:
                listed = kube.custom.list_namespaced_custom_object(WORKFLOW.group, WORKFLOW.version, ns,
                                                                   WORKFLOW.plural, **kwargs)
            items = listed.pop("items", None) or []
            token = (listed.get("metadata") or {}).get("continue")
            items.reverse()
            while items:
                yield items.pop()  # handed over: what the caller keeps of it is all that stays
            if not token:
                break


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


def delete_workflow(kube: Kube, name: str, namespace: str | None = None) -> None:
    from kubernetes.client.exceptions import ApiException

    ns = namespace or kube.namespace
    with api_errors(kube, f"deleting workflow {name}", ns):
        try:
            # Its pods are owned by the workflow: the garbage collector removes them.
            kube.custom.delete_namespaced_custom_object(WORKFLOW.group, WORKFLOW.version, ns, WORKFLOW.plural, name,
                                                        propagation_policy="Background")
        except ApiException as exc:
            if exc.status == 404:
                raise InputError(f"no workflow {name!r} in namespace {ns} ({kube.context})") from None
            raise


def retry_plan(workflow: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The workflow reset for a retry and the pods to delete first (pure).

    What `argo retry` does (workflow/util FormulateRetryWorkflow; Kubeflow Pipelines does the same through
    the API): keep what succeeded; drop every failed, errored or omitted step with all it contains, so the
    controller runs it afresh with a fresh retry budget; set failed DAG/Steps nodes on the way back to
    Running; clear the workflow's end (phase Running, message, finishedAt, completed label, shutdown). The
    nodes are written back as Argo's own retry writes them (hydrated, then packed as the controller packs them).
    """
    import copy

    metadata = workflow.get("metadata") or {}
    status = workflow.get("status") or {}
    phase = status.get("phase")
    if phase not in FAILED_PHASES:
        raise InputError(f"workflow {metadata.get('name')} is {phase or 'not started'}; "
                         "only Failed or Error workflows can be retried")
    nodes = workflow_nodes(workflow)
    on_exit = f"{metadata.get('name')}.onExit"
    dropped: set[str] = set()
    inside = members(containment(nodes))

    def drop(node_id: str) -> None:
        dropped.add(node_id)
        dropped.update(contents(inside, node_id))

    for node_id, node in nodes.items():
        node_phase = node.get("phase")
        if node_phase in ("Running", "Pending"):
            raise InputError(f"workflow {metadata.get('name')} still has {node.get('displayName')} {node_phase}; "
                             "wait for it to end")
        failed = node_phase in (*FAILED_PHASES, "Omitted")
        if (node.get("name") or "").startswith(on_exit) or (failed and node.get("type") not in ("DAG", "Steps")):
            drop(node_id)

    kept: dict[str, dict[str, Any]] = {}
    for node_id, original in nodes.items():
        if node_id in dropped:
            continue
        node = copy.deepcopy(original)
        if node.get("phase") in FAILED_PHASES and node.get("type") in ("DAG", "Steps"):
            node["phase"] = "Running"
            node.pop("message", None)
            node.pop("finishedAt", None)
        if node.get("children"):
            node["children"] = [c for c in node["children"] if c not in dropped]
        if node.get("outboundNodes"):
            node["outboundNodes"] = [c for c in node["outboundNodes"] if c not in dropped]
        kept[node_id] = node
    ended = ("nodes", "compressedNodes", "message", "finishedAt", "conditions")  # the nodes: `kept`, copied
    new = copy.deepcopy({**workflow, "status": {k: v for k, v in status.items() if k not in ended}})
    new["status"]["phase"] = "Running"
    labels = new["metadata"].setdefault("labels", {})
    labels[ARGO_COMPLETED_LABEL] = "false"
    labels[ARGO_PHASE_LABEL] = "Running"
    spec = new.setdefault("spec", {})
    spec.pop("shutdown", None)
    if spec.get("activeDeadlineSeconds") == 0:  # a terminated workflow had its deadline set to 0
        spec.pop("activeDeadlineSeconds")

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
    new, pods = retry_plan(workflow)
    with api_errors(kube, f"retrying workflow {name}", ns):
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
            pods = kube.core.list_namespaced_pod(ns, label_selector=f"{ARGO_WORKFLOW_LABEL}={name}").items
            present = {p.metadata.name for p in pods}
            remaining &= present
            if remaining:
                sleep(1.0)
        if remaining:
            raise InputError(f"pods {', '.join(sorted(remaining))} of {name} are still being deleted; "
                             "try again shortly")
        # Optimistic concurrency: the PUT carries the resourceVersion we read, so a concurrent change fails (409).
        return kube.custom.replace_namespaced_custom_object(WORKFLOW.group, WORKFLOW.version, ns, WORKFLOW.plural,
                                                            name, new)


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


def log_lines(kube: Kube, name: str, namespace: str | None = None, *, step: str | None = None,
              follow: bool = False, poll_seconds: float = 2.0) -> Iterator[str]:
    """Lines of the workflow's pods' main containers, each prefixed with its step; with follow, until the
    workflow ends, picking up pods as their steps start."""
    from queue import Empty, Queue

    ns = namespace or kube.namespace
    workflow = get_workflow(kube, name, ns)
    if step and step not in {row.name for row in workflow_view(workflow).steps}:
        known = ", ".join(row.name for row in workflow_view(workflow).steps) or "none yet"
        raise InputError(f"workflow {name} has no step {step!r} (steps: {known})")
    lines: Queue[str | None] = Queue()
    started: set[str] = set()
    active = [0]
    lock = threading.Lock()

    def read(step_name: str, pod: Any) -> None:
        try:
            response = kube.core.read_namespaced_pod_log(
                pod.metadata.name, ns, container=MAIN_CONTAINER, follow=True, _preload_content=False,
                _request_timeout=(10, None))
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
        if not follow:  # one step after another, so the output reads in order
            for step_name, pod in _pods_by_step(kube, name, ns, step):
                from kubernetes.client.exceptions import ApiException

                try:
                    text = kube.core.read_namespaced_pod_log(pod.metadata.name, ns, container=MAIN_CONTAINER)
                except ApiException as exc:
                    if exc.status in (400, 404):  # not started yet, or deleted meanwhile
                        yield f"[{step_name}] (no log from pod {pod.metadata.name}: {exc.reason})"
                        continue
                    raise
                for line in text.splitlines():
                    yield f"[{step_name}] {line}"
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
                line = lines.get(timeout=0.5)
                if line is not None:
                    yield line
            except Empty:
                pass
            if ended_at is None and time.monotonic() >= next_poll:
                next_poll = time.monotonic() + poll_seconds
                start_new()
                if (get_workflow(kube, name, ns).get("status") or {}).get("phase") in TERMINAL_PHASES:
                    start_new()  # pods of the last steps may have started since the previous look
                    ended_at = time.monotonic()
