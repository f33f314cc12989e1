"""The README stays true: every command of its set-up and walk-through sections runs against the repository (the
offline ones for real, the cluster ones as far as `--help`: the command and each flag exist), the job it quotes is
the file it cites, the steps and workflows it names are that job's, and the mistake it shows is what compile says.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
CATALOG = ROOT / "eksctl" / "catalog.yaml"
SECTIONS = ("Two commands", "Walk-through")
# Commands that need no cluster, run for real; every other `wf` command is checked through its --help.
OFFLINE = {("compile",), ("lint",), ("schema",), ("eksctl", "generate"), ("karpenter", "generate"),
           ("kueue", "generate"), ("kueue", "roles"), ("instances", "list"), ("--version",)}
# Other programs the sections may name: how a developer installs wf, not wf itself.
INSTALLERS = ("pip", "pipx")
OMITTED = "# ..."


def section(title: str) -> str:
    """A `## title` section with its subsections."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", README, re.S | re.M)
    assert match, f"README has no section {title!r}"
    return match.group(1)


def blocks(text: str, language: str) -> list[str]:
    """The fenced blocks of `text` opened with ```LANGUAGE (an empty one: plain blocks)."""
    found: list[str] = []
    current: list[str] | None = None
    keep = False
    for line in text.splitlines(keepends=True):
        if not line.startswith("```"):
            if current is not None:
                current.append(line)
        elif current is None:
            current, keep = [], line.rstrip() == f"```{language}"
        else:
            if keep:
                found.append("".join(current))
            current = None
    return found


def shell_commands() -> list[list[str]]:
    """Every command line of the sections' bash blocks, as words, comments dropped."""
    return [words for title in SECTIONS for block in blocks(section(title), "bash")
            for line in block.splitlines() if (words := shlex.split(line, comments=True))]


def wf_commands() -> list[list[str]]:
    return [words[1:] for words in shell_commands() if words[0] == "wf"]


def command_path(args: list[str]) -> tuple[str, ...]:
    """The subcommand words of `wf ARGS` (`cluster up`), or the root option it uses (`--version`)."""
    import click
    from typer.main import get_command

    from wf.cli.app import app

    command: click.Command = get_command(app)
    path: list[str] = []
    for word in args:
        sub = getattr(command, "commands", {}).get(word)
        if sub is None:
            break
        command, path = sub, [*path, word]
    return tuple(path) or (args[0],)


def wf(*args: str, cwd: Path = ROOT, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k != "WF_CATALOG"}  # as a new user's shell: no catalog set
    return subprocess.run([sys.executable, "-m", "wf", *args], capture_output=True, text=True, timeout=120, cwd=cwd,
                          env={**base, **(env or {})})


def cited_job() -> Path:
    match = re.search(r"A job spec \(`([^`]+)`", section("Walk-through"))
    assert match, "the walk-through names no job file"
    return ROOT / match.group(1)


def test_every_command_is_wf_make_or_an_installer() -> None:
    commands = shell_commands()
    assert commands and all(words[0] in ("wf", "make", *INSTALLERS) for words in commands), commands
    targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.M))
    assert {words[1] for words in commands if words[0] == "make"} <= targets


@pytest.mark.parametrize("args", [a for a in wf_commands() if command_path(a) in OFFLINE], ids=" ".join)
def test_offline_commands_run_against_the_repository(args: list[str]) -> None:
    result = wf(*args)
    assert result.returncode == 0, (result.stdout[-2000:], result.stderr[-2000:])


@pytest.mark.parametrize("args", [a for a in wf_commands() if command_path(a) not in OFFLINE], ids=" ".join)
def test_cluster_commands_and_their_flags_exist(args: list[str]) -> None:
    path = command_path(args)
    help_text = wf(*(p for p in path if not p.startswith("-")), "--help", env={"COLUMNS": "300"})
    assert help_text.returncode == 0, help_text.stderr
    for flag in (a for a in args if a.startswith("-")):
        assert re.search(rf"(^|[\s,]){re.escape(flag.split('=')[0])}([\s,]|$)", help_text.stdout, re.M), \
            f"`wf {' '.join(args)}`: {flag} is not an option of wf {' '.join(path)}"


def test_the_quoted_job_is_the_file_it_cites() -> None:
    [quoted, *_] = blocks(section("Walk-through"), "yaml")
    lines = cited_job().read_text().splitlines()
    at = 0
    # Each run between `# ...` lines is a run of the file's lines, in the file's order.
    for run in re.split(rf"^\s*{re.escape(OMITTED)}\n", quoted, flags=re.M):
        run_lines = run.splitlines()
        if not run_lines:
            continue
        found = next((i for i in range(at, len(lines)) if lines[i:i + len(run_lines)] == run_lines), None)
        assert found is not None, f"not in {cited_job().name} (after its line {at}):\n{run}"
        at = found + len(run_lines)


def test_the_workflows_and_steps_it_names_are_the_jobs() -> None:
    job = yaml.safe_load(cited_job().read_text())
    steps = {step["name"] for step in job["spec"]["steps"]}
    named = 0
    for args in wf_commands():
        if args[0] in ("get", "logs", "watch", "retry", "stop", "delete"):
            assert args[1].startswith(f"{job['metadata']['name']}-"), args
            named += 1
        if "--step" in args:
            assert args[args.index("--step") + 1] in steps, f"{args}: the job's steps are {sorted(steps)}"
        if args[0] in ("compile", "submit") and "--from" not in args:  # --from: a template, not a job file
            assert ROOT / args[1] == cited_job() or args[1].endswith("/"), args
    assert named


def test_the_mistake_it_shows_is_what_compile_prints(tmp_path: Path) -> None:
    walk_through = section("Walk-through")
    accelerators, step = re.search(r"With `accelerators: (\d+)` in `([\w-]+)`", walk_through).groups()  # type: ignore[union-attr]
    [shown] = [b for b in blocks(walk_through, "") if b.startswith("$ wf compile ")]
    command, *expected = shown.splitlines()
    lines = cited_job().read_text().splitlines()
    start = lines.index(f"    - name: {step}")
    index = next(i for i in range(start, len(lines)) if lines[i].strip().startswith("accelerators:"))
    lines[index] = f"      accelerators: {accelerators}"
    args = shlex.split(command)[2:]
    (tmp_path / args[-1]).write_text("\n".join(lines) + "\n")
    result = wf(*args, cwd=tmp_path, env={"WF_CATALOG": str(CATALOG)})
    assert result.returncode == 2 and result.stderr.splitlines() == expected, result.stderr


def test_its_python_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("WF_CATALOG", raising=False)
    # wf's Python API; other snippets show the user's own program (a training loop saving checkpoints).
    snippets = [b for title in SECTIONS for b in blocks(section(title), "python") if b.startswith("from wf ")]
    assert snippets
    for snippet in snippets:
        exec(compile(snippet, "README.md", "exec"), {"__name__": "readme"})


def job_blocks() -> list[tuple[int, dict[str, Any]]]:
    """Every job spec the README shows, by the line its block starts on: whole jobs, and fragments (a `spec:`, a
    list of steps) completed with only what a job needs besides (a name, an image, a class)."""
    out = []
    for line, block in _yaml_blocks():
        data = yaml.safe_load(textwrap.dedent(block))
        if isinstance(data, dict) and data.get("kind") == "TrainingJob":
            if OMITTED not in block:  # the walk-through quotes its file: test_the_quoted_job_is_the_file_it_cites
                out.append((line, data))
        elif isinstance(data, dict) and set(data) == {"spec"}:
            out.append((line, _job(data["spec"])))
        elif isinstance(data, list) and all(isinstance(s, dict) and "name" in s for s in data):
            out.append((line, _job({"steps": data})))
    return out


def _yaml_blocks() -> list[tuple[int, str]]:
    lines = README.splitlines(keepends=True)
    starts = [i for i, text in enumerate(lines) if text.rstrip() == "```yaml"]
    return [(i + 1, "".join(lines[i + 1:next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))]))
            for i in starts]


def _job(spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "wf/v1", "kind": "TrainingJob", "metadata": {"name": "readme"},
            "spec": {"image": "python:3.11", "compute": "cpu", **spec}}


def readme_catalog() -> Any:
    """The repository's catalog with the checkpoint volumes the README's catalog section shows."""
    from wf.model.catalog import Catalog

    data = yaml.safe_load(CATALOG.read_text())
    [shown] = [yaml.safe_load(b)["artifacts"]["checkpoints"] for _, b in _yaml_blocks()
               if b.startswith("artifacts:") and "checkpoints:" in b]
    data["artifacts"]["checkpoints"] = shown
    return Catalog.model_validate(data)


def test_every_yaml_block_is_a_job_or_catalog_settings() -> None:
    # So no job the README shows escapes the compile below by a shape job_blocks does not know.
    jobs = {line for line, _ in job_blocks()}
    assert jobs
    for line, block in _yaml_blocks():
        data = yaml.safe_load(textwrap.dedent(block))
        catalog = isinstance(data, dict) and (data.get("kind") == "Catalog" or set(data) <= {
            "catalog", "artifacts", "cache", "queues"})
        quote = OMITTED in block and isinstance(data, dict) and data.get("kind") == "TrainingJob"
        assert line in jobs or catalog or quote, f"README.md:{line}: neither a job nor catalog settings"


@pytest.mark.parametrize(("line", "job"), job_blocks(), ids=lambda v: f"README.md:{v}" if isinstance(v, int) else "")
def test_every_job_the_readme_shows_compiles(line: int, job: dict[str, Any]) -> None:
    from wf.compile.workflow import compile_job
    from wf.jobspec.job import TrainingJob

    manifest = compile_job(TrainingJob.model_validate(job), readme_catalog())
    assert manifest["spec"]["templates"], f"README.md:{line}"


def test_the_walk_through_job_compiles() -> None:
    result = wf("compile", str(cited_job().relative_to(ROOT)))
    assert result.returncode == 0, result.stderr
