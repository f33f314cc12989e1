"""`wf lint`'s static schedulability verdict (wf.compile.schedulability) against the real kube-scheduler.

Generated pods (seeded) with nodeSelectors, required node affinity, tolerations and requests around the
node groups' allocatable are created as bare pods; each either binds or is reported Unschedulable, and that
must be what `judge` (one node group) or `explain` (the whole catalog) said.

The static check judges an EMPTY node of each instance type of a group, so the test gives every pod exactly
that: probe nodes built by wf.cluster.nodes (the same manifests `wf cluster up` makes) in slots of one node per
(group, instance type), labelled with their slot and tainted so nothing else lands there. A pod selects one
slot, so it sees empty nodes only; a round holds at most one pod per (slot, group), and the next round
starts once the last one's pods are gone. The slot selector and the probe toleration are harness plumbing,
left out of the static verdict; the node-group pin (eks.amazonaws.com/nodegroup) is a label of the group, so
it is judged like any other selector.
"""

from __future__ import annotations

import copy
import random
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest

from wf.cluster.nodes import HOSTNAME_LABEL, node_manifest
from wf.compile.schedulability import PodConstraints, explain, judge, pod_constraints
from wf.controller.client import Kube
from wf.core.constants import (
    ARCH_LABEL,
    CAPACITY_LABEL,
    CLASS_LABEL,
    EKS_CAPACITY_LABEL,
    EKS_NODEGROUP_LABEL,
    INSTANCE_TYPE_LABEL,
    ZONE_LABEL,
)
from wf.core.units import parse_quantity
from wf.model.catalog import load_catalog
from wf.model.nodegroups import NodeGroup, node_groups

pytestmark = pytest.mark.cluster

SEED = 20261129
CASES_PER_GROUP = 20  # pinned (pod, node group) cases per group
WHOLE_CATALOG_PODS = 40  # unpinned pods: explain() over every group
SLOTS = 10
SLOT_LABEL = "e2e.wf.dev/slot"
PROBE_TAINT = "e2e.wf.dev/probe"
CASE_LABEL = "e2e.wf.dev/case"
ROUND_LABEL = "e2e.wf.dev/round"
SELECTOR_KEYS = (CLASS_LABEL, CAPACITY_LABEL, ARCH_LABEL, ZONE_LABEL, INSTANCE_TYPE_LABEL, EKS_CAPACITY_LABEL,
                 "k8s.amazonaws.com/accelerator")
ABSENT_KEY = "example.com/absent"
TAINT_KEYS = ("habana.ai/gaudi", "nvidia.com/gpu", "example.com/other")
BOUNDARY_RESOURCES = ("cpu", "memory", "nvidia.com/gpu", "habana.ai/gaudi", "hugepages-2Mi")
# One step below or above a boundary, in each resource's unit.
STEP = {"cpu": Decimal("0.001"), "memory": Decimal(2**20), "hugepages-2Mi": Decimal(2 * 2**20)}
BASE_REQUESTS = {"cpu": "100m", "memory": "128Mi"}


@dataclass
class Case:
    index: int
    pod: PodConstraints  # what the static check judges
    spec: dict[str, Any]  # the pod's spec, minus harness plumbing
    group: NodeGroup | None  # pinned to this group, or None: the whole catalog
    static_fits: bool = False
    fitting_groups: set[str] = field(default_factory=set)
    bound_to: str | None = None
    scheduler_message: str = ""


class Generator:
    """Pod constraints around one node group: mostly its own label values, sometimes another group's or none."""

    def __init__(self, rng: random.Random, groups: list[NodeGroup]) -> None:
        self.rng = rng
        self.groups = groups
        self.values: dict[str, list[str]] = {key: [] for key in SELECTOR_KEYS}
        for group in groups:
            for instance in group.instance_types:
                for key, value in group.node_labels(instance).items():
                    if key in self.values and value not in self.values[key]:
                        self.values[key].append(value)
        for key in SELECTOR_KEYS:
            self.values[key].append("bogus")

    def value(self, key: str, target: NodeGroup) -> str:
        own = target.node_labels(self.rng.choice(target.instance_types)).get(key)
        if own is not None and self.rng.random() < 0.75:
            return own
        return self.rng.choice(self.values[key])

    def spec(self, target: NodeGroup) -> dict[str, Any]:
        rng = self.rng
        spec: dict[str, Any] = {}
        own = target.node_labels(target.instance_types[0])
        # Mostly keys the group's nodes carry (a key they lack never matches: a few of those suffice).
        selector = {key: self.value(key, target) for key in SELECTOR_KEYS
                    if rng.random() < (0.25 if key in own else 0.04)}
        if selector:
            spec["nodeSelector"] = selector
        if rng.random() < 0.45:
            terms = [{"matchExpressions": [self.expression(target) for _ in range(rng.randint(1, 2))]}
                     for _ in range(rng.randint(1, 2))]
            spec["affinity"] = {
                "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}
            }
        if rng.random() < 0.65:
            spec["tolerations"] = [self.toleration(target) for _ in range(rng.randint(1, 2))]
        main, init = self.resources(target)
        spec["containers"] = [{"name": "main", "image": "busybox:1.36", "resources": main}]
        if init is not None:
            spec["initContainers"] = [{"name": "init", "image": "busybox:1.36", "resources": init}]
        return spec

    def expression(self, target: NodeGroup) -> dict[str, Any]:
        rng = self.rng
        labels = target.node_labels(rng.choice(target.instance_types))
        operator = rng.choice(("In", "NotIn", "Exists", "DoesNotExist"))
        if rng.random() < 0.7:  # aimed at the target: holds on (some of) its nodes
            key = rng.choice([k for k in SELECTOR_KEYS if k in labels])
            if operator == "In":
                return {"key": key, "operator": "In", "values": sorted({labels[key], rng.choice(self.values[key])})}
            if operator == "NotIn":
                return {"key": key, "operator": "NotIn", "values": ["bogus"]}
            if operator == "Exists":
                return {"key": key, "operator": "Exists"}
            absent = [k for k in (*SELECTOR_KEYS, ABSENT_KEY) if k not in labels]
            return {"key": rng.choice(absent), "operator": "DoesNotExist"}
        key = rng.choice((*SELECTOR_KEYS, ABSENT_KEY))
        if operator in ("Exists", "DoesNotExist"):
            return {"key": key, "operator": operator}
        values = sorted({rng.choice(self.values.get(key, ["bogus"])) for _ in range(2)})
        return {"key": key, "operator": operator, "values": values}

    def toleration(self, target: NodeGroup) -> dict[str, Any]:
        rng = self.rng
        own = [t.key for t in target.taints]
        key = rng.choice(own) if own and rng.random() < 0.6 else rng.choice(TAINT_KEYS)
        shape = rng.choice(("exists-any", "exists", "equal", "equal"))
        toleration: dict[str, Any] = {"operator": "Exists"} if shape == "exists-any" else (
            {"key": key, "operator": "Exists"} if shape == "exists" else
            {"key": key, "operator": "Equal", "value": rng.choice(("true", "true", "false"))})
        if rng.random() < 0.5:
            toleration["effect"] = rng.choice(("NoSchedule", "NoSchedule", "NoExecute", "PreferNoSchedule"))
        return toleration

    def resources(self, target: NodeGroup) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """Requests near one instance's allocatable of one resource (below, equal, above); the rest small."""
        rng = self.rng
        group = target if rng.random() < 0.85 else rng.choice(self.groups)
        allocatable = group.allocatable(rng.choice(group.instance_types))
        offered = [r for r in BOUNDARY_RESOURCES if parse_quantity(allocatable.get(r, "0")) > 0]
        resource = rng.choice(offered + ["cpu", "memory"])
        edge = parse_quantity(allocatable.get(resource, "0")) + rng.choice((-1, 0, 1)) * STEP.get(resource, Decimal(1))
        amount = _quantity(resource, max(edge, Decimal(0)))
        requests = dict(BASE_REQUESTS)
        requests[resource] = amount
        exact = resource not in ("cpu", "memory")  # extended resources and hugepages: requests == limits
        boundary = {"requests": requests, **({"limits": {resource: amount}} if exact else {})}
        if rng.random() < 0.2:  # the boundary in an init container: the pod needs the larger of init and main
            return {"requests": dict(BASE_REQUESTS)}, boundary
        return boundary, None


def _quantity(resource: str, amount: Decimal) -> str:
    if resource == "cpu":
        return f"{int(amount * 1000)}m"
    if resource in ("memory", "hugepages-2Mi"):
        return f"{int(amount) // 2**20}Mi"
    return str(int(amount))


def generate_cases(groups: list[NodeGroup]) -> list[Case]:
    rng = random.Random(SEED)
    generator = Generator(rng, groups)
    cases: list[Case] = []
    for _ in range(CASES_PER_GROUP):
        for group in groups:
            spec = generator.spec(group)
            spec.setdefault("nodeSelector", {})[EKS_NODEGROUP_LABEL] = group.name
            cases.append(Case(len(cases), _constraints(spec), spec, group))
    for _ in range(WHOLE_CATALOG_PODS):
        spec = generator.spec(rng.choice(groups))
        cases.append(Case(len(cases), _constraints(spec), spec, None))
    for case in cases:
        fitting = {g.name for g in groups if judge(case.pod, g).fits}
        case.fitting_groups = fitting
        case.static_fits = judge(case.pod, case.group).fits if case.group else explain(case.pod, groups) is None
    return cases


def _constraints(spec: dict[str, Any]) -> PodConstraints:
    """What lint judges, read the way lint reads an Argo template."""
    template = {key: spec[key] for key in ("nodeSelector", "tolerations", "affinity", "initContainers") if key in spec}
    template["container"] = spec["containers"][0]
    constraints = pod_constraints({}, template)
    assert constraints is not None
    return constraints


def rounds(cases: list[Case]) -> Iterator[list[tuple[Case, int]]]:
    """(case, slot) batches: a slot holds one pinned case per group, or one whole-catalog case."""
    units: list[list[Case]] = []
    pinned = [c for c in cases if c.group]
    per_group: dict[str, list[Case]] = {}
    for case in pinned:
        per_group.setdefault(case.group.name, []).append(case)  # type: ignore[union-attr]
    units += [list(batch) for batch in zip(*per_group.values(), strict=True)]
    units += [[c] for c in cases if c.group is None]
    for start in range(0, len(units), SLOTS):
        yield [(case, slot) for slot, unit in enumerate(units[start:start + SLOTS]) for case in unit]


@pytest.fixture
def probe_nodes(kube: Kube) -> Iterator[tuple[str, dict[str, dict[str, str]]]]:
    """SLOTS x one node per (group, instance type); yields the run id and each node's labels. Deleted after."""
    run = uuid.uuid4().hex[:6]
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    manifests = []
    for slot in range(SLOTS):
        for group in node_groups(load_catalog()):
            for index in range(len(group.instance_types)):
                node = node_manifest(group, index)
                name = f"p{run}-{slot}-{group.name}-{index}"
                node["metadata"]["name"] = name
                node["metadata"]["labels"] |= {HOSTNAME_LABEL: name, SLOT_LABEL: f"{run}-{slot}"}
                node["spec"]["taints"].append({"key": PROBE_TAINT, "value": run, "effect": "NoSchedule"})
                node["status"]["conditions"] = [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                                 "message": "probe node", "lastHeartbeatTime": now,
                                                 "lastTransitionTime": now}]
                manifests.append(node)
    core = kube.core
    try:
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(core.create_node, manifests))
            # Admission taints every new node not-ready; the node lifecycle controller lifts it at ~5 nodes/s
            # (45 s for these). They are Ready from the start (the status above), so lift it here.
            list(pool.map(
                lambda m: core.patch_node(m["metadata"]["name"], {"spec": {"taints": m["spec"]["taints"]}}),
                manifests))
        _wait_ready(core, run, len(manifests))
        yield run, {m["metadata"]["name"]: m["metadata"]["labels"] for m in manifests}
    finally:
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda m: core.delete_node(m["metadata"]["name"]), manifests))


def _wait_ready(core: Any, run: str, count: int, timeout: float = 60) -> None:
    """Every probe node Ready, with no taint but its own (the node lifecycle controller taints a node that is not)."""
    deadline = time.monotonic() + timeout
    while True:
        nodes = core.list_node(label_selector=SLOT_LABEL).items
        ready = [n for n in nodes if n.metadata.labels[SLOT_LABEL].startswith(run + "-")
                 and any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or [])
                 and not any(t.key.startswith("node.kubernetes.io/") for t in n.spec.taints or [])]
        if len(ready) == count:
            return
        assert time.monotonic() < deadline, f"{len(ready)}/{count} probe nodes ready after {timeout}s"
        time.sleep(0.5)


@pytest.fixture
def namespace(kube: Kube) -> Iterator[str]:
    name = f"sched-{uuid.uuid4().hex[:6]}"
    core = kube.core
    core.create_namespace({"metadata": {"name": name}})
    try:
        deadline = time.monotonic() + 30
        while not core.list_namespaced_service_account(name, field_selector="metadata.name=default").items:
            assert time.monotonic() < deadline, "the controller-manager never created the default service account"
            time.sleep(0.2)
        yield name
    finally:
        core.delete_namespace(name)


def test_static_verdict_agrees_with_the_kube_scheduler(
        kube: Kube, probe_nodes: tuple[str, dict[str, dict[str, str]]], namespace: str) -> None:
    run, node_labels = probe_nodes
    groups = {g.name: g for g in node_groups(load_catalog())}
    cases = generate_cases(list(groups.values()))
    pinned = [c for c in cases if c.group]
    fit_share = sum(c.static_fits for c in pinned) / len(pinned)
    # A generator whose pods all fit (or none do) would agree with anything.
    assert 0.3 <= fit_share <= 0.7, f"generated cases are lopsided: {fit_share:.0%} fit"

    started = time.monotonic()
    for number, batch in enumerate(rounds(cases)):
        _schedule(kube.core, namespace, run, number, batch)
    took = time.monotonic() - started

    disagreements = {True: [], False: []}  # pinned?
    for case in cases:
        if (found := _disagreement(case, groups, node_labels)) is not None:
            disagreements[case.group is not None].append(f"case {case.index}: {found}\n  spec: {case.spec}")
    whole = len(cases) - len(pinned)
    print(f"\nscheduler agreement: {len(pinned) - len(disagreements[True])}/{len(pinned)} (pod, node group) cases "
          f"({fit_share:.0%} fit), {whole - len(disagreements[False])}/{whole} whole-catalog pods "
          f"({sum(c.static_fits for c in cases if not c.group) / whole:.0%} fit); "
          f"{len(cases)} pods scheduled in {took:.1f}s")
    assert not disagreements[True] + disagreements[False], "\n".join(disagreements[True] + disagreements[False])
    assert len(pinned) >= 200


def _disagreement(case: Case, groups: dict[str, NodeGroup], node_labels: dict[str, dict[str, str]]) -> str | None:
    where = f"group {case.group.name}" if case.group else "the whole catalog"
    if (case.bound_to is not None) != case.static_fits:
        static = judge(case.pod, case.group).reasons if case.group else explain(case.pod, list(groups.values()))
        scheduler = f"bound to {case.bound_to}" if case.bound_to else f"unschedulable: {case.scheduler_message}"
        return f"on {where}, static {'fits' if case.static_fits else 'does not fit'} ({static}); scheduler {scheduler}"
    if case.bound_to is None:
        return None
    labels = node_labels[case.bound_to]
    group = groups[labels[EKS_NODEGROUP_LABEL]]
    on_instance = replace(group, instance_types=(labels[INSTANCE_TYPE_LABEL],))
    if group.name not in case.fitting_groups or not judge(case.pod, on_instance).fits:
        return (f"on {where}, bound to {case.bound_to} ({group.name}, {labels[INSTANCE_TYPE_LABEL]}) where the static "
                f"check says it does not fit: {judge(case.pod, on_instance).reasons}")
    return None


def _schedule(core: Any, namespace: str, run: str, number: int, batch: list[tuple[Case, int]]) -> None:
    """Create the batch's pods, wait until each is bound or Unschedulable, record it, delete them all."""
    by_name = {}
    bodies = []
    for case, slot in batch:
        spec = copy.deepcopy(case.spec)
        spec.setdefault("nodeSelector", {})[SLOT_LABEL] = f"{run}-{slot}"
        spec["tolerations"] = [*spec.get("tolerations", []),
                               {"key": PROBE_TAINT, "operator": "Equal", "value": run, "effect": "NoSchedule"}]
        spec["terminationGracePeriodSeconds"] = 0
        spec["automountServiceAccountToken"] = False
        name = f"case-{case.index}"
        by_name[name] = case
        bodies.append({"apiVersion": "v1", "kind": "Pod", "spec": spec,
                       "metadata": {"name": name, "labels": {CASE_LABEL: str(case.index), ROUND_LABEL: str(number)}}})
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda body: core.create_namespaced_pod(namespace, body), bodies))
    selector = f"{ROUND_LABEL}={number}"
    pending = _decide(core, namespace, selector, by_name, timeout=60)
    if pending:
        # Static says fits, scheduler said no: give a requeue a chance (the scheduler retries a pod when
        # another is deleted) before calling it a disagreement.
        time.sleep(3)
        _decide(core, namespace, selector, by_name, timeout=5)
    core.delete_collection_namespaced_pod(namespace, label_selector=selector, grace_period_seconds=0)
    deadline = time.monotonic() + 30
    while core.list_namespaced_pod(namespace, label_selector=selector).items:
        assert time.monotonic() < deadline, f"round {number}'s pods not deleted"
        time.sleep(0.1)


def _decide(core: Any, namespace: str, selector: str, by_name: dict[str, Case], timeout: float) -> list[Case]:
    """Record each pod's fate once all are bound or Unschedulable; returns the unschedulable the static check
    says fit."""
    deadline = time.monotonic() + timeout
    while True:
        pods = core.list_namespaced_pod(namespace, label_selector=selector).items
        undecided = []
        for pod in pods:
            case = by_name[pod.metadata.name]
            condition = next((c for c in pod.status.conditions or [] if c.type == "PodScheduled"), None)
            if pod.spec.node_name:
                case.bound_to, case.scheduler_message = pod.spec.node_name, ""
            elif condition is not None and condition.status == "False" and condition.reason == "Unschedulable":
                case.bound_to, case.scheduler_message = None, condition.message
            else:
                undecided.append(pod.metadata.name)
        if not undecided and len(pods) == len(by_name):
            return [c for c in by_name.values() if c.bound_to is None and c.static_fits]
        assert time.monotonic() < deadline, f"pods neither bound nor unschedulable after {timeout}s: {undecided[:10]}"
        time.sleep(0.2)
