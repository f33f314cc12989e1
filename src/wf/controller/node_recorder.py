"""The node facts recorder: as each pod of a workflow is bound to a node, that node's instance type, capacity and
zone are written into the workflow's ledger (wf.compile.node_facts, wf.controller.checkpoints), so every attempt can
be priced after its node is gone; each attempt whose pod was taken away while it ran (an eviction, a deletion) is
written there too, so its exit reads as an interruption whatever its code; and when a multi-node step's worker stops
running while its launcher runs, its MPIJob is marked (wf.controller.gangs), so the step's failure condition reads
an interruption, not the program's failure.

It watches the pods of every namespace that carry wf's step label (Argo's pods of a compiled step and a multi-node
step's launcher and workers alike: one stream, so an MPIJob's resource pod arrives before its replicas, and a
launcher's end before the operator's cleanup of its workers, which is no loss), and the Nodes, whose deletion loses
the workers on them before the pod GC deletes their pods. For a binding the workflow's record does not hold yet it
takes the Node's facts from the node stream, which keeps them after the Node is deleted (a binding that waited out a
busy API server, or a pod bound just before a storm took its node, is still priced), or else reads the Node; then it
merge-patches the record's key of the ledger (made, owned by the workflow, when missing). The record is kept off the
Workflow while it runs: Argo's controller rewrites that object whole, naming the version it read, and reconciles it
on every change, so each write there cost Argo a conflict (a read and a rewrite of the whole workflow) and queued
the workflow for reconciliation again (benchmarks/README.md: 13% to 21% of its updates refused at rehearsal size). A
workflow's writes run in one of RECORD_LANES threads off the streams, at most one every RECORD_INTERVAL, and the
bindings it gathers meanwhile go out together in its next write; the record's one writer is that lane, so no write
reads before it but the first after a restart. A node appears once per workflow, so a fan-out of 10,000 pods on 100
nodes costs at most 100 writes. A lost worker is marked first, in the pod stream's thread, before any binding of
that event is queued: mpirun fails within seconds of the loss, and the mark must be on the MPIJob when Argo reads
the launcher's failure.

A third stream, of the workflows Argo has ended (ARGO_COMPLETED_LABEL), copies each one's record onto it once
(NODE_FACTS_ANNOTATION), and again if a binding is written later: the ledger goes with the live workflow, and Argo's
archive, which keeps finished runs after that, copies the Workflow alone. Argo's archive worker copies what the
workflow is when it runs, once, while its archiving label says "Pending"; the copy sets that label back to "Pending",
so a run archived before its record was copied is archived again with it. The first copy (an empty record's too)
also counts the workflow into wf's metrics (`Counting`, wf.controller.metrics), once: a restarted recorder finds the
copy and does not count it again.

The watches are wf.controller.stream's: a dropped watch resumes, a 410 relists (a relist replays every bound pod, of
which only what the record lacks is written), the API server's absence is waited out. A 403 that lasts
(FORBIDDEN_PATIENCE) is the account's missing right, said once with the right it lacks; nothing else is tried for
that workflow until the recorder restarts (a refused mark is said each time: one per lost worker). A shorter one is
waited out: an API server that has just started may refuse what RBAC allows until its authorizer's caches fill.

Runs as `wf platform record-nodes`: on EKS the platform bundle's Deployment (service account wf-node-recorder,
which may get, list and watch pods and nodes, get, create and patch ConfigMaps, get, list, watch and patch workflows
and patch MPIJobs; it serves wf's metrics on its pod's address), on the local cluster a process beside the
simulated executor acting as that same account, its metrics on loopback: the same records, marks and counts on
both, whether or not anyone watches the workflow.
"""

from __future__ import annotations

import functools
import json
import logging
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from wf.compile.node_facts import (
    Binding,
    GangAttempts,
    NodeFacts,
    NodeRecord,
    disrupted_attempt,
    node_facts,
    pod_place,
)
from wf.controller.archive import Archive
from wf.controller.checkpoints import Ledger, ledger_name, parse_ledger, write_ledger
from wf.controller.client import Kube, is_transient, server_message
from wf.controller.gangs import Gangs, LostWorker, mark_worker_lost
from wf.controller.lanes import Lanes
from wf.controller.metrics import Exporter, observations
from wf.controller.report import Facts, run_of
from wf.controller.stream import WORKFLOW_PAGE, Backoff, KubeTransport, Refusals, Sink, Transport, watch_forever
from wf.core.constants import (
    ARGO_ARCHIVE_PENDING,
    ARGO_ARCHIVING_STATUS_LABEL,
    ARGO_COMPLETED_LABEL,
    JOB_LABEL,
    MPIJOB,
    NODE_FACTS_ANNOTATION,
    NODE_RECORD_KEY,
    STEP_LABEL,
    WORKFLOW,
)
from wf.core.errors import ClusterError, InputError
from wf.model.catalog import Catalog

log = logging.getLogger("wf.node-recorder")

# How long one binding's write, or one lost worker's mark, waits out a transient failure (a late mark still ends
# the attempt as an interruption while mpirun has not failed: the mark alone meets the failure condition).
TRANSIENT_SECONDS: Final = 60.0
# Threads writing records, each workflow's in one: a workflow's bindings that arrive while its record is being
# written go out together in its next write. On the full-size day (2026-12-07) one thread wrote every binding, a GET
# and a PATCH each that the loaded API server took seconds to answer (8 CPU s of work in a 31-minute day): the
# likeliest reason why 83 of 250 workflows kept an attempt that no record priced.
RECORD_LANES: Final = 8
# The least time between two writes of one workflow's record. A workflow's pods bind in bursts (a DAG level within
# seconds): written as they came, each burst of a few bindings was a request; on the evening's full-size day
# (2026-12-07), when the record still lived on the Workflow, that made the recorder its largest writer (3,084
# patches against Argo's 1,483 updates in 20 minutes; with 10 s: 912 in 15 minutes). The bindings wait in memory
# meanwhile, their nodes' facts kept by the node stream.
RECORD_INTERVAL: Final = 10.0
# Workflows whose record is remembered (what it holds, so a known binding costs no request): a day's worth.
REMEMBERED_WORKFLOWS: Final = 4096
# Nodes whose facts the node stream keeps, deleted ones included: the platform's 3,198 and a day's replacements.
REMEMBERED_NODES: Final = 16384
# Asks the API server for a workflow's metadata only (its uid, for the ledger's owner), not its megabyte of status.
_METADATA_ONLY: Final = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"

Key = tuple[str, str]  # a workflow: (namespace, name)


class Forbidden(Exception):
    """The recorder's account lacks a right it needs."""


@dataclass
class Ended:
    """A workflow Argo has ended, as the recorder last saw it."""

    archived: bool  # it carries Argo's archiving label: its archived copy must be made again to hold the record
    copied: int | None  # the hash of the record on it (NODE_FACTS_ANNOTATION), None without one


class Counting:
    """Counts ended workflows into wf's metrics (wf.controller.metrics) as `wf get` reads them: their steps (put back
    from Argo's database through the `archive` it gives, where Argo offloaded them), refined by their record, priced
    on the nodes it and the node stream know, each counted for the team the catalog gives its namespace."""

    def __init__(self, exporter: Exporter, catalog: Callable[[], Catalog],
                 archive: Callable[[], Archive | None] = lambda: None) -> None:
        self.exporter, self.catalog, self.archive = exporter, catalog, archive

    def count(self, workflow: dict[str, Any], record: NodeRecord, nodes: dict[str, NodeFacts]) -> None:
        from wf.argo.nodes import offloaded

        meta = workflow.get("metadata") or {}
        namespace, name = meta.get("namespace", ""), meta.get("name", "")
        job = (meta.get("labels") or {}).get(JOB_LABEL)
        if not job:
            return  # not a job's (a workflow wf did not compile): its name would be a label of its own
        if offloaded(workflow):
            try:
                archive = self.archive()
                whole = archive.hydrated(namespace, name) if archive else None
            except (ClusterError, InputError) as exc:
                whole, why = None, str(exc)
            else:
                why = "it is gone" if archive else "no Argo Server given (--argo-server)"
            if whole is None:
                log.warning("the steps of %s/%s are in Argo's database and could not be read (%s): only its end is "
                            "counted", namespace, name, why)
            workflow = whole or workflow
        run = run_of(workflow, Facts(nodes=nodes, ledger=lambda _namespace, _name: Ledger(nodes=record)),
                     self.catalog(), datetime.now(UTC))
        self.exporter.count(observations(run.team, job, run.view, run.cost, workflow))


class NodeRecorder:
    """Marks lost workers and records bindings as pod events arrive (`pod_event`, the pod stream's sink), lost
    workers as Nodes are deleted (`node_event`, the node stream's), and copies the record onto each workflow Argo
    has ended (`workflow_event`, the stream of ended workflows')."""

    def __init__(self, kube: Kube, api: Any = None, lanes: int = 0, interval: float = 0.0,
                 counting: Counting | None = None) -> None:
        """`lanes`: threads that write the records (RECORD_LANES); 0 writes each in the caller's thread. `interval`:
        with lanes, the least time between two writes of one workflow's record (RECORD_INTERVAL). `counting`: where
        each ended workflow is counted, once, when its record is first copied onto it (none: not counted)."""
        from kubernetes.client import CoreV1Api, CustomObjectsApi

        self.api = api or kube.api_client  # the client to call with: impersonating the recorder's account, or not
        self.core, self.custom = CoreV1Api(self.api), CustomObjectsApi(self.api)
        self.gangs = GangAttempts()
        self.lost = Gangs()  # the running replicas of each MPIJob, to tell a lost worker (two streams feed it)
        # The lanes' and the streams' threads share what follows under one lock.
        self._lock = threading.Lock()
        self._records: OrderedDict[Key, NodeRecord] = OrderedDict()
        self._pending: dict[Key, dict[Binding, None]] = {}  # bindings queued for a workflow's next write
        self._later: dict[Binding, None] = {}  # bindings a transient failure kept from being written
        self._ended: OrderedDict[Key, Ended] = OrderedDict()
        self._later_copies: set[Key] = set()  # ended workflows a transient failure kept the record from
        self._counting = counting
        self._uncounted: dict[Key, dict[str, Any]] = {}  # ended workflows not counted yet, as last seen
        # Those counted: a change Argo made before the copy may come after it, without the copy, and count nothing.
        self._counted: OrderedDict[Key, None] = OrderedDict()
        self._refused: set[Key] = set()  # workflows a 403 refused (said once)
        self._nodes: OrderedDict[str, NodeFacts] = OrderedDict()  # the node stream's, read by the writers
        self._lanes: Lanes[Key] | None = Lanes(lanes, self.flush, "node records") if lanes else None
        self._interval = interval
        self._written: dict[Key, float] = {}  # when each workflow's last write began (monotonic)
        self._due: queue.PriorityQueue[tuple[float, Key]] = queue.PriorityQueue()
        if self._lanes is not None and interval > 0:
            threading.Thread(target=self._release, name="node records due", daemon=True).start()

    def pod_event(self, kind: str, pod: dict[str, Any]) -> None:
        for loss in self.lost.observe(pod, kind == "DELETED"):
            self.mark(loss)
        if (place := pod_place(pod)) is None:
            return
        bindings = self.gangs.observe((pod.get("metadata") or {}).get("uid", ""), place, kind == "DELETED")
        if place.node and (attempt := disrupted_attempt(pod)):
            bindings.append(Binding(place.namespace, place.workflow, place.node, disrupted=attempt))
        with self._lock:
            bindings, self._later = [*self._later, *bindings], {}
            copies, self._later_copies = self._later_copies, set()
        for binding in bindings:
            self.queue(binding)
        for key in copies:
            self._hand_over(key)

    def queue(self, binding: Binding) -> None:
        """Have the binding written with whatever else its workflow's next write carries, unless its record holds
        it already (a relist replays every bound pod)."""
        key = (binding.namespace, binding.workflow)
        with self._lock:
            known = self._records.get(key)
            if key in self._refused or (known is not None and
                                        known.holds(binding.node, binding.gang, binding.disrupted)):
                return
            waiting = self._pending.setdefault(key, {})
            first, waiting[binding] = not waiting, None
            last = self._written.get(key)
        if not first:
            return  # its workflow's write is queued already and takes it along
        if self._lanes is not None and last is not None and last + self._interval > time.monotonic():
            self._due.put((last + self._interval, key))
        else:
            self._hand_over(key)

    def _hand_over(self, key: Key) -> None:
        """Have the workflow's lane write what is queued for it (and copy its record if it has ended)."""
        if self._lanes is None:
            self.flush(key)
        else:
            self._lanes.of(*key).put(key)

    def _release(self) -> None:
        """Hand each workflow whose write waits out the interval to its lane when its time comes, the earliest
        first (one queued while a later one is waited for goes right after it: late by less than the interval)."""
        assert self._lanes is not None
        while True:
            due, key = self._due.get()
            time.sleep(max(0.0, due - time.monotonic()))
            self._lanes.of(*key).put(key)

    def flush(self, key: Key) -> None:
        """Write what is queued for one workflow, then, if it has ended, copy its record onto it."""
        with self._lock:
            bindings = list(self._pending.pop(key, {}))
            if bindings and self._interval > 0:
                now = self._written[key] = time.monotonic()
                if len(self._written) > REMEMBERED_WORKFLOWS:  # only those still within their interval matter
                    self._written = {k: t for k, t in self._written.items() if now - t < self._interval}
            ended = key in self._ended
        if bindings:
            nodes = ", ".join(sorted({b.node for b in bindings}))
            self._patiently(key, f"recording nodes {nodes} of {key[0]}/{key[1]}", lambda: self._write(key, bindings),
                            lambda: self._later.update(dict.fromkeys(bindings)))
        if ended:
            self._patiently(key, f"copying the node record onto {key[0]}/{key[1]}", lambda: self._copy(key),
                            lambda: self._later_copies.add(key))

    def workflow_event(self, kind: str, workflow: dict[str, Any]) -> None:
        """An ended workflow's change: its record is copied onto it unless it holds it already. One that is gone
        (or no longer ended: `wf retry` takes it up again) is forgotten until it ends again."""
        meta = workflow.get("metadata") or {}
        key, labels = (meta.get("namespace", ""), meta.get("name", "")), meta.get("labels") or {}
        with self._lock:
            if kind == "DELETED" or labels.get(ARGO_COMPLETED_LABEL) != "true":
                self._ended.pop(key, None)
                self._uncounted.pop(key, None)
                if kind == "DELETED":
                    self._counted.pop(key, None)
                return
            copied = (meta.get("annotations") or {}).get(NODE_FACTS_ANNOTATION)
            known = self._ended.get(key)
            # Without a copy, a change Argo made before this process copied the record (its event comes later):
            # what was copied stands.
            copies = hash(copied) if copied else known.copied if known is not None else None
            self._ended[key] = Ended(ARGO_ARCHIVING_STATUS_LABEL in labels, copies)
            if copied is None and self._counting is not None and key not in self._counted:
                self._uncounted[key] = workflow  # held until its first copy (a lane's, seconds away)
            self._ended.move_to_end(key)
            while len(self._ended) > REMEMBERED_WORKFLOWS:
                forgotten, _ = self._ended.popitem(last=False)
                self._uncounted.pop(forgotten, None)
            if key in self._refused:
                return
        self._hand_over(key)

    def node_event(self, kind: str, node: dict[str, Any]) -> None:
        name = (node.get("metadata") or {}).get("name", "")
        if kind == "DELETED":
            for loss in self.lost.node_gone(name):
                self.mark(loss)
        elif name not in self._nodes and (facts := node_facts(node)) is not None:
            self._learn(name, facts)

    def _known_nodes(self) -> dict[str, NodeFacts]:
        with self._lock:
            return dict(self._nodes)

    def _learn(self, name: str, facts: NodeFacts) -> None:
        with self._lock:
            self._nodes[name] = facts
            while len(self._nodes) > REMEMBERED_NODES:
                self._nodes.popitem(last=False)

    def mark(self, loss: LostWorker) -> None:
        """Mark the loss's MPIJob, waiting out a transient failure for TRANSIENT_SECONDS."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        what = f"MPIJob {loss.namespace}/{loss.mpijob} (worker {loss.worker}: {loss.reason})"
        backoff, deadline, refusals = Backoff(), time.monotonic() + TRANSIENT_SECONDS, Refusals()
        while True:
            try:
                if mark_worker_lost(self.custom, loss):
                    log.info("marked %s lost while launcher %s ran", what, loss.launcher)
                return  # else the MPIJob is gone: its workflow stopped, nothing reads a mark
            except ApiException as exc:
                if exc.status == 403 and not refusals.patient():
                    log.error("marking %s: %s (the recorder needs patch on %s.%s); the attempt reads as the "
                              "program's failure", what, server_message(exc), MPIJOB.plural, MPIJOB.group)
                    return
                if (exc.status != 403 and not is_transient(exc)) or time.monotonic() >= deadline:
                    log.error("marking %s: %s %s", what, exc.status, server_message(exc))
                    return
            except (HTTPError, OSError) as exc:
                if time.monotonic() >= deadline:
                    log.error("marking %s: %s", what, exc)
                    return
            time.sleep(backoff.next())

    def _patiently(self, key: Key, what: str, write: Callable[[], None], later: Callable[[], None]) -> None:
        """Make one of a workflow's writes, waiting out a transient failure for TRANSIENT_SECONDS (then `later`,
        under the lock, keeps it for the next pod event)."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        backoff, deadline, refusals = Backoff(), time.monotonic() + TRANSIENT_SECONDS, Refusals()
        while True:
            try:
                write()
                return
            except Forbidden as exc:
                if refusals.patient():
                    time.sleep(backoff.next())
                    continue
                with self._lock:
                    self._refused.add(key)
                log.error("%s", exc)
                return
            except ApiException as exc:
                if not is_transient(exc):  # the server's verdict on this write (a 422, a webhook's refusal)
                    log.error("%s: %s %s", what, exc.status, server_message(exc))
                    return
                failure: object = server_message(exc)
            except (HTTPError, OSError) as exc:
                failure = exc
            if time.monotonic() >= deadline:
                log.warning("%s: %s; again at the next event", what, failure)
                with self._lock:
                    later()
                return
            time.sleep(backoff.next())

    def _facts(self, node: str) -> NodeFacts | None:
        from kubernetes.client.exceptions import ApiException

        with self._lock:
            if (known := self._nodes.get(node)) is not None:
                return known
        try:
            facts = node_facts(json.loads(self.core.read_node(node, _preload_content=False).data))
        except ApiException as exc:
            if exc.status == 404:
                return None  # gone before it was read: the live Node is no help either
            if exc.status == 403:
                raise Forbidden(f"reading node {node}: {server_message(exc)} (the recorder needs get on nodes)") \
                    from exc
            raise
        if facts is not None:
            self._learn(node, facts)
        return facts

    def _write(self, key: Key, bindings: list[Binding]) -> None:
        """One merge patch of the workflow's record with every binding it lacks."""
        from kubernetes.client.exceptions import ApiException

        namespace, workflow = key
        record, written = self._record(key), []
        for binding in bindings:
            if record.holds(binding.node, binding.gang, binding.disrupted):
                continue
            # A disruption on a node recorded already needs no facts read.
            if (facts := record.nodes.get(binding.node) or self._facts(binding.node)) is None:
                log.warning("node %s of %s/%s has no instance type (or is gone): not recorded", binding.node,
                            namespace, workflow)
                continue
            grown = record.with_binding(binding.node, facts, binding.gang, binding.disrupted)
            if not grown.fits():
                log.warning("the node record of %s/%s is full: node %s left to the live Node", namespace, workflow,
                            binding.node)
                continue
            record = grown
            written.append(f"recorded node {binding.node} ({facts.instance_type}) of {namespace}/{workflow}"
                           + (f", attempt {binding.gang[0]} {binding.gang[1]}" if binding.gang else "")
                           + (f", attempt {binding.disrupted} taken away" if binding.disrupted else ""))
        if written:
            try:
                made = write_ledger(self.core, namespace, workflow, {NODE_RECORD_KEY: record.encode()},
                                    lambda: self._owner(key))
            except ApiException as exc:
                if exc.status == 403:
                    raise self._refusal(exc, "write the ledger of", key, "create and patch on configmaps") from exc
                raise
            if not made:
                self._forget(key)
                return  # the workflow is gone: nothing to price
            for line in written:
                log.info("%s", line)
        self._remember(key, record)

    def _copy(self, key: Key) -> None:
        """Copy the ended workflow's record onto it, unless it holds that one already, setting its archiving label
        back to "Pending" when Argo archives it, so the archived copy is made again with the record; the first copy
        (an empty record's too: it says the workflow was counted) counts the workflow."""
        from kubernetes.client.exceptions import ApiException

        record = self._record(key)
        text = record.encode()
        with self._lock:
            ended = self._ended.get(key)
        if ended is None or ended.copied == hash(text) or (not record and ended.copied is not None):
            return
        labels = {ARGO_ARCHIVING_STATUS_LABEL: ARGO_ARCHIVE_PENDING} if ended.archived else {}
        body = {"metadata": {"annotations": {NODE_FACTS_ANNOTATION: text}, **({"labels": labels} if labels else {})}}
        try:
            self.custom.patch_namespaced_custom_object(WORKFLOW.group, WORKFLOW.version, key[0], WORKFLOW.plural,
                                                       key[1], body, _preload_content=False)
        except ApiException as exc:
            if exc.status == 404:
                self._forget(key)
                return
            if exc.status == 403:
                raise self._refusal(exc, "patch workflow", key, f"patch on workflows.{WORKFLOW.group}") from exc
            raise
        ended.copied = hash(text)
        log.info("copied the node record of %s/%s onto it (%d nodes)%s", *key, len(record.nodes),
                 ", to be archived again" if labels else "")
        with self._lock:
            if (workflow := self._uncounted.pop(key, None)) is not None:
                self._counted[key] = None
                while len(self._counted) > REMEMBERED_WORKFLOWS:
                    self._counted.popitem(last=False)
        if workflow is not None and self._counting is not None:
            try:
                self._counting.count(workflow, record, self._known_nodes())
            except Exception:  # a lane that raised would write no record again: a count is not worth that
                log.exception("counting %s/%s into wf's metrics", *key)

    def _record(self, key: Key) -> NodeRecord:
        """The workflow's record: as this process last wrote or read it, else as its ledger holds it."""
        from kubernetes.client.exceptions import ApiException

        with self._lock:
            if (known := self._records.get(key)) is not None:
                return known
        try:
            data = self.core.read_namespaced_config_map(ledger_name(key[1]), key[0], _preload_content=False).data
            record = parse_ledger(json.loads(data).get("data")).nodes
        except ApiException as exc:
            if exc.status == 403:
                raise self._refusal(exc, "read the ledger of", key, "get on configmaps") from exc
            if exc.status != 404:
                raise
            record = NodeRecord()  # nothing recorded yet: this process, its one writer, will know when there is
        self._remember(key, record)
        return record

    def _owner(self, key: Key) -> list[dict[str, Any]]:
        """The workflow's owner reference for its new ledger; none when it is gone."""
        from kubernetes.client.exceptions import ApiException

        namespace, name = key
        path = f"/apis/{WORKFLOW.group}/{WORKFLOW.version}/namespaces/{namespace}/{WORKFLOW.plural}/{name}"
        try:
            response = self.api.call_api(path, "GET", header_params={"Accept": _METADATA_ONLY},
                                         auth_settings=["BearerToken"], _preload_content=False,
                                         _return_http_data_only=True)
        except ApiException as exc:
            if exc.status == 404:
                return []
            if exc.status == 403:
                raise self._refusal(exc, "get workflow", key, f"get on workflows.{WORKFLOW.group}") from exc
            raise
        uid = (json.loads(response.data).get("metadata") or {}).get("uid")
        return [{"apiVersion": f"{WORKFLOW.group}/{WORKFLOW.version}", "kind": WORKFLOW.kind, "name": name,
                 "uid": uid}] if uid else []

    @staticmethod
    def _refusal(exc: Exception, doing: str, key: Key, needs: str) -> Forbidden:
        return Forbidden(f"{doing} {key[0]}/{key[1]}: {server_message(exc)} (the recorder needs {needs}); its nodes "
                         "are not recorded")

    def _remember(self, key: Key, record: NodeRecord) -> None:
        with self._lock:
            self._records[key] = record
            self._records.move_to_end(key)
            while len(self._records) > REMEMBERED_WORKFLOWS:
                self._records.popitem(last=False)

    def _forget(self, key: Key) -> None:
        with self._lock:
            self._records.pop(key, None)
            self._ended.pop(key, None)
            self._uncounted.pop(key, None)


def record_nodes(kube: Kube, api: Any = None, counting: Counting | None = None) -> None:
    """Record, mark, copy and count forever: the pod stream of every namespace and, once it has listed the pods, the
    node stream (a deletion matters only for the workers the pods named) and the stream of ended workflows, each
    started over when it gives up on the API server. A 403 on a stream itself that lasts (the account may not watch
    pods, nodes or workflows) raises Forbidden, naming the right; whatever else ends a stream is raised as well."""
    from kubernetes.client import CoreV1Api
    from kubernetes.client.exceptions import ApiException

    recorder = NodeRecorder(kube, api, lanes=RECORD_LANES, interval=RECORD_INTERVAL, counting=counting)
    core = CoreV1Api(recorder.api)
    ended: queue.SimpleQueue[BaseException] = queue.SimpleQueue()
    nodes_started = threading.Event()

    def watch(what: str, transport: Callable[[], Transport], sink: Sink, needs: str,
              on_synced: Callable[[], None] = lambda: None) -> None:
        try:
            watch_forever(what, transport, sink, log, on_synced)
        except ApiException as exc:  # watch_forever gives up on a lasting 403 only
            ended.put(Forbidden(f"watching {what}: {server_message(exc)} (the recorder needs {needs})"))
        except BaseException as exc:  # the process ends with it, as it would in one thread
            ended.put(exc)

    ended_workflows = functools.partial(recorder.custom.list_cluster_custom_object, WORKFLOW.group, WORKFLOW.version,
                                        WORKFLOW.plural)

    def watch_nodes_and_workflows() -> None:
        if not nodes_started.is_set():
            nodes_started.set()
            threading.Thread(target=watch, args=("nodes", lambda: KubeTransport(core.list_node), recorder.node_event,
                                                 "list and watch on nodes"), name="nodes", daemon=True).start()
            threading.Thread(target=watch, args=(
                "ended workflows", lambda: KubeTransport(ended_workflows, f"{ARGO_COMPLETED_LABEL}=true",
                                                         page=WORKFLOW_PAGE),
                recorder.workflow_event, f"list and watch on workflows.{WORKFLOW.group} in every namespace"),
                             name="ended workflows", daemon=True).start()

    threading.Thread(target=watch, args=(
        "pods", lambda: KubeTransport(core.list_pod_for_all_namespaces, label_selector=STEP_LABEL),
        recorder.pod_event, "get, list and watch on pods in every namespace", watch_nodes_and_workflows),
                     name="pods", daemon=True).start()
    raise ended.get()
