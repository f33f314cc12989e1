"""Two-way consistency between the catalog, compiled placement and the node groups that exist.

Argo and the schedulers find a selector/taint mismatch only at run time (a pod Pending, "pod didn't trigger
scale-up"); these checks find it in CI: every class x capacity x zone has a node group, each class's placement
admits its own groups and no other class's, and hand-edited configs have not drifted from the catalog.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from wf.catalog import Catalog, ComputeClass
from wf.eksctl import (
    cluster_config_drift, config_node_groups, group_taints, group_zones, group_instance_types, single_cluster_config,
)
from wf.errors import Problem
from wf.instances import instance_type
from wf.labels import ARCH_LABEL, CAPACITY_LABEL, CLASS_LABEL
from wf.loader import load_documents
from wf.placement import node_selector_for, tolerations_for

TaintTuple = tuple[str, str, str]
# Only these keep a pod off a node; PreferNoSchedule is a preference.
HARD_EFFECTS = ("NoSchedule", "NoExecute")


def tolerates(toleration: Mapping[str, str], taint: TaintTuple) -> bool:
    """Kubernetes' rule (core/v1 Toleration.ToleratesTaint)."""
    key, value, effect = taint
    if toleration.get("effect") and toleration["effect"] != effect:
        return False
    operator = toleration.get("operator", "Equal")
    if operator == "Exists":
        return not toleration.get("key") or toleration["key"] == key
    return toleration.get("key") == key and toleration.get("value", "") == value


def untolerated(tolerations: Iterable[Mapping[str, str]], taints: Iterable[TaintTuple]) -> list[TaintTuple]:
    tolerations = list(tolerations)
    return [t for t in taints if t[2] in HARD_EFFECTS and not any(tolerates(tol, t) for tol in tolerations)]


def unmatched(node_selector: Mapping[str, str], labels: Mapping[str, str]) -> list[str]:
    return [key for key, value in node_selector.items() if labels.get(key) != value]


def admits(node_selector: Mapping[str, str], tolerations: Iterable[Mapping[str, str]],
           labels: Mapping[str, str], taints: Iterable[TaintTuple]) -> bool:
    """Whether a pod with this nodeSelector and these tolerations may schedule on a node so labelled/tainted."""
    return not unmatched(node_selector, labels) and not untolerated(tolerations, taints)


def class_placements(catalog: Catalog) -> list[tuple[ComputeClass, str, dict[str, str], list[dict[str, str]]]]:
    """(class, capacity, nodeSelector, tolerations) exactly as compiled workflows carry them."""
    return [(cls, cap, node_selector_for(cls, cap), tolerations_for(cls))
            for cls in catalog.compute_classes for cap in cls.capacity]


def _node_labels(ng: dict[str, Any]) -> dict[str, str]:
    """The labels a node of a config group carries that placement may select on: its own plus its arch."""
    labels = {str(k): str(v) for k, v in (ng.get("labels") or {}).items()} if isinstance(ng.get("labels"), dict) \
        else {}
    arches = set()
    for name in group_instance_types(ng):
        try:
            arches.add(instance_type(name).arch)
        except ValueError:
            continue
    if len(arches) == 1:
        labels[ARCH_LABEL] = arches.pop()
    return labels


def check_cluster_config(catalog: Catalog, path: str | Path) -> list[Problem]:
    """Every finding about an eksctl ClusterConfig against the catalog, in file order where it has one."""
    doc = single_cluster_config(load_documents(path), str(path))
    groups = list(config_node_groups(doc))
    problems: list[Problem] = []

    for cls in catalog.compute_classes:
        ours = [ng for _, ng in groups if (ng.get("labels") or {}).get(CLASS_LABEL) == cls.name]
        if not ours:
            problems.append(doc.problem(("managedNodeGroups",),
                                        f"compute class {cls.name} has no node group (label {CLASS_LABEL}="
                                        f"{cls.name}): its steps would stay Pending"))
            continue
        for capacity in cls.capacity:
            covered = {z for ng in ours if (ng.get("labels") or {}).get(CAPACITY_LABEL) == capacity
                       for z in group_zones(ng, doc)}
            missing = [z for z in cls.zones(catalog.cluster) if z not in covered]
            if missing:
                problems.append(doc.problem(("managedNodeGroups",),
                                            f"compute class {cls.name} has no {capacity} node group in "
                                            f"{', '.join(missing)}"))

    placements = class_placements(catalog)
    for at, ng in groups:
        labels = _node_labels(ng)
        taints = group_taints(ng)
        name = ng.get("name", "?")
        owner = labels.get(CLASS_LABEL)
        for cls, capacity, selector, tolerations in placements:
            own = cls.name == owner and labels.get(CAPACITY_LABEL) == capacity
            if own:
                missing_labels = unmatched(selector, labels)
                blocked = untolerated(tolerations, taints)
                if missing_labels or blocked:
                    why = [f"label {k}={selector[k]} missing" for k in missing_labels]
                    why += [f"taint {k}={v}:{e} not tolerated" for k, v, e in blocked]
                    problems.append(doc.problem(at, f"node group {name}: class {cls.name} ({capacity}) pods "
                                                    f"cannot schedule here: {'; '.join(why)}"))
            elif admits(selector, tolerations, labels, taints):
                problems.append(doc.problem(at, f"node group {name}: pods of class {cls.name} ({capacity}) "
                                                "can schedule here too: its labels and taints do not keep "
                                                "other classes out"))

    seen = {(p.line, p.message) for p in problems}
    problems += [p for p in cluster_config_drift(catalog, path) if (p.line, p.message) not in seen]
    return problems
