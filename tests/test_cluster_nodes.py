"""Simulated nodes mirror the node groups: labels, taints, capacity and allocatable."""

from __future__ import annotations

from wf.cluster.nodes import node_manifests
from wf.core.units import parse_quantity
from wf.model.catalog import load_catalog
from wf.model.nodegroups import node_groups


def test_one_node_per_group_and_index_with_the_groups_labels_and_taints() -> None:
    catalog = load_catalog()
    groups = node_groups(catalog)
    nodes = node_manifests(catalog, 2)
    assert len(nodes) == 2 * len(groups)
    assert len({n["metadata"]["name"] for n in nodes}) == len(nodes)
    by_name = {n["metadata"]["name"]: n for n in nodes}
    for group in groups:
        for index in range(2):
            node = by_name[f"{group.name}-{index}"]
            itype = node["metadata"]["labels"]["node.kubernetes.io/instance-type"]
            assert itype in group.instance_types
            assert group.node_labels(itype).items() <= node["metadata"]["labels"].items()
            assert node["metadata"]["labels"]["kubernetes.io/hostname"] == node["metadata"]["name"]
            taints = [{"key": t.key, "value": t.value, "effect": t.effect} for t in group.taints]
            assert node["spec"]["taints"] == taints
            assert node["status"]["allocatable"] == group.allocatable(itype)


def test_capacity_is_at_least_allocatable_for_every_resource() -> None:
    for node in node_manifests(load_catalog(), 1):
        status = node["status"]
        assert status["capacity"].keys() == status["allocatable"].keys()
        for resource, value in status["allocatable"].items():
            assert parse_quantity(status["capacity"][resource]) >= parse_quantity(value), (
                node["metadata"]["name"], resource)


def test_accelerator_groups_advertise_their_devices() -> None:
    catalog = load_catalog()
    for group in node_groups(catalog):
        if group.accelerator is None:
            continue
        node = next(n for n in node_manifests(catalog, 1) if n["metadata"]["name"] == f"{group.name}-0")
        assert node["status"]["allocatable"][group.accelerator.resource] == str(group.accelerator.count)


def test_zero_nodes_per_group_means_no_nodes() -> None:
    assert node_manifests(load_catalog(), 0) == []
