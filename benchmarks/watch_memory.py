"""Watch memory benchmark: the peak memory of a `wf watch` process following N workflows of S steps each.

    python benchmarks/watch_memory.py [--workflows 250] [--steps 32] [--src src]

No cluster: this process serves the Kubernetes API paths `wf watch` reads (list and watch workflows, read nodes) on
127.0.0.1 (benchmarks/fakeapi.py), and runs `python -m wf watch NAME...` against it as a child process with its
output in a pipe; the child's peak RSS as GNU time reads it is the figure. The events are the ones Argo's
controller writes for a day at the platform's scale: every workflow is updated as its steps go Pending, Running,
Succeeded (a prepare step, shards five at a time, a Gaudi train step), each update carrying the whole Workflow;
every tenth workflow has a shard interrupted ("pod deleted") and retried, every fiftieth fails a shard. All
workflows advance together, so at the peak every one of them is mid-run with its status.nodes at full size. Node
and template shapes are copied from a real run (tests/controller_data/bert-large-pretrain-run.json): the compiled
outer Retry (application retries), the attempt DAG, the inner Retry (interruption retries) and the Pod, per step.

--src chooses the wf source tree the child imports, so two versions are compared in the same way.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fakeapi import ApiHandler, measure, start, write_kubeconfig  # noqa: E402
from wf.core.constants import ARGO_PHASE_LABEL, CAPACITY_LABEL, CLASS_LABEL, INSTANCE_TYPE_LABEL, WORKFLOW

ROOT = Path(__file__).resolve().parent.parent
RUN = json.loads((ROOT / "tests" / "controller_data" / "bert-large-pretrain-run.json").read_text())
NAMESPACE = "wf"
BATCH = "bench-memory"
SHARDS_AT_ONCE = 5
T0 = "2026-11-29T18:00:00Z"


def _real(relative: str) -> dict[str, Any]:
    """The real run's node whose name is `<workflow>.<relative>`."""
    prefix = RUN["metadata"]["name"] + "."
    return next(n for n in RUN["status"]["nodes"].values() if n["name"] == prefix + relative)


REAL = {"outer": _real("download"), "dag": _real("download(0)"), "inner": _real("download(0).download"),
        "pod": _real("download(0).download(0)")}
TEMPLATES = {t["name"]: t for t in RUN["spec"]["templates"]}


class Step:
    def __init__(self, name: str, gaudi: bool) -> None:
        self.name = name
        self.gaudi = gaudi
        self.attempts: list[list[str]] = []  # [phase, message, host]
        self.outcome = ""  # the step's final phase once decided


class Job:
    """One workflow's progress, kept small; the full Workflow object is built per event and dropped."""

    def __init__(self, index: int, steps: int) -> None:
        self.index = index
        self.name = f"day-{index:04d}"
        self.uid = f"uid-{index}"
        shards = steps - 2
        self.steps = [Step("prepare", False), *(Step(f"shard-{i:02d}", False) for i in range(shards)),
                      Step("train", True)]
        self.phase = "Pending"
        self.interrupt = index % 10 == 3  # this one's third group of shards has its first shard interrupted
        self.fail = index % 50 == 7  # this one fails a shard of its third group

    def _host(self, step: Step) -> str:
        k = zlib.crc32(f"{self.name}.{step.name}.{len(step.attempts)}".encode())
        return f"gaudi-spot-{k % 50}" if step.gaudi else f"cpu-spot-{k % 700}"

    def groups(self) -> list[list[Step]]:
        """The steps that run together: the prepare step, the shards SHARDS_AT_ONCE at a time, the train step."""
        last = len(self.steps) - 1  # the train step's: a group of shards stops before it
        return [self.steps[:1], *(self.steps[i:min(i + SHARDS_AT_ONCE, last)] for i in range(1, last, SHARDS_AT_ONCE)),
                self.steps[-1:]]

    def script(self) -> Iterator[None]:
        """Advance one Argo update at a time (each yield = one MODIFIED event)."""
        self.phase = "Running"
        yield
        for g, group in enumerate(self.groups()):
            for step in group:
                step.attempts.append(["Pending", "", ""])
            yield
            for step in group:
                step.attempts[-1][0], step.attempts[-1][2] = "Running", self._host(step)
            yield
            first = group[0]
            for step in group:
                step.attempts[-1][0] = "Succeeded"
            if g == 3 and self.interrupt:
                first.attempts[-1][:2] = ["Error", "pod deleted"]
                first.attempts.append(["Running", "", self._host(first)])
                yield
                first.attempts[-1][0] = "Succeeded"
            if g == 3 and self.fail:
                first.attempts[-1][:2] = ["Failed", "Error (exit code 1)"]
                first.outcome = "Failed"
                self.phase = "Failed"
                yield
                return
            yield
        self.phase = "Succeeded"
        yield

    def _node(
        self, kind: str, name: str, display: str, phase: str, boundary: str, template: str, **extra: Any
    ) -> dict[str, Any]:
        node = copy.deepcopy(REAL[kind])
        node_id = f"{self.name}-{zlib.crc32(name.encode())}"
        node.update(id=node_id, name=name, displayName=display, phase=phase, boundaryID=boundary,
                    templateName=template, templateScope=f"local/{self.name}", startedAt=T0, **extra)
        for key in ("children", "outboundNodes"):
            node.pop(key, None)
        if phase not in ("Succeeded", "Failed", "Error"):
            for key in ("finishedAt", "outputs", "resourcesDuration", "taskResultSynced"):
                node.pop(key, None)
        return node

    def workflow(self, version: int) -> dict[str, Any]:
        root = self.name
        nodes: dict[str, Any] = {}
        root_node = self._node("dag", root, root, self.phase, "", "Main")
        root_node.pop("boundaryID")
        nodes[root_node["id"]] = root_node
        tasks: list[dict[str, Any]] = []
        templates = [TEMPLATES["Main"] | {"dag": {"tasks": tasks}}]
        for step in self.steps:
            pod_template = TEMPLATES["pretrain-phase2" if step.gaudi else "download"]
            outer_template = TEMPLATES["download-Attempts"]
            tasks.append({"arguments": {}, "name": step.name, "template": f"{step.name}-Attempts"})
            inner_task = {"arguments": {}, "name": step.name, "template": step.name}
            templates.append(outer_template | {"name": f"{step.name}-Attempts", "dag": {"tasks": [inner_task]}})
            templates.append(pod_template | {"name": step.name})
            if not step.attempts:
                continue
            last = step.attempts[-1][0]
            phase = step.outcome or ("Succeeded" if last == "Succeeded" else "Running")
            outer_name = f"{step.name}-Attempts"
            outer = self._node("outer", f"{root}.{step.name}", step.name, phase, root_node["id"], outer_name)
            dag = self._node("dag", f"{root}.{step.name}(0)", f"{step.name}(0)", phase, root_node["id"], outer_name)
            inner = self._node("inner", f"{root}.{step.name}(0).{step.name}", step.name, phase, dag["id"], step.name)
            outer["children"], dag["children"] = [dag["id"]], [inner["id"]]
            inner["children"] = []
            for i, (attempt_phase, message, host) in enumerate(step.attempts):
                extra = {"hostNodeName": host} if host else {}
                if message:
                    extra["message"] = message
                pod = self._node("pod", f"{root}.{step.name}(0).{step.name}({i})", f"{step.name}({i})", attempt_phase,
                                 dag["id"], step.name, **extra)
                if not host:
                    pod.pop("hostNodeName", None)
                inner["children"].append(pod["id"])
                nodes[pod["id"]] = pod
            for node in (outer, dag, inner):
                nodes[node["id"]] = node
        status: dict[str, Any] = {"phase": self.phase, "startedAt": T0, "nodes": nodes}
        if self.phase in ("Succeeded", "Failed"):
            status["finishedAt"] = "2026-11-29T18:30:00Z"
        metadata = {"name": self.name, "namespace": NAMESPACE, "uid": self.uid, "resourceVersion": str(version),
                    "generation": 2, "creationTimestamp": T0,
                    "labels": {**RUN["metadata"]["labels"], "wf.dev/batch": BATCH,
                               ARGO_PHASE_LABEL: self.phase}}
        return {"apiVersion": WORKFLOW.api_version, "kind": WORKFLOW.kind, "metadata": metadata,
                "spec": RUN["spec"] | {"templates": templates}, "status": status}


class DayJob(Job):
    """A workflow of the full-size day (benchmarks/scale.py's job_spec, compiled by wf): a prepare step, every shard
    at once, a train step on Gaudi or Graviton; no application retries, so each step is the Retry node of its
    interruption retries over its pods, as Argo records them; every pod's log archived (`main-logs`); every other
    workflow's steps given a checkpoint location."""

    def __init__(self, index: int, steps: int) -> None:
        from scale import job_spec, parse_options
        from wf.compile.workflow import compile_job
        from wf.jobspec.job import TrainingJob

        super().__init__(index, steps)
        spec = job_spec(index, parse_options(["--shards", str(steps - 2), "--checkpoints"]), BATCH)
        compiled = compile_job(TrainingJob.model_validate(spec), _catalog())
        self.spec = compiled["spec"]
        self.steps = [Step(step["name"], False) for step in spec["spec"]["steps"]]
        self.labels = compiled["metadata"].get("labels") or {}
        self.steps[-1].gaudi = any(t["name"] == "train" and "gaudi" in json.dumps(t.get("nodeSelector"))
                                   for t in self.spec["templates"])

    def groups(self) -> list[list[Step]]:
        return [self.steps[:1], self.steps[1:-1], self.steps[-1:]]

    def workflow(self, version: int) -> dict[str, Any]:
        root = self.name
        root_node = self._node("dag", root, root, self.phase, "", "Main")
        root_node.pop("boundaryID")
        nodes: dict[str, Any] = {root_node["id"]: root_node}
        for step in self.steps:
            if not step.attempts:
                continue
            phase = step.outcome or ("Succeeded" if step.attempts[-1][0] == "Succeeded" else "Running")
            retry = self._node("inner", f"{root}.{step.name}", step.name, phase, root, step.name)
            retry["children"] = []
            for i, (attempt_phase, message, host) in enumerate(step.attempts):
                pod = self._node("pod", f"{root}.{step.name}({i})", f"{step.name}({i})", attempt_phase, root,
                                 step.name, **({"hostNodeName": host} if host else {}),
                                 **({"message": message} if message else {}))
                if not host:
                    pod.pop("hostNodeName", None)
                if attempt_phase in ("Succeeded", "Failed", "Error"):
                    key = f"{root}/{pod['id']}/main.log"
                    pod["outputs"] = {"exitCode": "0" if attempt_phase == "Succeeded" else "1",
                                      "artifacts": [{"name": "main-logs", "s3": {"key": key}}]}
                retry["children"].append(pod["id"])
                nodes[pod["id"]] = pod
            nodes[retry["id"]] = retry
        pods = [a[0] for step in self.steps for a in step.attempts]
        status: dict[str, Any] = {"phase": self.phase, "startedAt": T0, "nodes": nodes,
                                  "progress": f"{pods.count('Succeeded')}/{len(pods)}"}
        if self.phase in ("Succeeded", "Failed"):
            status["finishedAt"] = "2026-11-29T18:30:00Z"
        metadata = {"name": self.name, "namespace": NAMESPACE, "uid": self.uid, "resourceVersion": str(version),
                    "generation": 2, "creationTimestamp": T0,
                    "labels": {**self.labels, "wf.dev/batch": BATCH, ARGO_PHASE_LABEL: self.phase}}
        return {"apiVersion": WORKFLOW.api_version, "kind": WORKFLOW.kind, "metadata": metadata, "spec": self.spec,
                "status": status}


@cache
def _catalog() -> Any:
    from wf.model.catalog import load_catalog

    return load_catalog()


class Cluster:
    """The API server's side of the day: the jobs, their scripted updates, and counters."""

    def __init__(self, workflows: int, steps: int, day: bool = False) -> None:
        self.jobs = [(DayJob if day else Job)(i, steps) for i in range(workflows)]
        self.version = 1
        self.events = 0
        self.event_bytes = 0
        self.watch_started = threading.Event()

    def events_stream(self) -> Iterator[bytes]:
        running = [(job, job.script()) for job in self.jobs]
        while running:  # every workflow advances a step per round: all of them are mid-run at the peak
            alive = []
            for job, script in running:
                if next(script, "done") == "done":
                    continue
                alive.append((job, script))
                self.version += 1
                line = json.dumps({"type": "MODIFIED", "object": job.workflow(self.version)}).encode() + b"\n"
                self.events += 1
                self.event_bytes += len(line)
                yield line
            running = alive


def handler(cluster: Cluster) -> type[ApiHandler]:
    class Handler(ApiHandler):
        def get(self, path: str, query: dict[str, str]) -> None:
            if path == f"/apis/{WORKFLOW.api_version}/namespaces/{NAMESPACE}/{WORKFLOW.plural}":
                if query.get("watch") in ("true", "True", "1"):
                    if cluster.watch_started.is_set():
                        time.sleep(30)  # a later watch: nothing more happens
                        self.send_stream(iter(()))
                    else:
                        cluster.watch_started.set()
                        self.send_stream(cluster.events_stream())
                    return
                self.send_page(f"{WORKFLOW.kind}List", WORKFLOW.api_version,
                               [json.dumps(job.workflow(1)).encode() for job in cluster.jobs], query)
            elif path.startswith("/api/v1/nodes/"):
                name = path.rsplit("/", 1)[1]
                gaudi = name.startswith("gaudi")
                self.send_json(200, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {
                    INSTANCE_TYPE_LABEL: "dl1.24xlarge" if gaudi else "m7i.2xlarge", CAPACITY_LABEL: "spot",
                    CLASS_LABEL: "gaudi" if gaudi else "cpu"}}})
            else:
                self.not_found(path)

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workflows", type=int, default=250)
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--src", default=str(ROOT / "src"), help="the wf source tree the watcher runs")
    parser.add_argument("--day", action="store_true", help="the full-size day's shapes (benchmarks/scale.py)")
    args = parser.parse_args()

    cluster = Cluster(args.workflows, args.steps, args.day)
    server = start(handler(cluster))
    with tempfile.TemporaryDirectory(prefix="wf-bench-memory-") as tmp:
        kubeconfig = write_kubeconfig(Path(tmp) / "kubeconfig.yaml", server.server_port, NAMESPACE)
        command = [sys.executable, "-m", "wf", "watch", *(job.name for job in cluster.jobs), "-n", NAMESPACE,
                   "--context", "bench", "--kubeconfig", str(kubeconfig)]
        env = {**os.environ, "PYTHONPATH": args.src, "COLUMNS": "120"}
        try:
            watcher = measure(command, env)
        finally:
            server.shutdown()
    result = {
        "workflows": args.workflows, "steps": args.steps, "day": args.day, "src": args.src,
        "events": cluster.events, "event_mb": round(cluster.event_bytes / 2**20, 1),
        "largest_workflow_kb": round(len(json.dumps(cluster.jobs[0].workflow(0))) / 1024, 1),
        "watcher_peak_rss_mb": round(watcher.peak_rss_mb, 1),
        "watcher_cpu_seconds": round(watcher.cpu_seconds, 1),
        "wall_seconds": round(watcher.wall_seconds, 1),
        "exit_code": watcher.exit_code, "stdout_lines": watcher.stdout.count(b"\n"),
    }
    print(json.dumps(result, indent=2))
    if watcher.exit_code not in (0, 1):
        print(watcher.stderr.decode()[-3000:], file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
