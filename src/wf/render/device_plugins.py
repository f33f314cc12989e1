"""A device-plugin DaemonSet per accelerator the catalog uses: until it runs on a node, the node advertises none
of the resource and every step asking for it stays Pending.

Each DaemonSet runs on exactly the nodes of the classes that use its resource: node affinity on the labels
`NodeGroup.node_selector` gives those classes' pods, and the tolerations of their taints. Images are pinned by
version, after the upstream manifests named in `DevicePlugin.source` (read 2026-12; the tags are the ones those
sources and their public registries list). The Habana plugin must match the node's Habana driver release, so
its tag follows the SynapseAI release of wf's Gaudi examples.

Names and pod labels are upstream's (the selector of a DaemonSet cannot change): eksctl installs the NVIDIA,
Neuron and EFA plugins under these names itself, so applying the bundle takes over its DaemonSet rather than
running a second plugin for the same resource.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from wf.core.constants import DOMAIN
from wf.core.errors import InputError, Problem
from wf.model.accelerators import EFA_RESOURCE, GAUDI_RESOURCE, NEURON_RESOURCE, NVIDIA_GPU_RESOURCE
from wf.model.catalog import Catalog, ComputeClass
from wf.model.nodegroups import NodeGroup, node_groups_of

NAMESPACE = "kube-system"
PLUGIN_DIR = "/var/lib/kubelet/device-plugins"


@dataclass(frozen=True)
class DevicePlugin:
    resource: str
    name: str  # of the DaemonSet
    pod_label: str  # upstream's selector, `name: <pod_label>`
    image: str
    source: str  # the upstream manifest this DaemonSet follows
    privileged: bool = False  # the plugin opens the devices itself
    host_network: bool = False
    # (volume name, host path) mounted at the same path besides the kubelet's device-plugin socket directory
    host_paths: tuple[tuple[str, str], ...] = ()
    # The plugin annotates pods and patches node status (Neuron's scheduler extension reads them).
    node_access: bool = False


PLUGINS: dict[str, DevicePlugin] = {p.resource: p for p in (
    DevicePlugin(
        GAUDI_RESOURCE, "habanalabs-device-plugin-daemonset", "habanalabs-device-plugin-ds",
        "vault.habana.ai/docker-k8s-device-plugin/docker-k8s-device-plugin:1.21.0",
        "HabanaAI/habanalabs-k8s-device-plugin habanalabs-device-plugin.yaml", privileged=True),
    DevicePlugin(
        NVIDIA_GPU_RESOURCE, "nvidia-device-plugin-daemonset", "nvidia-device-plugin-ds",
        "nvcr.io/nvidia/k8s-device-plugin:v0.17.1",
        "NVIDIA/k8s-device-plugin deployments/static/nvidia-device-plugin.yml"),
    DevicePlugin(
        NEURON_RESOURCE, "neuron-device-plugin-daemonset", "neuron-device-plugin-ds",
        "public.ecr.aws/neuron/neuron-device-plugin:2.24.23.0",
        "aws-neuron/aws-neuron-sdk src/k8/k8s-neuron-device-plugin.yml",
        host_paths=(("infa-map", "/run"),), node_access=True),
    DevicePlugin(
        EFA_RESOURCE, "aws-efa-k8s-device-plugin-daemonset", "aws-efa-k8s-device-plugin",
        "602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/aws-efa-k8s-device-plugin:v0.5.8",
        "aws/eks-charts stable/aws-efa-k8s-device-plugin", host_network=True,
        host_paths=(("infiniband", "/dev/infiniband"),)),
)}


def plugin_classes(catalog: Catalog) -> dict[str, list[ComputeClass]]:
    """Per device resource, the classes whose nodes advertise it (an EFA class advertises the EFA interfaces)."""
    out: dict[str, list[ComputeClass]] = {}
    for cls in catalog.compute_classes:
        if cls.accelerator:
            out.setdefault(cls.accelerator.resource, []).append(cls)
        if cls.efa:
            out.setdefault(EFA_RESOURCE, []).append(cls)
    return out


def check_known(catalog: Catalog) -> None:
    """InputError naming every class whose accelerator no device plugin here advertises."""
    problems = [
        Problem.at(("computeClasses", c, "accelerator", "resource"),
                   f"no known device plugin advertises {cls.accelerator.resource}; wf installs one for "
                   f"{', '.join(sorted(PLUGINS))}")
        for c, cls in enumerate(catalog.compute_classes)
        if cls.accelerator and cls.accelerator.resource not in PLUGINS
    ]
    if problems:
        raise InputError(problems)


def objects(catalog: Catalog) -> list[dict[str, Any]]:
    check_known(catalog)
    out: list[dict[str, Any]] = []
    for resource, classes in plugin_classes(catalog).items():
        plugin = PLUGINS[resource]
        groups = [g for cls in classes for g in node_groups_of(cls, catalog)]
        if plugin.node_access:
            out += _node_access(plugin)
        out.append(daemonset(plugin, groups))
    return out


def daemonset(plugin: DevicePlugin, groups: Sequence[NodeGroup]) -> dict[str, Any]:
    selectors = list({tuple(sorted(g.node_selector.items())): g.node_selector for g in groups}.values())
    tolerations = list({tuple(sorted(t.items())): t for g in groups for t in g.tolerations}.values())
    labels = {"name": plugin.pod_label}
    container: dict[str, Any] = {
        "name": plugin.name,
        "image": plugin.image,
        "resources": {"requests": {"cpu": "10m", "memory": "20Mi"}},
        "volumeMounts": [{"name": "device-plugin", "mountPath": PLUGIN_DIR},
                         *({"name": name, "mountPath": path} for name, path in plugin.host_paths)],
    }
    if plugin.privileged:
        container["securityContext"] = {"privileged": True}
    else:
        container["securityContext"] = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    if plugin.resource == NVIDIA_GPU_RESOURCE:
        # Without this the plugin exits on a node whose driver is not loaded yet, and the DaemonSet backs off.
        container["env"] = [{"name": "FAIL_ON_INIT_ERROR", "value": "false"}]
    if plugin.node_access:
        container["env"] = [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]
    pod_spec: dict[str, Any] = {
        "priorityClassName": "system-node-critical",
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": k, "operator": "In", "values": [v]} for k, v in selector.items()]}
            for selector in selectors]}}},
        "containers": [container],
        "volumes": [{"name": "device-plugin", "hostPath": {"path": PLUGIN_DIR}},
                    *({"name": name, "hostPath": {"path": path}} for name, path in plugin.host_paths)],
    }
    if tolerations:
        pod_spec["tolerations"] = tolerations
    if plugin.host_network:
        pod_spec["hostNetwork"] = True
    if plugin.node_access:
        pod_spec["serviceAccountName"] = plugin.name
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": plugin.name, "namespace": NAMESPACE, "labels": labels,
                     "annotations": {f"{DOMAIN}/upstream": plugin.source}},
        "spec": {
            "selector": {"matchLabels": labels},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {"metadata": {"labels": labels}, "spec": pod_spec},
        },
    }


def _node_access(plugin: DevicePlugin) -> list[dict[str, Any]]:
    rbac = "rbac.authorization.k8s.io/v1"
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": plugin.name, "namespace": NAMESPACE}},
        {"apiVersion": rbac, "kind": "ClusterRole", "metadata": {"name": plugin.name}, "rules": [
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch", "update"]},
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "patch", "update"]},
            {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
        ]},
        {"apiVersion": rbac, "kind": "ClusterRoleBinding", "metadata": {"name": plugin.name},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": plugin.name},
         "subjects": [{"kind": "ServiceAccount", "name": plugin.name, "namespace": NAMESPACE}]},
    ]
