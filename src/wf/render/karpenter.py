"""Karpenter NodePools from the catalog: the same compute classes for clusters that provision with Karpenter.

One NodePool per class x capacity (not per class): a NodePool that allowed both Spot and On-Demand could not
stamp one truthful `wf.dev/capacity` label on its nodes, and compiled workflows select on that label.
Zones are a requirement, not separate pools: Karpenter picks the zone per node.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

from wf.core.constants import ARCH_LABEL, INSTANCE_TYPE_LABEL, ZONE_LABEL
from wf.core.units import format_mib
from wf.model.accelerators import GAUDI_RESOURCE
from wf.model.catalog import Catalog, ComputeClass, Taint
from wf.model.nodegroups import NodeGroup, node_groups_of
from wf.render.eksctl import display_path, hugepages_commands

NODEPOOL_API = "karpenter.sh/v1"
NODECLASS_API = "karpenter.k8s.aws/v1"
CAPACITY_TYPE_LABEL = "karpenter.sh/capacity-type"
DEFAULT_NODECLASS = "wf-default"
DISCOVERY_TAG = "karpenter.sh/discovery"
# The catalog's default root volume; classes that differ (or need node setup) get their own EC2NodeClass.
_DEFAULT_VOLUME_GIB = 100
_ROOT_DEVICE = "/dev/xvda"
# The node's IAM role is the node's, not its pods' (as eksctl's disableIMDSv1 and disablePodIMDS, wf.render.eksctl):
# IMDSv2 tokens only and a PUT response hop limit of 1, so no pod outside the host's network gets a token. These are
# Karpenter v1's defaults (EC2NodeClass CRD, spec.metadataOptions); stated so that the live object says so and
# `wf platform check` can tell a node class that lets pods reach the metadata service.
METADATA_OPTIONS = {"httpEndpoint": "enabled", "httpProtocolIPv6": "disabled", "httpPutResponseHopLimit": 1,
                    "httpTokens": "required"}


def metadata_exposure(options: Mapping[str, Any]) -> str | None:
    """How a node with these metadata options (an EC2NodeClass's, Karpenter's defaults for what it omits) lets
    its pods reach the metadata service and the node's role, None when it does not: IMDSv1 answers any caller
    (the hop limit bounds only IMDSv2's token response), and a hop limit above 1 lets a token reach a pod's own
    network namespace."""
    if options.get("httpEndpoint", METADATA_OPTIONS["httpEndpoint"]) == "disabled":
        return None
    tokens = options.get("httpTokens", METADATA_OPTIONS["httpTokens"])
    hops = int(options.get("httpPutResponseHopLimit", METADATA_OPTIONS["httpPutResponseHopLimit"]))
    if tokens != "required":
        return f"httpTokens {tokens}: IMDSv1 answers every pod"
    return f"httpPutResponseHopLimit {hops}: IMDSv2 tokens reach pods" if hops > 1 else None


class LiteralDumper(yaml.SafeDumper):
    """Multi-line strings (user data) as literal blocks, so the script reads as a script."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _literal(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


LiteralDumper.add_representer(str, _literal)


def pool_name(cls: ComputeClass, capacity: str) -> str:
    return f"{cls.name}-{capacity}"


def _needs_own_nodeclass(group: NodeGroup) -> bool:
    return group.volume_size != _DEFAULT_VOLUME_GIB or bool(group.hugepages_2mi_mib)


def nodeclass_name(group: NodeGroup) -> str:
    return f"wf-{group.compute_class}" if _needs_own_nodeclass(group) else DEFAULT_NODECLASS


def node_class(catalog: Catalog, name: str, group: NodeGroup | None = None) -> dict[str, Any]:
    """An EC2NodeClass: AL2023 (Karpenter picks the NVIDIA/Neuron variant per instance type), discovery by tag."""
    cluster = catalog.cluster.name
    spec: dict[str, Any] = {
        "role": f"KarpenterNodeRole-{cluster}",
        "amiSelectorTerms": [{"alias": "al2023@latest"}],
        "subnetSelectorTerms": [{"tags": {DISCOVERY_TAG: cluster}}],
        "securityGroupSelectorTerms": [{"tags": {DISCOVERY_TAG: cluster}}],
        "blockDeviceMappings": [{
            "deviceName": _ROOT_DEVICE,
            "ebs": {"volumeSize": f"{group.volume_size if group else _DEFAULT_VOLUME_GIB}Gi", "volumeType": "gp3",
                    "encrypted": True, "deleteOnTermination": True},
        }],
        "metadataOptions": dict(METADATA_OPTIONS),
    }
    if group and (commands := hugepages_commands(group)):
        # Karpenter merges a MIME multi-part user data with its own nodeadm NodeConfig on AL2023.
        spec["userData"] = _mime_shell_script(commands)
    return {"apiVersion": NODECLASS_API, "kind": "EC2NodeClass", "metadata": {"name": name}, "spec": spec}


def _mime_shell_script(commands: list[str]) -> str:
    return "\n".join([
        "MIME-Version: 1.0",
        'Content-Type: multipart/mixed; boundary="WF"',
        "",
        "--WF",
        'Content-Type: text/x-shellscript; charset="us-ascii"',
        "",
        "#!/bin/bash",
        "set -euo pipefail",
        *commands,
        "--WF--",
        "",
    ])


def node_pool(catalog: Catalog, cls: ComputeClass, capacity: str) -> dict[str, Any]:
    groups = [g for g in node_groups_of(cls, catalog) if g.capacity == capacity]
    group = groups[0]
    zones = [g.zone for g in groups]
    requirements = [
        {"key": INSTANCE_TYPE_LABEL, "operator": "In", "values": list(group.instance_types)},
        {"key": CAPACITY_TYPE_LABEL, "operator": "In", "values": [capacity]},
        {"key": ARCH_LABEL, "operator": "In", "values": [group.arch]},
        {"key": ZONE_LABEL, "operator": "In", "values": zones},
    ]
    template_spec: dict[str, Any] = {
        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": nodeclass_name(group)},
        "requirements": requirements,
    }
    if group.taints:
        template_spec["taints"] = group.kubernetes_taints
    return {
        "apiVersion": NODEPOOL_API,
        "kind": "NodePool",
        "metadata": {"name": pool_name(cls, capacity)},
        "spec": {
            "template": {"metadata": {"labels": dict(group.labels)}, "spec": template_spec},
            "limits": pool_limits(cls, len(zones)),
            # Training pods run for hours and checkpoint rarely: only empty nodes are removed, as the
            # cluster-autoscaler does for the eksctl groups, never nodes consolidated out from under a job.
            "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "5m"},
        },
    }


def pool_node_labels(pool: dict[str, Any]) -> dict[str, str]:
    """Labels every node of the pool carries: the template's, plus requirements pinned to a single value."""
    spec = pool["spec"]["template"]
    labels = dict(spec["metadata"].get("labels", {}))
    for req in spec["spec"].get("requirements", []):
        if req["operator"] == "In" and len(req["values"]) == 1:
            labels[req["key"]] = req["values"][0]
    return labels


def pool_taints(pool: dict[str, Any]) -> list[Taint]:
    return [Taint.from_kubernetes(t) for t in pool["spec"]["template"]["spec"].get("taints", [])]


def pool_limits(cls: ComputeClass, zones: int) -> dict[str, str]:
    """The eksctl groups' ceiling (maxSize per zone) in resources, so both styles cap spend alike."""
    nodes = cls.max_size * zones
    largest_cpu = max(i.vcpu for i in cls.instances)
    largest_memory = max(i.memory_mib for i in cls.instances)
    limits = {"cpu": str(nodes * largest_cpu), "memory": format_mib(nodes * largest_memory)}
    if cls.accelerator:
        most = max(i.accelerators.get(cls.accelerator.resource, 0) for i in cls.instances)
        limits[cls.accelerator.resource] = str(nodes * most)
    return limits


def manifests(catalog: Catalog) -> list[dict[str, Any]]:
    """EC2NodeClasses first (NodePools reference them), then the NodePools in catalog order."""
    classes: dict[str, dict[str, Any]] = {DEFAULT_NODECLASS: node_class(catalog, DEFAULT_NODECLASS)}
    pools = []
    for cls in catalog.compute_classes:
        for capacity in cls.capacity:
            pool = node_pool(catalog, cls, capacity)
            ref = pool["spec"]["template"]["spec"]["nodeClassRef"]["name"]
            if ref not in classes:
                group = next(g for g in node_groups_of(cls, catalog) if g.capacity == capacity)
                classes[ref] = node_class(catalog, ref, group)
            pools.append(pool)
    return [*classes.values(), *pools]


def render(catalog: Catalog, catalog_label: str | None = None) -> str:
    label = catalog_label or display_path(catalog.source)
    header = [
        f"# Generated by `wf karpenter generate` from {label}. Do not edit: change the catalog and regenerate.",
        "# One NodePool per compute class x capacity: a pool spanning Spot and On-Demand could not label its nodes",
        "# with one truthful wf.dev/capacity, which compiled workflows select on. Zones are requirements.",
        "# EC2NodeClasses discover subnets and security groups by the tag karpenter.sh/discovery=<cluster>, and use",
        "# the role KarpenterNodeRole-<cluster>; create those (Karpenter's getting-started stack does) or edit here.",
        "# metadataOptions keep that role from pods: IMDSv2 tokens only, hop limit 1 (no pod outside the host's",
        "# network reaches the metadata service).",
    ]
    if any(c.accelerator and c.accelerator.resource == GAUDI_RESOURCE for c in catalog.compute_classes):
        header += [
            "# Gaudi: al2023@latest has no Habana driver; point that class's EC2NodeClass amiSelectorTerms at a",
            "# Habana driver AMI and install the Habana device plugin DaemonSet (it advertises habana.ai/gaudi).",
        ]
    body = yaml.dump_all(manifests(catalog), Dumper=LiteralDumper, sort_keys=False, default_flow_style=False,
                         width=120, explicit_start=True)
    return "\n".join(header) + "\n" + body
