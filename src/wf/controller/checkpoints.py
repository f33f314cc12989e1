"""The checkpoint ledger: what each attempt of a checkpointed step found and left in its checkpoint location, so
`wf get`, the watch and the cost table can tell where an attempt resumed and how much of an interrupted attempt's
run time its last checkpoint kept (the rest is work done twice).

One ConfigMap per workflow, `<workflow>-checkpoints` in its namespace and owned by it (removed with the workflow),
a key per attempt's pod holding a JSON record. The local cluster's simulated executor writes it (wf.cluster.executor)
as it plays checkpointing programs, and for an interrupted program without a checkpoint location how long it ran
(location ""): the work redone is then the program's run time its checkpoint did not keep, in both cases. On EKS
nothing writes it: the checkpoints are the program's files in S3 or on a volume, which wf does not read, so an
interrupted attempt's whole time, from its pod's creation to Argo's noticing its end, counts as redone there (an
upper bound; README, "Checkpoints").
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, Final

from wf.controller.client import Kube

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


def ledger_name(workflow: str) -> str:
    return workflow + LEDGER_SUFFIX


def parse_ledger(data: dict[str, str] | None) -> dict[str, AttemptRecord]:
    """The ConfigMap's data as records by pod name (unreadable records left out)."""
    records = {pod: AttemptRecord.decode(text) for pod, text in (data or {}).items()}
    return {pod: record for pod, record in records.items() if record is not None}


def last_checkpoint(records: dict[str, AttemptRecord], location: str) -> Saved:
    """The furthest checkpoint an ended attempt left in `location` (none: start over)."""
    saved = [r.saved for r in records.values() if r.location == location and r.saved is not None]
    return max(saved, key=lambda s: s.progress, default=Saved())


def read_ledger(kube: Kube, namespace: str, workflow: str) -> dict[str, AttemptRecord]:
    """The workflow's ledger; empty when it has none (no checkpointed step ran, or a real cluster)."""
    from kubernetes.client.exceptions import ApiException

    try:
        configmap: Any = kube.core.read_namespaced_config_map(ledger_name(workflow), namespace)
    except ApiException as exc:
        if exc.status in (403, 404):  # none, or a role that may not read ConfigMaps: nothing to add
            return {}
        raise
    return parse_ledger(configmap.data)
