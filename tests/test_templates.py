"""`wf template`, `wf submit --from workflowtemplate/NAME` and `wf cron` against a fake API server: templates made
only from job specs, checked as a submitted job is; workflows from them checked offline, labelled like a job's and
read (steps, placement, cost) from the spec Argo stores; scheduled jobs listed, suspended and resumed."""

from __future__ import annotations

import copy
import itertools
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from controller_fakes import nested_run
from wf.core.constants import (
    ARGO_WORKFLOW_TEMPLATE_LABEL,
    CRON_WORKFLOW,
    JOB_LABEL,
    SUBMISSION_LABEL,
    WORKFLOW,
    WORKFLOW_TEMPLATE,
)

ROOT = Path(__file__).resolve().parents[1]
CATALOG = str(ROOT / "eksctl" / "catalog.yaml")
DATASET_SYNC = ROOT / "workflows" / "src" / "dataset-sync.yaml"
DATA_PREP = ROOT / "examples" / "data-prep.yaml"


class Store:
    """An API server's custom objects by (plural, namespace, name): resourceVersions, 409s on a stale replace or a
    taken name, 404s, merge patches, dry runs that store nothing."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.calls: list[str] = []
        self._versions = itertools.count(1)

    def _stamp(self, obj: dict[str, Any], namespace: str) -> dict[str, Any]:
        meta = obj["metadata"]
        meta.update(namespace=namespace, resourceVersion=str(next(self._versions)))
        meta.setdefault("uid", f"uid-{meta['name']}")
        meta.setdefault("creationTimestamp", "2026-12-01T12:00:00Z")
        meta["generation"] = meta.get("generation", 0) + 1
        return obj

    def create_namespaced_custom_object(self, group: str, version: str, namespace: str, plural: str,
                                        body: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        self.calls.append(f"create {plural}")
        key = (plural, namespace, body["metadata"]["name"])
        if key in self.objects:
            raise ApiException(status=409, reason="AlreadyExists")
        made = self._stamp(copy.deepcopy(body), namespace)
        if not kwargs.get("dry_run"):
            self.objects[key] = made
        return copy.deepcopy(made)

    def get_namespaced_custom_object(self, group: str, version: str, namespace: str, plural: str,
                                     name: str) -> dict[str, Any]:
        self.calls.append(f"get {plural}")
        if (plural, namespace, name) not in self.objects:
            raise ApiException(status=404, reason="NotFound")
        return copy.deepcopy(self.objects[(plural, namespace, name)])

    def replace_namespaced_custom_object(self, group: str, version: str, namespace: str, plural: str, name: str,
                                         body: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        self.calls.append(f"replace {plural}")
        current = self.objects[(plural, namespace, name)]
        if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
            raise ApiException(status=409, reason="Conflict")
        replaced = copy.deepcopy(body)
        replaced["metadata"] |= {k: current["metadata"][k] for k in ("uid", "creationTimestamp", "generation")}
        self.objects[(plural, namespace, name)] = self._stamp(replaced, namespace)
        return copy.deepcopy(replaced)

    def list_namespaced_custom_object(self, group: str, version: str, namespace: str, plural: str,
                                      label_selector: str = "", **kwargs: Any) -> dict[str, Any]:
        self.calls.append(f"list {plural}")
        items = [o for (p, ns, _), o in self.objects.items() if p == plural and ns == namespace]
        if label_selector:
            key, value = label_selector.split("=")
            items = [o for o in items if o["metadata"].get("labels", {}).get(key) == value]
        return {"items": copy.deepcopy(items)}

    def list_cluster_custom_object(self, group: str, version: str, plural: str, **kwargs: Any) -> dict[str, Any]:
        return {"items": [copy.deepcopy(o) for (p, _, _), o in self.objects.items() if p == plural]}

    def delete_namespaced_custom_object(self, group: str, version: str, namespace: str, plural: str, name: str,
                                        **kwargs: Any) -> None:
        self.calls.append(f"delete {plural}")
        if self.objects.pop((plural, namespace, name), None) is None:
            raise ApiException(status=404, reason="NotFound")

    def patch_namespaced_custom_object(self, group: str, version: str, namespace: str, plural: str, name: str,
                                       body: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(f"patch {plural}")
        obj = self.objects[(plural, namespace, name)]
        for key, value in body["spec"].items():
            if value is None:
                obj["spec"].pop(key, None)
            else:
                obj["spec"][key] = value
        return copy.deepcopy(obj)

    def of(self, plural: str) -> list[dict[str, Any]]:
        return [o for (p, _, _), o in self.objects.items() if p == plural]


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch) -> Store:
    from wf.cli import templates, workflows

    api = Store()
    no_real_nodes = SimpleNamespace(list_node=lambda **_: SimpleNamespace(items=[]))  # what submit asks first
    kube = SimpleNamespace(custom=api, core=no_real_nodes, namespace="wf", context="test",
                           server="https://127.0.0.1:6443")
    monkeypatch.setattr(templates, "connect", lambda target: kube)
    monkeypatch.setattr(workflows, "connect", lambda target: kube)
    return api


def run_main(*args: str) -> int:
    from wf.cli.app import main

    with pytest.raises(SystemExit) as ended:
        main(list(args))
    return int(ended.value.code or 0)


def job(tmp_path: Path, source: Path, **changes: Any) -> Path:
    doc = yaml.safe_load(source.read_text())
    for key, value in changes.items():
        doc["spec"][key] = value
    path = tmp_path / source.name
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


# --- wf template create ------------------------------------------------------------------------------------------


def test_create_compiles_for_the_namespace_then_updates_only_what_changed(
        store: Store, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_main("template", "create", str(DATASET_SYNC), "--catalog", CATALOG) == 0
    assert capsys.readouterr().out == f"WorkflowTemplate wf/dataset-sync created from {DATASET_SYNC}\n"
    (made,) = store.of(WORKFLOW_TEMPLATE.plural)
    assert made["kind"] == "WorkflowTemplate" and made["metadata"]["namespace"] == "wf"
    assert made["metadata"]["labels"] == {"team": "ml-platform", JOB_LABEL: "dataset-sync"}
    assert SUBMISSION_LABEL not in made["metadata"]["labels"]  # a template is not a submission

    assert run_main("template", "create", str(DATASET_SYNC), "--catalog", CATALOG, "-o", "name") == 0
    assert capsys.readouterr().out == "workflowtemplate/dataset-sync\n"
    assert store.of(WORKFLOW_TEMPLATE.plural)[0]["metadata"]["resourceVersion"] == made["metadata"]["resourceVersion"]

    changed = job(tmp_path, DATASET_SYNC, retries=1)
    assert run_main("template", "create", str(changed), "--catalog", CATALOG) == 0
    assert capsys.readouterr().out == f"WorkflowTemplate wf/dataset-sync updated from {changed}\n"
    (updated,) = store.of(WORKFLOW_TEMPLATE.plural)
    assert updated["metadata"]["generation"] == 2 and updated["spec"] != made["spec"]


def test_a_template_changed_between_read_and_write_is_read_again(store: Store, tmp_path: Path) -> None:
    from wf.controller.submit import compile_for
    from wf.controller.templates import apply_template
    from wf.jobspec.job import load_job
    from wf.model.catalog import load_catalog

    kube = SimpleNamespace(custom=store, namespace="wf", context="test", server="https://127.0.0.1:6443")
    catalog = load_catalog(CATALOG)
    first, _ = compile_for(load_job(DATASET_SYNC), catalog, "wf", None, kind="WorkflowTemplate")
    assert apply_template(kube, first, "a.yaml").outcome == "created"
    replace = store.replace_namespaced_custom_object

    def someone_else_first(*args: Any, **kwargs: Any) -> dict[str, Any]:
        store.replace_namespaced_custom_object = replace
        current = store.objects[(WORKFLOW_TEMPLATE.plural, "wf", "dataset-sync")]
        store._stamp(current, "wf")  # their write: a new resourceVersion
        return replace(*args, **kwargs)

    store.replace_namespaced_custom_object = someone_else_first
    second, _ = compile_for(load_job(job(tmp_path, DATASET_SYNC, retries=0)), catalog, "wf", None,
                            kind="WorkflowTemplate")
    assert apply_template(kube, second, "b.yaml").outcome == "updated"
    assert store.calls[-4:] == ["replace workflowtemplates", "create workflowtemplates", "get workflowtemplates",
                                "replace workflowtemplates"]
    assert store.of(WORKFLOW_TEMPLATE.plural)[0]["spec"] == second["spec"]


def test_a_template_wf_did_not_make_is_not_overwritten(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    theirs = {"apiVersion": WORKFLOW_TEMPLATE.api_version, "kind": "WorkflowTemplate",
              "metadata": {"name": "dataset-sync"}, "spec": {"entrypoint": "main", "templates": []}}
    store.create_namespaced_custom_object("", "", "wf", WORKFLOW_TEMPLATE.plural, theirs)
    assert run_main("template", "create", str(DATASET_SYNC), "--catalog", CATALOG) == 2
    assert "wf did not make it (no wf.dev/job label)" in capsys.readouterr().err
    assert store.of(WORKFLOW_TEMPLATE.plural)[0]["spec"] == theirs["spec"]


def test_a_refused_job_creates_nothing_not_even_the_good_ones(store: Store, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad"
    bad.mkdir()
    doc = yaml.safe_load((ROOT / "workflows" / "src" / "gaudi-smoke-test.yaml").read_text())
    doc["spec"]["steps"][0]["accelerators"] = 16
    (bad / "gaudi-smoke-test.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    assert run_main("template", "create", str(DATASET_SYNC), str(bad), "--catalog", CATALOG) == 2
    err = capsys.readouterr().err
    assert f"{bad / 'gaudi-smoke-test.yaml'}:" in err and "spec.steps[0].accelerators: no gaudi node offers 16" in err
    assert store.objects == {} and store.calls == []


def test_a_compiled_manifest_is_refused_with_the_reason(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    compiled = ROOT / "workflows" / "dataset-sync.yaml"
    assert run_main("template", "create", str(compiled), "--catalog", CATALOG) == 2
    err = capsys.readouterr().err
    line = compiled.read_text().splitlines().index("kind: WorkflowTemplate") + 1
    assert err.startswith(f"{compiled}:{line}: kind: an Argo WorkflowTemplate compiled by wf from job 'dataset-sync', "
                          "not a job spec")
    assert "with the catalog and for the namespace it runs in" in err and "pass the job spec" in err
    assert store.objects == {}


# --- wf template list / get / delete -----------------------------------------------------------------------------


def test_list_and_get_read_parameters_and_each_steps_placement(store: Store,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert run_main("template", "create", str(DATASET_SYNC), str(DATA_PREP), "--catalog", CATALOG) == 0
    capsys.readouterr()
    assert run_main("template", "list", "-A") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["NAMESPACE", "NAME", "JOB", "TEAM", "PARAMETERS", "CREATED"]
    assert lines[1].split()[:5] == ["ml-training", "data-prep", "data-prep", "perception", "source,"]
    assert lines[2].split()[:5] == ["wf", "dataset-sync", "dataset-sync", "ml-platform", "source,"]

    assert run_main("template", "get", "data-prep", "-n", "ml-training") == 0
    out = capsys.readouterr().out
    assert out.startswith("WorkflowTemplate ml-training/data-prep: job data-prep, team perception, created ")
    assert "source     s3://ml-datasets-raw/drive-logs/2026-07/" in out
    steps = {line.split()[0]: line.split()[1:] for line in out.splitlines() if line.split()[:1] in
             (["list-inputs"], ["to-tfrecords"], ["merge"])}
    assert steps["to-tfrecords"] == ["cpu", "spot,", "on-demand", "after", "2", "interruptions", "default"]
    assert out.endswith("run it: wf submit --from workflowtemplate/data-prep\n")
    assert run_main("template", "get", "data-prep", "-n", "ml-training", "-o", "yaml") == 0
    assert yaml.safe_load(capsys.readouterr().out)["kind"] == "WorkflowTemplate"


def test_get_and_delete_name_what_exists_when_a_name_is_wrong(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_main("template", "create", str(DATASET_SYNC), "--catalog", CATALOG) == 0
    capsys.readouterr()
    assert run_main("template", "get", "dataset-snyc") == 2
    assert "no WorkflowTemplate 'dataset-snyc' in namespace wf (test) (did you mean 'dataset-sync'?)" in \
        capsys.readouterr().err
    assert run_main("template", "delete", "dataset-sync") == 0
    assert capsys.readouterr().out == "wf/dataset-sync deleted\n" and store.objects == {}
    assert run_main("template", "delete", "dataset-sync") == 2


# --- wf submit --from --------------------------------------------------------------------------------------------


def test_submit_from_a_template_runs_it_with_its_parameters_labelled_as_the_job(
        store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_main("template", "create", str(DATASET_SYNC), "--catalog", CATALOG) == 0
    capsys.readouterr()
    assert run_main("submit", "--from", "workflowtemplate/dataset-sync", "-p", "source=s3://other/", "--catalog",
                    CATALOG, "-o", "name") == 0
    (workflow,) = store.of(WORKFLOW.plural)
    assert capsys.readouterr().out == f"workflow/{workflow['metadata']['name']}\n"
    assert workflow["metadata"]["name"].startswith("dataset-sync-") and len(workflow["metadata"]["name"]) == 18
    assert workflow["spec"] == {"workflowTemplateRef": {"name": "dataset-sync"},
                                "arguments": {"parameters": [{"name": "source", "value": "s3://other/"}]}}
    labels = workflow["metadata"]["labels"]
    assert {k: labels[k] for k in ("team", JOB_LABEL, ARGO_WORKFLOW_TEMPLATE_LABEL)} == {
        "team": "ml-platform", JOB_LABEL: "dataset-sync", ARGO_WORKFLOW_TEMPLATE_LABEL: "dataset-sync"}
    assert SUBMISSION_LABEL in labels

    # The same command with --skip-existing finds it; without, it is a second run.
    assert run_main("submit", "--from", "workflowtemplate/dataset-sync", "-p", "source=s3://other/", "--catalog",
                    CATALOG, "--skip-existing") == 0
    assert "already exists (an earlier submit created it)" in capsys.readouterr().out
    assert len(store.of(WORKFLOW.plural)) == 1


@pytest.mark.parametrize(("args", "message"), [
    (("-p", "sorce=x"), "-p sorce: the template has no parameter 'sorce' (did you mean 'source'?); its parameters: "
                        "source, destination"),
    (("--from", "workflowtemplate/dataset-snyc"), "(did you mean 'dataset-sync'?)"),
    (("--from", "cronworkflow/dataset-sync"), "--from takes workflowtemplate/NAME"),
    ((str(DATASET_SYNC),), "name job specs, or a template with --from workflowtemplate/NAME (one of the two)"),
    (("--no-cache",), "--no-cache applies to job specs"),
], ids=["unknown parameter", "unknown template", "other kind", "both", "no-cache"])
def test_submit_from_refuses_before_creating(args: tuple[str, ...], message: str, store: Store,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert run_main("template", "create", str(DATASET_SYNC), "--catalog", CATALOG) == 0
    froms = () if "--from" in args else ("--from", "workflowtemplate/dataset-sync")
    assert run_main("submit", *froms, *args, "--catalog", CATALOG) == 2
    assert message in capsys.readouterr().err
    assert store.of(WORKFLOW.plural) == []


def test_submit_from_requires_parameters_without_default_and_wfs_own_templates(
        store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_main("template", "create", str(DATASET_SYNC), "--catalog", CATALOG) == 0
    template = store.objects[(WORKFLOW_TEMPLATE.plural, "wf", "dataset-sync")]
    del template["spec"]["arguments"]["parameters"][1]["value"]
    template["spec"]["arguments"]["parameters"][0]["enum"] = ["s3://a/", "s3://b/"]
    assert run_main("submit", "--from", "workflowtemplate/dataset-sync", "-p", "source=s3://c/",
                    "--catalog", CATALOG) == 2
    err = capsys.readouterr().err
    assert "-p source: 's3://c/' is not one of its choices: s3://a/, s3://b/" in err
    assert "-p destination: required (the template gives it no default): -p destination=VALUE" in err

    del template["metadata"]["labels"][JOB_LABEL]
    assert run_main("submit", "--from", "workflowtemplate/dataset-sync", "--catalog", CATALOG) == 2
    assert "was not made by wf (no wf.dev/job label)" in capsys.readouterr().err
    assert store.of(WORKFLOW.plural) == []


def test_submit_from_a_template_the_catalog_no_longer_places_is_refused(
        store: Store, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_main("template", "create", str(DATASET_SYNC), "--catalog", CATALOG) == 0
    catalog = yaml.safe_load(Path(CATALOG).read_text())
    catalog["computeClasses"] = [c for c in catalog["computeClasses"] if c["name"] != "cpu"]
    catalog.pop("defaultClass", None)
    catalog.pop("queues", None)
    changed = tmp_path / "catalog.yaml"
    changed.write_text(yaml.safe_dump(catalog))
    assert run_main("submit", "--from", "workflowtemplate/dataset-sync", "--catalog", str(changed)) == 2
    err = capsys.readouterr().err
    assert err.startswith("workflowtemplate/dataset-sync: spec.templates[")
    assert "cannot schedule" in err and "make it again with `wf template create JOB.yaml`" in err
    assert store.of(WORKFLOW.plural) == []


def from_template(workflow: dict[str, Any]) -> dict[str, Any]:
    """The same run as Argo holds a workflow from a template: its spec a reference, its templates in its status."""
    referring = copy.deepcopy(workflow)
    referring["status"]["storedWorkflowTemplateSpec"] = referring["spec"]
    referring["spec"] = {"workflowTemplateRef": {"name": "bert"}}
    return referring


def test_a_workflow_from_a_template_reads_as_the_same_run_inline() -> None:
    """`wf get`, watch, cost, queue and report read a step's template by name: from the stored spec too."""
    from wf.controller.cost import NodeFacts, job_cost
    from wf.controller.events import snapshot
    from wf.controller.ops import choose_attempt
    from wf.controller.steps import workflow_view
    from wf.model.catalog import load_catalog

    inline = nested_run()
    referring = from_template(inline)
    view = workflow_view(referring)
    assert view == workflow_view(inline)
    assert [(s.name, s.compute_class, s.capacity) for s in view.steps] == [("prep", "cpu", "on-demand"),
                                                                           ("train", "gaudi", "spot")]
    nodes = {"cpu-1": NodeFacts("r5.4xlarge", "on-demand"), "gaudi-1": NodeFacts("dl1.24xlarge", "spot"),
             "gaudi-2": NodeFacts("dl1.24xlarge", "spot")}
    now = datetime(2026, 3, 1, 15, tzinfo=UTC)
    catalog = load_catalog(CATALOG)
    cost = job_cost(view, referring, nodes, now, catalog)
    assert cost == job_cost(view, inline, nodes, now, catalog) and cost.steps[1].node_hours > 0
    assert snapshot(referring).workflow["spec"] == snapshot(inline).workflow["spec"]
    assert choose_attempt(referring, "train") == choose_attempt(inline, "train")


# --- wf cron -----------------------------------------------------------------------------------------------------


def test_cron_lists_suspends_and_resumes_the_jobs_submit_scheduled(store: Store, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    scheduled = job(tmp_path, DATASET_SYNC, schedule="0 2 * * *")
    assert run_main("submit", str(scheduled), "--catalog", CATALOG) == 0
    (cron,) = store.of(CRON_WORKFLOW.plural)
    cron["status"] = {"lastScheduledTime": "2026-12-01T02:00:00Z", "active": [{"name": "dataset-sync-1"}]}
    capsys.readouterr()
    assert run_main("cron", "list") == 0
    header, row = capsys.readouterr().out.splitlines()
    assert header.split() == ["NAME", "JOB", "SCHEDULE", "SUSPENDED", "LAST", "SCHEDULED", "ACTIVE"]
    assert row.split()[:8] == ["dataset-sync", "dataset-sync", "0", "2", "*", "*", "*", "no"]
    assert row.split()[-2:] == ["ago", "1"]

    assert run_main("cron", "suspend", "dataset-sync") == 0 and cron["spec"]["suspend"] is True
    assert run_main("cron", "list", "-o", "name") == 0
    assert capsys.readouterr().out == "wf/dataset-sync suspended\ncronworkflow/dataset-sync\n"
    assert run_main("cron", "resume", "dataset-sync") == 0 and "suspend" not in cron["spec"]
    assert run_main("cron", "suspend", "datset-sync") == 2
    assert "(did you mean 'dataset-sync'?)" in capsys.readouterr().err
    assert run_main("cron", "delete", "dataset-sync") == 0 and store.of(CRON_WORKFLOW.plural) == []


# --- who may ----------------------------------------------------------------------------------------------------


def _allowed(rules: list[dict[str, Any]], resource: str) -> set[str]:
    return {verb for rule in rules if resource in rule["resources"] and "argoproj.io" in rule["apiGroups"]
            for verb in rule["verbs"]}


def test_teams_and_developers_may_keep_templates_and_schedules_and_no_more() -> None:
    from wf.render.team_roles import RULES

    assert _allowed(RULES, WORKFLOW_TEMPLATE.plural) == {"create", "get", "list", "watch", "update", "delete"}
    assert _allowed(RULES, CRON_WORKFLOW.plural) == {"create", "get", "list", "watch", "patch", "delete"}
    developer = next(d for d in yaml.safe_load_all((ROOT / "manifests" / "rbac.yaml").read_text())
                     if d["kind"] == "Role" and d["metadata"]["name"] == "wf-developer")
    # The developer role deletes nothing (as for workflows): a template is replaced, a schedule suspended.
    assert _allowed(developer["rules"], WORKFLOW_TEMPLATE.plural) == {"create", "get", "list", "watch", "update"}
    assert _allowed(developer["rules"], CRON_WORKFLOW.plural) == {"create", "get", "list", "watch", "patch"}
