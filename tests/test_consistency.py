"""Two-way consistency: placement admits each class's own node groups and no other's, for eksctl and Karpenter."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wf.lint.consistency import accidental_tolerations, admits, check_cluster_config, placement_of, untolerated
from wf.model.catalog import Catalog, Taint, load_catalog
from wf.model.nodegroups import node_groups
from wf.render import eksctl, karpenter

ROOT = Path(__file__).resolve().parents[1]
CATALOG = ROOT / "eksctl" / "catalog.yaml"

# Instance families of one architecture and one accelerator each, so any subset is a valid class.
FAMILIES: dict[str, tuple[list[str], dict[str, Any] | None, bool]] = {
    "r5": (["r5.4xlarge", "r5.8xlarge"], None, False),
    "c7g": (["c7g.4xlarge", "c7g.8xlarge"], None, False),
    "gaudi": (["dl1.24xlarge"], {"resource": "habana.ai/gaudi", "count": 8}, True),
    "g5": (["g5.2xlarge", "g4dn.2xlarge"], {"resource": "nvidia.com/gpu", "count": 1}, False),
    "trn": (["trn1.32xlarge"], {"resource": "aws.amazon.com/neuron", "count": 16}, True),
}
ZONES = ["us-east-1a", "us-east-1b", "us-east-1c", "us-east-1d"]
EFFECTS = ["NoSchedule", "PreferNoSchedule", "NoExecute"]
TAINT_KEYS = ["dedicated", "example.com/pool", "nvidia.com/gpu", "habana.ai/gaudi"]


@st.composite
def compute_class(draw: st.DrawFn, name: str) -> dict[str, Any]:
    family = draw(st.sampled_from(sorted(FAMILIES)))
    types, accelerator, efa = FAMILIES[family]
    cls: dict[str, Any] = {
        "name": name,
        "instanceTypes": draw(st.lists(st.sampled_from(types), min_size=1, max_size=len(types), unique=True)),
        "capacity": draw(st.lists(st.sampled_from(["spot", "on-demand"]), min_size=1, max_size=2, unique=True)),
    }
    if draw(st.booleans()):
        cls["availabilityZones"] = draw(st.lists(st.sampled_from(ZONES[:3]), min_size=1, max_size=3, unique=True))
    if accelerator and draw(st.booleans()):
        cls["accelerator"] = accelerator
    if efa and draw(st.booleans()):
        cls["efa"] = True
    keys = draw(st.lists(st.sampled_from(TAINT_KEYS), max_size=2, unique=True))
    cls["taints"] = [{"key": k, "value": draw(st.sampled_from(["", "true", name])),
                      "effect": draw(st.sampled_from(EFFECTS))} for k in keys]
    if draw(st.booleans()):
        cls["labels"] = {"example.com/team": draw(st.sampled_from(["ml", "data"]))}
    return cls


@st.composite
def catalogs(draw: st.DrawFn) -> Catalog:
    names = draw(st.lists(st.sampled_from(["cpu", "gaudi", "arm", "gpu", "trn", "big"]), min_size=1, max_size=4,
                          unique=True))
    return Catalog.model_validate({
        "cluster": {"name": "prop", "region": "us-east-1", "version": "1.33",
                    "availabilityZones": draw(st.lists(st.sampled_from(ZONES[:3]), min_size=2, max_size=3,
                                                       unique=True))},
        "computeClasses": [draw(compute_class(n)) for n in names],
    })


def hard(taints: Any) -> list[Taint]:
    return [t for t in taints if t.effect != "PreferNoSchedule"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(catalogs())
def test_every_group_is_matched_by_its_class_only(catalog: Catalog):
    classes = catalog.compute_classes
    for group in node_groups(catalog):
        taints = list(group.taints)
        for instance in group.instance_types:
            labels = group.node_labels(instance)
            for cls in classes:
                for capacity in cls.capacity:
                    own = (cls.name, capacity) == (group.compute_class, group.capacity)
                    selector, tolerations = placement_of(catalog, cls, capacity)
                    assert admits(selector, tolerations, labels, taints) is own
                    declared = set(cls.taints)
                    if not set(hard(group.taints)) <= declared and not own:
                        # A class lacking the group's tolerations is kept off by the taints alone, unless
                        # the consistency check names it as an accidental toleration.
                        tolerated = not untolerated(tolerations, hard(group.taints))
                        owner = catalog.compute_class(group.compute_class)
                        named = any(f"class {cls.name}'s" in m for m in accidental_tolerations(catalog, owner, taints))
                        assert tolerated == named


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(catalogs())
def test_karpenter_pools_admit_their_class_only(catalog: Catalog):
    pools = [m for m in karpenter.manifests(catalog) if m["kind"] == "NodePool"]
    for cls in catalog.compute_classes:
        for capacity in cls.capacity:
            selector, tolerations = placement_of(catalog, cls, capacity)
            admitted = [p["metadata"]["name"] for p in pools
                        if admits(selector, tolerations, karpenter.pool_node_labels(p), karpenter.pool_taints(p))]
            assert admitted == [karpenter.pool_name(cls, capacity)]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(catalogs())
def test_generated_config_is_consistent(tmp_path: Path, catalog: Catalog):
    path = tmp_path / "cluster.yaml"
    path.write_text(eksctl.render(catalog))
    problems = check_cluster_config(catalog, path)
    # Only accidental tolerations (a catalog property, not a config one) may remain.
    assert all("also tolerate" in p.message for p in problems), problems


def test_default_catalog_config_is_consistent():
    assert check_cluster_config(load_catalog(CATALOG), ROOT / "eksctl" / "cluster.yaml") == []


def test_kubernetes_toleration_rules():
    taint = Taint(key="habana.ai/gaudi", value="true", effect="NoSchedule")
    assert taint.tolerated_by(
        [{"key": "habana.ai/gaudi", "operator": "Equal", "value": "true", "effect": "NoSchedule"}])
    assert taint.tolerated_by([{"key": "habana.ai/gaudi", "operator": "Exists"}])
    assert taint.tolerated_by([{"operator": "Exists"}])
    assert not taint.tolerated_by([{"key": "habana.ai/gaudi", "operator": "Equal", "value": "false"}])
    assert not taint.tolerated_by([{"key": "habana.ai/gaudi", "operator": "Exists", "effect": "NoExecute"}])
    assert untolerated([], [Taint(key="a", effect="PreferNoSchedule")]) == []


def edited_config(tmp_path: Path, edit) -> Path:  # type: ignore[no-untyped-def]
    catalog = load_catalog(CATALOG)
    config = eksctl.cluster_config(catalog)
    edit(config)
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))  # no generated header: a hand-kept config
    return path


def test_class_without_groups(tmp_path):
    def drop_gpu(config: dict) -> None:
        config["managedNodeGroups"] = [g for g in config["managedNodeGroups"]
                                       if g["labels"]["wf.dev/compute-class"] != "gpu"]
    problems = check_cluster_config(load_catalog(CATALOG), edited_config(tmp_path, drop_gpu))
    assert [p.message for p in problems] == [
        "compute class gpu has no node group (label wf.dev/compute-class=gpu): its steps would stay Pending"]


def test_missing_zone_and_capacity(tmp_path):
    def drop(config: dict) -> None:
        config["managedNodeGroups"] = [g for g in config["managedNodeGroups"]
                                       if g["name"] not in ("cpu-on-demand-us-east-1b", "graviton-spot-us-east-1c")]
    messages = [p.message for p in check_cluster_config(load_catalog(CATALOG), edited_config(tmp_path, drop))]
    assert messages == ["compute class cpu has no on-demand node group in us-east-1b",
                        "compute class graviton has no spot node group in us-east-1c"]


def test_taint_not_tolerated_by_own_class(tmp_path):
    def retaint(config: dict) -> None:
        gaudi = next(g for g in config["managedNodeGroups"] if g["name"] == "gaudi-spot-us-east-1a")
        gaudi["taints"][0]["effect"] = "NoExecute"
    problems = check_cluster_config(load_catalog(CATALOG), edited_config(tmp_path, retaint))
    messages = [p.message for p in problems]
    assert ("node group gaudi-spot-us-east-1a: class gaudi pods cannot schedule here: "
            "taint habana.ai/gaudi=true:NoExecute not tolerated") in messages
    assert any(m.startswith("node group gaudi-spot-us-east-1a: taints are") for m in messages)


def test_accidental_toleration_is_reported(tmp_path):
    text = CATALOG.read_text().replace(
        "    arch: arm64\n",
        "    arch: arm64\n    taints: [{key: habana.ai/gaudi, effect: NoSchedule}]\n")
    catalog = Catalog.from_yaml_text(text, "catalog.yaml")
    path = tmp_path / "cluster.yaml"
    path.write_text(eksctl.render(catalog))
    messages = [p.message for p in check_cluster_config(catalog, path)]
    # graviton's valueless taint compiles to an Exists toleration, which covers gaudi's habana.ai/gaudi=true.
    assert messages == ["class graviton's tolerations also tolerate habana.ai/gaudi=true:NoSchedule of class "
                        "gaudi's node group; give the taints distinct keys or values"]
