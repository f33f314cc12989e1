"""Watch benchmark: N workflows submitted and followed to their end on a real cluster, wf's watch engine against
hera-style polling (a GET per unfinished workflow every 5 s, as `Workflow.wait()` does), in the same run.

    wf cluster up                                   # or any cluster with Argo and the wf catalog
    python benchmarks/watch.py [--workflows 100] [--context wf-local] [--namespace wf] [--poll 5]

Counted: the HTTP requests each follower makes (its own client, so nothing is shared), and for every workflow
the delay from the moment its terminal phase reached the API server to the moment each follower reported it.
"When it reached the API server" is taken from a separate bare watch that only timestamps terminal events
(sub-second), and cross-checked against `status.finishedAt` (whole seconds, so up to 1 s coarser).
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from wf.controller.client import Kube, Target, connect
from wf.controller.steps import TERMINAL_PHASES
from wf.controller.stream import KubeTransport, NamespaceStream
from wf.controller.submit import BATCH_LABEL, load_jobs, submit_jobs
from wf.controller.view import PlainDisplay
from wf.controller.watch import watch_workflows
from wf.core.constants import WORKFLOW
from wf.core.units import parse_time

DURATIONS = ("2s", "5s", "10s", "20s", "30s")  # spread the ends over time, as real jobs do


def job_files(directory: Path, namespace: str, count: int) -> list[str]:
    paths = []
    for duration in DURATIONS:
        doc = {"apiVersion": "wf/v1", "kind": "TrainingJob",
               "metadata": {"name": f"bench-{duration}", "namespace": namespace},
               "spec": {"image": "busybox:1.36", "compute": "cpu", "retries": 0, "steps": [
                   {"name": "work", "command": ["true"], "resources": {"cpu": "100m", "memory": "64Mi"},
                    "annotations": {"sim.wf.dev/duration": duration}}]}}
        path = directory / f"bench-{duration}.yaml"
        path.write_text(yaml.safe_dump(doc))
        paths.append(str(path))
    return [paths[i % len(paths)] for i in range(count)]


def reference(
    kube: Kube, namespace: str, selector: str, names: set[str], seen: dict[str, float], stop: threading.Event
) -> None:
    """A bare watch that only timestamps terminal phases: when each end reached the API server."""
    def sink(kind: str, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        if name in names and name not in seen and (obj.get("status") or {}).get("phase") in TERMINAL_PHASES:
            seen[name] = time.time()

    stream = NamespaceStream(KubeTransport.workflows(kube, namespace, label_selector=selector), sink)
    threading.Thread(target=lambda: (stop.wait(), stream.stop()), daemon=True).start()
    stream.run()


def poll(kube: Kube, namespace: str, names: list[str], interval: float, noticed: dict[str, float],
         finished: dict[str, str]) -> None:
    """hera's Workflow.wait(): GET the workflow, sleep `interval`, until it has ended; one loop for all of them."""
    pending = list(names)
    while pending:
        still = []
        for name in pending:
            obj = kube.custom.get_namespaced_custom_object(WORKFLOW.group, WORKFLOW.version, namespace, WORKFLOW.plural,
                                                           name)
            status = obj.get("status") or {}
            if status.get("phase") in TERMINAL_PHASES:
                noticed[name] = time.time()
                finished[name] = status.get("finishedAt", "")
            else:
                still.append(name)
        pending = still
        if pending:
            time.sleep(interval)


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"p50": round(statistics.median(ordered), 3), "p95": round(ordered[int(0.95 * (len(ordered) - 1))], 3),
            "max": round(ordered[-1], 3), "mean": round(statistics.fmean(ordered), 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workflows", type=int, default=100)
    parser.add_argument("--context")
    parser.add_argument("--kubeconfig")
    parser.add_argument("--namespace", default="wf")
    parser.add_argument("--poll", type=float, default=5.0, help="hera's poll interval (Workflow.wait default: 5 s)")
    parser.add_argument("--json", action="store_true", help="print only the JSON result")
    args = parser.parse_args()
    where = Target(kubeconfig=args.kubeconfig, context=args.context, namespace=args.namespace)

    submitter = connect(where)
    with tempfile.TemporaryDirectory() as tmp:
        jobs = load_jobs(job_files(Path(tmp), args.namespace, args.workflows))
    from wf.controller.catalog_source import resolve_catalog

    catalog = resolve_catalog(submitter)
    t0 = time.time()
    submitted = submit_jobs(submitter, jobs, catalog, rate=50, burst=50)
    submit_seconds = time.time() - t0
    names = [s.name for s in submitted]
    selector = f"{BATCH_LABEL}={submitted[0].batch}"

    stop = threading.Event()
    ref_seen: dict[str, float] = {}
    threading.Thread(target=reference, args=(connect(where), args.namespace, selector, set(names), ref_seen, stop),
                     daemon=True).start()
    poller, poll_noticed, finished_at = connect(where), {}, {}
    polling = threading.Thread(target=poll, args=(poller, args.namespace, names, args.poll, poll_noticed, finished_at))
    polling.start()
    engine = connect(where)
    outcome = watch_workflows(engine, [(args.namespace, n) for n in names], display=PlainDisplay(io.StringIO()),
                              label_selector=selector, with_cost=False)
    polling.join()
    time.sleep(0.5)
    stop.set()
    wall = time.time() - t0

    engine_noticed = {key[1]: at for key, at in outcome.noticed_at.items()}
    missing = [n for n in names if n not in ref_seen]
    delays = {
        "engine_vs_watch_event": [engine_noticed[n] - ref_seen[n] for n in names if n in ref_seen],
        "polling_vs_watch_event": [poll_noticed[n] - ref_seen[n] for n in names if n in ref_seen],
        "engine_vs_finishedAt": [engine_noticed[n] - parse_time(finished_at[n]).timestamp()
                                 for n in names if finished_at.get(n)],
        "polling_vs_finishedAt": [poll_noticed[n] - parse_time(finished_at[n]).timestamp()
                                  for n in names if finished_at.get(n)],
    }
    phases: dict[str, int] = {}
    for view in outcome.views.values():
        phases[view.phase] = phases.get(view.phase, 0) + 1
    result = {
        "workflows": args.workflows,
        "phases": phases,
        "submit": {"seconds": round(submit_seconds, 2), "requests": submitter.requests.total},
        "wall_seconds": round(wall, 1),
        "requests": {"engine": dict(engine.requests.by_method), "engine_total": engine.requests.total,
                     "polling_total": poller.requests.total,
                     "ratio": round(engine.requests.total / max(1, poller.requests.total), 4)},
        "stream": {ns: vars(stats) for ns, stats in outcome.stats.items()},
        "delay_seconds": {k: summary(v) for k, v in delays.items() if v},
        "reference_missed": len(missing),
    }
    print(json.dumps(result, indent=2))
    if not args.json:
        d = result["delay_seconds"]
        engine_delay, polling_delay = d["engine_vs_watch_event"], d["polling_vs_watch_event"]
        print(f"\n{args.workflows} workflows: engine {engine.requests.total} requests "
              f"vs polling {poller.requests.total} "
              f"({result['requests']['ratio']:.1%}); time to notice p50/p95/max: engine "
              f"{engine_delay['p50']}/{engine_delay['p95']}/{engine_delay['max']} s, "
              f"polling {polling_delay['p50']}/{polling_delay['p95']}/{polling_delay['max']} s",
              file=sys.stderr)


if __name__ == "__main__":
    main()
