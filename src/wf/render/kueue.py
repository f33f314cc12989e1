"""Kueue objects from the catalog's teams: ResourceFlavors, one ClusterQueue per team in one cohort, a
LocalQueue per team namespace, WorkloadPriorityClasses, and the Kueue configuration wf's pods need.

A ResourceFlavor is a compute class x capacity: its nodeLabels are the labels every node group of that class
and capacity carries (nodegroups.class_node_labels) and its nodeTaints are the class's taints, so Kueue
assigns a step exactly the flavor whose nodes the step's nodeSelector and tolerations already select.
Every ClusterQueue lists every flavor (nominal 0 where the team has no quota) so a team can borrow any
class its cohort has idle; one resource group covers cpu, memory and every accelerator, as Kueue requires
of flavors that share resources.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import yaml

from wf.core.constants import (
    CLUSTER_QUEUE,
    KUEUE_LOCAL_QUEUE,
    LOCAL_QUEUE,
    RESOURCE_FLAVOR,
    WORKLOAD_PRIORITY_CLASS,
    ApiKind,
)
from wf.core.errors import InputError
from wf.core.units import format_cpu, format_mib
from wf.model.accelerators import EFA_RESOURCE, HUGEPAGES_PREFIX
from wf.model.catalog import Catalog, ComputeClass
from wf.model.nodegroups import class_node_labels
from wf.model.quotas import FlavorQuota, flavor_quotas
from wf.model.teams import RESOURCES, Queues, Team

CONFIG_API_VERSION = "config.kueue.x-k8s.io/v1beta2"
KINDS: dict[str, ApiKind] = {k.kind: k for k in (RESOURCE_FLAVOR, CLUSTER_QUEUE, LOCAL_QUEUE, WORKLOAD_PRIORITY_CLASS)}
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
# Kueue's integrations wf's work uses: a step's pod, and a multi-node step's MPIJob, admitted as one workload
# (a podset each for launcher and workers) so a partial gang never holds quota.
POD_FRAMEWORK = "pod"
MPIJOB_FRAMEWORK = "kubeflow.org/mpijob"
# Requests wf's pods make that are not quota: scratch disk, the hugepages a Gaudi step carries with its cards,
# and EFA interfaces. Kueue refuses a workload that requests a resource its ClusterQueue does not cover.
EXCLUDED_RESOURCE_PREFIXES = ("ephemeral-storage", HUGEPAGES_PREFIX, EFA_RESOURCE)


def queues_of(catalog: Catalog) -> Queues:
    if catalog.queues is None:
        raise InputError(f"{catalog.source}: the catalog has no `queues:` section (teams, quotas, priorities)")
    return catalog.queues


def flavor_name(compute_class: str, capacity: str) -> str:
    return f"{compute_class}-{capacity}"




def _flavors(catalog: Catalog) -> list[tuple[ComputeClass, str]]:
    return [(cls, capacity) for cls in catalog.compute_classes for capacity in cls.capacity]


def covered_resources(catalog: Catalog) -> list[str]:
    devices = dict.fromkeys(c.accelerator.resource for c in catalog.compute_classes if c.accelerator)
    return ["cpu", "memory", *devices]


def resource_name(cls: ComputeClass, resource: str) -> str:
    """The Kubernetes resource of a quota entry: 'accelerators' is the class's device resource."""
    if resource == "accelerators":
        if cls.accelerator is None:
            raise KeyError(resource)
        return cls.accelerator.resource
    return resource


def quantity(resource: str, value: Decimal) -> str | int:
    """A quota amount as Kueue writes it: cpu in cores/millicores, memory in Mi/Gi, devices as integers."""
    if resource == "cpu":
        return format_cpu(int(value * 1000))
    if resource == "memory":
        mib = value / (1 << 20)
        return format_mib(int(mib)) if mib == int(mib) else str(int(value))
    return int(value)


def show_amount(resource: str, value: Decimal) -> str:
    """An amount for people: memory in Gi, cpu in cores, devices as counts."""
    if resource == "memory":
        return f"{value / (1 << 30):.0f}Gi"
    return f"{value.normalize():f}"


def resource_flavor(cls: ComputeClass, capacity: str) -> dict[str, Any]:
    spec: dict[str, Any] = {"nodeLabels": class_node_labels(cls, capacity)}
    if cls.taints:
        spec["nodeTaints"] = [t.to_kubernetes() for t in cls.taints]
    return {"apiVersion": RESOURCE_FLAVOR.api_version, "kind": RESOURCE_FLAVOR.kind,
            "metadata": {"name": flavor_name(cls.name, capacity)}, "spec": spec}


def _flavor_resources(catalog: Catalog, cls: ComputeClass, quota: FlavorQuota | None) -> list[dict[str, Any]]:
    by_name: dict[str, dict[str, Any]] = {name: {"name": name, "nominalQuota": 0}
                                          for name in covered_resources(catalog)}
    if quota is not None:
        for resource in RESOURCES:
            if resource == "accelerators" and cls.accelerator is None:
                continue
            entry = by_name[resource_name(cls, resource)]
            entry["nominalQuota"] = quantity(resource, quota.nominal[resource])
            for key, limits in (("borrowingLimit", quota.borrowing), ("lendingLimit", quota.lending)):
                if limits[resource] is not None:
                    entry[key] = quantity(resource, limits[resource])  # type: ignore[arg-type]
    return list(by_name.values())


def cluster_queue(catalog: Catalog, queues: Queues, team: Team) -> dict[str, Any]:
    quotas = {(q.compute_class, q.capacity): q for q in flavor_quotas(catalog, team)}
    flavors = [
        {"name": flavor_name(cls.name, capacity),
         "resources": _flavor_resources(catalog, cls, quotas.get((cls.name, capacity)))}
        for cls, capacity in _flavors(catalog)
    ]
    return {
        "apiVersion": CLUSTER_QUEUE.api_version,
        "kind": CLUSTER_QUEUE.kind,
        "metadata": {"name": team.name},
        "spec": {
            "cohortName": queues.cohort,
            # Only the team's own namespaces may point a LocalQueue at its quota.
            "namespaceSelector": {"matchExpressions": [
                {"key": NAMESPACE_NAME_LABEL, "operator": "In", "values": list(team.namespaces)}]},
            "queueingStrategy": "BestEffortFIFO",
            "fairSharing": {"weight": team.weight},
            # A team gets its lent quota back by preempting borrowers, and its own high-priority work may
            # preempt its own low-priority work; a preempted step's pod is deleted and Argo retries it as an
            # interruption (compile's retry expression matches "pod deleted").
            "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
            "resourceGroups": [{"coveredResources": covered_resources(catalog), "flavors": flavors}],
        },
    }


def local_queue(team: Team, namespace: str) -> dict[str, Any]:
    return {"apiVersion": LOCAL_QUEUE.api_version, "kind": LOCAL_QUEUE.kind,
            "metadata": {"name": KUEUE_LOCAL_QUEUE, "namespace": namespace},
            "spec": {"clusterQueue": team.name}}


def priority_classes(queues: Queues) -> list[dict[str, Any]]:
    return [
        {"apiVersion": WORKLOAD_PRIORITY_CLASS.api_version, "kind": WORKLOAD_PRIORITY_CLASS.kind,
         "metadata": {"name": p.name},
         "value": p.value, **({"description": p.description} if p.description else {})}
        for p in queues.priorities
    ]


def objects(catalog: Catalog) -> list[dict[str, Any]]:
    """Every Kueue object of the catalog's teams, in apply order (flavors before the queues naming them)."""
    queues = queues_of(catalog)
    out = [resource_flavor(cls, capacity) for cls, capacity in _flavors(catalog)]
    out += priority_classes(queues)
    out += [cluster_queue(catalog, queues, team) for team in queues.teams]
    out += [local_queue(team, ns) for team in queues.teams for ns in team.namespaces]
    return out


def configuration(catalog: Catalog) -> dict[str, Any]:
    """The parts of Kueue's Configuration wf's pods rely on: plain-pod and MPIJob integrations limited to the
    teams' namespaces (Argo's controller and system pods are never gated), fair sharing across the cohort, and
    the resources that are not quota left out of admission."""
    queues = queues_of(catalog)
    namespaces = sorted({ns for team in queues.teams for ns in team.namespaces})
    return {
        "apiVersion": CONFIG_API_VERSION,
        "kind": "Configuration",
        "manageJobsWithoutQueueName": False,
        "managedJobsNamespaceSelector": {"matchExpressions": [
            {"key": NAMESPACE_NAME_LABEL, "operator": "In", "values": namespaces}]},
        "integrations": {"frameworks": [POD_FRAMEWORK, MPIJOB_FRAMEWORK]},
        "fairSharing": {"preemptionStrategies": ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]},
        "resources": {"excludeResourcePrefixes": list(EXCLUDED_RESOURCE_PREFIXES)},
        # Default 20/30. Through the plain-pod integration every step costs Kueue several writes (its Workload,
        # the admission, the pod's ungating, the finalizers): in the scale benchmark 3,900 of the day's 8,000 pods
        # were still gated five minutes in, behind this client limit alone, with the machine half idle.
        "clientConnection": {"qps": 200, "burst": 400},
        # Without this every controller has one worker (controller-runtime's default; Kueue's own manifests
        # say 5 for pods and workloads). Admission is quick, but each admitted pod is then ungated by the pod
        # controller one at a time: in the scale benchmark 3,047 workloads were admitted while 6,540 of their
        # pods still waited behind their gate.
        "controller": {"groupKindConcurrency": {
            "Pod": 20, "Workload.kueue.x-k8s.io": 20, "MPIJob.kubeflow.org": 5,
            "LocalQueue.kueue.x-k8s.io": 1, "Cohort.kueue.x-k8s.io": 1, "ClusterQueue.kueue.x-k8s.io": 1,
            "ResourceFlavor.kueue.x-k8s.io": 1,
        }},
    }


def render(catalog: Catalog) -> str:
    header = f"# Generated by `wf kueue generate` from {catalog.source}; edit the catalog, not this file.\n"
    return header + yaml.safe_dump_all(objects(catalog), sort_keys=False, default_flow_style=False, width=120)
