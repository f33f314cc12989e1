"""Can a pod schedule on some node group? The kube-scheduler's static filters, against the catalog's node groups.

Covers what node groups decide: nodeSelector, required node affinity, taints vs tolerations, and requests
against the allocatable of the group's largest instance (cpu, memory, hugepages, accelerators, EFA). Verdicts
are checked against the real scheduler on the local cluster (tests/e2e).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from wf.constants import CLASS_LABEL
from wf.instances import instance_type
from wf.nodegroups import NodeGroup
from wf.units import parse_quantity


@dataclass(frozen=True)
class PodConstraints:
    node_selector: dict[str, str] = field(default_factory=dict)
    affinity_terms: list[dict[str, Any]] = field(default_factory=list)  # required nodeSelectorTerms (OR)
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    requests: dict[str, Decimal] = field(default_factory=dict)


@dataclass(frozen=True)
class Verdict:
    group: NodeGroup
    reasons: list[str]  # empty: the pod fits a node of this group

    @property
    def fits(self) -> bool:
        return not self.reasons


def tolerates(tolerations: list[dict[str, Any]], taint_key: str, taint_value: str, effect: str) -> bool:
    for t in tolerations:
        if t.get("effect") and t["effect"] != effect:
            continue
        operator = t.get("operator") or "Equal"
        key = t.get("key") or ""
        if operator == "Exists":
            if not key or key == taint_key:
                return True
        elif key == taint_key and (t.get("value") or "") == taint_value:
            return True
    return False


def _expression_holds(expr: dict[str, Any], labels: dict[str, str]) -> bool:
    key, operator, values = expr.get("key", ""), expr.get("operator", ""), expr.get("values") or []
    present = key in labels
    if operator == "In":
        return present and labels[key] in values
    if operator == "NotIn":
        return not present or labels[key] not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present and values:
        try:
            have, want = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return have > want if operator == "Gt" else have < want
    return False


def _term_holds(term: dict[str, Any], labels: dict[str, str]) -> bool:
    expressions = term.get("matchExpressions") or []
    # A term with no expressions matches nothing (kube-scheduler's NodeSelectorRequirementsAsSelector).
    return bool(expressions) and all(_expression_holds(e, labels) for e in expressions)


def judge(pod: PodConstraints, group: NodeGroup) -> Verdict:
    """Why the pod can't run on any instance of `group` (empty reasons: it can)."""
    best: list[str] | None = None
    # Largest first: when every instance falls short, the message names the one that comes closest.
    for instance in sorted(group.instance_types, key=_size, reverse=True):
        reasons = _judge_instance(pod, group, instance)
        if not reasons:
            return Verdict(group, [])
        if best is None or len(reasons) < len(best):
            best = reasons
    return Verdict(group, best or [])


def _size(name: str) -> tuple[int, int]:
    facts = instance_type(name)
    return facts.allocatable_cpu_millis, facts.allocatable_memory_mib


def _judge_instance(pod: PodConstraints, group: NodeGroup, instance: str) -> list[str]:
    labels = group.node_labels(instance)
    reasons = []
    for key, value in pod.node_selector.items():
        if labels.get(key) != value:
            reasons.append(f"nodeSelector {key}={value} (nodes have {key}={labels[key]})" if key in labels
                           else f"nodeSelector {key}={value} (nodes have no {key} label)")
    if pod.affinity_terms and not any(_term_holds(t, labels) for t in pod.affinity_terms):
        reasons.append("required node affinity matches no node of the group")
    for taint in group.taints:
        if taint.effect != "PreferNoSchedule" and not tolerates(pod.tolerations, taint.key, taint.value, taint.effect):
            reasons.append(f"untolerated taint {taint}")
    allocatable = group.allocatable(instance)
    for resource, wanted in pod.requests.items():
        have = parse_quantity(allocatable.get(resource, "0"))
        if wanted > have:
            reasons.append(f"requests {_show(resource, wanted)} {resource}; {instance} has {_show(resource, have)}")
    return reasons


def _show(resource: str, amount: Decimal) -> str:
    if resource == "memory" or resource.startswith("hugepages-") or resource == "ephemeral-storage":
        return f"{amount / 2**30:.4g}Gi"
    return f"{amount.normalize():f}"


def explain(pod: PodConstraints, groups: list[NodeGroup]) -> str | None:
    """None when some group fits; else one sentence in the developer's terms, from the nearest group."""
    verdicts = [judge(pod, g) for g in groups]
    if any(v.fits for v in verdicts):
        return None
    if not verdicts:
        return "the catalog has no node groups"
    wanted_class = pod.node_selector.get(CLASS_LABEL)
    # The class the pod asks for is nearest, whatever other groups miss by: its reasons are the ones to fix.
    nearest = min(verdicts, key=lambda v: (v.group.compute_class != wanted_class, len(v.reasons), v.group.name))
    cls = nearest.group.compute_class
    requested = [r for r in nearest.reasons if r.startswith("requests ")]
    if requested and len(requested) == len(nearest.reasons):
        # Only size is wrong: say it the way a developer asks ("no gaudi node offers 16 habana.ai/gaudi").
        return "; ".join(f"no {cls} node offers " + r.removeprefix("requests ") for r in requested)
    if wanted_class and not any(g.compute_class == wanted_class for g in groups):
        known = sorted({g.compute_class for g in groups})
        return f"no node group of compute class {wanted_class!r}; the catalog has {', '.join(known)}"
    return f"no node group fits; nearest is {nearest.group.name}: " + "; ".join(nearest.reasons)


def pod_requests(containers: list[dict[str, Any]], init_containers: list[dict[str, Any]]) -> tuple[dict[str, Decimal], list[str]]:
    """Effective pod requests (sum of containers, at least the largest init container), and values we could not
    read (templated with {{...}}), which are skipped rather than guessed."""
    skipped: list[str] = []

    def of(container: dict[str, Any]) -> dict[str, Decimal]:
        resources = container.get("resources") or {}
        # Kubernetes defaults a missing request to the limit.
        merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        out = {}
        for name, value in merged.items():
            try:
                out[str(name)] = parse_quantity(value)
            except (ValueError, TypeError):
                skipped.append(f"{name}={value}")
        return out

    total: dict[str, Decimal] = {}
    for c in containers:
        for k, v in of(c).items():
            total[k] = total.get(k, Decimal(0)) + v
    for c in init_containers:
        for k, v in of(c).items():
            total[k] = max(total.get(k, Decimal(0)), v)
    return total, skipped


def _templated(value: Any) -> bool:
    return "{{" in str(value)


def pod_constraints(spec: dict[str, Any], template: dict[str, Any]) -> PodConstraints | None:
    """The scheduling constraints of the pod Argo would create, or None when they depend on run-time values."""
    selector = {**(spec.get("nodeSelector") or {}), **(template.get("nodeSelector") or {})}
    tolerations = [*(spec.get("tolerations") or []), *(template.get("tolerations") or [])]
    affinity = template.get("affinity") or spec.get("affinity") or {}
    terms = (((affinity.get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or {})
             .get("nodeSelectorTerms") or [])
    if _templated(selector) or _templated(tolerations) or _templated(terms):
        return None
    return PodConstraints({str(k): str(v) for k, v in selector.items()}, terms, tolerations, template_requests(template))


def template_requests(template: dict[str, Any]) -> dict[str, Decimal]:
    """The requests of the pod an Argo template creates (main containers and sidecars, init containers)."""
    if "containerSet" in template:
        containers = list((template["containerSet"] or {}).get("containers") or [])
    else:
        containers = [template.get("container") or template.get("script") or {}]
    containers += list(template.get("sidecars") or [])
    requests, _ = pod_requests(containers, list(template.get("initContainers") or []))
    return requests
