"""The node facts record (wf.compile.node_facts): a Node's facts, a pod's place, which attempt a multi-node step's
replica serves, and the record merged, bounded and read back as cost reads it."""

from __future__ import annotations

import json
from typing import Any

from wf.compile.node_facts import (
    MAX_RECORD_BYTES,
    Binding,
    GangAttempts,
    NodeFacts,
    NodeRecord,
    decode_record,
    disrupted_attempt,
    node_facts,
    pod_place,
    read_record,
)
from wf.controller.events import snapshot
from wf.core.constants import NODE_FACTS_ANNOTATION

NS = "ml-training"


def _pod(name: str, labels: dict[str, str], node: str | None = None, created: str = "2026-03-01T12:00:00Z",
         node_id: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS, "uid": f"uid-{name}", "labels": labels,
                            "creationTimestamp": created}
    if node_id:
        meta["annotations"] = {"workflows.argoproj.io/node-id": node_id}
    return {"metadata": meta, "spec": {"nodeName": node} if node else {}}


def _argo(name: str, node_id: str, node: str | None = None, mpijob: str | None = None,
          created: str = "2026-03-01T12:00:00Z") -> dict[str, Any]:
    labels = {"workflows.argoproj.io/workflow": "bert-x7k2p", **({"wf.dev/mpijob": mpijob} if mpijob else {})}
    return _pod(name, labels, node, created, node_id)


def _replica(name: str, role: str, node: str | None, created: str, mpijob: str = "bert-train-ab12") -> dict[str, Any]:
    return _pod(name, {"wf.dev/workflow": "bert-x7k2p", "training.kubeflow.org/job-name": mpijob,
                       "training.kubeflow.org/job-role": role}, node, created)


def _observe(gangs: GangAttempts, pod: dict[str, Any], deleted: bool = False) -> list[Binding]:
    place = pod_place(pod)
    assert place is not None
    return gangs.observe(pod["metadata"]["uid"], place, deleted)


def test_a_nodes_facts_are_its_type_capacity_and_zone_in_wfs_terms() -> None:
    eks = {"metadata": {"labels": {"node.kubernetes.io/instance-type": "dl1.24xlarge",
                                   "eks.amazonaws.com/capacityType": "SPOT",
                                   "topology.kubernetes.io/zone": "us-east-1a"}},
           "spec": {"taints": [{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]}}
    assert node_facts(eks) == NodeFacts("dl1.24xlarge", "spot", zone="us-east-1a")
    assert node_facts({"metadata": {"labels": {}}}) is None


def test_pods_of_a_workflow_are_placed_and_others_are_not() -> None:
    place = pod_place(_argo("p", "bert-x7k2p-123", "cpu-1"))
    assert place is not None and (place.workflow, place.node, place.attempt, place.role) == \
        ("bert-x7k2p", "cpu-1", "bert-x7k2p-123", None)
    replica = pod_place(_replica("w0", "worker", None, "2026-03-01T12:00:05Z"))
    assert replica is not None and (replica.mpijob, replica.role, replica.node) == ("bert-train-ab12", "worker", None)
    assert pod_place(_pod("coredns", {"k8s-app": "kube-dns"}, "cpu-1")) is None


def test_a_replica_serves_the_newest_resource_pod_of_its_mpijob_created_before_it() -> None:
    gangs = GangAttempts()
    # Attempt 1's resource pod, Pending, then bound; its gang's worker bound.
    assert _observe(gangs, _argo("r1", "a1", mpijob="bert-train-ab12")) == []
    assert _observe(gangs, _argo("r1", "a1", "cpu-1", "bert-train-ab12")) == [Binding(NS, "bert-x7k2p", "cpu-1")]
    assert _observe(gangs, _replica("w0", "worker", "gaudi-1", "2026-03-01T12:00:05Z")) == \
        [Binding(NS, "bert-x7k2p", "gaudi-1", ("a1", "worker"))]
    # Attempt 2 (same MPIJob name) starts; a worker of the old gang the operator recreated before it is still
    # attempt 1's, the new gang's are attempt 2's.
    _observe(gangs, _argo("r2", "a2", "cpu-1", "bert-train-ab12", created="2026-03-01T12:10:00Z"))
    assert _observe(gangs, _replica("w0b", "worker", "gaudi-2", "2026-03-01T12:09:00Z")) == \
        [Binding(NS, "bert-x7k2p", "gaudi-2", ("a1", "worker"))]
    assert _observe(gangs, _replica("l", "launcher", "cpu-1", "2026-03-01T12:10:30Z")) == \
        [Binding(NS, "bert-x7k2p", "cpu-1", ("a2", "launcher"))]
    # An unbound replica records nothing.
    assert _observe(gangs, _replica("w1", "worker", None, "2026-03-01T12:10:30Z")) == []


def test_a_replica_listed_before_its_resource_pod_waits_for_it() -> None:
    gangs = GangAttempts()
    early = _observe(gangs, _replica("w0", "worker", "gaudi-1", "2026-03-01T12:00:05Z"))
    assert early == [Binding(NS, "bert-x7k2p", "gaudi-1")]  # the node's facts now, its attempt once known
    assert _observe(gangs, _argo("r1", "a1", "cpu-1", "bert-train-ab12")) == [
        Binding(NS, "bert-x7k2p", "gaudi-1", ("a1", "worker")), Binding(NS, "bert-x7k2p", "cpu-1")]
    # Deleted replicas stop waiting: nothing is released for them.
    _observe(gangs, _replica("w9", "worker", "gaudi-3", "2026-03-01T11:00:00Z", mpijob="other"))
    _observe(gangs, _replica("w9", "worker", "gaudi-3", "2026-03-01T11:00:00Z", mpijob="other"), deleted=True)
    assert _observe(gangs, _argo("r0", "a0", None, "other", created="2026-03-01T10:00:00Z")) == []


def test_the_record_merges_once_per_node_and_stays_bounded() -> None:
    dl1 = NodeFacts("dl1.24xlarge", "spot", zone="us-east-1a")
    record = NodeRecord().with_binding("gaudi-1", dl1, None)
    assert record.holds("gaudi-1", None) and not NodeRecord().holds("gaudi-1", None)  # a node appears once
    assert not record.holds("gaudi-1", ("a1", "worker"))
    record = record.with_binding("gaudi-1", dl1, ("a1", "worker"))
    assert record.holds("gaudi-1", ("a1", "worker"))
    record = record.with_binding("gaudi-2", NodeFacts("dl1.24xlarge", "on-demand"), ("a1", "worker"))
    assert json.loads(record.encode()) == {"nodes": {"gaudi-1": ["dl1.24xlarge", "spot", "us-east-1a"],
                                                     "gaudi-2": ["dl1.24xlarge", "on-demand", ""]},
                                           "gangs": {"a1": {"worker": ["gaudi-1", "gaudi-2"]}}}
    read = decode_record(record.encode())
    assert read == record and read.nodes["gaudi-2"] == NodeFacts("dl1.24xlarge", "on-demand")
    assert read.gangs["a1"]["worker"] == ("gaudi-1", "gaudi-2")
    # The first facts of a node stay.
    assert decode_record(record.with_binding("gaudi-1", NodeFacts("p3.2xlarge", None), None).encode()) == record
    # Past the bound the record no longer fits (the recorder leaves the node to the live Node).
    full, count = NodeRecord(), 0
    while (grown := full.with_binding(f"ip-10-0-{count}.ec2.internal", dl1, None)).fits():
        full, count = grown, count + 1
    assert count > 900 and len(full.encode()) <= MAX_RECORD_BYTES < len(grown.encode())  # ~1,000 nodes a workflow
    assert not NodeRecord() and record


def test_a_record_wf_did_not_write_is_no_record() -> None:
    for text in ("", "not json", "[]", '{"nodes": {"a": "dl1"}}', '{"nodes": {"a": [1, 2]}}'):
        assert decode_record(text) == NodeRecord()
    assert read_record({"metadata": {}}) == NodeRecord()


def test_the_watchs_snapshot_keeps_the_record() -> None:
    text = NodeRecord({"gaudi-1": NodeFacts("dl1.24xlarge", "spot")}).encode()
    workflow = {"metadata": {"name": "w", "namespace": NS, "annotations": {NODE_FACTS_ANNOTATION: text, "x": "y"}},
                "spec": {"templates": []}, "status": {}}
    kept = snapshot(workflow).workflow
    assert kept["metadata"]["annotations"] == {NODE_FACTS_ANNOTATION: text}
    assert read_record(kept).nodes == {"gaudi-1": NodeFacts("dl1.24xlarge", "spot")}


def test_refusals_are_waited_out_until_they_last_then_are_the_accounts_missing_right() -> None:
    """A restarted API server refuses for a few seconds what RBAC allows; a refusal that lasts is the account's."""
    from wf.controller.stream import FORBIDDEN_PATIENCE, Refusals

    now = [100.0]
    refusals = Refusals(clock=lambda: now[0])
    assert refusals.patient()
    now[0] += FORBIDDEN_PATIENCE - 1
    assert refusals.patient()
    now[0] += 1
    assert not refusals.patient()
    refusals.clear()  # a list got through: the next refusal starts a new count
    now[0] += 1000
    assert refusals.patient()


def _running(pod: dict[str, Any], *, condition: str | None = None, deleting: bool = False,
             phase: str = "Running") -> dict[str, Any]:
    pod["status"] = {"phase": phase, "conditions": [{"type": "Ready", "status": "True"}] + (
        [{"type": "DisruptionTarget", "status": "True", "reason": condition}] if condition else [])}
    if deleting:
        pod["metadata"]["deletionTimestamp"] = "2026-03-01T12:05:00Z"
    return pod


def test_an_attempt_taken_away_while_it_ran_is_its_disruption() -> None:
    # An eviction (a drain's), the pod GC's deletion of a lost node's pod, or a plain deletion of a running pod.
    assert disrupted_attempt(_running(_argo("p", "a1", "cpu-1"), condition="EvictionByEvictionAPI")) == "a1"
    assert disrupted_attempt(_running(_argo("p", "a1", "cpu-1"), condition="DeletionByPodGC")) == "a1"
    assert disrupted_attempt(_running(_argo("p", "a1", "cpu-1"), deleting=True)) == "a1"
    # Not: a pod running undisturbed, one that had ended first (its program failed; Argo's pod GC deletes ended
    # pods), one never bound, and a pod that is not Argo's.
    assert disrupted_attempt(_running(_argo("p", "a1", "cpu-1"))) is None
    assert disrupted_attempt(_running(_argo("p", "a1", "cpu-1"), phase="Failed", condition="EvictionByEvictionAPI",
                                      deleting=True)) is None
    assert disrupted_attempt(_running(_argo("p", "a1", "cpu-1"), phase="Succeeded", deleting=True)) is None
    assert disrupted_attempt(_running(_argo("p", "a1"), deleting=True)) is None
    assert disrupted_attempt(_running(_replica("w0", "worker", "gaudi-1", "2026-03-01T12:00:05Z"),
                                      deleting=True)) is None


def test_the_record_keeps_the_attempts_taken_away_once() -> None:
    m5 = NodeFacts("m5.large", "spot", zone="us-east-1a")
    record = NodeRecord().with_binding("cpu-1", m5, None)
    assert "disrupted" not in json.loads(record.encode())  # records without any read as before
    taken = record.with_binding("cpu-1", m5, None, disrupted="a1")
    assert json.loads(taken.encode())["disrupted"] == ["a1"]
    assert taken.holds("cpu-1", None, "a1") and taken.with_binding("cpu-1", m5, None, disrupted="a1") == taken
    assert decode_record(taken.encode()).disrupted == frozenset({"a1"})
    assert decode_record(taken.encode()).holds("cpu-1", None) and not record.holds("cpu-1", None, "a1")
