"""Manifest size limits: Argo's maximum workflow size (1 MiB) and etcd's request limit (1.5 MiB)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from wf.argo import ARGO_MAX_WORKFLOW_BYTES, ETCD_MAX_REQUEST_BYTES, json_size, size_problems, step_limit_problems
from wf.argo.size import NEAR_STEP_LIMIT, STATUS_BYTES_PER_STEP
from wf.compile.workflow import compile_job
from wf.model.catalog import Catalog

CATALOG_FILE = Path(__file__).resolve().parents[1] / "eksctl" / "catalog.yaml"


def test_limits_are_the_upstream_defaults() -> None:
    assert ARGO_MAX_WORKFLOW_BYTES == 1_048_576  # argo-workflows workflow/packer: 1024 * 1024
    assert ETCD_MAX_REQUEST_BYTES == 1_572_864  # etcd embed.DefaultMaxRequestBytes: 1.5 * 1024 * 1024


def test_sizes_at_and_under_the_argo_limit_are_fine() -> None:
    assert size_problems(0) == []
    assert size_problems(ARGO_MAX_WORKFLOW_BYTES) == []  # Argo's check is "greater than"


def test_over_argo_limit_only() -> None:
    problems = [p.message for p in size_problems(ARGO_MAX_WORKFLOW_BYTES + 1)]
    assert problems == [
        "manifest is 1,048,577 bytes (1.00 MiB) as JSON, over Argo's maximum workflow size of 1,048,576 bytes "
        "(1.00 MiB) (status included): split it into WorkflowTemplates referenced by templateRef"
    ]


def test_over_both_limits_names_the_measured_size() -> None:
    problems = [p.message for p in size_problems(2_000_000)]
    assert len(problems) == 2
    assert problems[0].startswith(
        "manifest is 2,000,000 bytes (1.91 MiB) as JSON, over etcd's request limit of 1,572,864 bytes"
    )
    assert "Argo's maximum workflow size" in problems[1]


def test_json_size_counts_like_go_json_marshal() -> None:
    manifest = {"a": "x<y", "b": ["é", 1]}
    compact = json.dumps(manifest, separators=(",", ":"), ensure_ascii=False).encode()
    # Go writes '<' as \u003c (5 more bytes) and 'é' as its two UTF-8 bytes.
    assert json_size(manifest) == len(compact) + 5
    assert json_size({}) == 2
    # Every escape Go adds, beside what both encoders write alike (control characters, quotes, backslashes).
    odd = {"k": "a&b>c\u2028\u2029\n\t\"\\\x01", "n": [1.5, -2, None, True]}
    plain = json.dumps(odd, separators=(",", ":"), ensure_ascii=False).encode()
    assert json_size(odd) == len(plain) + 5 + 5 + 3 + 3


def _steps(count: int, step_bytes: int) -> tuple[dict[str, Any], int]:
    """A workflow of `count` pod templates, and a JSON size of `step_bytes` a step."""
    manifest = {"spec": {"templates": [{"name": "Main", "dag": {"tasks": []}}] +
                         [{"name": f"s{i}", "container": {"image": "x"}} for i in range(count)]}}
    return manifest, count * step_bytes


def test_a_job_near_the_steps_argo_holds_is_warned_with_that_number() -> None:
    holds = ARGO_MAX_WORKFLOW_BYTES // (1_100 + STATUS_BYTES_PER_STEP)
    assert step_limit_problems(*_steps(int(holds * NEAR_STEP_LIMIT) - 1, 1_100)) == []
    [near] = step_limit_problems(*_steps(int(holds * NEAR_STEP_LIMIT) + 1, 1_100))
    assert near.severity == "warning"
    assert f"holds about {holds:,} steps" in near.message and "before it grows past that" in near.message
    [past] = step_limit_problems(*_steps(holds + 1, 1_100))
    assert "Argo fails it" in past.message
    assert step_limit_problems({"spec": {"templates": []}}, 100) == []


def test_a_plain_cpu_step_costs_at_most_1200_bytes(catalog: Catalog, make_job: Any) -> None:
    # Issue 34: what every template shares is written once, so a step adds only what is its own.
    def size(count: int) -> int:
        steps = [{"name": f"s{i}", "command": ["python", "train.py", "--shard", str(i)],
                  **({"needs": [f"s{i - 1}"]} if i else {})} for i in range(count)]
        return json_size(compile_job(make_job(steps), catalog))

    assert (size(200) - size(100)) / 100 <= 1_200


def test_wf_lint_names_argo_s_limit_in_steps_for_a_job_near_it(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 34: `wf lint` of a job spec (not only of a manifest) says how many steps of it Argo's 1 MiB holds, at
    the job's line, and lets a smaller one pass; a warning, not an error."""
    from wf.cli.app import main

    def job(steps: int) -> Path:
        path = tmp_path / f"chain-{steps}.yaml"
        path.write_text(yaml.safe_dump({
            "apiVersion": "wf/v1", "kind": "TrainingJob", "metadata": {"name": f"chain-{steps}"},
            "spec": {"image": "python:3.12", "compute": "cpu", "steps": [
                {"name": f"s{i}", "command": ["python", "train.py", "--shard", str(i)],
                 **({"needs": [f"s{i - 1}"]} if i else {})} for i in range(steps)]}}, sort_keys=False))
        return path

    def lint(path: Path) -> tuple[int, str]:
        with pytest.raises(SystemExit) as exit_:
            main(["lint", str(path), "--catalog", str(CATALOG_FILE)])
        out, err = capsys.readouterr()
        return int(exit_.value.code or 0), out + err

    code, output = lint(job(900))
    [warning] = [line for line in output.splitlines() if "maximum workflow size" in line]
    assert code == 0, output
    holds = int(re.search(r"holds about ([\d,]+) steps", warning)[1].replace(",", ""))  # type: ignore[index]
    assert warning.startswith(f"{tmp_path / 'chain-900.yaml'}:1: ") and "900 steps: " in warning
    assert 900 < holds < 900 / NEAR_STEP_LIMIT and "1,048,576 bytes (1.00 MiB)" in warning
    code, output = lint(job(600))
    assert code == 0 and "maximum workflow size" not in output, output
