"""Size benchmark: the largest job of plain cpu steps whose workflow fits Argo's maximum size, its status included.

    python benchmarks/size.py [--steps 100,400,800]

Argo measures the whole Workflow object (`len(json.Marshal(workflow))`, status included) against 1 MiB; past it the
controller compresses `status.nodes` (gzip + base64, `status.compressedNodes`) and, still too large and without its
database, fails the workflow. So a job fits when its compiled spec plus its finished, compressed node status do.

The spec is compiled (a chain of plain cpu steps, each needing the one before). The status is modelled, not
recorded: per step the Retry node and the attempt's Pod node Argo v4 writes for a Succeeded step (fields and
values as in tests/controller_data/bert-large-pretrain-run.json, a recorded run; the node ids Argo's FNV hashes of
the names; each pod's archived log, `main-logs`, in both nodes' outputs; the template's inputs in both), and the
root DAG node listing every step. Compressed as the controller does (wf.argo.nodes.compress_nodes). One attempt a
step: every interruption retried adds a Pod node more.
"""

from __future__ import annotations

import argparse
import zlib
from typing import Any

from wf.argo import ARGO_MAX_WORKFLOW_BYTES, json_size
from wf.argo.nodes import compress_nodes
from wf.compile.workflow import compile_job
from wf.jobspec.job import TrainingJob
from wf.model.catalog import load_catalog

WORKFLOW = "bench-x7k2p"  # a generated name: the job's name and Argo's five characters
NAMESPACE = "ml-training"


def job(steps: int) -> TrainingJob:
    return TrainingJob.model_validate({
        "apiVersion": "wf/v1", "kind": "TrainingJob", "metadata": {"name": "bench"},
        "spec": {"image": "python:3.11", "compute": "cpu", "steps": [
            {"name": f"s{i}", "command": ["python", "train.py", "--shard", str(i)],
             **({"needs": [f"s{i - 1}"]} if i else {})}
            for i in range(steps)]}})


def node_id(name: str) -> str:
    return f"{WORKFLOW}-{zlib.crc32(name.encode())}"  # Argo's is an FNV-32a hash: as many digits


def status_nodes(manifest: dict[str, Any]) -> dict[str, Any]:
    templates = {t["name"]: t for t in manifest["spec"]["templates"]}
    tasks = templates["Main"]["dag"]["tasks"]
    scope = f"local/{WORKFLOW}"
    nodes: dict[str, Any] = {}
    root = {"id": WORKFLOW, "name": WORKFLOW, "displayName": WORKFLOW, "type": "DAG", "templateName": "Main",
            "templateScope": scope, "phase": "Succeeded", "startedAt": "2026-12-05T01:00:00Z",
            "finishedAt": "2026-12-05T09:41:17Z", "progress": f"{len(tasks)}/{len(tasks)}",
            "resourcesDuration": {"cpu": 91234, "memory": 182468}, "children": [], "outboundNodes": []}
    for i, task in enumerate(tasks):
        step = task["name"]
        retry, pod = f"{WORKFLOW}.{step}", f"{WORKFLOW}.{step}(0)"
        started, finished = f"2026-12-05T{1 + i // 3600 % 8:02d}:{i // 60 % 60:02d}:{i % 60:02d}Z", \
            f"2026-12-05T{1 + i // 3600 % 8:02d}:{i // 60 % 60:02d}:{(i + 37) % 60:02d}Z"
        inputs = {"parameters": [{"name": p["name"], "value": p.get("value", p.get("default", ""))}
                                 for p in (templates[task["template"]].get("inputs") or {}).get("parameters", [])]}
        outputs = {"artifacts": [{"name": "main-logs", "s3": {
            "key": f"{NAMESPACE}/{WORKFLOW}/{WORKFLOW}-{step}-{zlib.crc32(pod.encode())}/main.log"}}],
            "exitCode": "0"}
        common = {"templateName": task["template"], "templateScope": scope, "phase": "Succeeded",
                  "boundaryID": WORKFLOW, "startedAt": started, "finishedAt": finished, "progress": "1/1",
                  "resourcesDuration": {"cpu": 37 + i % 11, "memory": 74 + i % 13}, "outputs": outputs,
                  **({"inputs": inputs} if inputs["parameters"] else {})}
        nodes[node_id(retry)] = {"id": node_id(retry), "name": retry, "displayName": step, "type": "Retry",
                                 "children": [node_id(pod)], **common}
        nodes[node_id(pod)] = {"id": node_id(pod), "name": pod, "displayName": f"{step}(0)", "type": "Pod",
                               "hostNodeName": f"cpu-spot-us-east-1a-{i % 40}", "nodeFlag": {"retried": True},
                               "taskResultSynced": True, **common}
        root["children"].append(node_id(retry))
    root["outboundNodes"] = [node_id(f"{WORKFLOW}.{tasks[-1]['name']}(0)")]
    nodes[WORKFLOW] = root
    return nodes


def measure(steps: int) -> tuple[int, int]:
    """(spec bytes, compressed status bytes) of the job's finished workflow."""
    manifest = compile_job(job(steps), load_catalog())
    manifest["metadata"] = {"name": WORKFLOW, "namespace": NAMESPACE, "labels": manifest["metadata"]["labels"]}
    return json_size(manifest), len(compress_nodes(status_nodes(manifest))) + 200  # phase, times, conditions


def largest(per_step: float, per_step_status: float, fixed: float) -> int:
    return int((ARGO_MAX_WORKFLOW_BYTES - fixed) // (per_step + per_step_status))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", default="100,400,800")
    sizes = [int(n) for n in parser.parse_args().steps.split(",")]
    rows = [(n, *measure(n)) for n in sizes]
    print(f"{'steps':>6} {'spec':>10} {'status (compressed)':>20} {'total':>10}")
    for n, spec, status in rows:
        print(f"{n:>6} {spec:>10,} {status:>20,} {spec + status:>10,}")
    (n0, spec0, status0), (n1, spec1, status1) = rows[0], rows[-1]
    per_spec, per_status = (spec1 - spec0) / (n1 - n0), (status1 - status0) / (n1 - n0)
    fixed = spec0 + status0 - n0 * (per_spec + per_status)
    print(f"a step: {per_spec:.0f} bytes of spec, {per_status:.0f} of compressed status; fixed {fixed:,.0f}")
    print(f"largest job that fits Argo's {ARGO_MAX_WORKFLOW_BYTES:,} bytes: {largest(per_spec, per_status, fixed):,}"
          f" steps (spec alone: {largest(per_spec, 0, spec0 - n0 * per_spec):,})")


if __name__ == "__main__":
    main()
