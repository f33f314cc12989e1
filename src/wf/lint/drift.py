"""Drift of an eksctl ClusterConfig from the catalog, and reading one (its node groups, taints, zones, types).

The generated file is a lock file: `cluster_config_drift` tells when the committed copy no longer equals what the
catalog generates (naming the first differing node group and field), and checks hand-written configs field by
field for the labels, taints, zones and instance types that placement relies on.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from wf.core.constants import CAPACITY_LABEL, CLASS_LABEL
from wf.core.errors import InputError, PathKey, Problem, format_path
from wf.core.loader import Document, load_documents
from wf.model.catalog import Catalog, Taint
from wf.model.nodegroups import class_node_labels
from wf.render.eksctl import GENERATED_MARK, cluster_config, display_path, render

ConfigSource = str | Path | Document


def cluster_config_drift(catalog: Catalog, config: ConfigSource) -> list[Problem]:
    """Where the ClusterConfig (a path, or a document lint already loaded) disagrees with the catalog.

    A generated file (it carries the generated header) must equal the generated output: every differing field
    is reported, node group by node group. A hand-written config is checked on what placement relies on:
    each node group that carries our compute-class label must have the class's labels, taints, zones and
    instance types, and Spot only when labelled Spot.
    """
    doc, text = read_cluster_config(config)
    if GENERATED_MARK in text:
        return generated_drift(catalog, doc, text)
    return hand_written_drift(catalog, doc)


def read_cluster_config(config: ConfigSource) -> tuple[Document, str]:
    """The ClusterConfig document and its file's text (empty when the document came from no readable file)."""
    if isinstance(config, Document):
        try:
            return config, Path(config.file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return config, ""
    file = str(config)
    docs = load_documents(config)
    configs = [d for d in docs if isinstance(d.data, dict) and d.data.get("kind") == "ClusterConfig"]
    if len(configs) != 1:
        raise InputError([Problem(file, None, "kind", f"expected one eksctl ClusterConfig, found {len(configs)}")])
    return configs[0], Path(config).read_text(encoding="utf-8")


def generated_drift(catalog: Catalog, doc: Document, text: str) -> list[Problem]:
    want = cluster_config(catalog)
    have = doc.data
    fix = f"regenerate with `wf eksctl generate --catalog {display_path(catalog.source)} --file {doc.file}`"
    problems: list[Problem] = []
    for key in ("apiVersion", "kind", "metadata", "availabilityZones"):
        problems += _diff(doc, (key,), have.get(key), want[key], "")
    have_groups = have.get("managedNodeGroups") or []
    if not isinstance(have_groups, list):
        return [doc.problem(("managedNodeGroups",), f"must be a list; {fix}")]
    index = {g.get("name"): i for i, g in enumerate(have_groups) if isinstance(g, dict)}
    wanted = {g["name"] for g in want["managedNodeGroups"]}
    for ng in want["managedNodeGroups"]:
        name = ng["name"]
        if name not in index:
            problems.append(doc.problem(("managedNodeGroups",), f"node group {name} is missing; {fix}"))
            continue
        at: tuple[PathKey, ...] = ("managedNodeGroups", index[name])
        problems += _diff(doc, at, have_groups[index[name]], ng, f"node group {name}: ")
    for name, i in index.items():
        if name not in wanted:
            problems.append(doc.problem(("managedNodeGroups", i, "name"),
                                        f"node group {name} is not generated from the catalog; {fix}"))
    if "nodeGroups" in have:
        problems.append(doc.problem(("nodeGroups",), f"the catalog generates managed node groups only; {fix}"))
    if problems:
        first = problems[0]
        return [Problem(first.file, first.line, first.field, f"{first.message} ({fix})"), *problems[1:]]
    rendered = render(catalog)
    if _body(text) != _body(rendered):
        line = _first_differing_line(text, rendered)
        return [Problem(doc.file, line, None, f"differs from the generated text (comments or layout); {fix}")]
    return []


def _body(text: str) -> list[str]:
    """The lines after the header comment, which names the catalog path as it was given."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if not line.startswith("#")), len(lines))
    return lines[start:]


def _first_differing_line(have: str, want: str) -> int:
    a, b = have.splitlines(), want.splitlines()
    matcher = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    for tag, i1, _, _, _ in matcher.get_opcodes():
        if tag != "equal":
            return min(i1, len(a) - 1) + 1 if a else 1
    return 1


def _diff(doc: Document, at: tuple[PathKey, ...], have: Any, want: Any, prefix: str) -> list[Problem]:
    """Field-by-field differences; mappings are compared key by key, everything else as a whole."""
    if isinstance(have, dict) and isinstance(want, dict):
        out: list[Problem] = []
        for key, value in want.items():
            if key not in have:
                out.append(doc.problem(at, f"{prefix}{_field(at, key)} is missing; the catalog generates "
                                           f"{_show(value)}"))
            else:
                out += _diff(doc, (*at, key), have[key], value, prefix)
        for key in have:
            if key not in want:
                out.append(doc.problem((*at, key), f"{prefix}{_field(at, key)} is not generated from the catalog"))
        return out
    if have != want:
        return [doc.problem(at, f"{prefix}{_field(at[:-1], at[-1])} is {_show(have)}; the catalog generates "
                                f"{_show(want)}")]
    return []


def _field(at: tuple[PathKey, ...], key: PathKey) -> str:
    """The path inside the node group (or document) for messages: labels.wf.dev/capacity, taints, ..."""
    inner = at[2:] if at[:1] == ("managedNodeGroups",) else at
    return format_path((*inner, key))


def _show(value: Any) -> str:
    if isinstance(value, list) and value and all(isinstance(v, dict) and {"key", "effect"} <= v.keys() for v in value):
        return "[" + ", ".join(str(Taint.from_kubernetes(v)) for v in value) + "]"
    return yaml.safe_dump(value, default_flow_style=True, width=10_000).strip().removesuffix("...").strip()


def config_node_groups(doc: Document) -> Iterator[tuple[tuple[PathKey, ...], dict[str, Any]]]:
    """Every node group of a ClusterConfig, managed and unmanaged, with its path."""
    for section in ("managedNodeGroups", "nodeGroups"):
        groups = doc.data.get(section) or []
        if isinstance(groups, list):
            for i, ng in enumerate(groups):
                if isinstance(ng, dict):
                    yield (section, i), ng


def group_taints(ng: dict[str, Any]) -> list[Taint]:
    """A node group's taints, in list form or the unmanaged map form key: value:Effect."""
    taints = ng.get("taints") or []
    if isinstance(taints, dict):
        return [Taint.from_text(str(key), str(text)) for key, text in taints.items()]
    return [Taint.from_kubernetes(t) for t in taints if isinstance(t, dict)]


def group_zones(ng: dict[str, Any], doc: Document) -> list[str]:
    """A group's zones: its own, else the cluster's (eksctl spreads it over them)."""
    return list(ng.get("availabilityZones") or doc.data.get("availabilityZones") or [])


def group_is_spot(ng: dict[str, Any]) -> bool:
    if ng.get("spot"):
        return True
    distribution = ng.get("instancesDistribution") or {}
    return isinstance(distribution, dict) and distribution.get("onDemandPercentageAboveBaseCapacity") == 0


def hand_written_drift(catalog: Catalog, doc: Document) -> list[Problem]:
    problems: list[Problem] = []
    for at, ng in config_node_groups(doc):
        labels = ng.get("labels") or {}
        name = ng.get("name", format_path(at))
        if not isinstance(labels, dict) or CLASS_LABEL not in labels:
            continue  # not ours: system node groups and the like
        try:
            cls = catalog.compute_class(str(labels[CLASS_LABEL]))
        except KeyError:
            problems.append(doc.problem((*at, "labels", CLASS_LABEL),
                                        f"node group {name}: compute class {labels[CLASS_LABEL]!r} is not in the "
                                        f"catalog ({', '.join(catalog.class_names)})"))
            continue
        capacity = str(labels.get(CAPACITY_LABEL, ""))
        if capacity not in cls.capacity:
            problems.append(doc.problem((*at, "labels"),
                                        f"node group {name}: label {CAPACITY_LABEL} is {capacity or 'missing'}; "
                                        f"class {cls.name} offers {', '.join(cls.capacity)}"))
            continue
        for key, value in class_node_labels(cls, capacity).items():
            if str(labels.get(key)) != value:
                have = f"is {labels[key]!r}" if key in labels else "is missing"
                problems.append(doc.problem((*at, "labels", key) if key in labels else (*at, "labels"),
                                            f"node group {name}: label {key} {have}; the catalog says {value!r}"))
        want_taints = sorted(cls.taints, key=str)
        have_taints = sorted(group_taints(ng), key=str)
        if have_taints != want_taints:
            problems.append(doc.problem((*at, "taints") if "taints" in ng else at,
                                        f"node group {name}: taints are {_taint_list(have_taints)}; "
                                        f"class {cls.name} declares {_taint_list(want_taints)}"))
        allowed_zones = cls.zones(catalog.cluster)
        for zone in group_zones(ng, doc):
            if zone not in allowed_zones:
                problems.append(doc.problem((*at, "availabilityZones"),
                                            f"node group {name}: zone {zone} is not one of class {cls.name}'s zones "
                                            f"({', '.join(allowed_zones)})"))
        have_types = group_instance_types(ng)
        extra = [t for t in have_types if t not in cls.instance_types]
        if extra:
            problems.append(doc.problem((*at, "instanceTypes") if "instanceTypes" in ng else at,
                                        f"node group {name}: instance types {', '.join(extra)} are not in class "
                                        f"{cls.name} ({', '.join(cls.instance_types)}); placement sizes pods for "
                                        "the catalog's types"))
        if group_is_spot(ng) != (capacity == "spot"):
            problems.append(doc.problem((*at, "spot") if "spot" in ng else at,
                                        f"node group {name}: labelled {CAPACITY_LABEL}={capacity} but "
                                        f"{'is' if group_is_spot(ng) else 'is not'} a Spot group"))
    return problems


def group_instance_types(ng: dict[str, Any]) -> list[str]:
    distribution = ng.get("instancesDistribution") or {}
    types = ng.get("instanceTypes") or (distribution.get("instanceTypes") if isinstance(distribution, dict) else None)
    if types:
        return [str(t) for t in types]
    return [str(ng["instanceType"])] if ng.get("instanceType") and ng["instanceType"] != "mixed" else []


def _taint_list(taints: list[Taint]) -> str:
    return ", ".join(map(str, taints)) or "none"
