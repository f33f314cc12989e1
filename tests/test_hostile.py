"""The hostile corpus (tests/hostile/): every broken input gets its exit code, file:line: field and message in
the developer's words (a "did you mean" where one is expected), no traceback, nothing written, in little time.

Each file says what it must produce in its opening comments (tests/hostile/README.md). The commands run in this
process (`wf.cli.app.main`): the corpus is large and a Python start-up per run would dominate.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from wf.cli.app import main

ROOT = Path(__file__).resolve().parents[1]
CATALOG = ROOT / "eksctl" / "catalog.yaml"
CORPUS = sorted((ROOT / "tests" / "hostile").glob("*.yaml"))
_EXPECT = re.compile(r"^# (error|compile-error|lint-error): (\S+) (\S+): (.+)$")
_LINT_EXIT = re.compile(r"^# lint-exit: (\d+)$")
# A refusal is a parse and a few checks: seconds would mean a pathological path.
REFUSAL_SECONDS = 3.0
# Python and pydantic wording that must never reach a developer.
_LEAKS = ("Traceback", "Input should be", "pydantic", "['", "function-before", "Value error")


@dataclass(frozen=True)
class Expected:
    line: str  # "-": the finding has no line
    field: str  # "-": the finding is about the whole document
    text: str

    def found_in(self, file: Path, output: str) -> bool:
        where = str(file) if self.line == "-" else f"{file}:{self.line}"
        prefix = f"{where}: " if self.field == "-" else f"{where}: {self.field}: "
        return any(line.startswith(prefix) and self.text in line for line in output.splitlines())


def expectations(path: Path) -> tuple[list[Expected], list[Expected], int]:
    """What `wf compile` and `wf lint` must report for a corpus file, and lint's exit code."""
    compile_, lint, lint_exit = [], [], 1
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        if m := _EXPECT.match(line):
            expected = Expected(m[2], m[3], m[4])
            if m[1] in ("error", "compile-error"):
                compile_.append(expected)
            if m[1] in ("error", "lint-error"):
                lint.append(expected)
        elif m := _LINT_EXIT.match(line):
            lint_exit = int(m[1])
    return compile_, lint, lint_exit


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str, float]:
    """`wf ARGS` in this process: exit code, stdout, stderr and the CPU seconds it took (not the wall clock, which
    other processes on a loaded machine stretch)."""
    start = time.process_time()
    with pytest.raises(SystemExit) as exit_:
        main(list(args))
    seconds = time.process_time() - start
    out, err = capsys.readouterr()
    code = exit_.value.code
    return code if isinstance(code, int) else 0, out, err, seconds


def test_the_corpus_covers_every_case() -> None:
    names = {path.stem.split("-")[0] for path in CORPUS}
    assert {"number", "name", "ref", "typo", "kind", "empty", "path", "mount", "load"} <= names
    assert all(expectations(path)[0] or expectations(path)[1] for path in CORPUS), "a file expects nothing"


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.stem)
def test_compile_refuses_with_file_line_field_and_writes_nothing(
        path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    expected, _, _ = expectations(path)
    out_file = tmp_path / "out.yaml"
    code, out, err, seconds = run(capsys, "compile", str(path), "--catalog", str(CATALOG), "--file", str(out_file))
    assert code == 2, err
    assert out == "" and not out_file.exists()
    assert not any(leak in err for leak in _LEAKS), err
    missing = [e for e in expected if not e.found_in(path, err)]
    assert not missing, f"missing {missing} in:\n{err}"
    assert seconds < REFUSAL_SECONDS


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.stem)
def test_lint_reports_the_same_findings(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, expected, lint_exit = expectations(path)
    code, out, err, seconds = run(capsys, "lint", str(path), "--catalog", str(CATALOG))
    assert code == lint_exit, out + err
    assert not any(leak in out + err for leak in _LEAKS), out + err
    assert " ok" not in err
    missing = [e for e in expected if not e.found_in(path, out + err)]
    assert not missing, f"missing {missing} in:\n{out}{err}"
    assert seconds < REFUSAL_SECONDS


def test_lint_of_an_empty_folder_or_only_other_tools_files_is_bad_input(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "jobs"
    empty.mkdir()
    (empty / "notes.txt").write_text("not yaml")
    code, _, err, _ = run(capsys, "lint", str(empty), "--catalog", str(CATALOG))
    assert code == 2 and err.startswith(f"{empty}: no YAML files"), err
    config_map = tmp_path / "config.yaml"
    config_map.write_text("# a ConfigMap\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    code, _, err, _ = run(capsys, "lint", str(config_map), "--catalog", str(CATALOG))
    assert code == 2 and err.startswith(f"{config_map}:2: not a document wf lint checks"), err


@pytest.mark.parametrize("line", [100, 1234])
@pytest.mark.parametrize("command", ["compile", "lint"])
def test_file_line_prints_literally_whatever_the_line(
        line: int, command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`:100:` is an emoji code to rich: a console printing problems must not render it."""
    job = tmp_path / "job.yaml"
    body = (ROOT / "tests" / "hostile" / "typo-needs.yaml").read_text()
    spec = [text for text in body.splitlines() if not text.startswith("#")]
    job.write_text("#\n" * (line - 12) + "\n".join(spec) + "\n")  # the finding is on the spec's 12th line
    code, out, err, _ = run(capsys, command, str(job), "--catalog", str(CATALOG))
    assert code == (2 if command == "compile" else 1)
    assert f"{job}:{line}: spec.steps[1].needs[0]: unknown step 'trian'" in out + err


_PARAMETERIZED_JOB = """\
apiVersion: wf/v1
kind: TrainingJob
metadata: {name: hostile}
spec:
  parameters: {out: /outputs, run: scratch, tag: "1.0"}
  image: ghcr.io/team/train:{{workflow.parameters.tag}}
  compute: cpu
  volumes:
    - {name: scratch, mountPath: '/{{workflow.parameters.run}}', emptyDir: {}}
  steps:
    - name: train
      command: [python, train.py, --out, '{{workflow.parameters.out}}']
      outputs:
        artifacts:
          model: '{{workflow.parameters.out}}/model'
"""


@pytest.mark.parametrize(("given", "expected"), [
    (["out=/var/run/secrets"], "{job}:15: spec.steps[0].outputs.artifacts.model: with -p out='/var/run/secrets': "
                               "'/var/run/secrets/model' reaches /var/run/secrets"),
    (["out=/x/../var/run/secrets"], "{job}:15: spec.steps[0].outputs.artifacts.model: with -p "
                                    "out='/x/../var/run/secrets': '/x/../var/run/secrets/model' has a '..' segment"),
    (["run=var/run/argo"], "{job}:9: spec.volumes[0].mountPath: with -p run='var/run/argo': '/var/run/argo' is "
                           "inside /var/run/argo"),
    (["tag=1.0 rc"], "{job}:6: spec.image: with -p tag='1.0 rc': 'ghcr.io/team/train:1.0 rc': not an image reference"),
    (["tag=1.0\x1b[31m"], ": -p 'tag': control character U+001B is not allowed in a parameter"),
])
def test_submit_holds_a_parameter_from_the_command_line_to_the_files_rules(
        given: list[str], expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Refused before any request reaches the cluster (the kubeconfig's server listens nowhere: a request would
    exit 3): exit 2, the field's line, the -p value and the rule."""
    job = tmp_path / "job.yaml"
    job.write_text(_PARAMETERIZED_JOB)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "none",
        "clusters": [{"name": "none", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "none", "user": {"token": "unused"}}],
        "contexts": [{"name": "none", "context": {"cluster": "none", "user": "none", "namespace": "wf"}}]}))
    args = [a for value in given for a in ("-p", value)]
    code, out, err, _ = run(capsys, "submit", str(job), *args, "--catalog", str(CATALOG),
                            "--kubeconfig", str(kubeconfig))
    assert code == 2, out + err
    assert not any(leak in err for leak in _LEAKS), err
    assert expected.format(job=job) in err, err


def test_parameters_the_rules_accept_and_those_no_path_or_image_reads_pass(tmp_path: Path) -> None:
    from wf.controller.submit import check_parameters
    from wf.jobspec.job import load_job

    job = tmp_path / "job.yaml"
    job.write_text(_PARAMETERIZED_JOB)
    check_parameters([load_job(job)], {"out": "/outputs/run-2", "tag": "1.1", "run": "data"})
    check_parameters([load_job(job)], {"other": "/var/run/secrets"})  # unknown: refused later, by name
