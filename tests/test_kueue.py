"""Teams in the catalog and the Kueue objects rendered from them, validated against Kueue v0.17.0's CRDs
(read in place from ../shared/schemas/kueue)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml

from test_catalog import BASE, catalog_problems, only
from upstream import KUEUE_CRDS, require, strictify
from wf import kueue
from wf.catalog import Catalog, load_catalog
from wf.cli import main
from wf.nodegroups import class_node_labels
from wf.teams import flavor_quotas

QUEUES: dict[str, Any] = {
    "cohort": "lab",
    "teams": [
        {"name": "perception", "namespaces": ["perception"],
         "quotas": [{"compute": "gaudi", "accelerators": 16, "borrowingLimit": {"accelerators": 8}},
                    {"compute": "cpu", "cpu": 32, "memory": "128Gi"}]},
        {"name": "mapping", "namespaces": ["mapping", "mapping-dev"],
         "quotas": [{"compute": "gaudi", "accelerators": 8, "lendingLimit": {"accelerators": 4}}]},
    ],
}
CRD_FILES = {
    "ResourceFlavor": "kueue.x-k8s.io_resourceflavors.yaml",
    "ClusterQueue": "kueue.x-k8s.io_clusterqueues.yaml",
    "LocalQueue": "kueue.x-k8s.io_localqueues.yaml",
    "WorkloadPriorityClass": "kueue.x-k8s.io_workloadpriorityclasses.yaml",
}


def team_catalog(write: Callable[..., Path], **queues: Any) -> Catalog:
    data = copy.deepcopy(BASE)
    data["queues"] = {**copy.deepcopy(QUEUES), **queues}
    return load_catalog(write("catalog.yaml", yaml.safe_dump(data, sort_keys=False)))


@pytest.fixture(scope="module")
def crd_validators() -> dict[str, Any]:
    from jsonschema import Draft4Validator

    require(KUEUE_CRDS)
    out = {}
    for kind, name in CRD_FILES.items():
        crd = yaml.safe_load((KUEUE_CRDS / name).read_text())
        version = next(v for v in crd["spec"]["versions"] if v["name"] == kueue.API_VERSION.split("/")[1])
        assert version["served"] and version["storage"]
        out[kind] = Draft4Validator(strictify(version["schema"]["openAPIV3Schema"]))
    return out


def errors(validators: dict[str, Any], obj: dict[str, Any]) -> list[str]:
    return [f"{obj['kind']} {obj['metadata']['name']} {list(e.absolute_path)}: {e.message}"
            for e in validators[obj["kind"]].iter_errors(obj)]


def test_repository_catalog_objects_are_valid_kueue_v0_17(catalog: Catalog, crd_validators: dict[str, Any]) -> None:
    objs = kueue.objects(catalog)
    assert {o["kind"] for o in objs} == set(CRD_FILES)
    assert [e for o in objs for e in errors(crd_validators, o)] == []


def test_the_crd_validators_can_fail(catalog: Catalog, crd_validators: dict[str, Any]) -> None:
    queue = next(o for o in kueue.objects(catalog) if o["kind"] == "ClusterQueue")
    queue["spec"]["cohort"] = "v1beta1-spelling"  # renamed cohortName in v1beta2
    queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = "lots"
    assert len(errors(crd_validators, queue)) == 2


def test_one_flavor_per_class_and_capacity_with_the_node_groups_labels_and_taints(catalog: Catalog) -> None:
    flavors = {o["metadata"]["name"]: o["spec"] for o in kueue.objects(catalog) if o["kind"] == "ResourceFlavor"}
    expected = {f"{c.name}-{cap}" for c in catalog.compute_classes for cap in c.capacity}
    assert set(flavors) == expected
    gaudi = catalog.compute_class("gaudi")
    assert flavors["gaudi-spot"]["nodeLabels"] == class_node_labels(gaudi, "spot")
    assert flavors["gaudi-spot"]["nodeTaints"] == [{"key": "habana.ai/gaudi", "value": "true", "effect": "NoSchedule"}]
    assert "nodeTaints" not in flavors["cpu-spot"]


def test_cluster_queues_share_a_cohort_and_list_every_flavor(write: Callable[..., Path]) -> None:
    cat = team_catalog(write)
    queues = {o["metadata"]["name"]: o["spec"] for o in kueue.objects(cat) if o["kind"] == "ClusterQueue"}
    assert set(queues) == {"perception", "mapping"}
    assert {q["cohortName"] for q in queues.values()} == {"lab"}
    group = queues["perception"]["resourceGroups"][0]
    assert group["coveredResources"] == ["cpu", "memory", "habana.ai/gaudi"]
    flavors = {f["name"]: {r["name"]: r for r in f["resources"]} for f in group["flavors"]}
    assert set(flavors) == {"cpu-spot", "cpu-on-demand", "gaudi-spot"}
    assert flavors["gaudi-spot"]["habana.ai/gaudi"] == {"name": "habana.ai/gaudi", "nominalQuota": 16,
                                                        "borrowingLimit": 8}
    # cpu and memory of 16 cards default to two dl1.24xlarge nodes' allocatable
    assert flavors["gaudi-spot"]["cpu"]["nominalQuota"] != 0
    assert flavors["cpu-spot"]["cpu"]["nominalQuota"] == "32"
    assert flavors["cpu-spot"]["memory"]["nominalQuota"] == "128Gi"
    assert flavors["cpu-on-demand"]["cpu"]["nominalQuota"] == 0
    mapping = {f["name"]: {r["name"]: r for r in f["resources"]} for f in queues["mapping"]["resourceGroups"][0]["flavors"]}
    assert mapping["gaudi-spot"]["habana.ai/gaudi"]["lendingLimit"] == 4
    assert queues["mapping"]["namespaceSelector"]["matchExpressions"][0]["values"] == ["mapping", "mapping-dev"]


def test_local_queue_per_namespace_and_default_priorities(write: Callable[..., Path]) -> None:
    objs = kueue.objects(team_catalog(write))
    local = [(o["metadata"]["namespace"], o["metadata"]["name"], o["spec"]["clusterQueue"])
             for o in objs if o["kind"] == "LocalQueue"]
    assert local == [("perception", "perception", "perception"), ("mapping", "mapping", "mapping"),
                     ("mapping-dev", "mapping", "mapping")]
    prios = {o["metadata"]["name"]: o["value"] for o in objs if o["kind"] == "WorkloadPriorityClass"}
    assert prios == {"high": 1000, "normal": 100, "low": 10}


def test_accelerator_quota_brings_its_nodes_cpu_and_memory(write: Callable[..., Path]) -> None:
    cat = team_catalog(write)
    gaudi = next(q for q in flavor_quotas(cat, cat.queues.team("perception")) if q.compute_class == "gaudi")
    node = cat.compute_class("gaudi").largest
    assert gaudi.nominal["cpu"] == Decimal(2 * node.allocatable_cpu_millis) / 1000
    assert gaudi.ceiling("accelerators") == 24


@pytest.mark.parametrize(("mutate", "field", "message"), [
    (lambda q: q["teams"][0]["quotas"][0].update(compute="tpu"), "queues.teams[0].quotas[0].compute",
     "unknown compute class 'tpu'"),
    (lambda q: q["teams"][0]["quotas"][1].update(accelerators=2), "queues.teams[0].quotas[1].accelerators",
     "has no accelerators"),
    (lambda q: q["teams"][1].update(namespaces=["perception"]), "queues.teams[1].namespaces[0]",
     "already belongs to team perception"),
    (lambda q: q["teams"][1].update(name="perception"), "queues.teams[1].name", "duplicate team"),
    (lambda q: q.update(defaultPriority="urgent"), "queues.defaultPriority", "unknown priority 'urgent'"),
    (lambda q: q["teams"][0]["quotas"][1].update(capacity="on-demand", compute="gaudi"),
     "queues.teams[0].quotas[1].capacity", "offers spot, not on-demand"),
    (lambda q: q["teams"][1]["quotas"][0].update(lendingLimit={"accelerators": 9}),
     "queues.teams[1].quotas[0].lendingLimit.accelerators", "lends more accelerators than the nominal quota of 8"),
    (lambda q: q["teams"][0]["quotas"][1].update(cpu="-1"), "queues.teams[0].quotas[1].cpu", "must not be negative"),
])
def test_bad_teams_are_reported_with_their_field(write: Callable[..., Path], mutate: Callable[[dict[str, Any]], None],
                                                  field: str, message: str) -> None:
    def change(data: dict[str, Any]) -> None:
        data["queues"] = copy.deepcopy(QUEUES)
        mutate(data["queues"])

    found_field, found = only(catalog_problems(write, change))
    assert found_field == field
    assert message in found


def test_generate_command_writes_the_objects(write: Callable[..., Path], tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    team_catalog(write)
    out = tmp_path / "kueue.yaml"
    with pytest.raises(SystemExit) as exc:
        main(["kueue", "generate", "--catalog", str(tmp_path / "catalog.yaml"), "-o", str(out)])
    assert exc.value.code == 0
    kinds = [d["kind"] for d in yaml.safe_load_all(out.read_text())]
    assert kinds.count("LocalQueue") == 3


def test_generate_without_teams_is_a_clear_error(write: Callable[..., Path], capsys: pytest.CaptureFixture[str]) -> None:
    path = write("catalog.yaml", yaml.safe_dump(BASE))
    with pytest.raises(SystemExit) as exc:
        main(["kueue", "generate", "--catalog", str(path)])
    assert exc.value.code == 2
    assert "no `queues:` section" in capsys.readouterr().err
