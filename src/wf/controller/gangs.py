"""A multi-node step's worker lost while its launcher runs, and the mark it leaves on the MPIJob.

mpirun fails within seconds when a rank's daemon goes with its node, and the launcher's Job fails with it: the
MPIJob's `Launcher.failed`, which is also every program's non-zero exit. What tells the two apart is gone by then
from the MPIJob's status (mpi-operator v0.6.0: a worker pod counts in `Worker.failed` only while it is listed; the
pod GC and a drain delete it, getOrCreateWorker creates it again under its name, and the workers' counters are reset
once the launcher's Job has finished). So what watches the pods marks the MPIJob (MPI_WORKER_LOST_ANNOTATION) when
one of its workers stops running (its pod deleted or being deleted, failed, or its node deleted) while its launcher
runs: the step's failure condition reads the mark before any `status.*` key (wf.compile.kinds.mpijob), an
interruption sign. A worker lost before its launcher started ends nothing (the operator creates it again and the
launcher waits for it), nor one removed after the launcher ended (the operator's cleanup).

`Gangs` is the rule, fed pod events of MPIJob replicas in the order one watch delivers them (a launcher's end comes
before the cleanup of its workers) and node deletions; `mark_worker_lost` writes the mark. The node recorder runs
both, on EKS (the platform bundle's Deployment) and on the local cluster (a process) alike
(wf.controller.node_recorder); the local cluster's simulated executor runs `Gangs` too, to play mpirun failing once
the mark is there (wf.cluster.executor).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from wf.compile.kinds.mpijob import JOB_NAME_LABEL, JOB_ROLE_LABEL
from wf.core.constants import MPI_WORKER_LOST_ANNOTATION, MPIJOB

LAUNCHER_ROLE = "launcher"
WORKER_ROLE = "worker"


@dataclass(frozen=True)
class LostWorker:
    namespace: str
    mpijob: str  # the MPIJob's name (its replicas' job-name label)
    worker: str  # the worker pod's name, which is its hostname in mpirun's hostfile
    launcher: str  # the launcher pod whose mpirun lost the rank
    reason: str  # how the worker stopped running, in a few words


def _running(pod: dict[str, Any], deleted: bool) -> bool:
    return not deleted and not (pod.get("metadata") or {}).get("deletionTimestamp") and \
        (pod.get("status") or {}).get("phase") == "Running"


def _how_it_stopped(pod: dict[str, Any], deleted: bool) -> str:
    if deleted:
        return "its pod was deleted"
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return "its pod is being deleted"
    status = pod.get("status") or {}
    return f"its pod {status.get('phase') or 'stopped'}" + (f" ({status['reason']})" if status.get("reason") else "")


class Gangs:
    """The running launcher and workers of each MPIJob (by namespace and name), from its replicas' pod events."""

    def __init__(self) -> None:
        self.launchers: dict[tuple[str, str], str] = {}  # MPIJob -> its running launcher pod
        self.workers: dict[tuple[str, str], dict[str, tuple[str, str]]] = {}  # MPIJob -> uid -> (pod, node)
        self.lost: set[tuple[str, str, str]] = set()  # (namespace, MPIJob, launcher) already reported
        self.lock = threading.Lock()  # pod events and node deletions come from two watches

    def observe(self, pod: dict[str, Any], deleted: bool = False) -> list[LostWorker]:
        """The losses a replica pod's event makes (at most one per launcher)."""
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        role, job = labels.get(JOB_ROLE_LABEL), labels.get(JOB_NAME_LABEL)
        if not job or role not in (LAUNCHER_ROLE, WORKER_ROLE):
            return []
        key = (meta.get("namespace", ""), job)
        running = _running(pod, deleted)
        with self.lock:
            if role == LAUNCHER_ROLE:
                if running:
                    self.launchers[key] = meta.get("name", "")
                elif self.launchers.get(key) == meta.get("name"):
                    self.lost.discard((*key, self.launchers.pop(key)))
                return []
            workers = self.workers.setdefault(key, {})
            if running:
                workers[meta.get("uid", "")] = (meta.get("name", ""), (pod.get("spec") or {}).get("nodeName") or "")
                return []
            seen = workers.pop(meta.get("uid", ""), None)
            if not workers:
                del self.workers[key]
            if seen is None:
                return []  # never seen running: nothing of mpirun's was on it
            return self._lose(key, meta.get("name", ""), _how_it_stopped(pod, deleted))

    def node_gone(self, node: str) -> list[LostWorker]:
        """The losses a Node's deletion makes: its workers' ranks went with it, before the pod GC deletes their pods."""
        out: list[LostWorker] = []
        with self.lock:
            for key, workers in self.workers.items():
                for uid, (pod, on) in list(workers.items()):
                    if on == node:
                        del workers[uid]
                        out += self._lose(key, pod, f"its node {node} was deleted")
            for key in [key for key, workers in self.workers.items() if not workers]:
                del self.workers[key]
        return out

    def _lose(self, key: tuple[str, str], worker: str, reason: str) -> list[LostWorker]:
        """A worker of `key` stopped running (the caller holds the lock): a loss when a launcher runs, once."""
        launcher = self.launchers.get(key)
        if launcher is None or (*key, launcher) in self.lost:
            return []
        self.lost.add((*key, launcher))
        return [LostWorker(key[0], key[1], worker, launcher, reason)]


def mark_worker_lost(custom: Any, loss: LostWorker) -> bool:
    """Mark the loss's MPIJob (a CustomObjectsApi's merge patch); False when the MPIJob is gone."""
    from kubernetes.client.exceptions import ApiException

    try:
        custom.patch_namespaced_custom_object(
            MPIJOB.group, MPIJOB.version, loss.namespace, MPIJOB.plural, loss.mpijob,
            {"metadata": {"annotations": {MPI_WORKER_LOST_ANNOTATION: f"{loss.worker}: {loss.reason}"}}})
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True
