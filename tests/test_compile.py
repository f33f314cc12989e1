"""The compiler: golden outputs of the examples, strict validity under Argo v4 and v3.7 (JSON Schemas and
the v4 full CRDs), the three kinds, linearity, and each field the job spec maps onto.

Goldens live in tests/golden/compiled-<example>.yaml. After an intended
change to the compiler's output, regenerate them and review the diff:

    WF_UPDATE_GOLDEN=1 python -m pytest tests/test_compile.py -k golden
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

import wf.compile.kinds.pod
from wf import argo
from wf.compile.interruptions import SPOT_FALLBACK_ANNOTATION, capacity_expression
from wf.compile.workflow import ATTEMPTS_SUFFIX, ENTRYPOINT, POD_GC, TTL, compile_job
from wf.core.constants import CAPACITY_LABEL, CLASS_LABEL, EKS_SKIP_CONTAINERS_ANNOTATION, JOB_LABEL, STEP_LABEL
from wf.core.errors import InputError
from wf.jobspec.job import TrainingJob, load_job
from wf.model.catalog import Catalog, load_catalog

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
GOLDEN = Path(__file__).parent / "golden"
KINDS = ("Workflow", "WorkflowTemplate", "CronWorkflow")


def compiled(example: Path, catalog: Catalog, kind: str = "Workflow") -> dict[str, Any]:
    job = load_job(example)
    if kind == "CronWorkflow":
        job.spec.schedule = "0 2 * * *"
    return compile_job(job, catalog, kind=kind)  # type: ignore[arg-type]


def test_every_example_has_a_golden() -> None:
    assert EXAMPLES, "no examples found"
    expected = {f"compiled-{e.stem}.yaml" for e in EXAMPLES}
    assert expected == {p.name for p in GOLDEN.glob("compiled-*.yaml")} or os.environ.get("WF_UPDATE_GOLDEN")


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_golden(example: Path, catalog: Catalog) -> None:
    from wf.cli.output import dump

    manifest = compiled(example, catalog)
    golden = GOLDEN / f"compiled-{example.stem}.yaml"
    if os.environ.get("WF_UPDATE_GOLDEN"):
        golden.parent.mkdir(exist_ok=True)
        golden.write_text(dump(manifest, "yaml"), encoding="utf-8")
    assert golden.exists(), f"missing {golden.name}: run WF_UPDATE_GOLDEN=1 pytest {__file__}"
    assert yaml.safe_load(golden.read_text(encoding="utf-8")) == manifest


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_examples_are_valid_for_argo_v4_and_v3_and_the_v4_crd(example: Path, kind: str, catalog: Catalog,
                                                              argo_schemas: Any) -> None:
    from wf import argo

    manifest = compiled(example, catalog, kind)
    assert argo.validate(manifest) == []
    assert argo_schemas.json_errors("v4", manifest) == []
    # The step cache is Argo v4.0's (wf.compile.cache): v3.7 requires a `key` in memoize's configMap, which v4 refuses.
    assert [e for e in argo_schemas.json_errors("v3", manifest) if "'memoize', 'cache'" not in e] == []
    assert argo_schemas.crd_errors(manifest) == []


def test_the_schema_fixtures_can_fail(catalog: Catalog, argo_schemas: Any) -> None:
    # The strict validators above must reject a typo, or their silence proves nothing.
    manifest = compiled(EXAMPLES[0], catalog)
    manifest["spec"]["templates"][-1]["nodeSelektor"] = {"a": "b"}
    assert argo_schemas.json_errors("v4", manifest)
    assert argo_schemas.json_errors("v3", manifest)
    assert argo_schemas.crd_errors(manifest)
    cron = compiled(EXAMPLES[0], catalog, "CronWorkflow")
    cron["spec"]["schedule"] = cron["spec"].pop("schedules")[0]
    assert argo_schemas.json_errors("v4", cron)  # v4 removed `schedule`


def test_workflow_metadata(catalog: Catalog, make_job: Any) -> None:
    job = make_job()
    first = compile_job(job, catalog)
    assert first["apiVersion"] == "argoproj.io/v1alpha1" and first["kind"] == "Workflow"
    assert first["metadata"]["generateName"] == "demo-" and "name" not in first["metadata"]
    # What is unique to a submission is added by `wf submit` (test_controller_submit): compiling is repeatable.
    assert first["metadata"]["labels"] == {"team": "ml", JOB_LABEL: "demo"}
    assert "namespace" not in first["metadata"]


def test_namespace_and_service_account(catalog: Catalog, job_data: Any) -> None:
    data = job_data(serviceAccount="trainer")
    data["metadata"]["namespace"] = "ml-training"
    allowing = catalog.model_copy(update={"step_service_accounts": {"ml-training": ["trainer"]}})
    manifest = compile_job(TrainingJob.model_validate(data), allowing)
    assert manifest["metadata"]["namespace"] == "ml-training"
    assert manifest["spec"]["serviceAccountName"] == "trainer"


def test_workflow_template(catalog: Catalog, make_job: Any) -> None:
    manifest = compile_job(make_job(), catalog, kind="WorkflowTemplate")
    assert manifest["kind"] == "WorkflowTemplate"
    assert manifest["metadata"] == {"name": "demo", "labels": {"team": "ml", JOB_LABEL: "demo"}}
    assert manifest["spec"]["entrypoint"] == ENTRYPOINT


def test_cron_workflow_from_a_schedule(catalog: Catalog, make_job: Any) -> None:
    manifest = compile_job(make_job(schedule="0 2 * * *"), catalog)
    assert manifest["kind"] == "CronWorkflow"
    spec = manifest["spec"]
    assert spec["schedules"] == ["0 2 * * *"] and "schedule" not in spec
    assert spec["concurrencyPolicy"] == "Forbid"
    assert spec["workflowMetadata"]["labels"] == {"team": "ml", JOB_LABEL: "demo"}
    assert spec["workflowSpec"]["entrypoint"] == ENTRYPOINT
    assert manifest["metadata"]["name"] == "demo"
    # Asked for explicitly, the same job is a plain Workflow.
    assert compile_job(make_job(schedule="0 2 * * *"), catalog, kind="Workflow")["kind"] == "Workflow"


def test_a_cron_workflow_needs_a_schedule(catalog: Catalog, make_job: Any) -> None:
    with pytest.raises(InputError, match="schedule"):
        compile_job(make_job(), catalog, kind="CronWorkflow")


def test_templates_are_steps_plus_wrappers_plus_entry(catalog: Catalog, make_job: Any) -> None:
    steps = [{"name": f"s{i}", "command": ["x"], "retries": i % 3} for i in range(30)]
    manifest = compile_job(make_job(steps), catalog)
    wrappers = sum(1 for s in steps if s["retries"])
    templates = manifest["spec"]["templates"]
    assert len(templates) == len(steps) + wrappers + 1
    assert len({t["name"] for t in templates}) == len(templates)
    assert sum(1 for t in templates if t["name"].endswith(ATTEMPTS_SUFFIX)) == wrappers


@pytest.mark.parametrize("size", [10, 200, 2000])
def test_compile_is_linear_in_the_steps(catalog: Catalog, make_job: Any, monkeypatch: pytest.MonkeyPatch,
                                        size: int) -> None:
    calls = 0
    original = wf.compile.kinds.pod.place_step

    def counting(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(wf.compile.kinds.pod, "place_step", counting)
    # A chain plus fan-in: step i needs i-1 and i//2 (the benchmark's shape).
    steps = [{"name": f"s{i}", "command": ["x"], "needs": sorted({f"s{j}" for j in (i - 1, i // 2) if 0 <= j < i})}
             for i in range(size)]
    manifest = compile_job(make_job(steps), catalog)
    assert calls == size  # one placement per step, no re-walks
    tasks = manifest["spec"]["templates"][0]["dag"]["tasks"]
    assert len(tasks) == size
    assert sum(len(t.get("dependencies", [])) for t in tasks) == sum(len(s["needs"]) for s in steps)


def test_dag_tasks_and_dependencies(catalog: Catalog, make_job: Any) -> None:
    manifest = compile_job(make_job([{"name": "a", "command": ["x"]},
                                     {"name": "b", "command": ["x"], "needs": ["a"]},
                                     {"name": "c", "command": ["x"], "needs": ["a", "b"]}]), catalog)
    entry = manifest["spec"]["templates"][0]
    assert entry["name"] == manifest["spec"]["entrypoint"] == ENTRYPOINT
    assert entry["dag"]["tasks"] == [{"name": "a", "template": "a"},
                                     {"name": "b", "template": "b", "dependencies": ["a"]},
                                     {"name": "c", "template": "c", "dependencies": ["a", "b"]}]


def pod(manifest: dict[str, Any], name: str) -> dict[str, Any]:
    [template] = [t for t in manifest["spec"]["templates"] if t["name"] == name]
    return template


def test_labels_and_annotations_on_pods(catalog: Catalog, make_job: Any) -> None:
    manifest = compile_job(make_job([{"name": "a", "command": ["x"], "labels": {"phase": "one"},
                                      "annotations": {"sidecar.istio.io/inject": "false"}},
                                     {"name": "b", "command": ["x"], "compute": "gaudi", "accelerators": 8}]), catalog)
    assert pod(manifest, "a")["metadata"] == {
        "labels": {"team": "ml", "phase": "one", JOB_LABEL: "demo", STEP_LABEL: "a", CLASS_LABEL: "cpu",
                   CAPACITY_LABEL: capacity_expression("spot", "on-demand", 2)},  # cpu: spotFallbackAfter 2
        "annotations": {"sidecar.istio.io/inject": "false", EKS_SKIP_CONTAINERS_ANNOTATION: "main",
                        SPOT_FALLBACK_ANNOTATION: "2"},
    }
    labels = pod(manifest, "b")["metadata"]["labels"]
    assert labels[CLASS_LABEL] == "gaudi" and labels[STEP_LABEL] == "b"
    assert pod(manifest, "b")["metadata"]["annotations"] == {EKS_SKIP_CONTAINERS_ANNOTATION: "main"}


def test_timeouts(catalog: Catalog, make_job: Any) -> None:
    manifest = compile_job(make_job([{"name": "a", "command": ["x"], "timeout": "12h"},
                                     {"name": "b", "command": ["x"]}], timeout="1d"), catalog)
    assert manifest["spec"]["activeDeadlineSeconds"] == 86400
    # Step timeouts count Pending time: an unschedulable step fails instead of waiting forever.
    assert pod(manifest, "a")["timeout"] == "43200s"
    assert "timeout" not in pod(manifest, "b")
    assert "activeDeadlineSeconds" not in compile_job(make_job(), catalog)["spec"]


def test_pod_gc_and_ttl_defaults(catalog: Catalog, make_job: Any) -> None:
    spec = compile_job(make_job(), catalog)["spec"]
    assert spec["podGC"] == POD_GC and spec["podGC"]["strategy"] == "OnPodSuccess"
    assert spec["ttlStrategy"] == TTL
    assert TTL["secondsAfterFailure"] >= TTL["secondsAfterSuccess"] > 0
    # Copies, so a caller editing one manifest cannot change the next.
    spec["podGC"]["strategy"] = "OnPodCompletion"
    assert compile_job(make_job(), catalog)["spec"]["podGC"]["strategy"] == "OnPodSuccess"


def test_parameters(catalog: Catalog, make_job: Any) -> None:
    spec = compile_job(make_job(parameters={"epochs": 40, "lr": "0.1"}), catalog)["spec"]
    assert spec["arguments"] == {"parameters": [{"name": "epochs", "value": "40"}, {"name": "lr", "value": "0.1"}]}
    assert "arguments" not in compile_job(make_job(), catalog)["spec"]


def test_env_merges_job_and_step_and_references_secrets(catalog: Catalog, make_job: Any) -> None:
    manifest = compile_job(make_job(
        [{"name": "a", "command": ["x"], "env": {"B": "step", "C": "c"}}, {"name": "b", "command": ["x"]}],
        env={"A": "job", "B": "job", "TOKEN": {"secret": "hf", "key": "token"}}), catalog)
    assert pod(manifest, "a")["container"]["env"] == [
        {"name": "A", "value": "job"}, {"name": "B", "value": "step"},
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}, {"name": "C", "value": "c"}]
    assert [e["name"] for e in pod(manifest, "b")["container"]["env"]] == ["A", "B", "TOKEN"]
    assert "env" not in pod(compile_job(make_job(), catalog), "main")["container"]


def test_container_fields(catalog: Catalog, make_job: Any) -> None:
    manifest = compile_job(make_job([{"name": "a", "command": ["python", "t.py", "--x", "1"], "image": "own:1",
                                      "workingDir": "/w"}, {"name": "b", "command": ["y"]}]), catalog)
    container = pod(manifest, "a")["container"]
    assert container["image"] == "own:1" and container["command"] == ["python", "t.py", "--x", "1"]
    assert container["workingDir"] == "/w" and "args" not in container
    assert pod(manifest, "b")["container"]["image"] == "busybox:1.36"


def test_placement_problems_carry_file_lines(catalog: Catalog, write: Any) -> None:
    path = write("job.yaml", """
        apiVersion: wf/v1
        kind: TrainingJob
        metadata: {name: demo}
        spec:
          image: img
          compute: cpu
          steps:
            - name: a
              command: [x]
              compute: tpu
            - name: b
              command: [x]
              compute: gaudi
              accelerators: 16
    """)
    with pytest.raises(InputError) as exc:
        compile_job(load_job(path), catalog)
    assert [str(p) for p in exc.value.problems] == [
        f"{path}:10: spec.steps[0].compute: unknown compute class 'tpu' (did you mean 'gpu'?); "
        "the catalog has: cpu, gaudi, graviton, gpu",
        f"{path}:14: spec.steps[1].accelerators: no gaudi node offers 16 habana.ai/gaudi; dl1.24xlarge has 8",
    ]


def test_python_built_jobs_report_fields_without_lines(catalog: Catalog, make_job: Any) -> None:
    with pytest.raises(InputError) as exc:
        compile_job(make_job(compute="tpu"), catalog)
    [problem] = exc.value.problems
    assert (problem.file, problem.line, problem.field) == ("<python>", None, "spec.compute")


def test_json_round_trip(catalog: Catalog) -> None:
    manifest = compiled(EXAMPLES[0], catalog)
    assert json.loads(json.dumps(manifest)) == manifest


def test_volumes_are_declared_once_and_mounted_in_every_step() -> None:
    job = TrainingJob.model_validate({
        "metadata": {"name": "v"},
        "spec": {"image": "i", "compute": "cpu", "volumes": [
            {"name": "data", "claim": "fsx-datasets", "mountPath": "/data", "readOnly": True},
            {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}, "mountPath": "/dev/shm"}],
            "steps": [{"name": "a", "command": ["x"]}, {"name": "b", "command": ["y"], "needs": ["a"]}]},
    })
    manifest = compile_job(job, load_catalog(ROOT / "eksctl" / "catalog.yaml"))
    assert manifest["spec"]["volumes"] == [
        {"name": "data", "persistentVolumeClaim": {"claimName": "fsx-datasets", "readOnly": True}},
        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}},
    ]
    pods = [t for t in manifest["spec"]["templates"] if "container" in t]
    assert [p["container"]["volumeMounts"] for p in pods] == [[
        {"name": "data", "mountPath": "/data", "readOnly": True}, {"name": "shm", "mountPath": "/dev/shm"}]] * 2
    assert not argo.validate(manifest)


@pytest.mark.parametrize("volume, message", [
    ({"name": "d", "mountPath": "/d"}, "exactly one of claim"),
    ({"name": "d", "claim": "c", "emptyDir": {}, "mountPath": "/d"}, "exactly one of claim"),
    ({"name": "d", "claim": "c", "mountPath": "relative"}, "is not an absolute path"),
    ({"name": "D_", "claim": "c", "mountPath": "/d"}, "DNS-1123"),
])
def test_bad_volumes_are_rejected(volume: dict, message: str) -> None:
    with pytest.raises((InputError, ValidationError)) as exc:
        TrainingJob.model_validate({"metadata": {"name": "v"}, "spec": {
            "image": "i", "compute": "cpu", "volumes": [volume], "steps": [{"name": "a", "command": ["x"]}]}})
    assert message in str(exc.value)


def _argo_pass(text: str, values: dict[str, str]) -> str:
    """One of Argo's templating passes over a template's JSON (util/template: fasttemplate with `{{` `}}`): each
    tag is replaced by its value, an unknown one kept as written; a `{{` without its `}}` fails the workflow."""
    out, at = [], 0
    while (start := text.find("{{", at)) >= 0:
        end = text.find("}}", start + 2)
        assert end >= 0, f"Argo: cannot find end tag in {text[start:]!r}"
        tag = text[start + 2:end]
        out += [text[at:start], values.get(tag.strip(), "{{" + tag + "}}")]
        at = end + 2
    return "".join(out) + text[at:]


def test_a_literal_brace_pair_reaches_the_pod_through_both_of_argos_passes(catalog: Catalog, make_job: Any) -> None:
    literal = "{{='{{'}}"
    job = make_job([{"name": "list", "command": ["kubectl", "get", "-o", f"go-template={literal}.metadata.name}}}}",
                                                 "{{workflow.name}}"],
                     "env": {"STEP": f"{literal}x"}, "annotations": {"note": f"a {literal} b"}}],
                   env={"FORMAT": f"{literal}.Name}}}}"})
    [pod] = [t for t in compile_job(job, catalog)["spec"]["templates"] if t["name"] == "list"]
    assert {"name": "lbrace", "default": "{"} in pod["inputs"]["parameters"]
    assert literal not in json.dumps(pod)
    # The workflow's variables first (the inputs unknown yet), then the template's inputs.
    first = _argo_pass(json.dumps(pod), {"workflow.name": "list-x7k2p"})
    ran = json.loads(_argo_pass(first, {"inputs.parameters.lbrace": "{"}))
    assert ran["container"]["command"][3:] == ["go-template={{.metadata.name}}", "list-x7k2p"]
    assert {e["name"]: e["value"] for e in ran["container"]["env"]} == {"FORMAT": "{{.Name}}", "STEP": "{{x"}
    assert ran["metadata"]["annotations"]["note"] == "a {{ b"
    assert not argo.validate(compile_job(job, catalog))


def test_steps_without_literal_braces_get_no_brace_input(catalog: Catalog, make_job: Any) -> None:
    pods = [t for t in compile_job(make_job(), catalog)["spec"]["templates"] if "container" in t]
    assert all("lbrace" not in json.dumps(p.get("inputs", {})) for p in pods)
