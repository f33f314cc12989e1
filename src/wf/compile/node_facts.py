"""Where a workflow's attempts ran, kept with the workflow: the node facts record.

An attempt is priced at its node's instance type and capacity, but nodes go (Spot reclaims them, Karpenter
consolidates them away) long before anyone asks what a run cost. So the node facts recorder
(wf.controller.node_recorder) keeps, as each of a workflow's pods is bound, its node's facts with the workflow: in
its ledger while it runs (the key NODE_RECORD_KEY), then on the ended workflow itself (the annotation
NODE_FACTS_ANNOTATION), for Argo's archive. One JSON object:

    {"nodes": {"<node>": ["<instance type>", "<capacity>", "<zone>"]},
     "gangs": {"<attempt's Argo node id>": {"launcher": ["<node>"], "worker": ["<node>", ...]}},
     "disrupted": ["<attempt's Argo node id>", ...]}

A node appears once however many pods ran on it. Argo's node status already says which node ran each of its pods
(`hostNodeName`); a multi-node step's launcher and workers are the mpi-operator's pods, so `gangs` says, per
attempt, which nodes its replicas were bound to. The attempt is the one whose Argo resource pod created their
MPIJob: every attempt of one run of the step creates the same MPIJob name (wf.compile.kinds.mpijob), only after the
previous one's pods are gone, so a replica belongs to the newest resource pod of its MPIJob created before it.
`disrupted` names the attempts whose pod was taken away while it ran (Kubernetes' DisruptionTarget condition: an
eviction, as a drain's; a preemption; the pod GC's or the taint manager's deletion; the kubelet's pressure
eviction; or any deletion of a pod not yet ended). Such an attempt is an interruption whatever its exit code: a
program that saves and exits 143 on the SIGTERM of an eviction may end, in Argo's words, "exit code 143" on a node
that stays (seen on a real node), which alone would read as the program's own SIGTERM.

This module is the pure part: a Node's facts, a pod's place, the record read and merged. The record is bounded
(MAX_RECORD_BYTES): past it new nodes are left out, and cost falls back to the live Node, as without a recorder.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from wf.compile.kinds.mpijob import JOB_NAME_LABEL, JOB_ROLE_LABEL
from wf.compile.readback import node_capacity
from wf.core.constants import (
    ARGO_NODE_ID_ANNOTATION,
    ARGO_WORKFLOW_LABEL,
    INSTANCE_TYPE_LABEL,
    MPIJOB_LABEL,
    NODE_FACTS_ANNOTATION,
    WORKFLOW_NAME_LABEL,
    ZONE_LABEL,
)

# Well under the API server's 256 KiB for all of an object's annotations: about 1,000 nodes per workflow.
MAX_RECORD_BYTES: Final = 64 * 1024


@dataclass(frozen=True)
class NodeFacts:
    instance_type: str
    capacity: str | None  # "spot" | "on-demand" | None when the node carries no capacity label
    zone: str | None = None


def node_facts(node: Mapping[str, Any]) -> NodeFacts | None:
    """What cost needs of a Node, as the API server sends it (JSON, the form wf's
    streams and pages read); None without an instance type."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    return NodeFacts(labels[INSTANCE_TYPE_LABEL], node_capacity(labels), labels.get(ZONE_LABEL)) \
        if INSTANCE_TYPE_LABEL in labels else None


Gang = Mapping[str, tuple[str, ...]]  # role (launcher, worker) -> the nodes its pods were bound to, in order


@dataclass(frozen=True)
class NodeRecord:
    """A workflow's record: facts by node name, and each multi-node attempt's nodes by its Argo node id."""

    nodes: Mapping[str, NodeFacts] = field(default_factory=dict)
    gangs: Mapping[str, Gang] = field(default_factory=dict)
    disrupted: frozenset[str] = frozenset()  # attempts (Argo node ids) whose pod was taken away while it ran

    def __bool__(self) -> bool:
        return bool(self.nodes or self.gangs or self.disrupted)

    def holds(self, node: str, gang: tuple[str, str] | None, disrupted: str | None = None) -> bool:
        """Whether the record already says that `node` ran (for `gang`: that attempt's role; for `disrupted`: that
        the attempt was taken away)."""
        if node not in self.nodes or (disrupted is not None and disrupted not in self.disrupted):
            return False
        return gang is None or node in (self.gangs.get(gang[0]) or {}).get(gang[1], ())

    def with_binding(self, node: str, facts: NodeFacts, gang: tuple[str, str] | None,
                     disrupted: str | None = None) -> NodeRecord:
        """The record with `node` (and, for a replica, its attempt's role; for `disrupted`, that attempt taken away)
        added; the first facts of a node stay."""
        nodes = self.nodes if node in self.nodes else {**self.nodes, node: facts}
        gangs = self.gangs
        if gang is not None and not self.holds(node, gang):
            attempt, role = gang
            roles = dict(self.gangs.get(attempt) or {})
            roles[role] = (*roles.get(role, ()), node)
            gangs = {**self.gangs, attempt: roles}
        return NodeRecord(nodes, gangs, self.disrupted | ({disrupted} if disrupted else set()))

    def fits(self) -> bool:
        """Whether it stays within MAX_RECORD_BYTES (copied onto the workflow, an annotation)."""
        return len(self.encode().encode()) <= MAX_RECORD_BYTES

    def encode(self) -> str:
        return json.dumps({"nodes": {name: [f.instance_type, f.capacity or "", f.zone or ""]
                                     for name, f in sorted(self.nodes.items())},
                           "gangs": {attempt: {role: list(nodes) for role, nodes in sorted(roles.items())}
                                     for attempt, roles in sorted(self.gangs.items())},
                           **({"disrupted": sorted(self.disrupted)} if self.disrupted else {})},
                          separators=(",", ":"))


def read_record(workflow: Mapping[str, Any]) -> NodeRecord:
    """The record copied onto an ended workflow (a running one's is in its ledger); empty when it has none (no
    recorder ran, or not yet) or holds what wf did not write."""
    text = ((workflow.get("metadata") or {}).get("annotations") or {}).get(NODE_FACTS_ANNOTATION)
    return decode_record(text) if isinstance(text, str) else NodeRecord()


def _strings(value: Any, length: int | None = None) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value) or \
            (length is not None and len(value) != length):
        raise TypeError("not a list of strings")
    return value


def decode_record(text: str) -> NodeRecord:
    try:
        data = json.loads(text)
        nodes = {str(name): NodeFacts(kind, capacity or None, zone=zone or None)
                 for name, facts in (data.get("nodes") or {}).items()
                 for kind, capacity, zone in [_strings(facts, 3)]}
        gangs = {str(attempt): {str(role): tuple(_strings(names)) for role, names in roles.items()}
                 for attempt, roles in (data.get("gangs") or {}).items()}
        disrupted = frozenset(_strings(data.get("disrupted") or []))
    except (ValueError, TypeError, AttributeError):
        return NodeRecord()
    return NodeRecord(nodes, gangs, disrupted)


@dataclass(frozen=True)
class PodPlace:
    """What the recorder needs of a workflow's pod: whose it is, where it runs, and which attempt it serves."""

    namespace: str
    workflow: str
    created: str  # its creationTimestamp (RFC 3339, as the API server writes it: ordered as text)
    node: str | None  # spec.nodeName: None until the scheduler binds it
    attempt: str | None = None  # an Argo pod's node id: the attempt it runs
    mpijob: str | None = None  # an Argo resource pod's MPIJob (MPIJOB_LABEL), or a replica's
    role: str | None = None  # a replica's role: launcher | worker (None: Argo's pod)


def pod_place(pod: Mapping[str, Any]) -> PodPlace | None:
    """The place of a pod of a workflow (Argo's, or a multi-node step's launcher or worker); None for others."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    node = (pod.get("spec") or {}).get("nodeName") or None
    namespace, created = meta.get("namespace", ""), meta.get("creationTimestamp") or ""
    if workflow := labels.get(ARGO_WORKFLOW_LABEL):
        attempt = (meta.get("annotations") or {}).get(ARGO_NODE_ID_ANNOTATION)
        return PodPlace(namespace, workflow, created, node, attempt, labels.get(MPIJOB_LABEL))
    if (workflow := labels.get(WORKFLOW_NAME_LABEL)) and (role := labels.get(JOB_ROLE_LABEL)):
        return PodPlace(namespace, workflow, created, node, mpijob=labels.get(JOB_NAME_LABEL), role=role)
    return None


@dataclass(frozen=True)
class Binding:
    """A node to record on a workflow, with the attempt and role it served for a multi-node step's replica."""

    namespace: str
    workflow: str
    node: str
    gang: tuple[str, str] | None = None  # (attempt's Argo node id, role)
    disrupted: str | None = None  # an attempt (Argo node id) whose pod on `node` was taken away while it ran


class GangAttempts:
    """Which attempt each MPIJob's replicas serve: the newest resource pod of that MPIJob created before them.
    Replicas seen before their resource pod (a relist's pages are in name order) wait for it."""

    def __init__(self) -> None:
        self._attempts: dict[tuple[str, str], dict[str, tuple[str, str]]] = {}  # MPIJob -> pod uid -> (created, id)
        self._waiting: dict[tuple[str, str], dict[str, PodPlace]] = {}  # MPIJob -> replica uid -> place

    def observe(self, uid: str, place: PodPlace, deleted: bool = False) -> list[Binding]:
        """What to record now that the pod `uid` is at `place` (or gone)."""
        key = (place.namespace, place.mpijob or "")
        if deleted:
            (self._attempts if place.role is None else self._waiting).get(key, {}).pop(uid, None)
            return []
        out: list[Binding] = []
        if place.role is None:
            if place.mpijob and place.attempt:
                self._attempts.setdefault(key, {})[uid] = (place.created, place.attempt)
                for waiting_uid, replica in list(self._waiting.get(key, {}).items()):
                    if (attempt := self._attempt(key, replica.created)) is not None:
                        del self._waiting[key][waiting_uid]
                        out.append(self._binding(replica, attempt))
            if place.node:
                out.append(Binding(place.namespace, place.workflow, place.node))
            return out
        if place.node is None:
            return out
        if (attempt := self._attempt(key, place.created)) is None:
            self._waiting.setdefault(key, {})[uid] = place
            return [Binding(place.namespace, place.workflow, place.node)]  # the node's facts at least, now
        return [self._binding(place, attempt)]

    def _attempt(self, key: tuple[str, str], created: str) -> str | None:
        earlier = [pair for pair in self._attempts.get(key, {}).values() if pair[0] <= created]
        return max(earlier)[1] if earlier else None

    @staticmethod
    def _binding(place: PodPlace, attempt: str) -> Binding:
        assert place.node is not None and place.role is not None
        return Binding(place.namespace, place.workflow, place.node, (attempt, place.role))


def disrupted_attempt(pod: Mapping[str, Any]) -> str | None:
    """The attempt (Argo node id) of an Argo pod taken away while it ran: one with Kubernetes' DisruptionTarget
    condition (an eviction, a preemption, the pod GC's or taint manager's deletion, the kubelet's pressure
    eviction), or deleted before it ended; None for any other pod."""
    meta = pod.get("metadata") or {}
    attempt = (meta.get("annotations") or {}).get(ARGO_NODE_ID_ANNOTATION)
    status = pod.get("status") or {}
    # Seen while it runs: a pod that had ended already (its program failed, then a drain evicted what was left)
    # was not cut short.
    if not attempt or not (pod.get("spec") or {}).get("nodeName") or status.get("phase") not in ("Pending", "Running"):
        return None
    disrupted = any(c.get("type") == "DisruptionTarget" and c.get("status") == "True"
                    for c in status.get("conditions") or [])
    return attempt if disrupted or meta.get("deletionTimestamp") else None
