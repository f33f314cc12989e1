"""A day at the platform's scale on the local cluster, as one command.

    python benchmarks/scale.py                                  # the full day: 3,198 nodes, 250 workflows
    python benchmarks/scale.py --nodes-per-group 20 --workflows 20 --shards 5 --shard-seconds 20   # a rehearsal
    python benchmarks/scale.py --checkpoints                    # the day, half of it checkpointing

What it does, in order:
1. `wf cluster up --name scale --nodes-per-group N` (13 node groups of the default catalog: 246 per group
   gives 3,198 simulated nodes); a benchmark's earlier workflows are deleted first.
2. Writes W job specs from T teams (label `team`): a `prepare` step (cpu, on-demand), S shards (cpu Spot, each
   --shard-seconds long), then a `train` step on Gaudi (8 cards) or Graviton, alternating. No application
   retries: every retry seen is the interruption budget's.
3. Runs `wf submit DIR --watch --plain` as a child process (the real CLI) and, while it runs, a Spot storm:
   at --storm-at seconds a fraction of the cpu Spot nodes vanish without a drain (Node deleted: the pod
   garbage collector fails their pods), --wave-gap seconds later a second wave is drained gracefully (cordon,
   evict every pod, delete the node). Reclaimed capacity comes back through Karpenter's kwok provider
   (`--replace karpenter`, default: the cluster runs wf's NodePools beside the fixed nodes, and the retried
   pods that no longer fit make it provision nodes), or `--replace recreate`: the same simulated nodes are
   recreated by this script --replace-after seconds later (no autoscaler needed).
4. Prints: workflows Succeeded / not Succeeded, interrupted attempts and how each was retried, the wall time
   from first submit to last completion against the day's critical path, peak memory (VmHWM) and CPU seconds
   of every cluster process and of the wf child, and wf's API requests by method. `--json FILE` writes it all.

With `--report` it then checks that the numbers agree (issue 24): `wf report --since <the day> -o json` (wall and
peak RSS of the whole command, and of `-o html`), its totals against the sum of `wf get` over every workflow of the
day (each one's cost table, as printed; and which of them left an attempt unpriced: none should, the node facts
recorder keeps every attempt's node even when consolidation or the storm removed it), and wf's metrics as the
cluster's Prometheus scraped them from the recorder (completions, attempts, interruptions, node-hours and estimate;
each series' highest value over the day).

With `--checkpoints` every shard's simulated program saves a checkpoint every tenth of its work
(`sim.wf.dev/checkpoints: 10`), and every other workflow (by index) gives its steps a checkpoint location, so the
two halves meet the same storm in the same session: the shards of one resume after an interruption from their
last checkpoint, the others from zero. It then reports, per half, the node-hours redone (an interrupted attempt's
run time its checkpoint did not keep, priced like `wf get` does, wf.controller.cost) and, for the checkpointed
half, how every attempt after an interruption resumed (from the last checkpoint its location held, or wrongly).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from wf.argo.nodes import workflow_nodes
from wf.cluster.nodes import node_manifests
from wf.cluster.runtime import LocalCluster
from wf.compile.readback import node_capacity
from wf.controller.checkpoints import LEDGER_SUFFIX, AttemptRecord, Ledger, Saved, last_checkpoint, parse_ledger
from wf.controller.cost import NodeFacts, job_cost
from wf.controller.steps import pod_name, with_facts, workflow_view
from wf.controller.stream import BUSY, WORKFLOW_PAGE, Backoff
from wf.core.constants import CLUSTER_QUEUE, INSTANCE_TYPE_LABEL, SIM_CHECKPOINTS, SIM_DURATION, WORKFLOW
from wf.model.accelerators import GAUDI_RESOURCE
from wf.model.catalog import Catalog, load_catalog
from wf.model.nodegroups import node_group

BENCH_LABEL = "bench.wf.dev/run"
CHECKPOINTED_LABEL = "bench.wf.dev/checkpointed"  # "true" or "false" with --checkpoints
CHECKPOINTS_PER_STEP = 10
NAMESPACE = "wf"
SPOT_CPU = "wf.dev/compute-class=cpu,wf.dev/capacity=spot"
GAUDI = "gaudi"  # the class whose share across teams --queues reports (its flavors are gaudi-<capacity>)
CLK_TCK = os.sysconf("SC_CLK_TCK")

# The child: the real `wf` CLI, with its clients' request counters and its own peak memory and CPU written
# to a file when it exits (the counters live in the process, so the process must report them itself).
_CHILD = """
import atexit, json, resource, sys
from wf.controller import client
made = []
_connect = client.connect
def connect(target):
    kube = _connect(target)
    made.append(kube)
    return kube
client.connect = connect
def report():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    hwm = next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM:'))
    by_method = {}
    for kube in made:
        for method, n in kube.requests.by_method.items():
            by_method[method] = by_method.get(method, 0) + n
    json.dump({'peak_rss_kib': hwm, 'cpu_seconds': usage.ru_utime + usage.ru_stime, 'requests': by_method},
              open(sys.argv[1], 'w'))
atexit.register(report)
from wf.cli.app import main
main(sys.argv[2:])
"""


@dataclass
class Options:
    name: str
    nodes_per_group: int
    workflows: int
    teams: int
    shards: int
    prepare_seconds: int
    shard_seconds: int
    shard_cpu: str
    train_seconds: int
    storm_at: float
    storm_fraction: float
    drain_fraction: float
    wave_gap: float
    replace_after: float
    replace: str
    queues: bool
    checkpoints: bool
    report: bool
    timeout: float
    keep: bool
    json_out: Path | None
    profile: Path | None = None

    @property
    def critical_path(self) -> int:
        return self.prepare_seconds + self.shard_seconds + self.train_seconds


def job_spec(index: int, opts: Options, run: str) -> dict[str, Any]:
    team = f"team-{index % opts.teams}"
    # Alternate by round, not by index: with an even team count the index's parity would give Gaudi to
    # half of the teams only, and the share report would compare those teams with the idle ones.
    gaudi = (index // opts.teams) % 2 == 0
    simulated = {SIM_DURATION: f"{opts.shard_seconds}s"}
    if opts.checkpoints:  # both halves' programs save alike; only one half's steps have somewhere to keep them
        simulated[SIM_CHECKPOINTS] = str(CHECKPOINTS_PER_STEP)
    shards = [
        {"name": f"shard-{k}", "needs": ["prepare"], "command": ["python", "shard.py", str(k)], "capacity": "spot",
         "resources": {"cpu": opts.shard_cpu, "memory": "8Gi"}, "annotations": dict(simulated)}
        for k in range(opts.shards)
    ]
    train: dict[str, Any] = {
        "name": "train", "needs": [s["name"] for s in shards], "command": ["python", "train.py"],
        "annotations": {SIM_DURATION: f"{opts.train_seconds}s"},
    }
    if gaudi:
        train.update(compute=GAUDI, accelerators=8, resources={"cpu": 16, "memory": "128Gi"})
    else:
        train.update(compute="graviton", resources={"cpu": 16, "memory": "32Gi"})
    labels = {"team": team, BENCH_LABEL: run}
    spec: dict[str, Any] = {
        "image": "registry.example/train:1", "compute": "cpu", "retries": 0,
        "steps": [
            {"name": "prepare", "command": ["python", "prepare.py"], "capacity": "on-demand",
             "resources": {"cpu": 4, "memory": "16Gi"}, "annotations": {SIM_DURATION: f"{opts.prepare_seconds}s"}},
            *shards,
            train,
        ],
    }
    if opts.checkpoints:
        checkpointed = index % 2 == 1
        labels[CHECKPOINTED_LABEL] = str(checkpointed).lower()
        if checkpointed:
            spec["checkpoint"] = {}
    return {
        "apiVersion": "wf/v1",
        "kind": "TrainingJob",
        "metadata": {"name": f"day-{index:04d}", "namespace": team if opts.queues else NAMESPACE, "labels": labels},
        "spec": spec,
    }


def team_catalog(opts: Options, path: Path) -> Path:
    """The default catalog with the day's teams queued (issue 12): each team in its own namespace, an equal
    nominal share of every class x capacity the day uses, free to borrow the rest of the cohort's idle quota."""
    catalog = load_catalog()
    quotas = []
    for cls in catalog.compute_classes:
        for capacity in cls.capacity:
            group = node_group(cls, catalog, capacity)
            nodes = opts.nodes_per_group * len(cls.zones(catalog.cluster))
            least = group.least_allocatable()
            quota: dict[str, Any] = {"compute": cls.name, "capacity": capacity,
                                     "cpu": str(int(nodes * least["cpu"]) // opts.teams),
                                     "memory": f"{int(nodes * least['memory'] / 2**30) // opts.teams}Gi"}
            if cls.accelerator:
                quota["accelerators"] = nodes * cls.accelerator.count // opts.teams
            quotas.append(quota)
    teams = [{"name": f"team-{k}", "namespaces": [f"team-{k}"], "quotas": quotas} for k in range(opts.teams)]
    data = yaml.safe_load(catalog.to_yaml())
    data["queues"] = {"cohort": "day", "teams": teams}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@dataclass
class GaudiShare:
    """Each team's Gaudi cards in use, from its ClusterQueue's flavorsUsage every few seconds: card-seconds over
    the day against the team's nominal quota."""

    custom: Any
    interval: float = 5.0
    card_seconds: Counter[str] = field(default_factory=Counter)
    peak: Counter[str] = field(default_factory=Counter)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        while not self.stop.wait(self.interval):
            try:
                queues = self.custom.list_cluster_custom_object(
                    CLUSTER_QUEUE.group, CLUSTER_QUEUE.version, CLUSTER_QUEUE.plural)["items"]
            except Exception:  # the API server is busy: the next sample counts
                continue
            for cq in queues:
                cards = sum(int(r.get("total", 0)) for f in (cq.get("status") or {}).get("flavorsUsage") or []
                            if f.get("name", "").startswith(f"{GAUDI}-") for r in f.get("resources") or []
                            if r.get("name") == GAUDI_RESOURCE)
                team = cq["metadata"]["name"]
                self.card_seconds[team] += cards * self.interval
                self.peak[team] = max(self.peak[team], cards)


@dataclass
class Sampler:
    """Peak memory (VmHWM) and CPU seconds of each process, read from /proc every few seconds; the last
    reading of a process that exits is kept. A process's CPU includes its descendants' (PostgreSQL serves each
    connection in a child): the live ones', and the reaped ones' the kernel adds to their parent."""

    pids: dict[str, int]
    peak_kib: dict[str, int] = field(default_factory=dict)
    cpu_start: dict[str, float] = field(default_factory=dict)
    cpu_last: dict[str, float] = field(default_factory=dict)
    stop: threading.Event = field(default_factory=threading.Event)

    def read(self) -> None:
        stats = _proc_stats()
        children: defaultdict[int, list[int]] = defaultdict(list)
        for pid, stat in stats.items():
            children[int(stat[1])].append(pid)  # ppid, field 4 of /proc/pid/stat
        for name, pid in self.pids.items():
            if pid not in stats:
                continue
            try:
                status = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                continue
            hwm = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")), 0)
            tree, cpu = [pid], 0.0
            while tree:
                stat = stats.get(member := tree.pop())
                if stat is None:
                    continue
                # utime, stime, cutime, cstime: fields 14-17 of /proc/pid/stat
                cpu += sum(int(stat[i]) for i in (11, 12, 13, 14)) / CLK_TCK
                tree += [child for child in children[member] if child not in self.pids.values()]
            self.peak_kib[name] = max(self.peak_kib.get(name, 0), hwm)
            self.cpu_start.setdefault(name, cpu)
            self.cpu_last[name] = cpu

    def run(self) -> None:
        while not self.stop.wait(5.0):
            self.read()


def _proc_stats() -> dict[int, list[str]]:
    """Every process's /proc/pid/stat fields after the command name (field 3 onwards), by pid."""
    stats = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stats[int(entry.name)] = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue  # it exited meanwhile
    return stats


class Storm:
    """Two waves of Spot reclaims on the cpu Spot nodes, then their replacement."""

    def __init__(self, kube_api: Any, opts: Options, replacements: dict[str, dict[str, Any]]) -> None:
        self.api = kube_api
        self.opts = opts
        self.replacements = replacements
        self.log: list[str] = []
        self.vanished: list[str] = []
        self.drained: list[str] = []
        self.evicted = 0

    def say(self, text: str) -> None:
        line = f"[storm {time.strftime('%H:%M:%S')}] {text}"
        self.log.append(line)
        print(line, file=sys.stderr, flush=True)

    def run(self, started: float) -> None:
        from kubernetes import client

        core = client.CoreV1Api(self.api)
        spot = sorted(n.metadata.name for n in core.list_node(label_selector=SPOT_CPU).items)
        rng = random.Random(7)
        rng.shuffle(spot)
        first = spot[: max(1, int(len(spot) * self.opts.storm_fraction))]
        second = spot[len(first) : len(first) + max(1, int(len(spot) * self.opts.drain_fraction))]
        _sleep_until(started + self.opts.storm_at)
        self.say(f"wave 1: {len(first)} of {len(spot)} cpu Spot nodes vanish without a drain")
        for name in first:
            _patient_call(core.delete_node, name, tolerate=_GONE)
        self.vanished = first
        if self.opts.replace == "recreate":
            threading.Thread(target=self._replace, args=(core, first), daemon=True).start()
        time.sleep(self.opts.wave_gap)
        self.say(f"wave 2: {len(second)} cpu Spot nodes drained gracefully (cordon, evict, delete)")
        self._drain(core, second)
        self.drained = second
        if self.opts.replace == "recreate":
            self._replace(core, second)

    def _drain(self, core: Any, names: list[str]) -> None:
        """Cordon the wave's nodes, evict their pods, delete them. One listing of every pod for the whole wave, not
        one per node: at 3,198 nodes a field-selected list scans every pod, and 73 of them in a row on the loaded
        API server timed out (the full-size day's drain wave died on one)."""
        from kubernetes import client

        for name in names:
            _patient_call(core.patch_node, name, {"spec": {"unschedulable": True}}, tolerate=_GONE)
        wave = set(names)
        for pod in [p for p in _every_pod(core) if p.spec.node_name in wave]:
            body = client.V1Eviction(
                metadata=client.V1ObjectMeta(name=pod.metadata.name, namespace=pod.metadata.namespace))
            _patient_call(core.create_namespaced_pod_eviction, pod.metadata.name, pod.metadata.namespace, body,
                        tolerate=_GONE)
            self.evicted += 1
        for name in names:
            _patient_call(core.delete_node, name, tolerate=_GONE)

    def _replace(self, core: Any, names: list[str]) -> None:
        time.sleep(self.opts.replace_after)
        for name in names:
            _patient_call(core.create_node, self.replacements[name], tolerate=(409,))
        self.say(f"{len(names)} replacement nodes created")


_GONE = (404, 429)  # gone already; an eviction a disruption budget refused
_LIST_TIMEOUT = 300  # seconds: every pod of the day in one answer from a loaded API server
# Pods a page: the full-size day's drain, listing its 8,000 pods in one answer, had the loaded API server (4.4 GB)
# close the connection five times in a row, and the storm died mid-wave.
_PAGE = 500
# A call meeting a busy server or a dropped connection is tried this often, backing off up to this many seconds
# between tries (0.5 s doubling: about 1.5 to 3 minutes in all, the jitter's).
_BUSY_TRIES = 12
_BUSY_BACKOFF_CAP = 30.0


def _every_pod(core: Any) -> list[Any]:
    return _every(core.list_pod_for_all_namespaces, limit=_PAGE)


def _every(call: Any, *args: Any, limit: int, **kwargs: Any) -> list[Any]:
    """Every object of a list call, a page at a time (a client's models, or a custom resource's JSON), each page tried
    again as any call of the storm is. The pages are read back to back, before anything is done with them: read as
    the drain evicted each page's pods, a token outlived etcd's compaction (410 Expired on the full-size day,
    2026-12-07). A 410 still met is answered with the token the API server puts in it: the rest of the list, no
    longer one snapshot, which neither the drain nor the day's reading needs."""
    from kubernetes.client.exceptions import ApiException

    objects: list[Any] = []
    token: str | None = None
    while True:
        try:
            page = _patient_call(call, *args, limit=limit, _continue=token, _request_timeout=_LIST_TIMEOUT, **kwargs)
        except ApiException as exc:
            if exc.status != 410 or not token or not (token := _fresh_continue(exc)):
                raise
            continue
        if isinstance(page, dict):
            objects += page["items"]
            token = page["metadata"].get("continue")
        else:
            objects += page.items
            token = page.metadata._continue
        if not token:
            return objects


def _fresh_continue(exc: Any) -> str | None:
    """The continue token a 410 Expired carries (metadata.continue of its Status), if any."""
    try:
        return json.loads(exc.body or "{}").get("metadata", {}).get("continue") or None
    except (ValueError, AttributeError):
        return None


def _sleep_until(moment: float) -> None:
    time.sleep(max(0.0, moment - time.monotonic()))


def _patient_call(call: Any, *args: Any, tolerate: tuple[int, ...] = (), **kwargs: Any) -> Any:
    """One request of the storm, or of the reading after the day. A status in `tolerate` means there is nothing to
    do (404: gone already; 429: an eviction a budget refused; 409: recreated already). A dropped connection or a
    busy server's answer (BUSY: 429, 503, or 504, a list the loaded API server gave up on after its 60 s, or a page
    its watch cache was too far behind to serve) is tried again for up to two or three minutes: at 3,198 nodes the
    loaded API server closes some, and a storm that dies on one stops draining mid-wave (a day with every pod's log
    archived lost its drain wave to one 504; another, on 2026-12-07, to five 504s in 15 s, `Too large resource
    version`, its watch cache 538 revisions behind etcd), a reading that dies on one loses the whole day's figures."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    backoff = Backoff(cap=_BUSY_BACKOFF_CAP)
    for attempt in range(1, _BUSY_TRIES + 1):
        try:
            return call(*args, **kwargs)
        except ApiException as exc:
            if exc.status in tolerate:
                return None
            if exc.status not in BUSY or attempt == _BUSY_TRIES:
                raise
        except HTTPError:
            if attempt == _BUSY_TRIES:
                raise
        time.sleep(backoff.next())
    return None


def interruptions(workflows: list[dict[str, Any]]) -> Counter[tuple[str, str]]:
    """Every failed attempt (a pod node that failed) by message and by what followed it: another attempt of
    the same step that succeeded, one that failed too, or none (the step, and so the workflow, failed)."""
    out: Counter[tuple[str, str]] = Counter()
    for wf in workflows:
        nodes = workflow_nodes(wf)
        for node in nodes.values():
            if node.get("type") != "Retry":
                continue
            attempts = [nodes[c] for c in node.get("children") or [] if c in nodes]
            for i, attempt in enumerate(attempts):
                if attempt.get("phase") not in ("Failed", "Error"):
                    continue
                later = attempts[i + 1 :]
                if any(a.get("phase") == "Succeeded" for a in later):
                    outcome = "retried, then Succeeded"
                elif later:
                    outcome = "retried, still not Succeeded"
                else:
                    outcome = "NOT retried"
                out[(_short(attempt.get("message") or "(no message)"), outcome)] += 1
    return out


def checkpoint_report(workflows: list[dict[str, Any]], ledgers: dict[tuple[str, str], Ledger],
                      nodes: dict[str, NodeFacts], catalog: Catalog) -> dict[str, Any]:
    """Per half of the day (checkpointed or not): interrupted attempts, the run time and node-hours redone, and
    for the checkpointed half how each attempt after an interruption resumed: from the furthest checkpoint its
    location held by then (from the start when none had been saved yet), or not."""
    halves: dict[str, defaultdict[str, float]] = {}
    wrong: list[str] = []
    attempts: list[dict[str, Any]] = []  # every interrupted attempt, for --json: its run time and what it kept
    now = datetime.now().astimezone()
    for wf in workflows:
        meta = wf["metadata"]
        half = "with checkpoints" if (meta.get("labels") or {}).get(CHECKPOINTED_LABEL) == "true" \
            else "without checkpoints"
        ledger = ledgers.get((meta["namespace"], meta["name"]), Ledger())
        view = with_facts(workflow_view(wf), wf, ledger)
        cost = job_cost(view, wf, nodes, now, catalog, record=ledger.record(wf))
        totals = halves.setdefault(half, defaultdict(float))
        totals["workflows"] += 1
        totals["node_hours"] += cost.node_hours
        totals["redone_node_hours"] += cost.redone_node_hours
        totals["redone_usd"] += cost.redone_usd
        totals["redone_seconds"] += view.redone_seconds(now)
        for row in view.steps:
            totals["interrupted_attempts"] += row.interruptions
            attempts.extend({"half": half, "workflow": meta["name"], "step": row.name, "host": a.host,
                             "started": a.started.isoformat() if a.started else None,
                             "seconds": round(a.seconds(now), 1), "kept_seconds": round(a.kept_seconds, 1),
                             "resumed": str(a.resumed) if a.resumed else None}
                            for a in row.attempts if a.interrupted)
            before: dict[str, AttemptRecord] = {}
            for earlier, attempt in zip(row.attempts, row.attempts[1:], strict=False):
                if (record := ledger.attempts.get(pod_name(wf, earlier))) is not None:
                    before[pod_name(wf, earlier)] = record
                if not earlier.interrupted or attempt.resumed is None:
                    continue
                # No earlier attempt in the ledger: none ran its program (each was taken away before it started),
                # so none saved, and the work starts over.
                expected = last_checkpoint(before, next(iter(before.values())).location) if before else Saved()
                if attempt.resumed != expected:
                    wrong.append(f"{meta['name']} {row.name}: resumed {attempt.resumed}, expected {expected}")
                else:
                    totals["resumed_from_checkpoint" if expected.checkpoint else "resumed_from_start"] += 1
    counts = ("workflows", "interrupted_attempts", "resumed_from_checkpoint", "resumed_from_start")
    out: dict[str, Any] = {half: {k: int(v) if k in counts else round(v, 4) for k, v in totals.items()}
                           for half, totals in halves.items()}
    out["resumed_wrongly"] = wrong
    out["interrupted"] = attempts
    with_, without = out.get("with checkpoints", {}), out.get("without checkpoints", {})
    if without.get("redone_node_hours"):
        out["redone_ratio"] = round(with_.get("redone_node_hours", 0.0) / without["redone_node_hours"], 3)
    return out


def _short(message: str) -> str:
    # Pod names and node names vary; the class of message is what matters.
    words = [w for w in message.split() if not any(ch.isdigit() for ch in w) or len(w) < 4]
    text = " ".join(words)
    return text if len(text) <= 90 else text[:87] + "..."


def _time(stamp: str | None) -> float | None:
    return datetime.fromisoformat(stamp).timestamp() if stamp else None


def run(opts: Options) -> dict[str, Any]:
    from kubernetes import client

    from wf.controller.client import Target, connect

    cluster = LocalCluster(opts.name)

    def say(msg: str) -> None:
        print(f"[cluster] {msg}", file=sys.stderr, flush=True)

    try:
        up_started = time.monotonic()
        autoscaler = "karpenter" if opts.replace == "karpenter" else None
        catalog_path = team_catalog(opts, Path(tempfile.mkdtemp(prefix="wf-scale-")) / "catalog.yaml") \
            if opts.queues else None
        state = cluster.up(nodes_per_group=opts.nodes_per_group, say=say, timeout=900, autoscaler=autoscaler,
                           catalog_path=catalog_path, queues=opts.queues)
        up_seconds = time.monotonic() - up_started
        catalog = load_catalog(cluster.catalog_file)
        replacements = {m["metadata"]["name"]: m for m in node_manifests(catalog, opts.nodes_per_group)}
        api = connect(Target(kubeconfig=state.kubeconfig)).api_client
        custom = client.CustomObjectsApi(api)
        namespaces = [f"team-{k}" for k in range(opts.teams)] if opts.queues else [NAMESPACE]
        for namespace in namespaces:
            custom.delete_collection_namespaced_custom_object(WORKFLOW.group, WORKFLOW.version, namespace,
                                                              WORKFLOW.plural, label_selector=BENCH_LABEL)
        run_id = time.strftime("%Y%m%d%H%M%S")
        result: dict[str, Any] = {"options": {k: str(v) for k, v in vars(opts).items()}, "nodes": len(replacements),
                                  "up_seconds": round(up_seconds)}
        with tempfile.TemporaryDirectory(prefix="wf-scale-") as tmp:
            jobs = Path(tmp) / "jobs"
            jobs.mkdir()
            for i in range(opts.workflows):
                (jobs / f"day-{i:04d}.yaml").write_text(yaml.safe_dump(job_spec(i, opts, run_id), sort_keys=False))
            child_report = Path(tmp) / "wf-child.json"
            pids = {c.name: c.pid for c in cluster.status() if c.pid}
            src = str(Path(__import__("wf").__file__).resolve().parents[1])
            env = {**os.environ, "PYTHONPATH": src}
            argv = [sys.executable, "-c", _CHILD, str(child_report), "submit", str(jobs), "--watch", "--plain",
                    "--kubeconfig", state.kubeconfig, "--context", state.context]
            print(f"[bench] submitting {opts.workflows} workflows ({opts.workflows * (opts.shards + 2)} pods) "
                  f"on {len(replacements)} nodes; critical path {opts.critical_path}s", file=sys.stderr, flush=True)
            started = time.monotonic()
            child_log = Path(tmp) / "wf-child.log"
            with child_log.open("w") as log:
                child = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
                pids["wf submit --watch"] = child.pid
                sampler = Sampler(pids)
                sampler.read()
                threading.Thread(target=sampler.run, daemon=True).start()
                profiling = threading.Thread(target=profile_api_server, daemon=True,
                                             args=(api, opts.profile, opts.critical_path * 2))
                if opts.profile:
                    profiling.start()
                storm = Storm(api, opts, replacements)
                storm_thread = threading.Thread(target=storm.run, args=(started,), daemon=True)
                storm_thread.start()
                share = GaudiShare(custom)
                if opts.queues:
                    threading.Thread(target=share.run, daemon=True).start()
                try:
                    rc = child.wait(timeout=opts.timeout)
                except subprocess.TimeoutExpired:
                    child.terminate()
                    rc = child.wait(timeout=30)
                    print(f"[bench] the day did not end within {opts.timeout:.0f}s", file=sys.stderr)
                if rc not in (0, 1):  # the watch itself failed (1: a workflow did): why, before anything else can fail
                    print(f"[bench] wf submit --watch ended with exit {rc}:", *child_log.read_text().splitlines()[-15:],
                          sep="\n", file=sys.stderr, flush=True)
                storm_thread.join(timeout=opts.replace_after + 60)
                if opts.profile:  # a day shorter than the profile still gets it: the API server stays up until then
                    profiling.join(timeout=opts.critical_path * 2 + 120)
                sampler.stop.set()
                share.stop.set()
                sampler.read()
            tail = child_log.read_text().splitlines()[-15:]
            child_stats = json.loads(child_report.read_text()) if child_report.is_file() else {}
        items = [w for namespace in namespaces for w in _every(
            custom.list_namespaced_custom_object, WORKFLOW.group, WORKFLOW.version, namespace, WORKFLOW.plural,
            # A page of workflows as wf reads them: the day's 250 in one answer (25 MB) had the loaded API server
            # close the connection five times running on the evening's full-size day, and its figures were lost.
            label_selector=f"{BENCH_LABEL}={run_id}", limit=WORKFLOW_PAGE)]
        provisioned: Counter[str] = Counter()
        if autoscaler:
            claims = custom.list_cluster_custom_object("karpenter.sh", "v1", "nodeclaims")["items"]
            provisioned = Counter(c["metadata"]["labels"].get("karpenter.sh/nodepool", "?") for c in claims)
        if opts.checkpoints:
            core = client.CoreV1Api(api)
            # Every node an attempt may have run on: the fixed ones (the vanished included) and those left now.
            labels = {name: m["metadata"]["labels"] for name, m in replacements.items()}
            labels |= {n.metadata.name: n.metadata.labels or {} for n in core.list_node().items}
            facts = {name: NodeFacts(node[INSTANCE_TYPE_LABEL], node_capacity(node))
                     for name, node in labels.items() if INSTANCE_TYPE_LABEL in node}
            ledgers = {(namespace, cm.metadata.name.removesuffix(LEDGER_SUFFIX)): parse_ledger(cm.data)
                       for namespace in namespaces for cm in core.list_namespaced_config_map(namespace).items
                       if cm.metadata.name.endswith(LEDGER_SUFFIX)}
            result["checkpoints"] = checkpoint_report(items, ledgers, facts, catalog)
        api.close()
        if state.prometheus_url:
            result["api_server"] = api_server_load(state, time.monotonic() - started)
            result["argo_controller"] = argo_controller_load(state, time.monotonic() - started)
        if opts.report:
            result["report"] = day_report(state, items, env)
        phases = Counter((w.get("status") or {}).get("phase") or "Pending" for w in items)
        created = [t for w in items if (t := _time(w["metadata"].get("creationTimestamp")))]
        finished = [t for w in items if (t := _time((w.get("status") or {}).get("finishedAt")))]
        wall = (max(finished) - min(created)) if created and finished else None
        retried = interruptions(items)
        if child_stats:
            sampler.peak_kib["wf submit --watch"] = child_stats["peak_rss_kib"]
            sampler.cpu_last["wf submit --watch"] = child_stats["cpu_seconds"]
            sampler.cpu_start["wf submit --watch"] = 0.0
        result.update(
            workflows=len(items), phases=dict(phases), lost=len(items) - phases.get("Succeeded", 0),
            wf_exit_code=rc, wall_seconds=round(wall) if wall else None, critical_path_seconds=opts.critical_path,
            ratio=round(wall / opts.critical_path, 2) if wall else None,
            storm={"vanished": len(storm.vanished), "drained": len(storm.drained), "evictions": storm.evicted,
                   "log": storm.log, "replaced_by": opts.replace, "karpenter_nodes_at_end": dict(provisioned)},
            interrupted_attempts=[{"message": m, "outcome": o, "count": n} for (m, o), n in retried.most_common()],
            processes={n: {"peak_mib": round(sampler.peak_kib.get(n, 0) / 1024),
                           "cpu_seconds": round(sampler.cpu_last.get(n, 0) - sampler.cpu_start.get(n, 0), 1)}
                       for n in pids},
            wf_requests=child_stats.get("requests", {}), wf_output_tail=tail,
        )
        if opts.queues:
            total = sum(share.card_seconds.values()) or 1
            quota = load_catalog(catalog_path).queues.teams[0].quotas  # type: ignore[union-attr]
            nominal = next(q.accelerators for q in quota if q.compute == GAUDI)
            result["gaudi_share"] = {team: {"card_hours": round(share.card_seconds[team] / 3600, 2),
                                            "share": round(share.card_seconds[team] / total, 3),
                                            "quota_share": round(1 / opts.teams, 3), "nominal_cards": nominal,
                                            "peak_cards": share.peak[team]}
                                     for team in sorted(share.card_seconds)}
    finally:
        if not opts.keep:
            cluster.down(say=say)
    return result


def _measured(argv: list[str], env: dict[str, str]) -> tuple[str, float, int]:
    """A child's stdout, wall seconds and peak RSS in MiB. The peak is GNU time's reading of the command it forks:
    a child forked from this process starts with this process's high-water mark (the day's 250 workflows and
    ledgers: wait4 read 504-641 MiB for a `wf report` that peaks at 122 MB run from a shell)."""
    started = time.monotonic()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err, \
            tempfile.NamedTemporaryFile("r") as peak:
        child = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", peak.name, *argv], env=env, stdout=out, stderr=err,
                               stdin=subprocess.DEVNULL, check=False)
        wall = time.monotonic() - started
        out.seek(0)
        err.seek(0)
        if child.returncode:
            raise RuntimeError(f"{' '.join(argv[3:])}: exit {child.returncode}: {err.read().strip()[-500:]}")
        return out.read(), wall, round(int(peak.read().split()[-1]) / 1024)


def _get_total(out: str) -> tuple[float, float]:
    """Node-hours and the estimate of `wf get`'s cost table's total row (| total | | hours | OD $ | est $ |)."""
    def amount(cell: str) -> float:
        return 0.0 if cell.startswith("<") else float(cell.replace(",", ""))  # money() prints "<0.0001"

    for line in out.splitlines():
        cells = [c.strip() for c in line.split("\u2502")[1:-1]]
        if cells[:1] == ["total"]:
            return float(cells[2]), amount(cells[4].removesuffix(" (Spot)"))
    raise RuntimeError(f"no cost table in wf get's output: {out[-300:]}")


def prometheus_query(state: Any, query: str) -> list[dict[str, Any]]:
    """An instant query of the local cluster's Prometheus: its result's series."""
    import urllib.parse
    import urllib.request

    url = f"{state.prometheus_url}/api/v1/query?{urllib.parse.urlencode({'query': query})}"
    with urllib.request.urlopen(url, timeout=60) as answer:  # noqa: S310 - the local cluster's, on loopback
        return json.load(answer)["data"]["result"]


def profile_api_server(api: Any, out: Path, seconds: int) -> None:
    """A CPU profile of the API server over the day's first `seconds` (its pprof handler, on by default, as the
    cluster's admin), for `go tool pprof -top FILE`: which of its work the day's CPU goes to."""
    try:
        answer = api.call_api("/debug/pprof/profile", "GET", query_params=[("seconds", seconds)],
                              auth_settings=["BearerToken"], _preload_content=False, _return_http_data_only=True,
                              _request_timeout=seconds + 120)
        out.write_bytes(answer.data)
        print(f"[bench] the API server's CPU profile of {seconds}s: {out}", file=sys.stderr, flush=True)
    except Exception as exc:  # the day goes on without it
        print(f"[bench] no CPU profile of the API server: {exc}", file=sys.stderr, flush=True)


API_SERVER_ROWS = 12  # the API server's busiest kinds of request shown, and its busiest kinds of watch event


def _increase(state: Any, metric: str, labels: tuple[str, ...], window: str, top: bool = False,
              where: str = "") -> dict[tuple[str, ...], float]:
    """A counter's increase over the window per value of `labels` (the busiest API_SERVER_ROWS with `top`)."""
    query = f"sum by ({', '.join(labels)}) (increase({metric}{{{where}}}[{window}]))"
    rows = prometheus_query(state, f"topk({API_SERVER_ROWS}, {query})" if top else query)
    values = {tuple(row["metric"].get(k, "") for k in labels): float(row["value"][1]) for row in rows}
    return dict(sorted(values.items(), key=lambda item: -item[1]))  # an instant vector comes in no order


def api_server_load(state: Any, seconds: float) -> dict[str, Any]:
    """What the API server spent the day on, from its own metrics as Prometheus scraped them: the time it took
    to serve each (verb, resource) and how many requests, the conflicts it answered, and the watch events it sent
    per resource (how many, and their bytes, every watcher's counted). The day's CPU table says the API server is
    the busiest process; this says for what."""
    window = f"{int(seconds) + 60}s"
    request, resource = ("verb", "resource", "subresource"), ("resource",)
    counts = _increase(state, "apiserver_request_total", request, window)
    requests = [{"request": " ".join(k for k in key if k), "seconds": round(took), "count": round(counts.get(key, 0))}
                for key, took in _increase(state, "apiserver_request_duration_seconds_sum", request, window,
                                           top=True).items()]
    conflicts = [{"request": " ".join(k for k in key if k), "count": round(count)}
                 for key, count in _increase(state, "apiserver_request_total", request, window,
                                             where='code="409"').items() if count >= 1]
    events = _increase(state, "apiserver_watch_events_total", resource, window)
    watch = [{"resource": key[0], "mib": round(size / 2**20), "events": round(events.get(key, 0))}
             for key, size in _increase(state, "apiserver_watch_events_sizes_sum", resource, window, top=True).items()]
    return {"requests": requests, "conflicts": conflicts, "watch_events": watch}


def argo_controller_load(state: Any, seconds: float) -> dict[str, Any]:
    """What Argo's controller did over the day, from its own metrics: how many reconciliations of a workflow
    (operations) it ran and what they took, how often a workflow was queued for one (each change of a workflow
    by anyone queues it), how busy its workflow workers were, and its requests by kind, verb and answer."""
    window = f"{int(seconds) + 60}s"

    def total(metric: str, where: str = "") -> float:
        return sum(_increase(state, metric, (), window, where=where).values())

    operations = total("argo_workflows_operation_duration_seconds_count")
    busy = prometheus_query(state, f'max_over_time(argo_workflows_workers_busy_count'
                                   f'{{worker_type="workflow_queue"}}[{window}])')
    requests = [{"request": " ".join(key), "count": round(count)}
                for key, count in _increase(state, "argo_workflows_k8s_request_total",
                                            ("kind", "verb", "status_code"), window, top=True).items()]
    return {"operations": round(operations),
            "operation_mean_seconds": round(total("argo_workflows_operation_duration_seconds_sum")
                                            / operations, 2) if operations else None,
            "workflow_queue_adds": round(total("argo_workflows_queue_adds_count", 'queue_name="workflow_queue"')),
            "workers_busy_peak": max((float(row["value"][1]) for row in busy), default=None),
            "requests": requests}


def day_report(state: Any, items: list[dict[str, Any]], env: dict[str, str]) -> dict[str, Any]:
    """`wf report` over the day against `wf get` of each workflow and Prometheus's counters."""
    target = ["--kubeconfig", state.kubeconfig, "--context", state.context]
    wf = [sys.executable, "-m", "wf"]
    first = min(t for w in items if (t := _time(w["metadata"].get("creationTimestamp"))))
    since = f"{int((time.time() - first) // 60) + 2}m"
    out, wall, peak = _measured([*wf, "report", "--since", since, "-o", "json", *target], env)
    document = json.loads(out)
    with tempfile.TemporaryDirectory(prefix="wf-report-") as tmp:
        _, html_wall, html_peak = _measured([*wf, "report", "--since", since, "-o", "html", "--file",
                                             str(Path(tmp) / "day.html"), *target], env)
    names = {w["metadata"]["name"] for w in items}
    runs = [r for r in document["workflows"] if r["name"] in names]
    node_hours = estimate = 0.0
    mismatches, unpriced = [], []
    for run in runs:
        shown, _, _ = _measured([*wf, "get", run["name"], "-n", run["namespace"], *target], env)
        hours, usd = _get_total(shown)
        if "not priced" in shown:  # an attempt whose node is neither recorded (wf.dev/nodes) nor still there
            unpriced.append(run["name"])
        node_hours, estimate = node_hours + hours, estimate + usd
        if abs(hours - run["nodeHours"]) > 0.00005 or abs(usd - run["estimateUsd"]) > 0.0001:
            mismatches.append(f"{run['name']}: wf get {hours} h ${usd}, report {run['nodeHours']} h "
                              f"${run['estimateUsd']} ({run['unpricedAttempts']} attempts unpriced then)")
    total = document["usage"][-1]

    def scraped(metric: str, by: str = "") -> float:
        window = f"{int(time.time() - first) + 120}s"
        result = prometheus_query(state, f"sum(max_over_time({metric}{{{by}}}[{window}]))")
        return float(result[0]["value"][1]) if result else 0.0

    day = 'job_name=~"day-.*"'
    return {
        "json": {"wall_seconds": round(wall, 1), "peak_mib": peak},
        "html": {"wall_seconds": round(html_wall, 1), "peak_mib": html_peak},
        "workflows": len(runs), "outcomes": total["workflows"],
        "report": {"node_hours": total["nodeHours"], "estimate_usd": total["estimateUsd"],
                   "interruptions": total["interruptions"]},
        "sum_of_wf_get": {"node_hours": round(node_hours, 4), "estimate_usd": round(estimate, 4)},
        "mismatches": mismatches,
        "unpriced": unpriced,
        "prometheus": {"completions": scraped("wf_workflow_completions_total", day),
                       "attempts": scraped("wf_step_attempts_total", day),
                       "interruptions": scraped("wf_step_interruptions_total", day),
                       "node_hours": round(scraped("wf_step_node_seconds_total", day) / 3600, 4),
                       "estimate_usd": round(scraped("wf_step_estimated_cost_usd_total", day), 4)},
    }


def report(r: dict[str, Any]) -> None:
    print(f"\nnodes {r['nodes']} (up in {r['up_seconds']}s); workflows {r['workflows']}: {r['phases']}; "
          f"not Succeeded (lost): {r['lost']}; wf exit code {r['wf_exit_code']}")
    print(f"day: {r['wall_seconds']}s from first submit to last completion; "
          f"critical path {r['critical_path_seconds']}s -> {r['ratio']}x (goal <= 5x)")
    s = r["storm"]
    print(f"storm: {s['vanished']} nodes vanished, {s['drained']} drained ({s['evictions']} evictions); "
          f"replaced by {s['replaced_by']}" + (f", Karpenter nodes at the end: {s['karpenter_nodes_at_end']}"
                                              if s["replaced_by"] == "karpenter" else ""))
    print("interrupted attempts:" if r["interrupted_attempts"] else "interrupted attempts: none")
    for item in r["interrupted_attempts"]:
        print(f"  {item['count']:5d}  {item['outcome']:<30}  {item['message']}")
    print(f"{'process':<26} {'peak MiB':>9} {'CPU s':>8}")
    for name, p in r["processes"].items():
        print(f"{name:<26} {p['peak_mib']:>9} {p['cpu_seconds']:>8}")
    a = r.get("api_server", {})
    print(f"{'API server: time serving':<40} {'s':>7} {'requests':>9}")
    for row in a.get("requests", []):
        print(f"  {row['request']:<38} {row['seconds']:>7} {row['count']:>9}")
    print("API server: conflicts (409) " + ", ".join(f"{c['request']} {c['count']}" for c in a.get("conflicts", [])))
    print(f"{'API server: watch events sent, by resource':<40} {'MiB':>7} {'events':>9}")
    for row in a.get("watch_events", []):
        print(f"  {row['resource']:<38} {row['mib']:>7} {row['events']:>9}")
    if g := r.get("argo_controller"):
        print(f"Argo's controller: {g['operations']} operations, {g['operation_mean_seconds']} s each on average; "
              f"workflows queued {g['workflow_queue_adds']} times; workflow workers busy at most "
              f"{g['workers_busy_peak']}")
        print("  requests: " + ", ".join(f"{row['request']} {row['count']}" for row in g["requests"]))
    total = sum(r["wf_requests"].values())
    print(f"wf API requests: {total} {r['wf_requests']}")
    if "checkpoints" in r:
        c = r["checkpoints"]
        for half in ("without checkpoints", "with checkpoints"):
            h = c.get(half, {})
            print(f"{half:<20} workflows {h.get('workflows', 0):>4}  interrupted attempts "
                  f"{h.get('interrupted_attempts', 0):>5}  redone {h.get('redone_seconds', 0):>8.0f}s  "
                  f"{h.get('redone_node_hours', 0):.4f} of {h.get('node_hours', 0):.4f} node-hours  "
                  f"${h.get('redone_usd', 0):.4f}")
        with_ = c.get("with checkpoints", {})
        print(f"redone with / without checkpoints: {c.get('redone_ratio', '-')} (goal <= 0.2); attempts after an "
              f"interruption resumed from their last checkpoint: {with_.get('resumed_from_checkpoint', 0)}, from the "
              f"start with none saved yet: {with_.get('resumed_from_start', 0)}, wrongly: {len(c['resumed_wrongly'])}")
        for line in c["resumed_wrongly"][:10]:
            print(f"  {line}")
    if "report" in r:
        d = r["report"]
        print(f"wf report -o json: {d['json']['wall_seconds']}s, {d['json']['peak_mib']} MiB; -o html: "
              f"{d['html']['wall_seconds']}s, {d['html']['peak_mib']} MiB; {d['workflows']} workflows {d['outcomes']}")
        print(f"report totals {d['report']}; sum of wf get {d['sum_of_wf_get']}; workflows that differ: "
              f"{len(d['mismatches'])}; with an attempt not priced: {len(d['unpriced'])}; "
              f"Prometheus {d['prometheus']}")
        for line in [*d["mismatches"][:10], *d["unpriced"][:10]]:
            print(f"  {line}")
    if "gaudi_share" in r:
        print(f"{'team':<10} {'Gaudi card-hours':>17} {'share':>6} {'quota share':>12} {'peak cards':>11} "
              f"{'nominal':>8}")
        for team, g in r["gaudi_share"].items():
            print(f"{team:<10} {g['card_hours']:>17} {g['share']:>6} {g['quota_share']:>12} {g['peak_cards']:>11} "
                  f"{g['nominal_cards']:>8}")


def parse_options(argv: list[str] | None = None) -> Options:
    """The day's options from the command line (`argv`; the defaults are the full-size day)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--name", default="scale", help="local cluster name (created if missing)")
    p.add_argument("--nodes-per-group", type=int, default=246, help="13 node groups: 246 -> 3,198 nodes")
    p.add_argument("--workflows", type=int, default=250)
    p.add_argument("--teams", type=int, default=10)
    p.add_argument("--shards", type=int, default=30)
    p.add_argument("--prepare-seconds", type=int, default=10)
    p.add_argument("--shard-seconds", type=int, default=60)
    p.add_argument("--shard-cpu", default="1500m",
                   help="10 shards fill a cpu node: at the defaults the shards just fit the cpu Spot nodes, so "
                        "what the storm takes away must come back for the day to end soon")
    p.add_argument("--train-seconds", type=int, default=30)
    p.add_argument("--storm-at", type=float, default=100.0, help="seconds after the first submit")
    p.add_argument("--storm-fraction", type=float, default=0.2, help="cpu Spot nodes that vanish (wave 1)")
    p.add_argument("--drain-fraction", type=float, default=0.1, help="cpu Spot nodes drained (wave 2)")
    p.add_argument("--wave-gap", type=float, default=60.0)
    p.add_argument("--replace", choices=("karpenter", "recreate"), default="karpenter",
                   help="who brings capacity back: Karpenter's kwok provider, or this script recreating the nodes")
    p.add_argument("--replace-after", type=float, default=30.0,
                   help="with --replace recreate: seconds until nodes return")
    p.add_argument("--queues", action="store_true",
                   help="queue the teams with Kueue (each in its own namespace, an equal share of every class) and "
                        "report each team's share of Gaudi over the day against its quota")
    p.add_argument("--checkpoints", action="store_true",
                   help="shards save a checkpoint every tenth of their work; every other workflow keeps them "
                        "(a checkpoint location), and the two halves' redone node-hours are compared")
    p.add_argument("--report", action="store_true",
                   help="then check wf report against wf get and Prometheus, and time the report")
    p.add_argument("--timeout", type=float, default=3600.0, help="give up on the day after this many seconds")
    p.add_argument("--keep", action="store_true", help="leave the cluster running afterwards")
    p.add_argument("--json", dest="json_out", type=Path, help="also write the results here")
    p.add_argument("--profile", type=Path,
                   help="write a CPU profile of the API server over two critical paths from the first submit here")
    return Options(**vars(p.parse_args(argv)))


def main() -> None:
    opts = parse_options()
    result = run(opts)
    report(result)
    if opts.json_out:
        opts.json_out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
