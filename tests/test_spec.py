"""The job spec contract of DESIGN.md: unknown keys, names, DAG rules, argv commands, durations, quantities,
parameters and secrets; from YAML (file:line: field) and from Python (the same models)."""

from __future__ import annotations

import graphlib
import itertools
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from wf.core.errors import InputError
from wf.core.units import parse_duration, parse_quantity
from wf.jobspec.job import TrainingJob, find_cycle, load_job
from wf.jobspec.steps import SecretRef, Step


def problems(write: Any, data: dict[str, Any]) -> list[tuple[int | None, str | None, str]]:
    path = write("job.yaml", yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(InputError) as exc:
        load_job(path)
    assert all(p.file == str(path) for p in exc.value.problems)
    return [(p.line, p.field, p.message) for p in exc.value.problems]


def at(data: dict[str, Any], needle: str, nth: int = 1) -> int:
    """The line of the nth line containing `needle` in the YAML that problems() writes for `data`."""
    hits = [i for i, text in enumerate(yaml.safe_dump(data, sort_keys=False).splitlines(), 1) if needle in text]
    return hits[nth - 1]


def test_examples_shape_loads(write: Any) -> None:
    job = load_job(write("job.yaml", """
        apiVersion: wf/v1
        kind: TrainingJob
        metadata: {name: bert, namespace: ml-training, labels: {team: nlp}}
        spec:
          image: img
          compute: cpu
          capacity: spot
          retries: 1
          timeout: 24h
          env: {HF_HOME: /cache, TOKEN: {secret: hf, key: token}}
          parameters: {epochs: "40"}
          schedule: "0 2 * * *"
          steps:
            - name: download
              command: [python, download.py]
              resources: {cpu: 8, memory: 32Gi, ephemeral-storage: 100Gi}
            - name: pretrain
              needs: [download]
              compute: gaudi
              accelerators: 8
              command: [mpirun, -n, "8", python, run.py]
              timeout: 12h
              workingDir: /w
              annotations: {sidecar.istio.io/inject: "false"}
              labels: {phase: one}
    """))
    assert job.name == "bert" and job.metadata.namespace == "ml-training"
    assert [s.name for s in job.spec.steps] == ["download", "pretrain"]
    assert job.spec.env["TOKEN"] == SecretRef(secret="hf", key="token")
    assert job.spec.steps[0].resources.ephemeral_storage == "100Gi"
    assert job.spec.steps[1].working_dir == "/w"
    assert job.document is not None and job.source.endswith("job.yaml")


@pytest.mark.parametrize(
    ("where", "field"),
    [
        ((), "colour"),
        (("metadata",), "metadata.colour"),
        (("spec",), "spec.colour"),
        (("spec", "steps", 0), "spec.steps[0].colour"),
        (("spec", "steps", 0, "resources"), "spec.steps[0].resources.colour"),
    ],
)
def test_unknown_keys_name_file_line_and_field(write: Any, job_data: Any, where: tuple[Any, ...], field: str) -> None:
    data = job_data([{"name": "main", "command": ["echo"], "resources": {"cpu": 1}}])
    node = data
    for key in where:
        node = node[key]
    node["colour"] = "blue"
    lines = yaml.safe_dump(data, sort_keys=False).splitlines()
    line = next(i for i, text in enumerate(lines, 1) if "colour: blue" in text)
    assert problems(write, data) == [(line, field, "unknown field")]


def test_a_typo_in_a_file_names_its_line(write: Any) -> None:
    path = write("job.yaml", """
        apiVersion: wf/v1
        kind: TrainingJob
        metadata: {name: demo}
        spec:
          image: img
          compute: cpu
          steps:
            - name: a
              command: [echo]
              resourcs: {cpu: 1}
    """)
    with pytest.raises(InputError) as exc:
        load_job(path)
    assert [str(p) for p in exc.value.problems] == [
        f"{path}:10: spec.steps[0].resourcs: unknown field (did you mean 'resources'?)"]


def test_missing_required_fields(write: Any, job_data: Any) -> None:
    data = job_data()
    del data["spec"]["image"]
    del data["spec"]["steps"][0]["command"]
    assert set(problems(write, data)) == {
        (at(data, "spec:") + 1, "spec.image", "required field is missing"),  # where the spec mapping starts
        (at(data, "- name: main"), "spec.steps[0].command", "required field is missing"),
    }


@pytest.mark.parametrize(("field", "value"), [("apiVersion", "wf/v2"), ("kind", "Workflow")])
def test_api_version_and_kind_are_fixed(write: Any, job_data: Any, field: str, value: str) -> None:
    data = job_data()
    data[field] = value
    [(line, got, message)] = problems(write, data)
    assert got == field and value in message


@pytest.mark.parametrize("name", ["Train", "train_1", "-train", "train-", "a" * 64, "tr.ain", ""])
def test_step_names_are_dns1123_labels(write: Any, job_data: Any, name: str) -> None:
    data = job_data([{"name": name, "command": ["x"]}])
    found = problems(write, data)
    assert found == [(at(data, "- name:"), "spec.steps[0].name", found[0][2])]
    assert "DNS-1123" in found[0][2]


@pytest.mark.parametrize("name", ["a", "train-1", "0", "a" * 63])
def test_valid_step_names(job_data: Any, name: str) -> None:
    TrainingJob.model_validate(job_data([{"name": name, "command": ["x"]}]))


def test_job_name_rules(write: Any, job_data: Any) -> None:
    data = job_data()
    data["metadata"]["name"] = "Bert"
    assert problems(write, data)[0][1] == "metadata.name"
    data["metadata"]["name"] = "a" * 58
    assert "57" in problems(write, data)[0][2]
    data["metadata"] = {"name": "ok", "namespace": "Bad_NS"}
    assert problems(write, data)[0][1] == "metadata.namespace"


def test_label_syntax_on_job_and_steps(write: Any, job_data: Any) -> None:
    data = job_data([{"name": "a", "command": ["x"], "labels": {"ok": "not ok!"}}])
    data["metadata"]["labels"] = {"bad key!": "x"}
    fields = {field for _, field, _ in problems(write, data)}
    assert fields == {"metadata.labels.bad key!", "spec.steps[0].labels.ok"}


def test_step_names_are_unique(write: Any, job_data: Any) -> None:
    data = job_data([{"name": "a", "command": ["x"]}, {"name": "b", "command": ["x"]}, {"name": "a", "command": ["x"]}])
    found = problems(write, data)
    assert found == [(at(data, "- name: a", 2), "spec.steps[2].name", "duplicate step name 'a' (first at steps[0])")]


def test_needs_must_name_existing_steps(write: Any, job_data: Any) -> None:
    data = job_data([{"name": "a", "command": ["x"]}, {"name": "b", "command": ["x"], "needs": ["a", "c"]}])
    found = problems(write, data)
    assert found == [(at(data, "- c"), "spec.steps[1].needs[1]", "unknown step 'c'; steps: a, b")]


def test_a_step_cannot_need_itself(write: Any, job_data: Any) -> None:
    data = job_data([{"name": "a", "command": ["x"], "needs": ["a"]}])
    found = problems(write, data)
    assert found == [(at(data, "needs:") + 1, "spec.steps[0].needs[0]", "a step cannot need itself")]


def test_cycles_are_reported_with_their_path(write: Any, job_data: Any) -> None:
    steps = [{"name": "a", "command": ["x"], "needs": ["c"]}, {"name": "b", "command": ["x"], "needs": ["a"]},
             {"name": "c", "command": ["x"], "needs": ["b"]}, {"name": "d", "command": ["x"]}]
    data = job_data(steps)
    [(line, field, message)] = problems(write, data)
    assert field == "spec.steps[0].needs" and line == at(data, "needs:") + 1
    assert message == "steps form a cycle: a -> c -> b -> a"


def test_a_4000_step_chain_has_no_recursion_limit() -> None:
    steps = [Step(name=f"s{i}", command=["x"], needs=[f"s{i - 1}"] if i else []) for i in range(4000)]
    assert find_cycle(steps) is None
    steps[0].needs = ["s3999"]
    cycle = find_cycle(steps)
    assert cycle is not None and len(cycle) == 4001 and cycle[0] == cycle[-1]


@st.composite
def dags(draw: st.DrawFn) -> list[Step]:
    n = draw(st.integers(min_value=1, max_value=12))
    steps = []
    for i in range(n):
        needs = draw(st.lists(st.integers(min_value=0, max_value=n - 1), max_size=3, unique=True))
        steps.append(Step(name=f"s{i}", command=["x"], needs=[f"s{j}" for j in needs]))
    return steps


@settings(max_examples=300, deadline=None)
@given(dags())
def test_find_cycle_agrees_with_graphlib(steps: list[Step]) -> None:
    graph = {s.name: set(s.needs) for s in steps}
    try:
        graphlib.TopologicalSorter(graph).prepare()
        expected_cycle = False
    except graphlib.CycleError:
        expected_cycle = True
    cycle = find_cycle(steps)
    assert (cycle is not None) == expected_cycle
    if cycle:
        # A real cycle: closed, and every hop is a `needs` edge.
        assert cycle[0] == cycle[-1] and len(set(cycle[:-1])) == len(cycle) - 1
        assert all(b in graph[a] for a, b in itertools.pairwise(cycle))


@pytest.mark.parametrize("command", ["python train.py", "", ["python", {"x": 1}]])
def test_command_is_an_argv_list_of_strings(write: Any, job_data: Any, command: Any) -> None:
    found = problems(write, job_data([{"name": "a", "command": command}]))
    assert found and found[0][1].startswith("spec.steps[0].command")
    if isinstance(command, str):
        assert "argv list" in found[0][2] and "shell string" in found[0][2]


def test_yaml_scalars_in_argv_env_and_annotations_are_taken_as_text(write: Any, job_data: Any) -> None:
    data = job_data([{"name": "a", "command": ["sleep", 10, 1.5, True], "env": {"THREADS": 32},
                      "annotations": {"sidecar.istio.io/inject": False}}])
    job = load_job(write("job.yaml", yaml.safe_dump(data, sort_keys=False)))
    step = job.spec.steps[0]
    assert step.command == ["sleep", "10", "1.5", "true"]
    assert step.env == {"THREADS": "32"} and step.annotations == {"sidecar.istio.io/inject": "false"}


def test_text_fields_keep_the_yaml_source_text(write: Any) -> None:
    """YAML 1.1 reads 1.10, on, 010 and ~ as 1.1, true, 8 and null: a text field takes what the file says."""
    job = load_job(write("job.yaml", """
        apiVersion: wf/v1
        kind: TrainingJob
        metadata: {name: t, labels: {version: 1.10}}
        spec:
          image: img
          retries: 2
          env: &env {VERSION: 1.20, DEBUG: on, MASK: 0755, EMPTY: , HOME_DIR: ~}
          parameters: {n: 010, day: 2001-01-01, big: 1_000, hex: 0x1F}
          steps:
            - name: a
              command: [python, train.py, --lr, 1.10, --flag, on, --n, 010, .inf, null, yes, 1e3]
              env: {<<: *env, EXTRA: 3.0}
              labels: {v: 1.0}
              annotations: {inject: off}
              forEach: [1.10, {lr: 0.10}]
              resources: {cpu: 2, memory: 4Gi}
              timeout: 3600
    """))
    step = job.spec.steps[0]
    assert step.command == ["python", "train.py", "--lr", "1.10", "--flag", "on", "--n", "010", ".inf", "null",
                            "yes", "1e3"]
    assert job.spec.env == {"VERSION": "1.20", "DEBUG": "on", "MASK": "0755", "EMPTY": "", "HOME_DIR": "~"}
    assert step.env == {**job.spec.env, "EXTRA": "3.0"}
    assert job.spec.parameters == {"n": "010", "day": "2001-01-01", "big": "1_000", "hex": "0x1F"}
    assert job.metadata.labels == {"version": "1.10"} and step.labels == {"v": "1.0"}
    assert step.annotations == {"inject": "off"} and step.for_each == ["1.10", {"lr": "0.10"}]
    # Numeric fields still read numbers.
    assert (job.spec.retries, step.resources.cpu, step.timeout) == (2, 2, 3600)


def test_text_fields_built_in_python_take_the_values_text() -> None:
    step = Step(name="a", command=["sleep", 10, 1.5, True])
    assert step.command == ["sleep", "10", "1.5", "true"]


def test_a_bad_env_value_names_the_field_not_pydantics_union_labels(write: Any, job_data: Any) -> None:
    [(_, field, _msg)] = problems(write, job_data([{"name": "a", "command": ["x"], "env": {"A": [1, 2]}}]))
    assert field == "spec.steps[0].env.A"


def test_an_empty_command_list_is_rejected(write: Any, job_data: Any) -> None:
    [(_, field, message)] = problems(write, job_data([{"name": "a", "command": []}]))
    assert field == "spec.steps[0].command" and message == "must not be empty"


def test_steps_are_required(write: Any, job_data: Any) -> None:
    [(_, field, _)] = problems(write, job_data([]))
    assert field == "spec.steps"


@pytest.mark.parametrize(("text", "seconds"), [("24h", 86400), ("1h30m", 5400), ("90s", 90), ("2d", 172800),
                                               ("1.5h", 5400), (3600, 3600), ("1500ms", 1)])
def test_durations(text: str | int, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["5x", "0s", "-1h", "h", "", "1h 30m", "500ms", 0, -5, True, "1y"])
def test_bad_durations(text: Any) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def test_bad_durations_in_a_spec_name_the_field(write: Any, job_data: Any) -> None:
    found = problems(write, job_data([{"name": "a", "command": ["x"], "timeout": "5x"}], timeout="forever"))
    assert {f for _, f, _ in found} == {"spec.timeout", "spec.steps[0].timeout"}


@pytest.mark.parametrize(("text", "value"), [("500m", "0.5"), (8, "8"), (0.5, "0.5"), ("32Gi", str(32 * 2**30)),
                                             ("1k", "1000"), ("1e3", "1000"), ("100Mi", str(100 * 2**20))])
def test_quantities(text: Any, value: str) -> None:
    assert parse_quantity(text) == parse_quantity(value) == __import__("decimal").Decimal(value)


@pytest.mark.parametrize("text", ["banana", "1Gb", "Gi", "1.2.3", True, "1 Gi"])
def test_bad_quantities(text: Any) -> None:
    with pytest.raises(ValueError):
        parse_quantity(text)


@pytest.mark.parametrize(("resources", "field"), [({"cpu": "banana"}, "cpu"), ({"memory": "-1Gi"}, "memory"),
                                                  ({"cpu": 0}, "cpu"),
                                                  ({"ephemeral-storage": "x"}, "ephemeral-storage")])
def test_bad_resources_name_the_field(write: Any, job_data: Any, resources: dict[str, Any], field: str) -> None:
    [(line, got, message)] = problems(write, job_data([{"name": "a", "command": ["x"], "resources": resources}]))
    assert got == f"spec.steps[0].resources.{field}"


@pytest.mark.parametrize("retries", [-1, 51, "two"])
def test_retries_are_bounded(write: Any, job_data: Any, retries: Any) -> None:
    [(_, field, _)] = problems(write, job_data(retries=retries))
    assert field == "spec.retries"


def test_capacity_is_spot_or_on_demand(write: Any, job_data: Any) -> None:
    [(_, field, message)] = problems(write, job_data(capacity="reserved"))
    assert field == "spec.capacity" and message == "must be 'spot' or 'on-demand' (got 'reserved')"


def test_python_api_type_errors_are_pydantic_validation_errors(job_data: Any) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="capacity"):
        TrainingJob.model_validate(job_data(capacity="reserved"))


def test_parameters_are_coerced_to_strings(job_data: Any) -> None:
    job = TrainingJob.model_validate(job_data(parameters={"epochs": 40, "lr": 0.5, "resume": True, "off": False,
                                                          "name": "x"}))
    assert job.spec.parameters == {"epochs": "40", "lr": "0.5", "resume": "true", "off": "false", "name": "x"}


def test_parameters_from_yaml_numbers(write: Any, job_data: Any) -> None:
    path = write("job.yaml", yaml.safe_dump(job_data(parameters={"epochs": 40, "resume": True})))
    assert load_job(path).spec.parameters == {"epochs": "40", "resume": "true"}


def test_secret_env_refs(write: Any, job_data: Any) -> None:
    job = TrainingJob.model_validate(job_data(env={"TOKEN": {"secret": "hf", "key": "token"}, "PLAIN": "v"}))
    assert job.spec.env == {"TOKEN": SecretRef(secret="hf", key="token"), "PLAIN": "v"}
    found = problems(write, job_data(env={"TOKEN": {"secret": "hf", "key": "k", "value": "inline"}}))
    assert any(f is not None and f.endswith("value") and m == "unknown field" for _, f, m in found)


def test_python_api_builds_the_same_models_and_checks_the_same_rules() -> None:
    from wf import Step as TopStep
    from wf import TrainingJob as TopJob

    assert TopJob is TrainingJob and TopStep is Step
    train = TopStep(name="train", command=["python", "t.py"], accelerators=8)
    job = TopJob(metadata={"name": "bert"}, spec={"image": "i", "compute": "gaudi", "steps": [train]})
    assert job.spec.steps[0].accelerators == 8 and job.source == "<python>"
    with pytest.raises(InputError) as exc:
        TopJob(metadata={"name": "bert"}, spec={"image": "i", "compute": "cpu", "steps": [
            TopStep(name="a", command=["x"], needs=["b"]), TopStep(name="b", command=["x"], needs=["a"])]})
    [problem] = exc.value.problems
    assert (problem.file, problem.line, problem.field) == ("<python>", None, "spec.steps[0].needs")
    assert "cycle" in problem.message


def test_python_api_rejects_unknown_fields() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        Step(name="a", command=["x"], comand=["y"])  # type: ignore[call-arg]


def test_python_names_and_yaml_aliases_both_work() -> None:
    assert Step(name="a", command=["x"], working_dir="/w").working_dir == "/w"
    assert Step.model_validate({"name": "a", "command": ["x"], "workingDir": "/w"}).working_dir == "/w"


@pytest.mark.parametrize("schedule, ok", [
    ("0 2 * * *", True), ("*/15 9-17 * * MON-FRI", True), ("@daily", True), ("@every 6h", True),
    ("0 2 * *", False), ("every night", False), ("0 2 * * * *", False),
])
def test_schedules_are_cron(write: Any, job_data: Any, schedule: str, ok: bool) -> None:
    path = write("job.yaml", yaml.safe_dump(job_data(schedule=schedule), sort_keys=False))
    if ok:
        assert load_job(path).spec.schedule == schedule
    else:
        with pytest.raises(InputError) as exc:
            load_job(path)
        [problem] = exc.value.problems
        assert problem.field == "spec.schedule" and "not a cron schedule" in problem.message
