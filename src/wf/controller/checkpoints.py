"""The workflow's ledger: what each attempt of a checkpointed step found and left in its checkpoint location, so
`wf get`, the watch and the cost table can tell where an attempt resumed and how much of an interrupted attempt's
run time its last checkpoint kept (the rest is work done twice); and, while the workflow runs, the node recorder's
record of where its attempts ran (wf.compile.node_facts), kept off the Workflow.

One ConfigMap per workflow, `<workflow>-checkpoints` in its namespace and owned by it (removed with the workflow),
a key per attempt's pod holding a JSON record, and the record under NODE_RECORD_KEY. The local cluster's simulated
executor writes the attempts' records (wf.cluster.executor) as it plays checkpointing programs, and for an
interrupted program without a checkpoint location how long it ran (location ""): the work redone is then the
program's run time its checkpoint did not keep, in both cases. On EKS only the node recorder writes it: the
checkpoints are the program's files in S3 or on a volume, which wf does not read, so an interrupted attempt's whole
time, from its pod's creation to Argo's noticing its end, counts as redone there (an upper bound; README,
"Checkpoints"). Each key has one writer, so a write is a merge patch of its keys, without a read before it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Final

from wf.compile.node_facts import NodeRecord, decode_record, read_record
from wf.controller.client import Kube
from wf.core.constants import NODE_RECORD_KEY

LEDGER_SUFFIX: Final = "-checkpoints"
FROM_THE_START: Final = "from the start"


@dataclass(frozen=True)
class Saved:
    """A checkpoint: its number (0: none, the work starts over) and the share of the step's work it holds."""

    checkpoint: int = 0
    progress: float = 0.0

    def __str__(self) -> str:
        if not self.checkpoint:
            return FROM_THE_START
        return f"at {self.progress:.0%} from checkpoint {self.checkpoint}"


@dataclass(frozen=True)
class AttemptRecord:
    location: str  # WF_CHECKPOINT_URI or WF_CHECKPOINT_DIR: the same for every attempt of a step (and item)
    resumed: Saved  # what the attempt started from
    saved: Saved | None = None  # the last checkpoint in the location when the attempt ended; None: not ended
    kept_seconds: float = 0.0  # the share of the attempt's run time that `saved` holds beyond `resumed`
    # How long the program ran, from its container's start to its end (its node's loss): the work an interruption
    # can cost, without the attempt's wait for a node before and Argo's noticing after. None: not recorded.
    ran_seconds: float | None = None

    def encode(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def decode(cls, text: str) -> AttemptRecord | None:
        try:
            data = json.loads(text)
            saved = data.get("saved")
            ran = data.get("ran_seconds")
            return cls(str(data["location"]), Saved(**data["resumed"]), Saved(**saved) if saved else None,
                       float(data.get("kept_seconds", 0.0)), float(ran) if ran is not None else None)
        except (ValueError, TypeError, KeyError, AttributeError):
            return None  # a record wf did not write: no resumption to show


@dataclass(frozen=True)
class Ledger:
    """A workflow's ledger: its attempts' records by pod name, and the node recorder's record."""

    attempts: Mapping[str, AttemptRecord] = field(default_factory=dict)
    nodes: NodeRecord = field(default_factory=NodeRecord)

    def record(self, workflow: Mapping[str, Any]) -> NodeRecord:
        """Where the workflow's attempts ran: the ledger's record, the newest; else the copy on the ended workflow
        (all that is left of an archived run, whose ledger went with the live object)."""
        return self.nodes if self.nodes else read_record(workflow)


def ledger_name(workflow: str) -> str:
    return workflow + LEDGER_SUFFIX


def parse_ledger(data: Mapping[str, str] | None) -> Ledger:
    """The ConfigMap's data as the ledger (unreadable records left out)."""
    data = data or {}
    records = {pod: AttemptRecord.decode(text) for pod, text in data.items() if pod != NODE_RECORD_KEY}
    nodes = data.get(NODE_RECORD_KEY)
    return Ledger({pod: record for pod, record in records.items() if record is not None},
                  decode_record(nodes) if nodes else NodeRecord())


def last_checkpoint(records: Mapping[str, AttemptRecord], location: str) -> Saved:
    """The furthest checkpoint an ended attempt left in `location` (none: start over)."""
    saved = [r.saved for r in records.values() if r.location == location and r.saved is not None]
    return max(saved, key=lambda s: s.progress, default=Saved())


def read_ledger(kube: Kube, namespace: str, workflow: str) -> Ledger:
    """The workflow's ledger; empty when it has none (nothing wrote one, or the workflow is gone)."""
    from kubernetes.client.exceptions import ApiException

    try:
        configmap: Any = kube.core.read_namespaced_config_map(ledger_name(workflow), namespace)
    except ApiException as exc:
        if exc.status in (403, 404):  # none, or a role that may not read ConfigMaps: nothing to add
            return Ledger()
        raise
    return parse_ledger(configmap.data)


def write_ledger(core: Any, namespace: str, workflow: str, data: Mapping[str, str],
                 owners: Callable[[], Sequence[Mapping[str, Any]]]) -> bool:
    """Merge `data`'s keys into the workflow's ledger (`core`: a CoreV1Api), creating it when missing, owned by
    the workflow (`owners()`: its owner references, asked for only then) so it goes with it. False when it could
    not be made: no owner (the workflow is gone)."""
    from kubernetes.client.exceptions import ApiException

    name, body = ledger_name(workflow), {"data": dict(data)}
    try:
        core.patch_namespaced_config_map(name, namespace, body)
        return True
    except ApiException as exc:
        if exc.status != 404:
            raise
    if not (references := list(owners())):
        return False  # a ledger is made only owned by its workflow, to go with it
    try:
        core.create_namespaced_config_map(namespace, {"metadata": {"name": name, "namespace": namespace,
                                                                   "ownerReferences": references}, **body})
    except ApiException as exc:
        if exc.status != 409:  # another writer created it meanwhile
            raise
        core.patch_namespaced_config_map(name, namespace, body)
    return True
