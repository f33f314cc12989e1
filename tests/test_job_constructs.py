"""Fan-out, outputs and references, conditions, exit handlers and job-level defaults: what each compiles to
(valid for Argo v4.0 and v3.7), and every reference error reported with its file, line and field."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from wf import argo
from wf.compile.artifacts import REPOSITORY_REF, repository_configmap
from wf.compile.workflow import compile_job
from wf.core.errors import InputError
from wf.jobspec.job import TrainingJob, load_job
from wf.jobspec.steps import Step
from wf.model.catalog import Catalog


def job(steps: list[dict[str, Any]], **spec: Any) -> TrainingJob:
    return TrainingJob.model_validate({"metadata": {"name": "demo", "namespace": "ml-training"},
                                       "spec": {"image": "busybox", "compute": "cpu", "steps": steps, **spec}})


def templates(manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in manifest["spec"]["templates"]}


def tasks(manifest: dict[str, Any], template: str = "Main") -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in templates(manifest)[template]["dag"]["tasks"]}


def valid(manifest: dict[str, Any], argo_schemas: Any) -> dict[str, Any]:
    assert argo.validate(manifest) == []
    assert argo_schemas.json_errors("v4", manifest) == []
    assert argo_schemas.json_errors("v3", manifest) == []
    assert argo_schemas.crd_errors(manifest) == []
    return manifest


PRODUCER = {"name": "list", "command": ["ls"], "outputs": {"parameters": {"shards": "/tmp/shards.json"}}}


@pytest.mark.parametrize(("for_each", "loop"), [
    (["a", "b"], {"withItems": ["a", "b"]}),
    ([{"id": 1, "path": "x"}], {"withItems": [{"id": "1", "path": "x"}]}),
    ({"count": 30}, {"withSequence": {"count": "30"}}),
    ("{{workflow.parameters.shards}}", {"withParam": "{{workflow.parameters.shards}}"}),
])
def test_fan_out_sources(for_each: Any, loop: dict[str, Any], catalog: Catalog, argo_schemas: Any) -> None:
    item = "{{item.id}}" if isinstance(for_each, list) and isinstance(for_each[0], dict) else "{{item}}"
    manifest = valid(compile_job(job([{"name": "shard", "forEach": for_each, "retries": 0,
                                       "command": ["run", f"--shard={item}"]}],
                                     parameters={"shards": '["a"]'}), catalog), argo_schemas)
    task = tasks(manifest)["shard"]
    assert {k: task[k] for k in loop} == loop
    name = "item__id" if item == "{{item.id}}" else "item"
    assert task["arguments"] == {"parameters": [{"name": name, "value": item}]}
    pod = templates(manifest)["shard"]
    assert pod.get("inputs") == {"parameters": [{"name": name}]}
    assert pod["container"]["command"] == ["run", "--shard={{inputs.parameters." + name + "}}"]


def test_fan_out_over_an_output_with_parallelism_keeps_both_retry_layers(catalog: Catalog,
                                                                        argo_schemas: Any) -> None:
    manifest = valid(compile_job(job([
        PRODUCER,
        {"name": "shard", "needs": ["list"], "forEach": "{{steps.list.outputs.shards}}", "parallelism": 10,
         "retries": 2, "command": ["run", "{{item}}"], "env": {"SHARD": "{{item}}"}},
        {"name": "merge", "needs": ["shard"], "command": ["merge"]},
    ], parallelism=50, retries=1), catalog), argo_schemas)
    assert manifest["spec"]["parallelism"] == 50
    main = tasks(manifest)
    assert main["shard"]["template"] == "shard-Items"
    assert main["shard"]["arguments"] == {
        "parameters": [{"name": "items", "value": "{{tasks.list.outputs.parameters.shards}}"}]}
    assert main["merge"]["dependencies"] == ["shard"]  # Argo waits for every item of a looped task
    by_name = templates(manifest)
    items = by_name["shard-Items"]
    assert items["parallelism"] == 10
    assert items["dag"]["tasks"] == [{"name": "shard", "template": "shard-Attempts",
                                      "withParam": "{{inputs.parameters.items}}",
                                      "arguments": {"parameters": [{"name": "item", "value": "{{item}}"}]}}]
    assert by_name["shard-Attempts"]["retryStrategy"]["limit"] == 2  # application retries, per item
    assert by_name["shard"]["retryStrategy"]["limit"] == 5  # Spot interruptions, per item
    assert by_name["shard"]["container"]["env"][-1] == {"name": "SHARD", "value": "{{inputs.parameters.item}}"}
    assert by_name["list"]["outputs"] == {"parameters": [{"name": "shards", "valueFrom": {"path": "/tmp/shards.json"}}]}
    assert by_name["list-Attempts"]["outputs"] == {"parameters": [
        {"name": "shards", "valueFrom": {"parameter": "{{tasks.list.outputs.parameters.shards}}"}}]}


def test_parameters_and_artifacts_flow_through_the_retry_wrapper(catalog: Catalog, argo_schemas: Any) -> None:
    manifest = valid(compile_job(job([
        {"name": "train", "command": ["train"], "retries": 1,
         "outputs": {"parameters": {"accuracy": "/out/acc"}, "artifacts": {"model": "/out/model"}}},
        {"name": "eval", "needs": ["train"], "retries": 1,
         "command": ["eval", "--model", "{{steps.train.outputs.model}}/weights.pt",
                     "--baseline", "{{steps.train.outputs.accuracy}}"]},
    ]), catalog), argo_schemas)
    by_name = templates(manifest)
    assert tasks(manifest)["eval"]["arguments"] == {
        "parameters": [{"name": "train_accuracy", "value": "{{tasks.train.outputs.parameters.accuracy}}"}],
        "artifacts": [{"name": "train_model", "from": "{{tasks.train.outputs.artifacts.model}}"}]}
    assert by_name["eval-Attempts"]["inputs"] == {"parameters": [{"name": "train_accuracy"}],
                                                  "artifacts": [{"name": "train_model"}]}
    assert by_name["eval-Attempts"]["dag"]["tasks"][0]["arguments"] == {
        "parameters": [{"name": "train_accuracy", "value": "{{inputs.parameters.train_accuracy}}"}],
        "artifacts": [{"name": "train_model", "from": "{{inputs.artifacts.train_model}}"}]}
    assert by_name["eval"].get("inputs") == {"parameters": [{"name": "train_accuracy"}],
                                         "artifacts": [{"name": "train_model", "path": "/wf/inputs/train/model"}]}
    assert by_name["eval"]["container"]["command"] == [
        "eval", "--model", "/wf/inputs/train/model/weights.pt", "--baseline", "{{inputs.parameters.train_accuracy}}"]
    assert by_name["train"]["outputs"]["artifacts"] == [{"name": "model", "path": "/out/model"}]
    assert by_name["train-Attempts"]["outputs"]["artifacts"] == [
        {"name": "model", "from": "{{tasks.train.outputs.artifacts.model}}"}]
    # Artifacts go to the catalog's store, reached with the namespace's service account (no keys).
    assert manifest["spec"]["artifactRepositoryRef"] == REPOSITORY_REF
    assert manifest["spec"]["serviceAccountName"] == "wf-workflow"


def test_the_artifact_repository_configmap(catalog: Catalog) -> None:
    assert catalog.artifacts is not None
    configmap = repository_configmap(catalog.artifacts, "ml-training")
    assert configmap["metadata"]["name"] == REPOSITORY_REF["configMap"]
    repository = yaml.safe_load(configmap["data"][REPOSITORY_REF["key"]])
    assert repository["s3"]["useSDKCreds"] is True
    assert not {"accessKeySecret", "secretKeySecret"} & repository["s3"].keys()


def test_artifacts_need_an_artifact_store(catalog: Catalog) -> None:
    bare = catalog.model_copy(update={"artifacts": None})
    with pytest.raises(InputError, match="no artifact store"):
        compile_job(job([{"name": "a", "command": ["x"], "outputs": {"artifacts": {"m": "/m"}}}]), bare)


def test_when_and_exit_handler(catalog: Catalog, argo_schemas: Any) -> None:
    manifest = valid(compile_job(job(
        [{"name": "train", "command": ["t"], "outputs": {"parameters": {"accuracy": "/acc"}}},
         {"name": "publish", "needs": ["train"], "command": ["p"],
          "when": "{{steps.train.outputs.accuracy}} > {{workflow.parameters.baseline}}"}],
        parameters={"baseline": "0.9"},
        onExit=[{"name": "notify", "command": ["notify", "--status", "{{workflow.status}}"]},
                {"name": "cleanup", "needs": ["notify"], "command": ["rm"]}]), catalog), argo_schemas)
    assert tasks(manifest)["publish"]["when"] == (
        "{{tasks.train.outputs.parameters.accuracy}} > {{workflow.parameters.baseline}}")
    assert manifest["spec"]["onExit"] == "Exit"
    exit_tasks = tasks(manifest, "Exit")
    assert exit_tasks["cleanup"]["dependencies"] == ["notify"]
    assert templates(manifest)["notify"]["container"]["command"] == ["notify", "--status", "{{workflow.status}}"]


def test_a_thousand_item_fan_out_is_small(catalog: Catalog) -> None:
    manifest = compile_job(job([{"name": "shard", "forEach": [f"s3://bucket/shard-{i:04d}" for i in range(1000)],
                                 "parallelism": 50, "command": ["run", "{{item}}"]}]), catalog)
    size = argo.json_size(manifest)
    assert argo.size_problems(size) == []
    assert size < 64 * 1024  # Argo's limits are in megabytes (etcd 1.5 MB; status offloading at 1 MB)


def test_compute_is_optional_when_every_step_names_a_class(catalog: Catalog) -> None:
    spec_job = TrainingJob.model_validate({"metadata": {"name": "d"}, "spec": {"image": "i", "steps": [
        {"name": "a", "command": ["x"], "compute": "graviton"}]}})
    assert templates(compile_job(spec_job, catalog))["a"]["nodeSelector"]["kubernetes.io/arch"] == "arm64"
    with pytest.raises(InputError) as exc:
        compile_job(spec_job.model_copy(update={"spec": spec_job.spec.model_copy(update={"steps": [
            Step(name="b", command=["x"])]})}), catalog)
    assert exc.value.problems[0].field == "spec.steps[0].compute"
    assert "no compute class" in exc.value.problems[0].message
    defaulted = catalog.model_copy(update={"default_class": "cpu"})
    pod = templates(compile_job(spec_job.model_copy(update={"spec": spec_job.spec.model_copy(update={
        "steps": [Step(name="b", command=["x"])]})}), defaulted))["b"]
    assert pod["nodeSelector"]["wf.dev/compute-class"] == "cpu"


def test_the_catalog_default_class_must_exist(catalog: Catalog) -> None:
    data = yaml.safe_load(catalog.to_yaml())
    with pytest.raises(InputError, match="defaultClass: unknown compute class 'tpu'"):
        Catalog.model_validate({**data, "defaultClass": "tpu"})


def test_one_load_reports_every_error(write: Any) -> None:
    path = write("job.yaml", """
        apiVersion: wf/v1
        kind: TrainingJob
        metadata: {name: Demo}
        spec:
          steps:
            - name: a
              command: [x]
              bogus: 1
            - name: a
              needs: [missing]
              command: "echo hi"
            - name: c
              needs: [a]
    """)
    with pytest.raises(InputError) as exc:
        load_job(path)
    found = {(p.line, p.field) for p in exc.value.problems}
    assert found >= {
        (3, "metadata.name"),           # a rule across fields, reported despite the type errors
        (5, "spec.image"),              # missing: the line of its parent mapping
        (8, "spec.steps[0].bogus"),     # unknown
        (11, "spec.steps[1].command"),  # a shell string
        (10, "spec.steps[1].needs[0]"),  # unknown step
        (12, "spec.steps[2].command"),  # missing
    }, exc.value.problems
    assert all(p.file == str(path) for p in exc.value.problems)


REFERENCE_ERRORS = [
    ({"name": "b", "needs": ["a"], "command": ["{{steps.nope.outputs.x}}"]}, "command[0]", "unknown step 'nope'"),
    ({"name": "b", "needs": ["a"], "command": ["{{steps.a.outputs.nope}}"]}, "command[0]",
     "step 'a' has no output 'nope'; its outputs: model, shards"),
    ({"name": "b", "command": ["{{steps.a.outputs.shards}}"]}, "command[0]", "step 'a' does not precede 'b'"),
    ({"name": "b", "needs": ["a"], "env": {"X": "{{workflow.parameters.nope}}"}, "command": ["x"]}, "env.X",
     "unknown parameter 'nope'"),
    ({"name": "b", "command": ["{{item}}"]}, "command[0]", "has no forEach"),
    ({"name": "b", "forEach": [{"id": "1"}], "command": ["{{item.path}}"]}, "command[0]",
     "forEach item 0 has no field 'path'"),
    ({"name": "b", "forEach": {"count": 3}, "command": ["{{item.path}}"]}, "command[0]", "numbers, without fields"),
    ({"name": "b", "forEach": "shards", "command": ["x"]}, "forEach", "forEach takes a list"),
    ({"name": "b", "forEach": "{{steps.a.outputs.shards}}", "command": ["x"]}, "forEach", "does not precede"),
    ({"name": "b", "needs": ["a"], "when": "{{steps.a.outputs.model}} == x", "command": ["x"]}, "when",
     "is an artifact"),
    ({"name": "b", "command": ["{{inputs.parameters.x}}"]}, "command[0]", "unknown reference"),
    ({"name": "b", "forEach": ["1"], "command": ["x"], "when": "{{item}} == 1"}, "when", "when cannot refer"),
    ({"name": "b", "forEach": ["1"], "command": ["x"], "workingDir": "/w/{{item}}"}, "workingDir",
     "workingDir may use only workflow references"),
    ({"name": "b", "command": ["x"], "outputs": {"parameters": {"o": "{{workflow.parameters.nope}}/o"}}},
     "outputs.parameters.o", "unknown parameter 'nope'"),
]


@pytest.mark.parametrize(("step", "field", "message"), REFERENCE_ERRORS, ids=lambda v: str(v)[:40])
def test_reference_errors(step: dict[str, Any], field: str, message: str, write: Any) -> None:
    producer = {"name": "a", "command": ["x"],
                "outputs": {"parameters": {"shards": "/s"}, "artifacts": {"model": "/m"}}}
    data = {"apiVersion": "wf/v1", "kind": "TrainingJob", "metadata": {"name": "demo"},
            "spec": {"image": "i", "compute": "cpu", "parameters": {"p": "1"}, "steps": [producer, step]}}
    text = yaml.safe_dump(data, sort_keys=False)
    path = write("job.yaml", text)
    with pytest.raises(InputError) as exc:
        load_job(path)
    [problem] = exc.value.problems
    assert problem.field == f"spec.steps[1].{field}"
    assert message in problem.message
    assert problem.line is not None and problem.line > text.splitlines().index("  - name: b")


def test_exit_handlers_cannot_read_step_outputs() -> None:
    with pytest.raises(InputError, match="exit handlers run after the job"):
        job([PRODUCER], onExit=[{"name": "n", "command": ["{{steps.list.outputs.shards}}"]}])


def test_outputs_of_a_fanned_out_step_are_not_readable() -> None:
    with pytest.raises(InputError, match="runs once per item"):
        job([{**PRODUCER, "forEach": ["a"]},
             {"name": "b", "needs": ["list"], "command": ["{{steps.list.outputs.shards}}"]}])


def test_step_names_are_unique_across_steps_and_exit_handlers() -> None:
    with pytest.raises(InputError, match="duplicate step name 'list'"):
        job([PRODUCER], onExit=[{"name": "list", "command": ["x"]}])


def test_python_api_builds_the_constructs(catalog: Catalog) -> None:
    built = TrainingJob(metadata={"name": "api"}, spec={  # type: ignore[arg-type]
        "image": "i", "compute": "cpu",
        "steps": [Step(name="list", command=["ls"], outputs={"parameters": {"shards": "/s"}}),  # type: ignore[arg-type]
                  Step(name="shard", needs=["list"], for_each="{{steps.list.outputs.shards}}", parallelism=2,
                       command=["run", "{{item}}"])]})
    assert tasks(compile_job(built, catalog))["shard"]["template"] == "shard-Items"
    with pytest.raises(InputError, match="has no forEach"):
        TrainingJob(metadata={"name": "api"}, spec={"image": "i", "steps": [  # type: ignore[arg-type]
            Step(name="a", command=["{{item}}"])]})


def test_schema_covers_the_constructs() -> None:
    schema = TrainingJob.model_json_schema(by_alias=True)
    step = schema["$defs"]["Step"]["properties"]
    assert {"forEach", "parallelism", "when", "outputs"} <= step.keys()
    assert {"onExit", "parallelism"} <= schema["$defs"]["JobSpec"]["properties"].keys()


def test_lint_reports_reference_errors_with_lines(write: Any) -> None:
    from wf.lint.documents import lint_paths

    path = write("job.yaml", """
        apiVersion: wf/v1
        kind: TrainingJob
        metadata: {name: demo}
        spec:
          image: i
          compute: cpu
          steps:
            - name: train
              command: [train]
            - name: publish
              needs: [train]
              command: [publish, "{{steps.train.outputs.model}}"]
    """)
    [problem] = lint_paths([path]).errors
    assert (problem.line, problem.field) == (12, "spec.steps[1].command[1]")
    assert "step 'train' has no output 'model'" in problem.message


def test_the_package_exports_the_new_models() -> None:
    import wf

    assert wf.Outputs(parameters={"a": "/a"}).parameters == {"a": "/a"}
    assert wf.Count(count=3).count == 3
