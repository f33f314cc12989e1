"""Can a pod schedule on some node group? The kube-scheduler's static filters, against the catalog's node groups.

Covers what node groups decide: nodeSelector, required node affinity, taints vs tolerations, and requests
against the allocatable of each of the group's instance types (cpu, memory, hugepages, accelerators, EFA). Verdicts
are checked against the real scheduler on the local cluster (tests/e2e).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from wf.compile.readback import selected_labels
from wf.core.constants import CLASS_LABEL
from wf.core.units import parse_quantity
from wf.model.nodegroups import NodeGroup


@dataclass(frozen=True)
class PodConstraints:
    node_selector: dict[str, str] = field(default_factory=dict)
    affinity_terms: list[dict[str, Any]] = field(default_factory=list)  # required nodeSelectorTerms (OR)
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    requests: dict[str, Decimal] = field(default_factory=dict)


@dataclass(frozen=True)
class Shortfall:
    """A resource an instance type's node has less of than the pod requests."""

    instance: str
    resource: str
    wanted: Decimal
    have: Decimal

    def __str__(self) -> str:
        return (f"requests {_show(self.resource, self.wanted)} {self.resource}; "
                f"{self.instance} has {_show(self.resource, self.have)}")


@dataclass(frozen=True)
class Verdict:
    group: NodeGroup
    reasons: list[str]  # empty: the pod fits an empty node of some instance type of the group
    # Resources the pod lacks: on the nearest instance type when none fits; else on the group's types it matches
    # but is too big for, which cluster-autoscaler may be modelling (wf.model.nodegroups, mixed-size instance types).
    shortfalls: tuple[Shortfall, ...] = ()

    @property
    def fits(self) -> bool:
        return not self.reasons

    @property
    def fits_every_type(self) -> bool:
        return self.fits and not self.shortfalls


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
    """The fit verdict: whether, and why not, the pod can run on an empty node of `group`, per instance type."""
    # Largest first: when every instance falls short, the message names the one that comes closest.
    verdicts = [_judge_instance(pod, group, instance) for instance in group.by_size()]
    if any(not reasons for reasons, _ in verdicts):
        return Verdict(group, [], tuple(s for reasons, short in verdicts if len(reasons) == len(short) for s in short))
    reasons, short = min(verdicts, key=lambda v: len(v[0]))
    return Verdict(group, reasons, tuple(short))


def _judge_instance(pod: PodConstraints, group: NodeGroup, instance: str) -> tuple[list[str], list[Shortfall]]:
    labels = group.node_labels(instance)
    reasons = []
    for key, value in pod.node_selector.items():
        if labels.get(key) != value:
            reasons.append(f"nodeSelector {key}={value} (nodes have {key}={labels[key]})" if key in labels
                           else f"nodeSelector {key}={value} (nodes have no {key} label)")
    if pod.affinity_terms and not any(_term_holds(t, labels) for t in pod.affinity_terms):
        reasons.append("required node affinity matches no node of the group")
    reasons += [f"untolerated taint {taint}" for taint in group.taints if taint.repels(pod.tolerations)]
    allocatable = group.allocatable_amounts(instance)
    short = [Shortfall(instance, resource, wanted, allocatable.get(resource, Decimal(0)))
             for resource, wanted in pod.requests.items() if wanted > allocatable.get(resource, Decimal(0))]
    return reasons + [str(s) for s in short], short


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
    wanted_class = selected_labels(pod.node_selector, pod.affinity_terms).get(CLASS_LABEL)
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


def pod_requests(
    containers: list[dict[str, Any]], init_containers: list[dict[str, Any]]
) -> tuple[dict[str, Decimal], list[str]]:
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
    selector_text = {str(k): str(v) for k, v in selector.items()}
    return PodConstraints(selector_text, terms, tolerations, template_requests(template))


def template_requests(template: dict[str, Any]) -> dict[str, Decimal]:
    """The requests of the pod an Argo template creates (main containers and sidecars, init containers)."""
    if "containerSet" in template:
        containers = list((template["containerSet"] or {}).get("containers") or [])
    else:
        containers = [template.get("container") or template.get("script") or {}]
    containers += list(template.get("sidecars") or [])
    requests, _ = pod_requests(containers, list(template.get("initContainers") or []))
    return requests
