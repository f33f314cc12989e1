"""Karpenter's kwok provider is given wf's own NodePools and the catalog's instance types, nothing else."""

from __future__ import annotations

import json

from wf.cluster import karpenter_kwok
from wf.model.catalog import load_catalog
from wf.model.instances import instance_type
from wf.model.nodegroups import node_groups
from wf.render.karpenter import manifests


def test_node_pools_are_wfs_with_only_the_node_class_swapped() -> None:
    catalog = load_catalog(None)
    generated = [d for d in manifests(catalog) if d["kind"] == "NodePool"]
    pools = karpenter_kwok.node_pools(catalog)
    assert [p["metadata"]["name"] for p in pools] == [g["metadata"]["name"] for g in generated]
    for pool, original in zip(pools, generated, strict=True):
        assert pool["spec"]["template"]["spec"]["nodeClassRef"] == karpenter_kwok.NODECLASS_REF
        pool["spec"]["template"]["spec"]["nodeClassRef"] = original["spec"]["template"]["spec"]["nodeClassRef"]
        assert pool == original
    assert original["spec"]["template"]["spec"]["nodeClassRef"]["kind"] == "EC2NodeClass"  # not mutated


def test_instance_types_are_the_catalogs_with_an_offering_per_capacity_and_zone() -> None:
    catalog = load_catalog(None)
    types = {t["name"]: t for t in json.loads(json.dumps(karpenter_kwok.instance_types(catalog)))}
    groups = node_groups(catalog)
    assert set(types) == {name for g in groups for name in g.instance_types}
    for group in groups:
        for name in group.instance_types:
            offered = {
                (o["Requirements"][0]["values"][0], o["Requirements"][1]["values"][0]) for o in types[name]["offerings"]
            }
            assert (group.capacity, group.zone) in offered
            assert types[name]["resources"] == group.allocatable(name)
            assert types[name]["architecture"] == instance_type(name).arch
    gaudi = types["dl1.24xlarge"]
    assert gaudi["resources"]["habana.ai/gaudi"] == "8" and gaudi["resources"]["hugepages-2Mi"] != "0Mi"
    spot = [o["Price"] for o in types["r5.4xlarge"]["offerings"] if o["Requirements"][0]["values"] == ["spot"]]
    on_demand = [o["Price"] for o in types["r5.4xlarge"]["offerings"]
                 if o["Requirements"][0]["values"] == ["on-demand"]]
    assert max(spot) < min(on_demand)
