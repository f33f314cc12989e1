"""The offline commands as users and CI run them (whole processes): exit codes of DESIGN.md, problems printed as
file:line: field: message without tracebacks, YAML/JSON output, and `wf schema` as a JSON Schema editors can use.
And the vocabulary every command shares: -o only where there is a choice of format, --file, one cluster target."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
CATALOG = ROOT / "eksctl" / "catalog.yaml"
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
PROBLEM_LINE = re.compile(r"^\S+:\d+: [\w.\[\]/ -]+: \S.*$")


def wf(*args: str, cwd: Path = ROOT, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run([sys.executable, "-m", "wf", *args], capture_output=True, text=True, timeout=60, cwd=cwd,
                          env={**os.environ, "COLUMNS": "60", **(env or {})})


def run_main(*args: str) -> int:
    """`wf ARGS` in this process (for what a subprocess cannot reach, such as the client it connects); its exit code."""
    from wf.cli.app import main

    with pytest.raises(SystemExit) as ended:
        main(list(args))
    return int(ended.value.code or 0)


BAD_JOB = """\
apiVersion: wf/v1
kind: TrainingJob
metadata: {name: demo}
spec:
  image: img
  compute: cpu
  steps:
    - name: a
      command: python train.py --a-long-argument-list-that-makes-this-message-wider-than-eighty-columns
      resourcs: {cpu: 1}
"""


def test_compile_succeeds_with_yaml_by_default() -> None:
    result = wf("compile", str(EXAMPLES[0]))
    assert result.returncode == 0, result.stderr
    manifest = yaml.safe_load(result.stdout)
    assert manifest["kind"] == "Workflow" and manifest["spec"]["templates"]


def test_compile_json_equals_yaml() -> None:
    as_yaml = yaml.safe_load(wf("compile", str(EXAMPLES[1])).stdout)
    as_json = json.loads(wf("compile", "-o", "json", str(EXAMPLES[1])).stdout)
    assert as_yaml == as_json


@pytest.mark.parametrize("output", ["yaml", "json"])
def test_compiling_twice_gives_the_same_bytes(output: str) -> None:
    # GitOps diffs and `kubectl diff` settle: what is unique to a submission is added by `wf submit`.
    first, second = (wf("compile", "-o", output, str(EXAMPLES[1])) for _ in range(2))
    assert first.returncode == 0 and first.stdout == second.stdout
    assert "wf.dev/submission" not in first.stdout


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_yaml_output_has_no_anchors(example: Path) -> None:
    result = wf("compile", str(example))
    assert result.returncode == 0
    events = list(yaml.parse(result.stdout))
    assert not any(getattr(e, "anchor", None) for e in events)
    assert not any(isinstance(e, yaml.AliasEvent) for e in events)


def test_compile_kinds() -> None:
    template = yaml.safe_load(wf("compile", "--kind", "WorkflowTemplate", str(EXAMPLES[0])).stdout)
    assert template["kind"] == "WorkflowTemplate" and template["metadata"]["name"]


def test_bad_input_exits_2_with_one_line_per_problem_and_no_traceback(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(BAD_JOB)
    result = wf("compile", str(job))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and result.stdout == ""
    lines = result.stderr.splitlines()
    assert lines == [
        f"{job}:9: spec.steps[0].command: command is an argv list, e.g. [python, train.py, --epochs, '40'], "
        "not a shell string",
        f"{job}:10: spec.steps[0].resourcs: unknown field (did you mean 'resources'?)",
    ]
    assert all(PROBLEM_LINE.match(line) for line in lines)


def test_lint_exit_codes(tmp_path: Path) -> None:
    clean = wf("lint", "--catalog", str(CATALOG), "examples")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "ok" in clean.stderr
    (tmp_path / "job.yaml").write_text(BAD_JOB)
    findings = wf("lint", "--catalog", str(CATALOG), str(tmp_path))
    assert findings.returncode == 1 and "Traceback" not in findings.stderr
    assert all(PROBLEM_LINE.match(line) for line in findings.stdout.splitlines()), findings.stdout
    assert len(findings.stdout.splitlines()) == 2
    assert "2 errors" in findings.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("compile", "no-such-job.yaml"),
        ("lint", "no-such-dir"),
        ("compile", "--output", "xml", "examples/data-prep.yaml"),
        ("compile",),
        ("lint", "--bogus", "examples"),
        ("compile", "--catalog", "no-such-catalog.yaml", "examples/data-prep.yaml"),
        ("compile", "--kind", "CronWorkflow", "examples/data-prep.yaml"),
        ("platform", "record-nodes", "--metrics-address", "nowhere"),  # said before any cluster is asked
    ],
)
def test_usage_and_missing_files_exit_2(args: tuple[str, ...]) -> None:
    result = wf(*args)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_missing_file_names_the_file() -> None:
    result = wf("compile", "no-such-job.yaml")
    assert result.stderr.startswith("no-such-job.yaml: cannot read")


def test_catalog_from_the_environment(tmp_path: Path) -> None:
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text(CATALOG.read_text().replace("name: gpu", "name: gpus"))
    result = wf("compile", str(ROOT / "examples" / "mme-load-test.yaml"), env={"WF_CATALOG": str(catalog)})
    assert result.returncode == 2
    assert "unknown compute class 'gpu'" in result.stderr
    assert "the catalog has: cpu, gaudi, graviton, gpus" in result.stderr


def test_the_catalog_is_found_from_the_job_file_in_any_directory(tmp_path: Path) -> None:
    # The repository's project file (.wf.yaml) names its catalog: found upwards from the job, wherever wf runs.
    result = wf("compile", str(EXAMPLES[0]), cwd=tmp_path, env={"WF_CATALOG": ""})
    assert result.returncode == 0, result.stderr
    assert result.stdout == wf("compile", str(EXAMPLES[0])).stdout
    linted = wf("lint", str(ROOT / "examples"), cwd=tmp_path, env={"WF_CATALOG": ""})
    assert linted.returncode == 0, linted.stdout + linted.stderr


@pytest.mark.parametrize("command", ["compile", "lint"])
def test_outside_a_project_no_catalog_is_bad_input_naming_every_place(command: str, tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(EXAMPLES[0].read_text())
    result = wf(command, str(job), cwd=tmp_path, env={"WF_CATALOG": ""})
    assert result.returncode == 2 and "Traceback" not in result.stderr
    for place in ("--catalog", "WF_CATALOG", ".wf.yaml", "wf-system/wf-catalog"):
        assert place in result.stderr
    assert wf(command, str(job), "--catalog", str(CATALOG), cwd=tmp_path).returncode == 0
    assert wf(command, str(job), cwd=tmp_path, env={"WF_CATALOG": str(CATALOG)}).returncode == 0


def test_compile_refuses_what_lint_refuses_and_writes_nothing(tmp_path: Path) -> None:
    # A spec whose workflow is too big for Argo: lint always refused it, compile now does too, in the same words.
    many = [f"--arg-{i}-" + "x" * 60 for i in range(20_000)]
    job = tmp_path / "big.yaml"
    job.write_text(yaml.safe_dump({"apiVersion": "wf/v1", "kind": "TrainingJob", "metadata": {"name": "big"},
                                   "spec": {"image": "img", "compute": "cpu",
                                            "steps": [{"name": "a", "command": ["python", *many]}]}}))
    out = tmp_path / "out.yaml"
    compiled = wf("compile", str(job), "--file", str(out))
    linted = wf("lint", str(job))
    assert compiled.returncode == 2 and linted.returncode == 1 and not out.exists()
    refusal = [line for line in compiled.stderr.splitlines() if "over Argo's maximum workflow size" in line]
    assert refusal and set(refusal) <= set(linted.stdout.splitlines())


def test_a_spec_too_big_to_fit_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    job = tmp_path / "huge.yaml"
    head = "apiVersion: wf/v1\nkind: TrainingJob\nmetadata: {name: huge}\nspec:\n  image: img\n  compute: cpu\n"
    steps = "  steps:\n    - name: a\n      command:\n" + "      - --an-argument-of-some-length\n" * 200_000
    job.write_text(head + steps)
    out = tmp_path / "out.yaml"
    for command, code in (("compile", 2), ("lint", 1)):
        result = wf(command, str(job), *(["--file", str(out)] if command == "compile" else []))
        assert result.returncode == code and "job spec is" in result.stdout + result.stderr
    assert not out.exists()


@pytest.fixture(scope="module")
def job_schema() -> dict[str, Any]:
    result = wf("schema")
    assert result.returncode == 0
    return json.loads(result.stdout)


def test_schema_is_a_valid_draft_2020_12_schema(job_schema: dict[str, Any]) -> None:
    from jsonschema import Draft202012Validator

    assert job_schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    Draft202012Validator.check_schema(job_schema)


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_schema_accepts_the_examples(job_schema: dict[str, Any], example: Path) -> None:
    from jsonschema import Draft202012Validator

    assert list(Draft202012Validator(job_schema).iter_errors(yaml.safe_load(example.read_text()))) == []


def test_schema_rejects_typos_like_the_loader(job_schema: dict[str, Any]) -> None:
    from jsonschema import Draft202012Validator

    data = yaml.safe_load(EXAMPLES[0].read_text())
    data["spec"]["steps"][0]["resourcs"] = {"cpu": 1}
    data["spec"]["capacity"] = "reserved"
    errors = list(Draft202012Validator(job_schema).iter_errors(data))
    assert len(errors) == 2


def test_catalog_schema() -> None:
    from jsonschema import Draft202012Validator

    schema = json.loads(wf("schema", "--for", "catalog").stdout)
    Draft202012Validator.check_schema(schema)
    assert list(Draft202012Validator(schema).iter_errors(yaml.safe_load(CATALOG.read_text()))) == []


def test_lint_output_json_and_its_format_alias() -> None:
    by_output = wf("lint", "-o", "json", "examples")
    by_format = wf("lint", "--format", "json", "examples")
    assert by_output.returncode == by_format.returncode == 0, by_output.stderr
    assert json.loads(by_output.stdout)["ok"] and json.loads(by_output.stdout) == json.loads(by_format.stdout)


GENERATORS = [("eksctl", "generate"), ("karpenter", "generate"), ("kueue", "generate"), ("kueue", "roles")]


@pytest.mark.parametrize("command", [*GENERATORS, ("compile", str(EXAMPLES[0]))], ids=" ".join)
def test_generators_write_files_with_file(command: tuple[str, ...], tmp_path: Path) -> None:
    target = tmp_path / "out.yaml"
    written = wf(*command, "--file", str(target))
    assert written.returncode == 0 and written.stdout == "", written.stderr
    assert list(yaml.safe_load_all(target.read_text()))
    assert wf(*command).stdout == target.read_text()


def test_o_names_the_format_and_a_file_name_there_is_told_to_use_file(tmp_path: Path) -> None:
    old = wf("compile", str(EXAMPLES[0]), "-o", str(tmp_path / "out.yaml"))
    assert old.returncode == 2 and f"--file {tmp_path / 'out.yaml'}" in old.stderr and "Traceback" not in old.stderr


@pytest.mark.parametrize("command", [*GENERATORS, ("schema",), ("logs", "x")], ids=" ".join)
def test_o_is_rejected_where_there_is_no_choice_of_format(command: tuple[str, ...],
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    # The lock-file generators write commented YAML only: an -o they would ignore is a usage error.
    assert run_main(*command, "-o", "yaml") == 2
    assert "No such option: -o" in capsys.readouterr().err


def test_region_means_the_eks_clusters_region_only(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_main("instances", "refresh", "--region", "us-west-2") == 2
    assert "--pricing-region" in capsys.readouterr().err


def test_cluster_up_takes_team_namespaces_and_not_namespace() -> None:
    help_text = wf("cluster", "up", "--help", env={"COLUMNS": "200"}).stdout
    assert "--team-namespace" in help_text and "--namespace" not in help_text


TARGET_FLAGS = ("--context", "c", "--kubeconfig", "k", "--eks-cluster", "e", "--region", "r", "--role-arn", "a")
CLUSTER_COMMANDS = [("submit", str(EXAMPLES[0])), ("watch", "w"), ("wait", "w"), ("get", "w"), ("list",),
                    ("logs", "w"), ("retry", "w"), ("rerun", "w", "--from", "s"), ("stop", "w"), ("suspend", "w"),
                    ("resume", "w"), ("delete", "w"),
                    ("queue",), ("report",),
                    ("lint", "--server", "--catalog", str(CATALOG), str(EXAMPLES[0]))]


@pytest.mark.parametrize("command", CLUSTER_COMMANDS, ids=lambda c: c[0])
def test_every_cluster_command_takes_its_cluster_as_one_target(command: tuple[str, ...],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from wf.cli import kueue, offline, report, workflows
    from wf.controller.client import Target
    from wf.core.errors import ClusterError

    asked: list[Target] = []

    def connect(target: Target) -> None:
        asked.append(target)
        raise ClusterError("not connecting in a unit test")

    for module in (offline, workflows, kueue, report):
        monkeypatch.setattr(module, "connect", connect)
    # `wf queue` and `wf report` read every team's namespace: they have no -n rather than one they would ignore.
    namespaced = command[0] not in ("queue", "report")
    flags = (*TARGET_FLAGS, "-n", "ns") if namespaced else TARGET_FLAGS
    assert run_main(*command, *flags) == 3
    assert asked == [Target(context="c", namespace="ns" if namespaced else None, kubeconfig="k", eks_cluster="e",
                            region="r", role_arn="a")]
    if not namespaced:
        assert run_main(*command, "-n", "ns") == 2


def test_public_api_is_spelled_out_for_type_checkers() -> None:
    import wf

    assert sorted(wf.__all__) == sorted(wf._HOME)
    assert all(callable(getattr(wf, name)) for name in wf.__all__)


# --- conventions: --version, completion, help in words, kubectl's -o formats, JSON wherever a table is printed --


def test_version_and_shell_completion() -> None:
    from importlib.metadata import version

    assert wf("--version").stdout == f"wf {version('wf')}\n"
    installed = Path(sys.executable).parent / "wf"  # completion is for the command, not `python -m wf`
    completion = subprocess.run([installed, "--show-completion", "bash"], capture_output=True, text=True, timeout=60)
    assert completion.returncode == 0 and "_WF_COMPLETE=complete_bash" in completion.stdout
    assert "complete -o default -F _wf_completion wf" in completion.stdout
    assert wf("--install-completion", "--help").returncode == 0


def test_help_names_no_python_type() -> None:
    import click
    from typer.main import get_command

    from wf.cli.app import app

    def commands(command: click.Command, path: str) -> Any:
        yield path, command
        for name, sub in getattr(command, "commands", {}).items():
            yield from commands(sub, f"{path} {name}")

    for path, command in commands(get_command(app), "wf"):
        text = command.get_help(click.Context(command, info_name=path))
        assert not re.findall(r"<(?:list\[|str|int|float|bool|Path)\b", text), (path, text)


def _workflow(name: str, phase: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "wf", "creationTimestamp": "2026-12-01T10:00:00Z",
                         "labels": {"wf.dev/job": "bert"}},
            "status": {"phase": phase, "startedAt": "2026-12-01T10:00:01Z", "message": "child failed"}}


def test_list_offers_kubectls_name_and_wide(monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    from wf.cli import workflows
    from wf.controller import listing, ops

    monkeypatch.setattr(workflows, "connect", lambda target: None)
    monkeypatch.setattr(listing, "list_workflows", lambda *a, **k: [_workflow("bert-a", "Running"),
                                                                 _workflow("bert-b", "Failed")])
    assert run_main("list", "-o", "name") == 0
    assert capsys.readouterr().out == "workflow/bert-a\nworkflow/bert-b\n"
    assert run_main("list", "-o", "wide") == 0
    wide = capsys.readouterr().out
    assert "MESSAGE" in wide and "child failed" in wide and "2026-12-01T10:00:01Z" in wide
    assert run_main("list") == 0
    assert "MESSAGE" not in capsys.readouterr().out
    assert run_main("list", "-o", "json") == 0
    assert [i["metadata"]["name"] for i in json.loads(capsys.readouterr().out)["items"]] == ["bert-a", "bert-b"]
    monkeypatch.setattr(ops, "get_workflow", lambda kube, name, namespace: _workflow(name, "Running"))
    assert run_main("get", "bert-a", "-o", "name") == 0
    assert capsys.readouterr().out == "workflow/bert-a\n"


def test_instances_and_queue_print_json(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    listed = json.loads(wf("instances", "list", "dl1", "-o", "json").stdout)
    assert [t["name"] for t in listed["instanceTypes"]] == ["dl1.24xlarge"]
    assert listed["instanceTypes"][0]["accelerators"] == {"habana.ai/gaudi": 8} and listed["asOf"]

    from wf.cli import kueue
    from wf.controller import catalog_source, queue
    from wf.model.catalog import load_catalog

    monkeypatch.setattr(kueue, "connect", lambda target: None)
    monkeypatch.setattr(catalog_source, "resolve_catalog", lambda kube, path: load_catalog(CATALOG))
    monkeypatch.setattr(queue, "QueueReader", lambda kube: None)
    monkeypatch.setattr(queue, "team_table", lambda catalog, reader, teams: [
        ["perception", "gaudi", "spot", "accelerators", "8", "64", "0 of 32", "1"]])
    assert run_main("queue", "-o", "json") == 0
    assert json.loads(capsys.readouterr().out) == {"usage": [
        {"team": "perception", "class": "gaudi", "capacity": "spot", "resource": "accelerators", "used": "8",
         "quota": "64", "borrowed": "0 of 32", "pending": "1"}]}
