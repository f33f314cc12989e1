"""Team queues read from Kueue Workloads: usage per class, and why a step waits for quota (pure arithmetic)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from test_kueue import team_catalog
from wf.controller.queue import parse_workload, quota_wait, usage
from wf.core.constants import CAPACITY_LABEL, CLASS_LABEL

GAUDI_TEMPLATE = {"nodeSelector": {CLASS_LABEL: "gaudi", CAPACITY_LABEL: "spot"}}


def workload(name: str, *, cards: int = 8, admitted: bool = False, finished: bool = False, priority: int = 100,
             created: str = "2026-01-01T00:00:00Z", namespace: str = "perception") -> dict[str, Any]:
    conditions = [{"type": "QuotaReserved", "status": "True" if admitted else "False",
                   "message": "" if admitted else "couldn't assign flavors to pod set main: insufficient unused quota "
                                                  f"for habana.ai/gaudi in flavor gaudi-spot, {cards} more needed"}]
    if finished:
        conditions.append({"type": "Finished", "status": "True"})
    status: dict[str, Any] = {"conditions": conditions}
    if admitted:
        status["admission"] = {"clusterQueue": "perception", "podSetAssignments": [{
            "name": "main", "flavors": {"cpu": "gaudi-spot", "habana.ai/gaudi": "gaudi-spot", "memory": "gaudi-spot"},
            "resourceUsage": {"cpu": "86", "habana.ai/gaudi": str(cards), "memory": "640Gi"}}]}
    return {"metadata": {"name": f"pod-{name}-x", "namespace": namespace, "creationTimestamp": created,
                         "ownerReferences": [{"kind": "Pod", "name": name}]},
            "spec": {"priority": priority, "queueName": "default"}, "status": status}


def test_usage_counts_admitted_unfinished_workloads(write: Callable[..., Path]) -> None:
    cat = team_catalog(write)
    team = cat.queues.team("perception")  # type: ignore[union-attr]
    loads = [parse_workload(w) for w in (workload("a", admitted=True), workload("b", admitted=True, cards=4),
                                         workload("c", admitted=True, finished=True), workload("d"))]
    lines = {(u.compute_class, u.resource): u for u in usage(cat, team, loads, {"pod-d-x": "gaudi-spot"})}
    gaudi = lines[("gaudi", "accelerators")]
    assert (gaudi.used, gaudi.quota, gaudi.borrowed, gaudi.borrowing_limit, gaudi.pending) == (12, 16, 0, 8, 1)
    assert lines[("cpu", "cpu")].used == 0 and lines[("cpu", "cpu")].quota == 32


def test_a_waiting_step_is_explained_in_team_terms(write: Callable[..., Path]) -> None:
    cat = team_catalog(write)
    team = cat.queues.team("perception")  # type: ignore[union-attr]
    loads = [parse_workload(w) for w in (
        workload("r1", admitted=True), workload("r2", admitted=True), workload("r3", admitted=True),
        workload("early", created="2026-01-01T00:00:01Z"),
        workload("urgent", created="2026-01-01T00:00:09Z", priority=1000),
        workload("mine", created="2026-01-01T00:00:05Z"), workload("late", created="2026-01-01T00:00:07Z"))]
    text = quota_wait(cat, team, loads, "mine", GAUDI_TEMPLATE)
    assert text == ("waiting for quota: perception uses 24 of 16 gaudi cards (8 borrowed from other teams); "
                    "2 workloads ahead")
    assert quota_wait(cat, team, loads, "r1", GAUDI_TEMPLATE) is None  # admitted
    assert quota_wait(cat, team, loads, "not-queued", GAUDI_TEMPLATE) is None


def test_first_in_line_has_nobody_ahead(write: Callable[..., Path]) -> None:
    cat = team_catalog(write)
    team = cat.queues.team("perception")  # type: ignore[union-attr]
    loads = [parse_workload(workload("mine"))]
    assert quota_wait(cat, team, loads, "mine", GAUDI_TEMPLATE) == \
        "waiting for quota: perception uses 0 of 16 gaudi cards; 0 workloads ahead"


def test_a_workload_kueue_has_not_looked_at_yet_is_not_explained(write: Callable[..., Path]) -> None:
    cat = team_catalog(write)
    team = cat.queues.team("perception")  # type: ignore[union-attr]
    fresh = workload("mine")
    fresh["status"] = {}
    assert quota_wait(cat, team, [parse_workload(fresh)], "mine", GAUDI_TEMPLATE) is None
