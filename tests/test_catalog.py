"""The compute-class catalog: validation rules with file:line: field, and the default catalog mirroring the
reference cluster of DESIGN.md."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from wf.core.constants import CAPACITY_LABEL, CLASS_LABEL
from wf.core.errors import InputError
from wf.lint.documents import lint_paths
from wf.model.catalog import CATALOG_ENV, PROJECT_FILE, Catalog, Taint, catalog_path, load_catalog
from wf.model.nodegroups import mixed_sizes, node_groups

BASE: dict[str, Any] = {
    "apiVersion": "wf/v1",
    "kind": "Catalog",
    "cluster": {"name": "t", "region": "us-east-1", "version": "1.33",
                "availabilityZones": ["us-east-1a", "us-east-1b"]},
    "computeClasses": [
        {"name": "cpu", "instanceTypes": ["r5.4xlarge"], "capacity": ["spot", "on-demand"]},
        {"name": "gaudi", "instanceTypes": ["dl1.24xlarge"], "availabilityZones": ["us-east-1a"],
         "accelerator": {"resource": "habana.ai/gaudi", "count": 8},
         "taints": [{"key": "habana.ai/gaudi", "value": "true", "effect": "NoSchedule"}], "efa": True},
    ],
}


def catalog_problems(write: Any, mutate: Any) -> list[tuple[int | None, str | None, str]]:
    data = copy.deepcopy(BASE)
    mutate(data)
    path = write("catalog.yaml", yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(InputError) as exc:
        load_catalog(path)
    assert all(p.file == str(path) and p.line for p in exc.value.problems)
    return [(p.line, p.field, p.message) for p in exc.value.problems]


def only(found: list[tuple[int | None, str | None, str]]) -> tuple[str | None, str]:
    assert len(found) == 1, found
    return found[0][1], found[0][2]


def test_base_catalog_is_valid(write: Any) -> None:
    catalog = load_catalog(write("catalog.yaml", yaml.safe_dump(BASE)))
    assert catalog.class_names == ["cpu", "gaudi"]
    assert catalog.compute_class("gaudi").default_capacity == "spot"
    assert catalog.compute_class("cpu").zones(catalog.cluster) == ["us-east-1a", "us-east-1b"]
    assert catalog.source.endswith("catalog.yaml")


def test_unknown_instance_type_suggests_close_names(write: Any) -> None:
    field, message = only(catalog_problems(write, lambda d: d["computeClasses"][0].update(instanceTypes=["r5.4xlarg"])))
    assert field == "computeClasses[0].instanceTypes[0]"
    assert "unknown instance type 'r5.4xlarg'" in message and "r5.4xlarge" in message


def test_instance_types_listed_twice(write: Any) -> None:
    field, message = only(catalog_problems(
        write, lambda d: d["computeClasses"][0].update(instanceTypes=["r5.4xlarge", "r5.4xlarge"])))
    assert field == "computeClasses[0].instanceTypes" and "twice" in message


def test_duplicate_classes(write: Any) -> None:
    def mutate(d: dict[str, Any]) -> None:
        d["computeClasses"].append(copy.deepcopy(d["computeClasses"][0]))

    field, message = only(catalog_problems(write, mutate))
    assert field == "computeClasses[2].name" and message == "duplicate compute class 'cpu'"


def test_class_names_are_dns_labels(write: Any) -> None:
    field, message = only(catalog_problems(write, lambda d: d["computeClasses"][0].update(name="CPU_big")))
    assert field == "computeClasses[0].name" and "DNS-1123" in message


@pytest.mark.parametrize("effect", ["NoScheduleX", "noschedule", ""])
def test_taint_effects(write: Any, effect: str) -> None:
    field, message = only(catalog_problems(write, lambda d: d["computeClasses"][1]["taints"][0].update(effect=effect)))
    assert field == "computeClasses[1].taints[0].effect"
    assert "'NoSchedule', 'PreferNoSchedule' or 'NoExecute'" in message


def test_taint_key_and_value_syntax_and_duplicates(write: Any) -> None:
    def mutate(d: dict[str, Any]) -> None:
        d["computeClasses"][1]["taints"] += [
            {"key": "bad key", "value": "x", "effect": "NoSchedule"},
            {"key": "ok", "value": "bad value!", "effect": "NoSchedule"},
            {"key": "habana.ai/gaudi", "value": "other", "effect": "NoSchedule"},
        ]

    found = catalog_problems(write, mutate)
    assert [f for _, f, _ in found] == [f"computeClasses[1].taints[{i}]" for i in (1, 2, 3)]
    assert "taint key 'bad key'" in found[0][2]
    assert "value 'bad value!'" in found[1][2]
    assert "declared twice" in found[2][2]


@pytest.mark.parametrize(
    ("labels", "snippet"),
    [
        ({"bad key!": "x"}, "name part"),
        ({"-bad/x": "x"}, "prefix"),
        ({"a" * 64: "x"}, "name part"),
        ({"team": "not ok!"}, "value 'not ok!'"),
        ({"team": "v" * 64}, "at most 63"),
        ({"kubernetes.io/role": "x"}, "kubernetes.io/ or k8s.io/"),
        ({"k8s.io/x": "x"}, "kubernetes.io/ or k8s.io/"),
        ({"foo.kubernetes.io/x": "x"}, "kubernetes.io/ or k8s.io/"),
        ({"wf.dev/compute-class": "x"}, "set by wf itself"),
    ],
)
def test_label_rules(write: Any, labels: dict[str, str], snippet: str) -> None:
    field, message = only(catalog_problems(write, lambda d: d["computeClasses"][0].update(labels=labels)))
    assert field == f"computeClasses[0].labels.{next(iter(labels))}"
    assert snippet in message


@pytest.mark.parametrize("labels", [{"node.kubernetes.io/pool": "a"}, {"k8s.amazonaws.com/accelerator": "gaudi"},
                                    {"example.com/tier": "gold", "team": ""}])
def test_allowed_labels(write: Any, labels: dict[str, str]) -> None:
    data = copy.deepcopy(BASE)
    data["computeClasses"][0]["labels"] = labels
    load_catalog(write("catalog.yaml", yaml.safe_dump(data)))


def test_zones_outside_the_region(write: Any) -> None:
    def mutate(d: dict[str, Any]) -> None:
        d["cluster"]["availabilityZones"].append("us-west-2a")
        d["computeClasses"][1]["availabilityZones"] = ["eu-west-1a"]

    found = catalog_problems(write, mutate)
    assert [(f, m) for _, f, m in found] == [
        ("cluster.availabilityZones[2]", "zone 'us-west-2a' is not in region 'us-east-1'"),
        ("computeClasses[1].availabilityZones[0]", "zone 'eu-west-1a' is not in region 'us-east-1'"),
    ]


def test_mixed_architectures(write: Any) -> None:
    field, message = only(catalog_problems(
        write, lambda d: d["computeClasses"][0].update(instanceTypes=["r5.4xlarge", "c7g.8xlarge"])))
    assert field == "computeClasses[0].instanceTypes"
    assert "mix architectures" in message and "c7g.8xlarge (arm64)" in message


def test_declared_arch_must_match_the_instances(write: Any) -> None:
    field, message = only(catalog_problems(write, lambda d: d["computeClasses"][0].update(arch="arm64")))
    assert field == "computeClasses[0].arch" and "amd64" in message


def test_accelerator_count_beyond_the_instance(write: Any) -> None:
    field, message = only(catalog_problems(write, lambda d: d["computeClasses"][1]["accelerator"].update(count=16)))
    assert field == "computeClasses[1].accelerator.count"
    assert message == "dl1.24xlarge has 8 habana.ai/gaudi, fewer than the 16 the class declares"


def test_accelerator_the_instance_does_not_have(write: Any) -> None:
    def mutate(d: dict[str, Any]) -> None:
        d["computeClasses"][0]["accelerator"] = {"resource": "nvidia.com/gpu", "count": 1}

    field, message = only(catalog_problems(write, mutate))
    assert field == "computeClasses[0].accelerator.count" and "r5.4xlarge has 0 nvidia.com/gpu" in message


def test_efa_on_instances_without_efa(write: Any) -> None:
    field, message = only(catalog_problems(write, lambda d: d["computeClasses"][0].update(efa=True)))
    assert (field, message) == ("computeClasses[0].efa", "r5.4xlarge has no EFA interface")


def test_capacity_values(write: Any) -> None:
    field, message = only(catalog_problems(write, lambda d: d["computeClasses"][0].update(capacity=["spot", "spot"])))
    assert field == "computeClasses[0].capacity" and "twice" in message
    field, _ = only(catalog_problems(write, lambda d: d["computeClasses"][0].update(capacity=["reserved"])))
    assert field == "computeClasses[0].capacity[0]"


def test_sizes(write: Any) -> None:
    field, message = only(catalog_problems(write, lambda d: d["computeClasses"][0].update(minSize=5, maxSize=2)))
    assert field == "computeClasses[0].minSize" and "exceeds maxSize" in message


def test_unknown_keys_and_missing_fields(write: Any) -> None:
    def mutate(d: dict[str, Any]) -> None:
        d["computeClasses"][0]["instanceType"] = "r5.4xlarge"
        del d["cluster"]["region"]

    found = {(f, m) for _, f, m in catalog_problems(write, mutate)}
    assert found == {("computeClasses[0].instanceType", "unknown field (did you mean 'instanceTypes'?)"),
                     ("cluster.region", "required field is missing")}


def test_python_api_checks_the_same_rules() -> None:
    data = copy.deepcopy(BASE)
    data["computeClasses"][0]["instanceTypes"] = ["r5.4xlarg"]
    with pytest.raises(InputError) as exc:
        Catalog.model_validate(data)
    assert [(p.file, p.field) for p in exc.value.problems] == [("<python>", "computeClasses[0].instanceTypes[0]")]


def test_from_yaml_text_and_to_yaml_round_trip() -> None:
    catalog = Catalog.from_yaml_text(yaml.safe_dump(BASE), "in-cluster")
    again = Catalog.from_yaml_text(catalog.to_yaml(), "again")
    assert again.model_dump() == catalog.model_dump()
    with pytest.raises(InputError):
        Catalog.from_yaml_text("- a\n", "in-cluster")


def test_catalog_path_precedence(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # --catalog, else WF_CATALOG, else the nearest project file above the job, else none (README, The catalog).
    project = tmp_path / "project"
    (project / "jobs" / "nlp").mkdir(parents=True)
    (project / "platform").mkdir()
    (project / "platform" / "catalog.yaml").write_text("x")
    (project / PROJECT_FILE).write_text("catalog: platform/catalog.yaml\n")
    job = project / "jobs" / "nlp" / "job.yaml"
    monkeypatch.delenv(CATALOG_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    assert catalog_path() is None
    assert catalog_path(near=job) == project / "platform" / "catalog.yaml"
    assert catalog_path(near=project / "jobs") == project / "platform" / "catalog.yaml"
    monkeypatch.setenv(CATALOG_ENV, str(tmp_path / "env.yaml"))
    assert catalog_path(near=job) == tmp_path / "env.yaml"
    assert catalog_path(tmp_path / "flag.yaml", near=job) == tmp_path / "flag.yaml"


def test_the_repository_names_its_catalog_in_its_project_file(monkeypatch: pytest.MonkeyPatch) -> None:
    root = Path(__file__).resolve().parents[1]
    monkeypatch.delenv(CATALOG_ENV, raising=False)
    assert catalog_path(near=root / "examples" / "data-prep.yaml") == root / "eksctl" / "catalog.yaml"


@pytest.mark.parametrize(("text", "message"), [
    ("catalog: missing.yaml\n", "1: catalog: no such file"),
    ("catalgo: c.yaml\n", "1: catalgo: unknown setting (did you mean 'catalog'?)"),
    ("{}\n", "name the compute-class catalog"),
])
def test_a_broken_project_file_is_bad_input_at_its_line(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / PROJECT_FILE).write_text(text)
    with pytest.raises(InputError) as refused:
        catalog_path(near=tmp_path)
    assert f"{tmp_path / PROJECT_FILE}:" in str(refused.value) and message in str(refused.value)


def test_no_catalog_names_every_place_it_is_looked_for(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(CATALOG_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError) as refused:
        load_catalog(near=tmp_path / "job.yaml")
    message = str(refused.value)
    assert refused.value.exit_code == 2
    for place in ("--catalog", CATALOG_ENV, PROJECT_FILE, str(tmp_path.resolve()), "wf-system/wf-catalog"):
        assert place in message


# --- the default catalog mirrors the reference cluster (DESIGN.md) -------------------------------------------


def test_default_catalog_classes(catalog: Catalog) -> None:
    assert catalog.cluster.region == "us-east-1"
    assert catalog.cluster.availability_zones == ["us-east-1a", "us-east-1b", "us-east-1c"]
    assert set(catalog.class_names) == {"cpu", "gaudi", "graviton", "gpu"}

    cpu = catalog.compute_class("cpu")
    assert cpu.instance_types == ["r5.4xlarge", "r6i.4xlarge"]  # Xeon memory-optimised, one size
    assert cpu.capacity == ["spot", "on-demand"] and cpu.resolved_arch == "amd64"

    gaudi = catalog.compute_class("gaudi")
    assert gaudi.instance_types == ["dl1.24xlarge"]
    assert gaudi.capacity == ["spot"] and gaudi.zones(catalog.cluster) == ["us-east-1a"]
    assert gaudi.accelerator is not None
    assert (gaudi.accelerator.resource, gaudi.accelerator.count) == ("habana.ai/gaudi", 8)
    assert [str(t) for t in gaudi.taints] == ["habana.ai/gaudi=true:NoSchedule"]
    assert gaudi.labels == {"k8s.amazonaws.com/accelerator": "gaudi"}
    assert gaudi.efa

    graviton = catalog.compute_class("graviton")
    assert {i.split(".")[0] for i in graviton.instance_types} == {"c7g"}
    assert graviton.resolved_arch == "arm64" and graviton.capacity == ["spot"]

    gpu = catalog.compute_class("gpu")
    assert {i.split(".")[0] for i in gpu.instance_types} == {"g5", "g4dn"}
    assert gpu.capacity == ["spot"] and gpu.accelerator is not None and gpu.accelerator.resource == "nvidia.com/gpu"
    assert [t.effect for t in gpu.taints] == ["NoSchedule"]


def test_default_catalog_node_groups(catalog: Catalog) -> None:
    groups = {g.name: g for g in node_groups(catalog)}
    # cpu: 2 capacities x 3 zones; gaudi: 1 x 1; graviton: 1 x 3; gpu: 1 x 3.
    assert len(groups) == 6 + 1 + 3 + 3
    gaudi = groups["gaudi-spot-us-east-1a"]
    assert gaudi.labels == {CLASS_LABEL: "gaudi", CAPACITY_LABEL: "spot", "k8s.amazonaws.com/accelerator": "gaudi"}
    allocatable = gaudi.allocatable("dl1.24xlarge")
    assert allocatable["habana.ai/gaudi"] == "8" and allocatable["hugepages-2Mi"] == "42000Mi"
    assert allocatable["vpc.amazonaws.com/efa"] == "4"
    assert gaudi.node_labels("dl1.24xlarge")["eks.amazonaws.com/capacityType"] == "SPOT"
    on_demand_labels = groups["cpu-on-demand-us-east-1c"].node_labels("r6i.4xlarge")
    assert on_demand_labels["eks.amazonaws.com/capacityType"] == "ON_DEMAND"
    assert {g.arch for g in groups.values() if g.compute_class == "graviton"} == {"arm64"}


def test_taint_renders_every_form() -> None:
    taint = Taint(key="habana.ai/gaudi", value="true", effect="NoSchedule")
    assert str(taint) == "habana.ai/gaudi=true:NoSchedule" and taint.is_hard
    assert taint.to_kubernetes() == {"key": "habana.ai/gaudi", "value": "true", "effect": "NoSchedule"}
    assert Taint.from_kubernetes(taint.to_kubernetes()) == taint
    assert Taint.from_text("habana.ai/gaudi", taint.autoscaler_tag_value) == taint
    assert taint.toleration() == {"key": "habana.ai/gaudi", "operator": "Equal", "value": "true",
                                  "effect": "NoSchedule"}
    valueless = Taint(key="dedicated", effect="PreferNoSchedule")
    assert str(valueless) == "dedicated:PreferNoSchedule" and not valueless.is_hard
    assert valueless.to_kubernetes() == {"key": "dedicated", "effect": "PreferNoSchedule"}
    assert valueless.toleration() == {"key": "dedicated", "operator": "Exists", "effect": "PreferNoSchedule"}
    assert not valueless.repels([]) and taint.repels([]) and not taint.repels([taint.toleration()])
    assert len({taint, Taint.from_kubernetes(taint.to_kubernetes())}) == 1


def test_the_repository_catalog_lists_instance_types_of_one_size(catalog: Catalog) -> None:
    assert mixed_sizes(catalog) == []  # gpu's g5.2xlarge and g4dn.2xlarge are one size too


def test_mixed_size_classes_are_named(mixed_catalog: Catalog, tmp_path: Path) -> None:
    catalog = mixed_catalog
    [found] = mixed_sizes(catalog)
    message = found.message
    assert (found.path, found.severity) == (("computeClasses", 0, "instanceTypes"), "warning")
    assert message.startswith("compute class cpu mixes instance sizes: r5.4xlarge (16 vCPU, 128Gi), r5.8xlarge "
                              "(32 vCPU, 256Gi); cluster-autoscaler sizes a scale-up from zero from the first type "
                              "(r5.4xlarge)")
    assert "at most 15890m cpu and 118312Mi memory" in message
    file = tmp_path / "catalog.yaml"
    file.write_text(catalog.to_yaml())
    [finding] = lint_paths([file], file).problems
    assert (finding.severity, finding.field) == ("warning", "computeClasses[0].instanceTypes")
