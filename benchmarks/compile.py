"""Compile benchmark: a 4,000-step DAG with scheduling constraints, wf against hera's own builder, same run; and
how wf's compile and lint grow from 1,000 to 10,000 steps.

    python benchmarks/compile.py [--steps 4000] [--sweep 1000,2500,4000,10000] [--repeat 3] [--no-processes]

In-process: wf = TrainingJob model -> compile_job -> strict Argo validation -> json.dumps;
hera = Workflow/DAG/Container context-manager builder -> to_dict -> json.dumps, for the same DAG, placement
included (nodeSelector, tolerations, resources, retryStrategy). Whole process: `wf compile job.yaml -o json`
against a Python process that builds and prints the same workflow with hera, by wall time and by CPU time (user +
system of the child, which a loaded machine stretches least). Ratios, not absolute times, are the result: these
machines are shared and noisy. The sweep runs `wf compile -o json` and `wf lint` whole process at each size: the
CPU time a step stays flat when the work grows linearly.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

CLASSES = ("cpu", "gaudi", "graviton")


def job_document(steps: int) -> dict[str, Any]:
    """Step i needs i-1 and i//2: a connected DAG with fan-out and fan-in, classes rotating."""
    out = []
    for i in range(steps):
        step: dict[str, Any] = {"name": f"s{i}", "command": ["python", "train.py", "--shard", str(i)]}
        needs = sorted({f"s{j}" for j in (i - 1, i // 2) if 0 <= j < i})
        if needs:
            step["needs"] = needs
        cls = CLASSES[i % len(CLASSES)]
        step["compute"] = cls
        if cls == "gaudi":
            step["accelerators"] = 8
        else:
            step["resources"] = {"cpu": 4, "memory": "16Gi"}
        out.append(step)
    return {"apiVersion": "wf/v1", "kind": "TrainingJob", "metadata": {"name": "bench"},
            "spec": {"image": "python:3.11", "compute": "cpu", "retries": 0, "steps": out}}


def wf_compile(document: dict[str, Any]) -> str:
    from wf import argo
    from wf.compile.workflow import compile_job
    from wf.jobspec.job import TrainingJob
    from wf.model.catalog import load_catalog

    manifest = compile_job(TrainingJob.model_validate(document), load_catalog())
    problems = argo.validate(manifest)
    assert not problems, problems[:3]
    return json.dumps(manifest)


def hera_compile(document: dict[str, Any]) -> str:
    """The same workflow with hera's builder: what a team writes without wf (placement copied from wf's output)."""
    from hera.workflows import DAG, Container, Workflow
    from hera.workflows.models import ResourceRequirements, RetryStrategy, Toleration

    from wf.compile.interruptions import INTERRUPTION_EXPRESSION
    from wf.model.accelerators import GAUDI_RESOURCE
    from wf.model.catalog import load_catalog
    from wf.model.nodegroups import node_group

    catalog = load_catalog()
    classes = {c.name: c for c in catalog.compute_classes}
    with Workflow(generate_name="bench-", entrypoint="main") as w:
        containers = {}
        for step in document["spec"]["steps"]:
            cls = classes[step["compute"]]
            group = node_group(cls, catalog, cls.default_capacity)
            requests = ({GAUDI_RESOURCE: "8", "cpu": "86", "memory": "640Gi"} if "accelerators" in step
                        else {"cpu": "4", "memory": "16Gi"})
            containers[step["name"]] = Container(
                name=step["name"],
                image=document["spec"]["image"],
                command=step["command"],
                node_selector=group.node_selector,
                tolerations=[Toleration(**t) for t in group.tolerations],
                resources=ResourceRequirements(requests=requests, limits=requests),
                retry_strategy=RetryStrategy(limit=5, expression=INTERRUPTION_EXPRESSION),
            )
        with DAG(name="main"):
            tasks = {}
            for step in document["spec"]["steps"]:
                task = containers[step["name"]](name=step["name"])
                for need in step.get("needs", []):
                    tasks[need] >> task
                tasks[step["name"]] = task
    return json.dumps(w.to_dict())


def best_of(fn: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


HERA_SCRIPT = """
import json, sys
sys.path.insert(0, {bench!r})
from compile import hera_compile
sys.stdout.write(hera_compile(json.load(open({doc!r}))))
"""


def processes(document: dict[str, Any], repeat: int) -> tuple[tuple[float, float], tuple[float, float]]:
    """((wall, CPU) of `wf compile -o json`, (wall, CPU) of the hera script), each the best of `repeat`, taken
    in turns so that a shared machine's slower minutes fall on both."""
    with tempfile.TemporaryDirectory() as tmp:
        job = Path(tmp, "job.yaml")
        job.write_text(yaml.safe_dump(document, sort_keys=False))
        doc_json = Path(tmp, "job.json")
        doc_json.write_text(json.dumps(document))
        ours = [sys.executable, "-m", "wf", "compile", str(job), "-o", "json"]
        theirs = [sys.executable, "-c", HERA_SCRIPT.format(bench=str(Path(__file__).parent), doc=str(doc_json))]
        runs = [(timed(ours), timed(theirs)) for _ in range(repeat)]
        return _best([r[0] for r in runs]), _best([r[1] for r in runs])


def best(argv: list[str], repeat: int) -> tuple[float, float]:
    return _best([timed(argv) for _ in range(repeat)])


def _best(runs: list[tuple[float, float]]) -> tuple[float, float]:
    return min(r[0] for r in runs), min(r[1] for r in runs)


def timed(argv: list[str]) -> tuple[float, float]:
    """(wall, CPU) seconds of one whole process; a refusal of the size ("over Argo's maximum workflow size": exit 2
    from compile, a finding from lint) is all of the work but the output."""
    start, before = time.perf_counter(), os.times()
    done = subprocess.run(argv, capture_output=True, text=True)
    wall, after = time.perf_counter() - start, os.times()
    if done.returncode and "over Argo's maximum workflow size" not in done.stderr + done.stdout:
        raise subprocess.CalledProcessError(done.returncode, argv, stderr=done.stderr)
    return wall, (after.children_user - before.children_user) + (after.children_system - before.children_system)


def sweep(sizes: list[int], repeat: int) -> None:
    """Whole-process compile and lint per size: best wall and best CPU of `repeat` runs, and CPU per step."""
    print(f"{'steps':>6} {'command':8} {'wall':>8} {'CPU':>8} {'CPU/step':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        for steps in sizes:
            job = Path(tmp, f"job-{steps}.yaml")
            job.write_text(yaml.safe_dump(job_document(steps), sort_keys=False))
            for verb, argv in (("compile", ["compile", str(job), "-o", "json"]), ("lint", ["lint", str(job)])):
                wall, cpu = best([sys.executable, "-m", "wf", *argv], repeat)
                print(f"{steps:>6} {verb:8} {wall:7.2f}s {cpu:7.2f}s {cpu / steps * 1e6:7.0f}us")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=4000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-processes", action="store_true", help="skip the whole-process comparison")
    parser.add_argument("--sweep", default="1000,2500,4000,10000",
                        help="step counts for wf's whole-process compile and lint ('' for none)")
    args = parser.parse_args()
    import wf
    from fakeapi import byte_compiled  # here, not above: hera's timed process imports this module

    byte_compiled(str(Path(wf.__file__).parent))
    if args.sweep:
        sweep([int(n) for n in args.sweep.split(",")], args.repeat)
    document = job_document(args.steps)
    wf_compile(document), hera_compile(document)  # warm imports and caches: in-process means steady state
    ours = best_of(lambda: wf_compile(document), args.repeat)
    theirs = best_of(lambda: hera_compile(document), args.repeat)
    rows = [("in-process (compile + validate + JSON)", ours, theirs)]
    if not args.no_processes:
        (our_wall, our_cpu), (their_wall, their_cpu) = processes(document, args.repeat)
        rows.append(("whole process, wall (wf compile -o json vs hera)", our_wall, their_wall))
        rows.append(("whole process, CPU (user + system)", our_cpu, their_cpu))
    print(f"{args.steps} steps, best of {args.repeat}")
    print(f"{'':52} {'wf':>9} {'hera':>9} {'hera/wf':>8}")
    for label, a, b in rows:
        print(f"{label:52} {a:8.3f}s {b:8.3f}s {b / a:7.1f}x")


if __name__ == "__main__":
    main()
