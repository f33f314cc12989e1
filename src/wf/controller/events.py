"""The watch's pure core: Workflow events in, watch state out (no threads, no cluster, no screen).

A Workflow event carries the whole object, status.nodes included (hundreds of KB for a 32-step job), and a
busy cluster sends one per pod change. Each event is reduced to a `Snapshot` as it arrives, in the stream's
thread, and only the newest snapshot per workflow waits for the consumer (`Inbox`), so memory is bounded by
the number of workflows, not by the events or by how far the consumer lags.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any

from wf.controller.steps import WorkflowView, templates_by_name, workflow_view
from wf.core.constants import (
    ARGO_POD_NAME_FORMAT_ANNOTATION,
    CAPACITY_LABEL,
    CLASS_LABEL,
    KUEUE_QUEUE_LABEL,
    NODE_FACTS_ANNOTATION,
)
from wf.core.errors import InputError

Key = tuple[str, str]  # (namespace, name)

_POD_TEMPLATE_KINDS = ("container", "script", "containerSet")


@dataclass(frozen=True)
class Snapshot:
    """One Workflow event as the watch keeps it: the per-step view, plus the few spec fields that reasons
    and cost read later (the name and pod-naming annotation, the pod templates without their bulk)."""

    view: WorkflowView
    workflow: dict[str, Any]


# The template labels the watch's later readers read (wf.compile.readback.read_placement: class, capacity, the
# team queue); the others (job, step, team...) differ from step to step and would keep every template distinct.
_READ_LABELS = (CLASS_LABEL, CAPACITY_LABEL, KUEUE_QUEUE_LABEL)


class Shared:
    """One object per distinct slim part of a pod template (labels, selector, containers...), for every snapshot a
    watch keeps: a day's 8,000 step templates hold a handful of distinct ones, not 8,000 copies of each (about
    20 MB of the full-size day's watch). The parts are never changed once made."""

    def __init__(self) -> None:
        self._parts: dict[str, Any] = {}

    def __call__(self, part: Any) -> Any:
        return self._parts.setdefault(json.dumps(part, sort_keys=True), part)


def _slim_container(container: dict[str, Any], share: Shared) -> dict[str, Any]:
    return share({k: container[k] for k in ("name", "resources") if k in container})


def _slim_template(template: dict[str, Any], share: Shared) -> dict[str, Any]:
    """A pod template with what placement, requests and reasons read (wf.compile.readback.read_placement, including
    the team queue's label; wf.compile.schedulability.pod_constraints): commands, env, images, retry strategies,
    annotations and the labels nothing reads dropped, the rest shared (`Shared`)."""
    slim: dict[str, Any] = {"name": template["name"]} if "name" in template else {}
    slim |= {k: share(template[k]) for k in ("nodeSelector", "affinity", "tolerations") if k in template}
    labels = (template.get("metadata") or {}).get("labels") or {}
    if read := {k: labels[k] for k in _READ_LABELS if k in labels}:
        slim["metadata"] = share({"labels": read})
    for key in ("container", "script"):
        if key in template:
            slim[key] = _slim_container(template[key] or {}, share)
    if "containerSet" in template:
        containers = (template["containerSet"] or {}).get("containers") or []
        slim["containerSet"] = share({"containers": [_slim_container(c, share) for c in containers]})
    for key in ("sidecars", "initContainers"):
        if key in template:
            slim[key] = share([_slim_container(c, share) for c in template[key] or []])
    return slim


def snapshot(workflow: dict[str, Any], share: Shared | None = None) -> Snapshot:
    """Reduce a Workflow object to a Snapshot (pure: `share` only decides which equal parts are one object)."""
    share = share or Shared()
    metadata = workflow.get("metadata") or {}
    templates = list(templates_by_name(workflow).values())
    # How its pods are named (`wf logs`), and the record of its nodes (cost).
    annotations = {k: v for k, v in (metadata.get("annotations") or {}).items()
                   if k in (ARGO_POD_NAME_FORMAT_ANNOTATION, NODE_FACTS_ANNOTATION)}
    return Snapshot(
        view=workflow_view(workflow),
        workflow={
            "metadata": {"name": metadata.get("name", ""), "namespace": metadata.get("namespace", ""),
                         "annotations": annotations},
            "spec": {"templates": [_slim_template(t, share) for t in templates
                                   if any(k in t for k in _POD_TEMPLATE_KINDS)]
                     # A multi-node step's object, whose replicas are what its attempts ran: cost and `wf get`
                     # read them (wf.compile.kinds.mpijob.replica_templates).
                     + [{"name": t.get("name", ""), "resource": {"manifest": (t["resource"] or {}).get("manifest", "")}}
                        for t in templates if "resource" in t]},
        },
    )


class Inbox:
    """What the streams hand the consumer: the newest snapshot per workflow (None: deleted) and, in order,
    the stream's notices. A workflow that changed ten times before the consumer looked is read once."""

    def __init__(self) -> None:
        self._ready = threading.Condition()
        self._latest: dict[Key, Snapshot | None] = {}
        self._notices: list[tuple[str, Any]] = []

    def workflow(self, key: Key, snap: Snapshot | None) -> None:
        with self._ready:
            self._latest.pop(key, None)  # re-insert: the consumer sees changes in the order they last happened
            self._latest[key] = snap
            self._ready.notify()

    def notice(self, kind: str, payload: Any) -> None:
        """kind: "synced" (namespace), "trouble" (message), "error" ((namespace, exception))."""
        with self._ready:
            self._notices.append((kind, payload))
            self._ready.notify()

    def take(self, timeout: float) -> tuple[dict[Key, Snapshot | None], list[tuple[str, Any]]]:
        """Everything that arrived, waiting up to timeout for something; snapshots first, then notices, so a
        "synced" notice comes after the listed workflows it vouches for."""
        with self._ready:
            if not self._latest and not self._notices:
                self._ready.wait(timeout)
            latest, notices = self._latest, self._notices
            self._latest, self._notices = {}, []
            return latest, notices


@dataclass
class WatchState:
    """Which workflows are followed, how each looks now, and which have ended.

    Named targets are followed as given; with `selector` set and no names, every workflow the stream
    delivers is followed (the selector chose them), including ones created while watching."""

    namespaces: set[str]
    targets: set[Key]
    selector: str = ""
    context: str = ""
    snapshots: dict[Key, Snapshot] = field(default_factory=dict)
    deleted: set[Key] = field(default_factory=set)
    ended: set[Key] = field(default_factory=set)
    synced: set[str] = field(default_factory=set)  # namespaces whose first list has been delivered

    @property
    def follows_selector(self) -> bool:
        return not self.targets

    def wants(self, key: Key) -> bool:
        return self.follows_selector or key in self.targets

    def apply(self, key: Key, snap: Snapshot | None) -> bool:
        """Take a workflow's newest state (None: deleted); True when it concerns a followed workflow."""
        if not self.wants(key) or key in self.deleted:
            return False
        if snap is None:
            # A followed workflow can be created and deleted between two looks: named, it still counts.
            if key not in self.ended and (key in self.snapshots or key in self.targets):
                self.deleted.add(key)
            return key in self.deleted
        self.snapshots[key] = snap
        if snap.view.done:
            self.ended.add(key)
        return True

    def on_synced(self, namespace: str) -> None:
        """After a namespace's list: a named workflow absent now does not exist (InputError)."""
        self.synced.add(namespace)
        if self.follows_selector:
            if not any(ns == namespace for ns, _ in self.snapshots):
                raise InputError(f"no workflow matches {self.selector!r} in namespace {namespace} ({self.context})")
            return
        missing = sorted(name for ns, name in self.targets if ns == namespace and (ns, name) not in self.snapshots
                         and (ns, name) not in self.deleted)
        if missing:
            raise InputError(f"no workflow {', '.join(missing)} in namespace {namespace} ({self.context})")

    @property
    def followed(self) -> list[Key]:
        return list(self.targets) if not self.follows_selector else list(self.snapshots)

    @property
    def running(self) -> list[Key]:
        return [k for k in self.snapshots if k not in self.ended and k not in self.deleted]

    @property
    def listed(self) -> bool:
        """Every namespace's first list has been delivered: the set of followed workflows is known."""
        return self.namespaces <= self.synced

    @property
    def finished(self) -> bool:
        """Every followed workflow has ended or was deleted (once every namespace has been listed)."""
        if not self.listed:
            return False
        return all(k in self.ended or k in self.deleted for k in self.followed)

    @property
    def views(self) -> dict[Key, WorkflowView]:
        return {k: s.view for k, s in self.snapshots.items()}
