"""`wf report -o html` benchmark: the time and peak memory of the whole command over a day of N workflows, as
ratios against floors measured in the same run; and the README's screenshot of the page's pictures.

    python benchmarks/report.py [--workflows 250] [--steps 32] [--runs 3]
    python benchmarks/report.py --png docs/report.png --workflows 40 --steps 12

No cluster: a process of its own serves the Kubernetes API paths `wf report` reads (workflows across namespaces,
nodes, checkpoint ledgers, Kueue workloads) on 127.0.0.1 (benchmarks/fakeapi.py) and `python -m wf report` runs
against it as a child process; its wall time, CPU and peak RSS as GNU time reads them (wait4's rusage, which keeps
the high-water mark across the exec into the drawing program) are the figures. The floors, whole processes too: `wf
--help` (the CLI's start-up), `import matplotlib.pyplot` with Agg (what any matplotlib picture costs), the imports
of each half of the html path (the reading half's Kubernetes client, the drawing half's matplotlib), and `wf report
-o json` (the same reading and aggregation, no pictures). And each half of `-o html` alone: the reading half up to
the digest file (the command with its hand-over replaced by writing the digest), the drawing program on that
digest.

The day: workflows of the watch memory benchmark's shape (benchmarks/watch_memory.py: node and template shapes of
a real run, a prepare step, shards five at a time, a Gaudi train step), spread over 20 hours across the catalog's
teams, with times: every tenth has a shard interrupted and retried, every seventh its train step interrupted and
retried On-Demand (Spot fallback), every fiftieth fails a shard, the last six are still training. Every pod had a
Kueue workload that waited for quota (Gaudi minutes, CPU seconds).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fakeapi import ApiHandler, Measured, byte_compiled, measure, serve_until_stdin_closes, served, write_kubeconfig  # noqa: E402
from watch_memory import Job  # noqa: E402 - a sibling script, not a package
from wf.compile.interruptions import SPOT_FALLBACK_ANNOTATION  # noqa: E402
from wf.compile.node_facts import NodeRecord, node_facts  # noqa: E402
from wf.controller.steps import pod_name, workflow_view  # noqa: E402
from wf.core.constants import (  # noqa: E402
    CAPACITY_LABEL,
    CLASS_LABEL,
    INSTANCE_TYPE_LABEL,
    NODE_FACTS_ANNOTATION,
    WORKFLOW,
    WORKLOAD,
)

ROOT = Path(__file__).resolve().parent.parent
CATALOG = ROOT / "eksctl" / "catalog.yaml"
NAMESPACES = ("ml-training", "mapping", "perception", "mapping")  # teams perception and mapping
RUNNING = 6  # the last workflows are still training
INSTANCE = {"gaudi": "dl1.24xlarge", "cpu": "r5.4xlarge"}


def _stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def day(count: int, steps: int, now: datetime) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """`count` workflows that started over the 20 hours before the last four, and a Kueue workload per pod."""
    workflows, workloads = [], []
    for index in range(count):
        workflow, waits = _workflow(index, count, steps, now)
        workflows.append(workflow)
        for attempt, wait in waits:
            workloads.append(_workload(workflow, attempt, wait))
    return workflows, workloads


def _workflow(index: int, count: int, steps: int, now: datetime) -> tuple[dict[str, Any], list[tuple[Any, float]]]:
    rng = random.Random(index)
    job = Job(index, steps)
    running = index >= count - RUNNING
    start = now - timedelta(hours=rng.uniform(1.5, 2.5)) if running else \
        now - timedelta(hours=24) + timedelta(hours=20 * index / count, minutes=rng.uniform(0, 10))
    groups = job.groups()
    failing = index % 50 == 7
    times: dict[str, list[tuple[datetime, datetime | None]]] = {}
    moment, job.phase = start, "Running" if running else "Succeeded"
    for g, group in enumerate(groups):
        train = group[0].gaudi
        group_end = moment
        for s, step in enumerate(group):
            begin = moment + timedelta(seconds=rng.uniform(0, 900 if train else 60))
            length = timedelta(minutes=rng.uniform(60, 120) if train else rng.uniform(4, 12))
            host = job._host(step)
            interrupted = (train and index % 7 == 2) or (g == 3 and s == 0 and index % 10 == 3)
            spans: list[tuple[datetime, datetime | None]] = []
            if interrupted:
                cut = begin + length * rng.uniform(0.2, 0.7)
                step.attempts.append(["Error", "pod deleted", host])
                spans.append((begin, cut))
                begin, host = cut + timedelta(seconds=40), host.replace("spot", "od") if train else host + "b"
            if train and running:
                step.attempts.append(["Running", "", host])
                spans.append((begin, None))
            elif g == 3 and s == 0 and failing:
                step.attempts.append(["Failed", "Error (exit code 1)", host])
                step.outcome = job.phase = "Failed"
                spans.append((begin, begin + length / 3))
            else:
                step.attempts.append(["Succeeded", "", host])
                spans.append((begin, begin + length))
            times[step.name] = spans
            group_end = max(group_end, *(end or now for _, end in spans))
        moment = group_end + timedelta(seconds=5)
        if job.phase == "Failed":
            break
    workflow = job.workflow(1)
    _retime(workflow, times, start, None if running else moment)
    metadata = workflow["metadata"]
    metadata.update(namespace=NAMESPACES[index % len(NAMESPACES)], creationTimestamp=_stamp(start))
    for template in workflow["spec"]["templates"]:
        if template["name"] == "train":  # a Spot step that falls back to On-Demand after one interruption
            template.setdefault("metadata", {}).setdefault("annotations", {})[SPOT_FALLBACK_ANNOTATION] = "1"
    if not running:  # an ended workflow: the node recorder has copied its record onto it
        record = NodeRecord({host: facts for host in sorted(_hosts([workflow])) if (facts := node_facts(_node(host)))})
        metadata.setdefault("annotations", {})[NODE_FACTS_ANNOTATION] = record.encode()
    view = workflow_view(workflow)
    waits = [(attempt, rng.uniform(60, 1500) if row.compute_class == "gaudi" else rng.uniform(1, 90))
             for row in view.steps for attempt in row.attempts]
    return workflow, waits


def _retime(workflow: dict[str, Any], times: dict[str, list[tuple[datetime, datetime | None]]], start: datetime,
            end: datetime | None) -> None:
    """Give each step's nodes its attempts' times (the shape's nodes all start at one moment)."""
    root = workflow["metadata"]["name"]
    status = workflow["status"]
    status["startedAt"] = _stamp(start)
    if end is not None and status["phase"] != "Running":
        status["finishedAt"] = _stamp(end)
    for node in status["nodes"].values():
        name = node["name"].removeprefix(root + ".")
        step = name.split("(", 1)[0].split(".", 1)[0]
        spans = times.get(step)
        if node["name"] == root:
            node["startedAt"] = _stamp(start)
            continue
        if not spans:
            continue
        if node["type"] == "Pod":
            begin, finish = spans[int(name.rsplit("(", 1)[1].rstrip(")"))]
        else:
            begin, finish = spans[0][0], spans[-1][1]
        node["startedAt"] = _stamp(begin)
        if finish is not None and node["phase"] not in ("Running", "Pending"):
            node["finishedAt"] = _stamp(finish)
        else:
            node.pop("finishedAt", None)


def _workload(workflow: dict[str, Any], attempt: Any, wait: float) -> dict[str, Any]:
    """Kueue's Workload for an attempt's pod: created with the pod, quota reserved `wait` seconds later."""
    pod = pod_name(workflow, attempt)
    return {"apiVersion": WORKLOAD.api_version, "kind": WORKLOAD.kind,
            "metadata": {"name": f"pod-{pod}", "namespace": workflow["metadata"]["namespace"],
                         "creationTimestamp": _stamp(attempt.started),
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": pod}]},
            "spec": {"priority": 100},
            "status": {"conditions": [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved",
                                       "message": "", "lastTransitionTime":
                                           _stamp(attempt.started + timedelta(seconds=wait))}]}}


def _hosts(workflows: list[dict[str, Any]]) -> set[str]:
    return {n["hostNodeName"] for w in workflows for n in w["status"]["nodes"].values() if n.get("hostNodeName")}


def _node(host: str) -> dict[str, Any]:
    """The Node an attempt ran on: Gaudi or CPU, Spot or On-Demand as its name says."""
    compute_class = "gaudi" if host.startswith("gaudi") else "cpu"
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": host, "labels": {
        INSTANCE_TYPE_LABEL: INSTANCE[compute_class], CLASS_LABEL: compute_class,
        CAPACITY_LABEL: "on-demand" if "-od-" in host else "spot"}}}


def nodes(workflows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A Node for every host an attempt ran on."""
    return [_node(host) for host in sorted(_hosts(workflows))]


def handler(workflows: list[dict[str, Any]], workloads: list[dict[str, Any]]) -> type[ApiHandler]:
    listed_nodes = nodes(workflows)
    encoded = [json.dumps(w).encode() for w in workflows]

    class Handler(ApiHandler):
        def get(self, path: str, query: dict[str, str]) -> None:
            parts = path.strip("/").split("/")
            if path == f"/apis/{WORKFLOW.api_version}/{WORKFLOW.plural}":
                self.send_page(f"{WORKFLOW.kind}List", WORKFLOW.api_version, encoded, query)
            elif path == "/api/v1/nodes":
                self.send_json(200, {"apiVersion": "v1", "kind": "NodeList", "metadata": {"resourceVersion": "1"},
                                     "items": listed_nodes})
            elif path.startswith(f"/apis/{WORKLOAD.api_version}/namespaces/") and parts[-1] == WORKLOAD.plural:
                self.send_json(200, {"apiVersion": WORKLOAD.api_version, "kind": "WorkloadList", "metadata": {},
                                     "items": [w for w in workloads if w["metadata"]["namespace"] == parts[-2]]})
            else:  # checkpoint ledgers, the catalog's ConfigMap: none here
                self.not_found(path)

    return Handler


def _measure_all(args: argparse.Namespace, port: int, tmp: Path) -> tuple[dict[str, list[Measured]], str, int]:
    kubeconfig = write_kubeconfig(tmp / "kubeconfig.yaml", port)
    wf = [sys.executable, "-m", "wf"]
    report = [*wf, "report", "--since", "24h", "--catalog", str(CATALOG), "--kubeconfig", str(kubeconfig)]
    commands = {
        "wf --help": [*wf, "--help"],
        "import matplotlib.pyplot (Agg)": [sys.executable, "-c",
                                           "import matplotlib; matplotlib.use('Agg'); import matplotlib.pyplot"],
        # What the html path imports before it reads anything: the memory no report can go below.
        # What each half of the html path imports before it reads anything: the memory it cannot go below.
        "imports of the reading half": [sys.executable, "-c", "import kubernetes.client, wf.cli.app, wf.cli.report, "
                                        "wf.controller.watch"],
        "imports of the drawing half": [sys.executable, "-c", "import wf.cli.report_page, matplotlib.figure, "
                                        "matplotlib.backends.backend_agg, PIL.PngImagePlugin"],
        "wf report -o json": [*report, "-o", "json", "--file", str(tmp / "report.json")],
        "reading half: wf report -o html to the digest": [sys.executable, "-c", READING_HALF, str(tmp / "digest"),
                                                          *report[3:], "-o", "html"],
        "drawing half: python -m wf.cli.report_page": [sys.executable, "-m", "wf.cli.report_page",
                                                       str(tmp / "digest.json"), "--file", str(tmp / "drawn.html")],
        "wf report -o html": [*report, "-o", "html", "--file", str(tmp / "report.html")],
    }
    env = byte_compiled(args.src) | {"PYTHONPATH": args.src, "MPLCONFIGDIR": str(tmp)}
    results: dict[str, list[Measured]] = {name: [] for name in commands}
    for _ in range(args.runs):  # in turns, so a busy moment of the machine hits every command alike
        for name, command in commands.items():
            if name.startswith("drawing half"):  # the program removes its digest: a fresh copy each run
                shutil.copyfile(tmp / "digest", tmp / "digest.json")
            results[name].append(measured := measure(command, env))
            if measured.exit_code != 0:
                sys.stderr.write(measured.stderr.decode()[-3000:])
    return results, (tmp / "report.html").read_text(), (tmp / "digest").stat().st_size


# `wf report` up to the moment it hands over to the drawing program, which writes the digest to argv[1] instead.
READING_HALF = """import sys
from pathlib import Path
from wf.cli import report
from wf.cli.app import main

def keep(built, file, *, replace_process):
    Path(sys.argv[1]).write_text(built.digest().dumps())

report.hand_over = keep
main(sys.argv[2:])
"""


def serve(args: argparse.Namespace) -> None:
    """The fake API server, in a process of its own (fakeapi.served): the day's objects must not count in the
    measured children's peak RSS."""
    serve_until_stdin_closes(handler(*day(args.workflows, args.steps, datetime.now(UTC))))


def benchmark(args: argparse.Namespace) -> dict[str, Any]:
    with served([__file__, "--serve", "--workflows", str(args.workflows), "--steps", str(args.steps)]) as port, \
            tempfile.TemporaryDirectory(prefix="wf-bench-report-") as tmp:
        results, page, digest = _measure_all(args, port, Path(tmp))
    floor = statistics.median(r.wall_seconds for r in results["wf --help"])
    pictures = statistics.median(r.wall_seconds for r in results["import matplotlib.pyplot (Agg)"])
    return {
        "workflows": args.workflows, "steps": args.steps, "runs": args.runs,
        "page_kb": round(len(page.encode()) / 1024, 1), "pictures_in_page": page.count("data:image/png;base64,"),
        "digest_kb": round(digest / 1024, 1),
        "commands": {name: {"wall_seconds": round(statistics.median(r.wall_seconds for r in runs), 3),
                            "cpu_seconds": round(statistics.median(r.cpu_seconds for r in runs), 2),
                            "peak_rss_mb": round(max(r.peak_rss_mb for r in runs), 1),
                            "exit_codes": sorted({r.exit_code for r in runs}),
                            "over_wf_help": round(statistics.median(r.wall_seconds for r in runs) / floor, 2),
                            "over_matplotlib_import": round(statistics.median(r.wall_seconds for r in runs) / pictures,
                                                            2)}
                     for name, runs in results.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workflows", type=int, default=250)
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--src", default=str(ROOT / "src"), help="the wf source tree the commands run")
    parser.add_argument("--png", type=Path, help="write the page's pictures of such a day to this PNG instead")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)  # the benchmark's API server
    args = parser.parse_args()
    if args.serve:
        serve(args)
        return
    if args.png:
        from wf.cli.report_page import save_png
        from wf.controller.cost import NodeFacts
        from wf.controller.queue import parse_workload
        from wf.controller.report import Facts, build_report, window
        from wf.model.catalog import load_catalog

        now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
        workflows, workloads = day(args.workflows, args.steps, now)
        facts = Facts({n["metadata"]["name"]: NodeFacts(n["metadata"]["labels"][INSTANCE_TYPE_LABEL],
                                                        n["metadata"]["labels"][CAPACITY_LABEL])
                       for n in nodes(workflows)}, workloads=[parse_workload(w) for w in workloads])
        save_png(build_report(workflows, facts, load_catalog(CATALOG), window("24h", now)).digest(), str(args.png))
        print(f"{args.png}: {args.png.stat().st_size / 1024:.0f} KB")
        return
    result = benchmark(args)
    print(json.dumps(result, indent=2))
    if any(code != 0 for c in result["commands"].values() for code in c["exit_codes"]):
        sys.exit(1)


if __name__ == "__main__":
    main()
