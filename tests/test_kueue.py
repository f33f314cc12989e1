"""Teams in the catalog and the Kueue objects rendered from them, validated against Kueue v0.17.0's CRDs
(read in place from the Go module cache: tests/upstream.py)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from test_catalog import BASE, catalog_problems, only
from upstream import KUEUE, KUEUE_CRDS, strictify
from wf.cli.app import main
from wf.core.constants import KUEUE_PRIORITY_LABEL, KUEUE_QUEUE_LABEL, LOCAL_QUEUE
from wf.model.catalog import Catalog, load_catalog
from wf.model.nodegroups import class_node_labels, node_group
from wf.model.quotas import flavor_quotas
from wf.render import kueue

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
CRD_FILES = {kind: f"{api.group}_{api.plural}.yaml" for kind, api in kueue.KINDS.items()}


def team_catalog(write: Callable[..., Path], **queues: Any) -> Catalog:
    data = copy.deepcopy(BASE)
    data["queues"] = {**copy.deepcopy(QUEUES), **queues}
    return load_catalog(write("catalog.yaml", yaml.safe_dump(data, sort_keys=False)))


@pytest.fixture(scope="module")
def crd_validators() -> dict[str, Any]:
    from jsonschema import Draft4Validator

    crds = KUEUE.file(KUEUE_CRDS)
    out = {}
    for kind, name in CRD_FILES.items():
        crd = yaml.safe_load((crds / name).read_text())
        version = next(v for v in crd["spec"]["versions"] if v["name"] == kueue.KINDS[kind].version)
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
    mapping = {f["name"]: {r["name"]: r for r in f["resources"]}
               for f in queues["mapping"]["resourceGroups"][0]["flavors"]}
    assert mapping["gaudi-spot"]["habana.ai/gaudi"]["lendingLimit"] == 4
    assert queues["mapping"]["namespaceSelector"]["matchExpressions"][0]["values"] == ["mapping", "mapping-dev"]


def test_local_queue_per_namespace_and_default_priorities(write: Callable[..., Path]) -> None:
    objs = kueue.objects(team_catalog(write))
    local = [(o["metadata"]["namespace"], o["metadata"]["name"], o["spec"]["clusterQueue"])
             for o in objs if o["kind"] == "LocalQueue"]
    assert local == [("perception", "default", "perception"), ("mapping", "default", "mapping"),
                     ("mapping-dev", "default", "mapping")]
    prios = {o["metadata"]["name"]: o["value"] for o in objs if o["kind"] == "WorkloadPriorityClass"}
    assert prios == {"high": 1000, "normal": 100, "low": 10}


def test_accelerator_quota_brings_its_nodes_cpu_and_memory(write: Callable[..., Path]) -> None:
    cat = team_catalog(write)
    gaudi = next(q for q in flavor_quotas(cat, cat.queues.team("perception")) if q.compute_class == "gaudi")
    node = node_group(cat.compute_class("gaudi"), cat, "spot").least_allocatable()
    assert gaudi.nominal["cpu"] == 2 * node["cpu"]
    # Memory net of the hugepage pool, as a step's memory request is (its hugepages are requested apart).
    assert gaudi.nominal["memory"] == 2 * node["memory"] < 2 * 768 * 2**30
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
        main(["kueue", "generate", "--catalog", str(tmp_path / "catalog.yaml"), "--file", str(out)])
    assert exc.value.code == 0
    kinds = [d["kind"] for d in yaml.safe_load_all(out.read_text())]
    assert kinds.count("LocalQueue") == 3


def test_generate_without_teams_is_a_clear_error(write: Callable[..., Path],
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    path = write("catalog.yaml", yaml.safe_dump(BASE))
    with pytest.raises(SystemExit) as exc:
        main(["kueue", "generate", "--catalog", str(path)])
    assert exc.value.code == 2
    assert "no `queues:` section" in capsys.readouterr().err


def team_job(make_job: Callable[..., Any], steps: list[dict[str, Any]] | None = None, namespace: str | None = None,
             **spec: Any) -> Any:
    job = make_job(steps, **spec)
    job.metadata.namespace = namespace
    return job


GAUDI_STEP = {"name": "train", "command": ["python", "train.py"], "compute": "gaudi", "accelerators": 8,
              "timeout": "2h"}


def pod_templates(manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in manifest["spec"]["templates"] if "container" in t}


def test_a_team_job_lands_in_its_queue_with_its_priority(write: Callable[..., Path],
                                                         make_job: Callable[..., Any]) -> None:
    from wf.compile.workflow import compile_job

    manifest = compile_job(team_job(make_job, [GAUDI_STEP], team="perception", priority="high"), team_catalog(write))
    assert manifest["metadata"]["namespace"] == "perception"
    labels = pod_templates(manifest)["train"]["metadata"]["labels"]
    assert labels[KUEUE_QUEUE_LABEL] == "default" and labels[KUEUE_PRIORITY_LABEL] == "high"


def test_the_namespace_names_the_team_and_the_default_priority_applies(write: Callable[..., Path],
                                                                       make_job: Callable[..., Any]) -> None:
    from wf.compile.workflow import compile_job

    manifest = compile_job(team_job(make_job, [GAUDI_STEP], namespace="mapping-dev"), team_catalog(write))
    assert manifest["metadata"]["namespace"] == "mapping-dev"
    assert pod_templates(manifest)["train"]["metadata"]["labels"][KUEUE_PRIORITY_LABEL] == "normal"


def test_queued_step_timeout_counts_from_the_pod_start(write: Callable[..., Path],
                                                       make_job: Callable[..., Any]) -> None:
    from wf.compile.workflow import compile_job

    cat = team_catalog(write)
    queued = pod_templates(compile_job(team_job(make_job, [GAUDI_STEP], team="perception"), cat))["train"]
    assert queued["activeDeadlineSeconds"] == 7200 and "timeout" not in queued
    unqueued = pod_templates(compile_job(team_job(make_job, [GAUDI_STEP]), cat))["train"]
    assert unqueued["timeout"] == "7200s" and "activeDeadlineSeconds" not in unqueued
    assert KUEUE_QUEUE_LABEL not in unqueued["metadata"]["labels"]


@pytest.mark.parametrize(("namespace", "spec", "field", "message"), [
    (None, {"team": "vision"}, "spec.team", "unknown team 'vision'; the catalog's teams: perception, mapping"),
    ("mapping", {"team": "perception"}, "metadata.namespace",
     "team perception runs in perception, not in namespace mapping"),
    (None, {"priority": "high"}, "spec.priority", "a priority needs a team"),
    (None, {"team": "mapping", "priority": "urgent"}, "spec.priority", "unknown priority 'urgent'"),
])
def test_bad_team_or_priority_is_a_compile_error(write: Callable[..., Path], make_job: Callable[..., Any],
                                                 namespace: str | None, spec: dict[str, Any], field: str,
                                                 message: str) -> None:
    from wf.compile.workflow import compile_job
    from wf.core.errors import InputError

    with pytest.raises(InputError) as exc:
        compile_job(team_job(make_job, [GAUDI_STEP], namespace=namespace, **spec), team_catalog(write))
    [problem] = exc.value.problems
    assert problem.field == field and message in problem.message


def test_lint_reports_a_step_no_quota_can_ever_admit(write: Callable[..., Path], tmp_path: Path) -> None:
    from wf.lint.documents import lint_paths

    teams = copy.deepcopy(QUEUES["teams"])
    teams[1]["quotas"] = [{"compute": "gaudi", "accelerators": 2, "borrowingLimit": {"accelerators": 1}}]
    team_catalog(write, teams=teams)
    job = write("job.yaml", yaml.safe_dump({
        "apiVersion": "wf/v1", "kind": "TrainingJob", "metadata": {"name": "big", "namespace": "mapping"},
        "spec": {"image": "x", "compute": "gaudi", "steps": [{**GAUDI_STEP, "accelerators": 4},
                                                            {**GAUDI_STEP, "name": "fits", "accelerators": 3}]}}))
    result = lint_paths([job], tmp_path / "catalog.yaml")
    [problem] = result.errors
    assert "template 'train' asks for 4 habana.ai/gaudi on gaudi spot, but team mapping can be admitted at most 3 " \
           "(quota 2 + borrowing up to 1)" in problem.message


def test_lint_sums_a_multi_node_steps_workers_as_kueue_admits_them(write: Callable[..., Path], tmp_path: Path) -> None:
    from wf.lint.documents import lint_paths

    team_catalog(write)  # mapping: 8 cards of its own, at most 16 more borrowed from perception
    job = write("job.yaml", yaml.safe_dump({
        "apiVersion": "wf/v1", "kind": "TrainingJob", "metadata": {"name": "wide", "namespace": "mapping"},
        "spec": {"image": "x", "compute": "gaudi", "steps": [
            {"name": "three", "command": ["mpirun", "python", "train.py"], "nodes": 3},
            {"name": "four", "command": ["mpirun", "python", "train.py"], "nodes": 4}]}}))
    result = lint_paths([job], tmp_path / "catalog.yaml")
    # One workload: 3 workers (24 cards) can be admitted, 4 (32 cards) never, though each pod alone fits.
    [problem] = [p for p in result.errors if "habana.ai/gaudi" in p.message]
    assert "template 'four' asks for 32 habana.ai/gaudi on gaudi spot, but team mapping can be admitted at most 24" \
        in problem.message


def test_borrowing_is_bounded_by_what_the_cohort_lends(write: Callable[..., Path]) -> None:
    from wf.lint.queues import admission_ceiling

    cat = team_catalog(write)
    assert cat.queues is not None
    # perception may borrow 8, but mapping lends only 4 of its 8
    assert admission_ceiling(cat, cat.queues, cat.queues.team("perception"), "gaudi", "spot", "accelerators")[0] == 20
    # mapping has no borrowing limit: perception's whole 16 is lendable
    assert admission_ceiling(cat, cat.queues, cat.queues.team("mapping"), "gaudi", "spot", "accelerators")[0] == 24


def generated(write: Callable[..., Path], tmp_path: Path) -> tuple[Path, list[dict[str, Any]]]:
    cat = team_catalog(write)
    return tmp_path / "catalog.yaml", kueue.objects(cat)


def lint_objects(write: Callable[..., Path], catalog: Path, objs: list[dict[str, Any]]) -> list[str]:
    from wf.lint.documents import lint_paths

    path = write("kueue/queues.yaml", yaml.safe_dump_all(objs, sort_keys=False))
    return [f"{p.field}: {p.message}" for p in lint_paths([path], catalog).errors]


def test_lint_accepts_what_generate_writes(write: Callable[..., Path], tmp_path: Path) -> None:
    catalog, objs = generated(write, tmp_path)
    assert lint_objects(write, catalog, objs) == []


def test_lint_finds_hand_edits_both_ways(write: Callable[..., Path], tmp_path: Path) -> None:
    catalog, objs = generated(write, tmp_path)
    queue = next(o for o in objs if o["kind"] == "ClusterQueue")
    queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"][1]["nominalQuota"] = "1Ti"  # 128Gi generated
    flavor = next(o for o in objs if o["kind"] == "ResourceFlavor")
    flavor["spec"]["nodeLabels"]["extra"] = "x"
    objs = [o for o in objs if o["kind"] != "WorkloadPriorityClass" or o["metadata"]["name"] != "low"]
    objs.append({"apiVersion": LOCAL_QUEUE.api_version, "kind": LOCAL_QUEUE.kind,
                 "metadata": {"name": "default", "namespace": "sandbox"}, "spec": {"clusterQueue": "perception"}})
    found = lint_objects(write, catalog, objs)
    assert len(found) == 4, found
    assert any("resources[memory].nominalQuota is 1Ti; the catalog generates 128Gi" in f for f in found)
    assert any("nodeLabels.extra is not generated from the catalog" in f for f in found)
    assert any("WorkloadPriorityClass low of the catalog" in f and "is missing" in f for f in found)
    assert any("LocalQueue sandbox/default is not generated from the catalog" in f for f in found)


def test_equal_quantities_are_not_drift(write: Callable[..., Path], tmp_path: Path) -> None:
    catalog, objs = generated(write, tmp_path)
    queue = next(o for o in objs if o["kind"] == "ClusterQueue")
    queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"][1]["nominalQuota"] = "131072Mi"
    assert lint_objects(write, catalog, objs) == []


def test_committed_kueue_yaml_matches_the_catalog(catalog: Catalog) -> None:
    from wf.lint.documents import lint_paths

    committed = Path(__file__).resolve().parents[1] / "eksctl" / "kueue.yaml"
    result = lint_paths([committed], Path(catalog.source))
    assert result.documents == len(kueue.objects(catalog)) and result.errors == []


def test_submit_compiles_for_the_namespace_it_lands_in(write: Callable[..., Path],
                                                       make_job: Callable[..., Any]) -> None:
    from wf.controller.submit import prepare

    cat = team_catalog(write)
    # No team, no namespace: the context's namespace decides, and mapping-dev is mapping's.
    manifest, namespace, _ = prepare(team_job(make_job, [GAUDI_STEP]), cat, "mapping-dev", None, {}, "b")
    assert namespace == "mapping-dev"
    assert pod_templates(manifest)["train"]["metadata"]["labels"][KUEUE_PRIORITY_LABEL] == "normal"
    # A team and no namespace: the team's namespace, not the context's.
    _, namespace, _ = prepare(team_job(make_job, [GAUDI_STEP], team="perception"), cat, "wf", None, {}, "b")
    assert namespace == "perception"
    # Outside every team: unchanged.
    manifest, namespace, _ = prepare(team_job(make_job, [GAUDI_STEP]), cat, "wf", None, {}, "b")
    assert namespace == "wf" and KUEUE_QUEUE_LABEL not in pod_templates(manifest)["train"]["metadata"]["labels"]
