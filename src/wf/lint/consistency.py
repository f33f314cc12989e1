"""Two-way consistency between the catalog, compiled placement and the node groups that exist.

Argo and the schedulers find a selector/taint mismatch only at run time (a pod Pending, "pod didn't trigger
scale-up"); these checks find it in CI: every class x capacity x zone has a node group, each class's placement
admits its own groups and no other class's, and hand-edited configs have not drifted from the catalog.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from wf.core.constants import ARCH_LABEL, CAPACITY_LABEL, CLASS_LABEL
from wf.core.errors import Problem
from wf.lint.drift import (
    ConfigSource,
    cluster_config_drift,
    config_node_groups,
    group_instance_types,
    group_taints,
    group_zones,
    read_cluster_config,
)
from wf.model.catalog import Catalog, ComputeClass, Taint
from wf.model.instances import instance_type
from wf.model.nodegroups import node_group


def untolerated(tolerations: Iterable[Mapping[str, str]], taints: Iterable[Taint]) -> list[Taint]:
    tolerations = list(tolerations)
    return [t for t in taints if t.repels(tolerations)]


def unmatched(node_selector: Mapping[str, str], labels: Mapping[str, str]) -> list[str]:
    return [key for key, value in node_selector.items() if labels.get(key) != value]


def admits(node_selector: Mapping[str, str], tolerations: Iterable[Mapping[str, str]],
           labels: Mapping[str, str], taints: Iterable[Taint]) -> bool:
    """Whether a pod with this nodeSelector and these tolerations may schedule on a node so labelled/tainted."""
    return not unmatched(node_selector, labels) and not untolerated(tolerations, taints)


def accidental_tolerations(catalog: Catalog, owner: ComputeClass, taints: list[Taint]) -> list[str]:
    """Other classes whose tolerations cover a group's hard taints without declaring those taints themselves.

    Classes that declare the same taint share it on purpose (say two NVIDIA classes); a valueless taint's
    `Exists` toleration covering another class's `key=value` taint is an accident: only the class label then
    keeps that class's pods off the group.
    """
    hard = [t for t in taints if t.is_hard]
    if not hard:
        return []
    out = []
    for other in catalog.compute_classes:
        if other.name == owner.name or set(hard) <= set(other.taints):
            continue
        if not untolerated(placement_of(catalog, other, other.default_capacity)[1], hard):
            out.append(f"class {other.name}'s tolerations also tolerate {', '.join(map(str, hard))} of class "
                       f"{owner.name}'s node group; give the taints distinct keys or values")
    return out


def placement_of(catalog: Catalog, cls: ComputeClass, capacity: str) -> tuple[dict[str, str], list[dict[str, str]]]:
    """The nodeSelector and tolerations compiled workflows give pods of the class (the node groups' renderer)."""
    group = node_group(cls, catalog, capacity if capacity in cls.capacity else cls.default_capacity)
    # A hand-written group may carry a capacity the class lacks: select on it as written, to report the rest.
    return {**group.node_selector, CAPACITY_LABEL: capacity}, group.tolerations


def _node_labels(ng: dict[str, Any]) -> dict[str, str]:
    """The labels a node of a config group carries that placement may select on: its own plus its arch."""
    raw = ng.get("labels")
    labels = {str(k): str(v) for k, v in raw.items()} if isinstance(raw, dict) else {}
    arches = set()
    for name in group_instance_types(ng):
        try:
            arches.add(instance_type(name).arch)
        except ValueError:
            continue
    if len(arches) == 1:
        labels[ARCH_LABEL] = arches.pop()
    return labels


def check_cluster_config(catalog: Catalog, config: ConfigSource) -> list[Problem]:
    """Every finding about an eksctl ClusterConfig (a path or a loaded document) against the catalog:
    coverage of each class x capacity x zone, taints each class tolerates, and drift (`cluster_config_drift`)."""
    doc, _ = read_cluster_config(config)
    groups = list(config_node_groups(doc))
    problems: list[Problem] = []

    for cls in catalog.compute_classes:
        ours = [ng for _, ng in groups if _node_labels(ng).get(CLASS_LABEL) == cls.name]
        if not ours:
            problems.append(doc.problem(("managedNodeGroups",),
                                        f"compute class {cls.name} has no node group (label {CLASS_LABEL}="
                                        f"{cls.name}): its steps would stay Pending"))
            continue
        for capacity in cls.capacity:
            covered = {z for ng in ours if _node_labels(ng).get(CAPACITY_LABEL) == capacity
                       for z in group_zones(ng, doc)}
            missing = [z for z in cls.zones(catalog.cluster) if z not in covered]
            if missing:
                problems.append(doc.problem(("managedNodeGroups",),
                                            f"compute class {cls.name} has no {capacity} node group in "
                                            f"{', '.join(missing)}"))

    for at, ng in groups:
        labels = _node_labels(ng)
        owner = labels.get(CLASS_LABEL)
        if owner not in catalog.class_names:
            continue  # not ours (system groups), or an unknown class, which the drift check reports
        cls = catalog.compute_class(owner)
        name = ng.get("name", "?")
        taints = group_taints(ng)
        selector, tolerations = placement_of(catalog, cls, labels.get(CAPACITY_LABEL, cls.default_capacity))
        why = [f"label {k}={selector[k]} missing" for k in unmatched(selector, labels)]
        why += [f"taint {t} not tolerated" for t in untolerated(tolerations, taints)]
        if why:
            problems.append(doc.problem(at, f"node group {name}: class {cls.name} pods cannot schedule here: "
                                            f"{'; '.join(why)}"))
        problems += [doc.problem((*at, "taints"), message) for message in accidental_tolerations(catalog, cls, taints)]

    seen = {(p.line, p.message) for p in problems}
    problems += [p for p in cluster_config_drift(catalog, config) if (p.line, p.message) not in seen]
    return problems
