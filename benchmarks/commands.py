"""Commands at size: `wf get -o wide` of a 10,000-item fan-out whose steps Argo offloaded to its database, and
`wf list` of 1,000 workflows, each a whole process measured from outside by GNU time (wall, peak RSS, CPU),
against `wf --help` (the CLI's start-up) in the same turns.

    python benchmarks/commands.py [--items 10000] [--workflows 1000] [--runs 3] [--src src]

No cluster: a process of its own serves what the commands read on 127.0.0.1 (benchmarks/fakeapi.py):

* the fan-out as the Kubernetes API holds it once Argo offloaded its node status (`status.offloadNodeStatusVersion`,
  no nodes, plain or compressed), and as Argo Server's GET /api/v1/workflows/{namespace}/{name} serves it, the
  nodes put back from the database (`wf get` reads it there: wf.controller.archive.Archive.hydrated). The workflow
  is the one `tests/e2e/test_offloaded_fanout.py` runs (a `shard` step with `forEach: {count: N}`, then `merge`),
  compiled by wf, its nodes shaped as Argo 4.0.7 records them: the DAG's TaskGroup, a Retry node per item (the
  interruption retries) and its Pods, each pod's log archived (`main-logs`); every hundredth item was interrupted
  once ("pod deleted") and ran again;
* the Nodes the attempts ran on (for cost), no checkpoint ledger, no multi-node replicas;
* 1,000 workflows in one namespace for `wf list`: the report benchmark's day (benchmarks/report.py: 32 steps
  each, about 120 KB of JSON a workflow), the list paged as the API server pages it; its peer, a plain Python
  client that fetches the same pages and parses them whole (`json.loads`), keeping nothing (the floor of any
  client that reads whole objects: `wf list` reads only the fields it shows).

`--src` picks the source tree the children run, so two versions are measured in the same turns.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fakeapi import ApiHandler, Measured, byte_compiled, measure, serve_until_stdin_closes, served, write_kubeconfig  # noqa: E402
from wf.argo.nodes import node_id  # noqa: E402
from wf.core.constants import CAPACITY_LABEL, CLASS_LABEL, INSTANCE_TYPE_LABEL, WORKFLOW  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CATALOG = ROOT / "eksctl" / "catalog.yaml"
NAMESPACE = "wf"  # the fan-out's
LISTED = "day"  # the 1,000 workflows'
FAN_OUT = "offloaded-fan-out-b7x2k"
HOSTS = 20  # cpu Spot nodes the items ran on (the e2e test's 10 nodes per group, two zones)
INTERRUPTED_EVERY = 100
START = datetime(2026, 12, 4, 10, 0, tzinfo=UTC)


def _stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _compiled() -> dict[str, Any]:
    """The e2e test's job, compiled by wf with the default catalog (the item count is Argo's, at run time)."""
    from wf.compile.workflow import compile_job
    from wf.jobspec.job import TrainingJob
    from wf.model.catalog import load_catalog

    job = {"apiVersion": "wf/v1", "kind": "TrainingJob",
           "metadata": {"name": "offloaded-fan-out", "namespace": NAMESPACE},
           "spec": {"image": "busybox:1.36", "compute": "cpu", "retries": 0, "steps": [
               {"name": "shard", "command": ["convert", "--shard", "{{item}}"], "forEach": {"count": 2},
                "resources": {"cpu": "100m", "memory": "64Mi"}},
               {"name": "merge", "command": ["sh", "-c", "echo merge"], "needs": ["shard"],
                "resources": {"cpu": 1, "memory": "1Gi"}}]}}
    return compile_job(TrainingJob.model_validate(job), load_catalog(CATALOG))


def fan_out(items: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The fan-out as the Kubernetes API holds it (offloaded) and as Argo Server serves it (hydrated)."""
    workflow = _compiled()
    for task in workflow["spec"]["templates"][0]["dag"]["tasks"]:
        if "withSequence" in task:
            task["withSequence"]["count"] = str(items)
    name = FAN_OUT
    finished = START + timedelta(seconds=5 * items / HOSTS + 60)

    def node(node_name: str, display: str, kind: str, template: str, boundary: str | None, begin: datetime,
             end: datetime, **extra: Any) -> dict[str, Any]:
        made = {"id": node_id(name, node_name), "name": node_name, "displayName": display, "type": kind,
                "templateName": template, "templateScope": f"local/{name}", "phase": "Succeeded",
                "startedAt": _stamp(begin), "finishedAt": _stamp(end), "progress": "1/1",
                "resourcesDuration": {"cpu": 1, "memory": 5}, **extra}
        if boundary:
            made["boundaryID"] = boundary
        return made

    def pod(node_name: str, template: str, index: int, begin: datetime, end: datetime, **extra: Any
            ) -> dict[str, Any]:
        key = f"{name}/{name}-{template}-{node_id(name, node_name).rsplit('-', 1)[1]}/main.log"
        outputs = {"exitCode": "0", "artifacts": [{"name": "main-logs", "s3": {"key": key}}]}
        return node(node_name, node_name.rsplit(".", 1)[1], "Pod", template, name, begin, end,
                    hostNodeName=f"cpu-spot-us-east-1{'ab'[index % 2]}-{index % (HOSTS // 2)}",
                    outputs=outputs, taskResultSynced=True, nodeFlag={"retried": True}, **extra)

    merge_retry = node(f"{name}.merge", "merge", "Retry", "merge", name, finished - timedelta(seconds=30), finished)
    merge_pod = pod(f"{name}.merge(0)", "merge", 0, finished - timedelta(seconds=30), finished)
    merge_retry["children"] = [merge_pod["id"]]
    group = node(f"{name}.shard", "shard", "TaskGroup", "shard", name, START, finished - timedelta(seconds=40))
    group["children"] = []
    nodes = {n["id"]: n for n in (merge_retry, merge_pod)}
    for i in range(items):
        begin = START + timedelta(seconds=5 * (i // HOSTS))
        end = begin + timedelta(seconds=5)
        item = f"{name}.shard({i}:{i})"
        retry = node(item, f"shard({i}:{i})", "Retry", "shard", name, begin, end, children=[])
        group["children"].append(retry["id"])
        attempts = 2 if i % INTERRUPTED_EVERY == INTERRUPTED_EVERY - 1 else 1
        for attempt in range(attempts):
            last = attempt == attempts - 1
            made = pod(f"{item}({attempt})", "shard", i + attempt, begin, end,
                       children=[merge_retry["id"]] if last else [])
            if not last:
                made.update(phase="Error", message="pod deleted", outputs={"exitCode": "143"})
                made.pop("taskResultSynced")
                begin, end = end + timedelta(seconds=5), end + timedelta(seconds=10)
            retry["children"].append(made["id"])
            nodes[made["id"]] = made
        retry["finishedAt"] = _stamp(end)
        nodes[retry["id"]] = retry
    root = node(name, name, "DAG", "Main", None, START, finished, children=[group["id"]],
                outboundNodes=[merge_pod["id"]], progress=f"{items + 1}/{items + 1}")
    nodes = {root["id"]: root, group["id"]: group, **nodes}
    metadata = {**workflow["metadata"], "name": name, "namespace": NAMESPACE, "uid": "uid-fan-out",
                "resourceVersion": "9", "creationTimestamp": _stamp(START),
                "labels": {**workflow["metadata"].get("labels", {}), "workflows.argoproj.io/completed": "true",
                           "workflows.argoproj.io/phase": "Succeeded"}}
    metadata.pop("generateName", None)
    status = {"phase": "Succeeded", "startedAt": _stamp(START), "finishedAt": _stamp(finished),
              "progress": f"{items + 1}/{items + 1}", "offloadNodeStatusVersion": "fnv:3265339126"}
    offloaded = {**workflow, "metadata": metadata, "status": status}
    hydrated = {**offloaded, "status": {**status, "nodes": nodes}}
    return offloaded, hydrated


def _node(host: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": host, "labels": {
        INSTANCE_TYPE_LABEL: "r5.4xlarge", CLASS_LABEL: "cpu", CAPACITY_LABEL: "spot"}}}


def handler(items: int, listed: int) -> type[ApiHandler]:
    offloaded, hydrated = fan_out(items)
    bodies = {f"/apis/{WORKFLOW.api_version}/namespaces/{NAMESPACE}/{WORKFLOW.plural}/{FAN_OUT}":
              json.dumps(offloaded).encode(),
              f"/api/v1/workflows/{NAMESPACE}/{FAN_OUT}": json.dumps(hydrated).encode()}

    from report import day

    workflows, _ = day(listed, 32, datetime.now(UTC))
    for workflow in workflows:
        workflow["metadata"]["namespace"] = LISTED
    encoded = [json.dumps(workflow).encode() for workflow in workflows]
    del workflows

    class Handler(ApiHandler):
        def get(self, path: str, query: dict[str, str]) -> None:
            if path in bodies:
                self.send_bytes(200, bodies[path])
            elif path == f"/apis/{WORKFLOW.api_version}/namespaces/{LISTED}/{WORKFLOW.plural}":
                self.send_page(f"{WORKFLOW.kind}List", WORKFLOW.api_version, encoded, query)
            elif path.startswith("/api/v1/nodes/"):
                self.send_json(200, _node(path.rsplit("/", 1)[1]))
            elif path == f"/api/v1/namespaces/{NAMESPACE}/pods":  # a multi-node step's replicas: none
                self.send_json(200, {"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": []})
            else:  # the checkpoint ledger, the catalog's ConfigMap: none here
                self.not_found(path)

    return Handler


PEER = """import json, sys, urllib.request
token = ""
while True:
    page = json.loads(urllib.request.urlopen(f"{sys.argv[1]}?limit=100&continue={token}").read())
    token = page["metadata"].get("continue")
    if not token:
        break
"""


def _row(runs: list[Measured], floor: float) -> dict[str, Any]:
    wall = statistics.median(r.wall_seconds for r in runs)
    return {"wall_seconds": round(wall, 3), "over_wf_help": round(wall / floor, 1),
            "peak_rss_mb": round(max(r.peak_rss_mb for r in runs), 1),
            "cpu_seconds": round(statistics.median(r.cpu_seconds for r in runs), 2),
            "exit_codes": sorted({r.exit_code for r in runs}), "stdout_lines": runs[-1].stdout.count(b"\n")}


def benchmark(args: argparse.Namespace) -> dict[str, Any]:
    with served([__file__, "--serve", "--items", str(args.items), "--workflows", str(args.workflows)]) as port, \
            tempfile.TemporaryDirectory(prefix="wf-bench-commands-") as tmp:
        kubeconfig = write_kubeconfig(Path(tmp) / "kubeconfig.yaml", port, NAMESPACE)
        target = ["--kubeconfig", str(kubeconfig)]
        wf = [sys.executable, "-m", "wf"]
        commands = {
            "wf --help": [*wf, "--help"],
            f"wf get -o wide ({args.items:,} items, offloaded)":
                [*wf, "get", FAN_OUT, "-o", "wide", "--catalog", str(CATALOG), "--argo-server",
                 f"http://127.0.0.1:{port}", *target],
            f"wf list ({args.workflows:,} workflows)": [*wf, "list", "-n", LISTED, *target],
            # The least a Python client that reads whole objects does for that list: fetch its pages, parse them.
            "peer: the list's pages fetched and parsed whole": [sys.executable, "-c", PEER,
                                                           f"http://127.0.0.1:{port}/apis/{WORKFLOW.api_version}/"
                                                           f"namespaces/{LISTED}/{WORKFLOW.plural}"],
        }
        env = byte_compiled(args.src) | {"PYTHONPATH": args.src, "COLUMNS": "200"}
        results: dict[str, list[Measured]] = {name: [] for name in commands}
        load = [os.getloadavg()[0]]  # the machine is shared: what else ran beside the turns
        for _ in range(args.runs):  # in turns: a busy moment of the machine hits every command alike
            for name, command in commands.items():
                results[name].append(measured := measure(command, env))
                if measured.exit_code != 0:
                    sys.stderr.write(measured.stderr.decode()[-3000:])
        load.append(os.getloadavg()[0])
    floor = statistics.median(r.wall_seconds for r in results["wf --help"])
    return {"items": args.items, "workflows": args.workflows, "runs": args.runs, "src": args.src,
            "load_average_before_after": load,
            "commands": {name: _row(runs, floor) for name, runs in results.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--workflows", type=int, default=1_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--src", default=str(ROOT / "src"), help="the wf source tree the commands run")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)  # the benchmark's API server
    args = parser.parse_args()
    if args.serve:
        serve_until_stdin_closes(handler(args.items, args.workflows))
        return
    result = benchmark(args)
    print(json.dumps(result, indent=2))
    if any(code != 0 for c in result["commands"].values() for code in c["exit_codes"]):
        sys.exit(1)


if __name__ == "__main__":
    main()
