"""`wf lint` (lint_paths): upstream's Argo example corpus, the project's examples, typo'd manifests with lines,
schedulability of hand-written manifests, duplicate keys, and the JSON output format."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from upstream import ARGO
from wf.lint.documents import lint_paths

ROOT = Path(__file__).resolve().parents[1]
CATALOG = ROOT / "eksctl" / "catalog.yaml"


def test_the_argo_corpus_has_exactly_the_known_findings() -> None:
    result = lint_paths([ARGO.file("examples")], CATALOG)
    assert result.files > 200 and result.documents >= result.files
    errors = {(Path(p.file).name, p.message.split(" cannot schedule")[0].split(":")[0]) for p in result.errors}
    # Upstream's windows examples, the deliberately unschedulable pod of timeouts-workflow.yaml, and the Docker
    # daemon sidecar that runs privileged, on no class that allows it; no schema errors at all (upstream's own
    # strict schema accepts every corpus document).
    assert errors == {
        ("hello-hybrid.yaml", "template 'hello-win'"),
        ("hello-windows.yaml", "template 'hello-win'"),
        ("timeouts-workflow.yaml", "template 'unschedulable'"),
        ("sidecar-dind.yaml", "a privileged container"),
    }
    assert len(result.errors) == 4
    assert all(p.line and p.field and p.field.startswith("spec.templates[") for p in result.errors)
    warnings = [(Path(p.file).name, p.line, p.message) for p in result.problems if p.severity == "warning"]
    assert warnings == [("k8s-patch-json-workflow.yaml", 13, "duplicate key 'annotations'; the last value wins")]


def test_examples_lint_clean() -> None:
    result = lint_paths([ROOT / "examples"], CATALOG)
    assert result.problems == []
    assert result.files == result.documents == len(list((ROOT / "examples").rglob("*.yaml")))
    # The CI pipeline example is a GitHub Actions file, not ours to check.
    assert [Path(s).parent.name for s in result.skipped] == ["ci"]


def test_typos_in_job_specs_and_manifests_name_file_and_line(write: Any) -> None:
    job = write("jobs/train.yaml", """
        apiVersion: wf/v1
        kind: TrainingJob
        metadata: {name: demo}
        spec:
          image: img
          compute: cpu
          steps:
            - name: a
              comand: [x]
    """)
    write("argo/wf.yaml", """
        apiVersion: argoproj.io/v1alpha1
        kind: Workflow
        metadata: {generateName: t-}
        spec:
          entrypoint: main
          templates:
            - name: main
              nodeSelektor: {a: b}
              container: {image: busybox}
    """)
    result = lint_paths([job.parent.parent], CATALOG)
    found = {(Path(p.file).name, p.line, p.field) for p in result.errors}
    assert ("train.yaml", 9, "spec.steps[0].comand") in found
    assert ("train.yaml", 8, "spec.steps[0].command") in found  # required, reported where the step starts
    assert any(name == "wf.yaml" and line == 8 and field and "nodeSelektor" in field
               for name, line, field in found), found
    assert result.files == 2


def test_hand_written_manifests_are_checked_for_schedulability(write: Any) -> None:
    path = write("wf.yaml", """
        apiVersion: argoproj.io/v1alpha1
        kind: Workflow
        metadata: {generateName: t-}
        spec:
          entrypoint: main
          templates:
            - name: main
              nodeSelector: {wf.dev/compute-class: gaudi}
              tolerations: [{key: habana.ai/gaudi, operator: Exists}]
              container:
                image: busybox
                resources: {limits: {habana.ai/gaudi: 16}}
            - name: templated
              nodeSelector: {wf.dev/compute-class: "{{inputs.parameters.cls}}"}
              inputs: {parameters: [{name: cls}]}
              container: {image: busybox}
    """)
    [problem] = lint_paths([path], CATALOG).errors
    assert (problem.line, problem.field) == (7, "spec.templates[0]")
    assert problem.message == ("template 'main' cannot schedule: no gaudi node offers 16 habana.ai/gaudi; "
                               "dl1.24xlarge has 8")


def test_cron_workflows_and_template_defaults(write: Any) -> None:
    path = write("cron.yaml", """
        apiVersion: argoproj.io/v1alpha1
        kind: CronWorkflow
        metadata: {name: nightly}
        spec:
          schedules: ["0 2 * * *"]
          workflowSpec:
            entrypoint: main
            nodeSelector: {kubernetes.io/arch: s390x}
            templates:
              - name: main
                container: {image: busybox}
    """)
    [problem] = lint_paths([path], CATALOG).errors
    assert problem.field == "spec.workflowSpec.templates[0]" and "kubernetes.io/arch=s390x" in problem.message


def test_job_spec_placement_errors_come_with_lines(write: Any) -> None:
    path = write("job.yaml", """
        apiVersion: wf/v1
        kind: TrainingJob
        metadata: {name: demo}
        spec:
          image: img
          compute: gaudi
          steps:
            - name: a
              command: [x]
              accelerators: 16
    """)
    assert [str(p) for p in lint_paths([path], CATALOG).errors] == [
        f"{path}:10: spec.steps[0].accelerators: no gaudi node offers 16 habana.ai/gaudi; dl1.24xlarge has 8"]


def test_a_fan_out_too_large_for_argo_without_its_database_is_a_warning(write: Any) -> None:
    """Measured: 10,000 items outgrew Argo's maximum workflow size compressed and ended in Error at 8,784."""
    def job(count: int) -> Path:
        return write(f"fan-{count}.yaml", f"""
            apiVersion: wf/v1
            kind: TrainingJob
            metadata: {{name: fan}}
            spec:
              image: img
              compute: cpu
              steps:
                - name: shard
                  command: [x]
                  forEach: {{count: {count}}}
        """)

    assert not lint_paths([job(7_000)], CATALOG).problems
    result = lint_paths([job(7_001)], CATALOG)
    assert not result.errors
    [warning] = result.problems
    assert warning.severity == "warning" and "'shard' fans out to 7,001 items" in warning.message
    assert "persistence.nodeStatusOffLoad" in warning.message


def test_duplicate_keys_are_errors_in_job_specs_and_warnings_in_argo_manifests(write: Any) -> None:
    job = write("job.yaml", """
        apiVersion: wf/v1
        kind: TrainingJob
        metadata: {name: demo}
        spec:
          image: img
          image: img2
          compute: cpu
          steps: [{name: a, command: [x]}]
    """)
    manifest = write("wf.yaml", """
        apiVersion: argoproj.io/v1alpha1
        kind: Workflow
        metadata: {generateName: t-}
        spec:
          entrypoint: main
          entrypoint: main
          templates: [{name: main, container: {image: busybox}}]
    """)
    problems = {Path(p.file).name: p for p in lint_paths([job, manifest], CATALOG).problems}
    assert (problems["job.yaml"].severity, problems["job.yaml"].line) == ("error", 6)
    assert (problems["wf.yaml"].severity, problems["wf.yaml"].line) == ("warning", 6)


def test_unreadable_and_foreign_files_never_crash(write: Any) -> None:
    write("d/latin1.yaml", b"a: caf\xe9\n")
    write("d/broken.yaml", "a: [1\n")
    write("d/configmap.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    write("d/list.yml", "- 1\n- 2\n")
    write("d/notes.txt", "not yaml: [")
    write("d/.hidden/x.yaml", "a: [")
    path = write("d/empty.yaml", "")
    result = lint_paths([path.parent], CATALOG)
    assert result.files == 5  # .txt and hidden folders are not linted
    assert sorted(Path(p.file).name for p in result.errors) == ["broken.yaml", "empty.yaml", "latin1.yaml"]
    assert len(result.skipped) == 2  # the ConfigMap and the list


def test_missing_paths_are_input_errors(tmp_path: Path) -> None:
    from wf.core.errors import InputError

    with pytest.raises(InputError, match="no such file"):
        lint_paths([tmp_path / "nope"], CATALOG)


def test_catalog_documents_are_linted(write: Any) -> None:
    path = write("catalog.yaml", CATALOG.read_text().replace("dl1.24xlarge", "dl1.24xlarg"))
    [problem] = lint_paths([path], CATALOG).errors
    assert problem.field == "computeClasses[1].instanceTypes[0]" and problem.line


def test_format_json(write: Any) -> None:
    good = write("ok/job.yaml", (ROOT / "examples" / "data-prep.yaml").read_text())
    bad = write("bad/wf.yaml", "apiVersion: argoproj.io/v1alpha1\nkind: Workflow\nmetadata: {generateName: t-}\n"
                               "spec: {entrypoint: main, templates: [{name: main, container: {image: x}, bogus: 1}]}\n")
    result = wf("lint", "--format", "json", "--catalog", str(CATALOG), str(good), str(bad))
    assert result.returncode == 1, result.stderr
    payload = json.loads(result.stdout)
    assert payload["ok"] is False and payload["files"] == 2 and payload["documents"] == 2
    [problem] = payload["problems"]
    assert set(problem) == {"file", "line", "field", "message", "severity"}
    assert problem["file"] == str(bad) and problem["line"] == 4 and problem["severity"] == "error"
    assert "bogus" in problem["field"]
    clean = wf("lint", "--format", "json", "--catalog", str(CATALOG), str(good))
    assert clean.returncode == 0 and json.loads(clean.stdout)["ok"] is True


def wf(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wf", *args], capture_output=True, text=True, timeout=60, cwd=ROOT)
