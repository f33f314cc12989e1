"""Compiled placement read back: which class, capacity and queue a compiled pod template (or the pod it made)
asks for, whether it falls back to On-Demand, and which node groups can take it.

The one reader of what wf.compile.placement and wf.compile.workflow render, for everything that meets a compiled
template again: `wf get` (controller.steps), the Pending and quota reasons (controller.pending, controller.queue),
the watch's node facts, Kueue lint (lint.queues) and the schedulability verdicts. One rule: a pod's class and
capacity are what it selects (nodeSelector, else a required node affinity term with one value), else its own
labels, which the compiler writes alike; a label still holding an Argo expression (the Spot fallback's capacity)
is not a value yet, but a selector holding the fallback's expression gives the first attempt's capacity.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from wf.compile.interruptions import ON_DEMAND, SPOT_FALLBACK_ANNOTATION, first_capacity
from wf.core.constants import CAPACITY_LABEL, CLASS_LABEL, EKS_CAPACITY_LABEL, EKS_CAPACITY_VALUES, KUEUE_QUEUE_LABEL
from wf.model.catalog import Catalog
from wf.model.nodegroups import NodeGroup, node_groups

_CAPACITY_OF_EKS = {eks: capacity for capacity, eks in EKS_CAPACITY_VALUES.items()}


@dataclass(frozen=True)
class CompiledPlacement:
    """Where a compiled pod asks to run; None where it does not say."""

    compute_class: str | None = None
    capacity: str | None = None  # the first attempt's
    queue: str | None = None  # the Kueue LocalQueue it waits in
    # Spot fallback: the number of interruptions after which its attempts run On-Demand.
    fallback_after: int | None = None
    # A step whose attempts run pods of several roles (a multi-node step): the role this placement is of, and the
    # other roles with the capacity each asks for, the same in every attempt.
    role: str | None = None
    others: tuple[tuple[str, str | None], ...] = ()

    @property
    def capacities(self) -> tuple[str, ...]:
        """The capacities its attempts may run on, the first attempt's first; none known: empty."""
        if self.capacity is None:
            return ()
        return tuple(dict.fromkeys((self.capacity, ON_DEMAND))) if self.fallback_after is not None else (self.capacity,)

    def attempt_capacity(self, retry_index: int) -> str | None:
        """The capacity the attempt at `retry_index` of its Retry node asked for (the compiled podSpecPatch
        counts Argo's `retries` the same way)."""
        if self.fallback_after is not None and retry_index >= self.fallback_after:
            return ON_DEMAND
        return self.capacity

    def attempt_roles(self, retry_index: int) -> tuple[tuple[str, str | None], ...]:
        """Each role of the attempt at `retry_index` with the capacity it asked for (none: one role)."""
        return (*self.others, (self.role, self.attempt_capacity(retry_index))) if self.role else ()

    def node_groups(self, catalog: Catalog) -> list[NodeGroup]:
        """The catalog's node groups of its class, of its capacity when it names one."""
        return [g for g in node_groups(catalog) if g.compute_class == self.compute_class
                and (self.capacity is None or g.capacity == self.capacity)]


def read_placement(template: dict[str, Any] | None) -> CompiledPlacement:
    """The placement of an Argo pod template, or of a pod or pod template (its `spec` holds the selector)."""
    if not template:
        return CompiledPlacement()
    spec = template["spec"] if isinstance(template.get("spec"), dict) else template
    metadata = template.get("metadata") or {}
    labels = metadata.get("labels") or {}
    chosen = {**_literal(labels), **selected_labels(spec.get("nodeSelector") or {}, _required_terms(spec))}
    if (capacity := chosen.get(CAPACITY_LABEL)) is not None and "{{" in capacity:
        # A Spot fallback in the selector itself (a multi-node step's workers): the first attempt's capacity.
        if (first := first_capacity(capacity)) is not None:
            chosen[CAPACITY_LABEL] = first
        else:
            del chosen[CAPACITY_LABEL]
    after = str((metadata.get("annotations") or {}).get(SPOT_FALLBACK_ANNOTATION, ""))
    return CompiledPlacement(chosen.get(CLASS_LABEL), chosen.get(CAPACITY_LABEL), labels.get(KUEUE_QUEUE_LABEL),
                             int(after) if after.isdigit() else None)


def selected_labels(node_selector: dict[str, Any], affinity_terms: list[dict[str, Any]]) -> dict[str, str]:
    """The node labels a pod insists on: its nodeSelector, and the single-valued `In` expressions of its first
    required node affinity term (the scheduler ORs the terms, so only a lone term pins a label)."""
    selected = {str(k): str(v) for k, v in node_selector.items()}
    for term in affinity_terms[:1] if len(affinity_terms) == 1 else []:
        for expr in term.get("matchExpressions") or []:
            if expr.get("operator") == "In" and len(expr.get("values") or []) == 1:
                selected.setdefault(str(expr.get("key")), str(expr["values"][0]))
    return selected


def node_capacity(labels: dict[str, str]) -> str | None:
    """The capacity a node offers: wf's label, else EKS's capacityType (`SPOT`, `ON_DEMAND`) in wf's terms."""
    return labels.get(CAPACITY_LABEL) or _CAPACITY_OF_EKS.get(labels.get(EKS_CAPACITY_LABEL, ""))


def _required_terms(spec: dict[str, Any]) -> list[dict[str, Any]]:
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution") or {}
    return list(required.get("nodeSelectorTerms") or [])


def _literal(labels: dict[str, Any]) -> dict[str, str]:
    return {str(k): str(v) for k, v in labels.items() if "{{" not in str(v)}
