"""Hand-written Workflow objects and fake API transports for the controller's unit tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def pod_node(wf: str, node_id: str, display: str, phase: str, *, template: str = "train", host: str | None = "node-a",
             started: str = "2026-03-01T12:00:00Z", finished: str | None = "2026-03-01T12:30:00Z",
             message: str = "", children: list[str] | None = None) -> dict[str, Any]:
    node = {"id": node_id, "name": f"{wf}.{display}", "displayName": display, "type": "Pod", "phase": phase,
            "templateName": template, "startedAt": started, "boundaryID": wf}
    if finished:
        node["finishedAt"] = finished
    if host:
        node["hostNodeName"] = host
    if message:
        node["message"] = message
    if children:
        node["children"] = children
    return node


def workflow(name: str = "bert-x7k2p", phase: str = "Running", nodes: dict[str, Any] | None = None,
             rv: str = "1", namespace: str = "wf") -> dict[str, Any]:
    """A compiled-shaped Workflow: step `train` (gaudi, spot) inside app retries around interruption retries."""
    return {
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
        "metadata": {"name": name, "namespace": namespace, "resourceVersion": rv, "uid": f"uid-{name}",
                     "labels": {"wf.dev/job": "bert"}},
        "spec": {"entrypoint": "Main", "templates": [
            {"name": "Main", "dag": {"tasks": [
                {"name": "prep", "template": "prep"},
                {"name": "train", "template": "train-Attempts", "dependencies": ["prep"]},
            ]}},
            {"name": "train-Attempts", "retryStrategy": {"limit": 2},
             "dag": {"tasks": [{"name": "train", "template": "train"}]}},
            {"name": "train", "nodeSelector": {"wf.dev/compute-class": "gaudi", "wf.dev/capacity": "spot"},
             "tolerations": [{"key": "habana.ai/gaudi", "operator": "Exists", "effect": "NoSchedule"}],
             "container": {"image": "x", "resources": {
                 "requests": {"cpu": "90", "memory": "600Gi", "habana.ai/gaudi": "8"},
                 "limits": {"habana.ai/gaudi": "8"}}}},
            {"name": "prep", "nodeSelector": {"wf.dev/compute-class": "cpu", "wf.dev/capacity": "on-demand"},
             "container": {"image": "x", "resources": {"requests": {"cpu": "7", "memory": "32Gi"}}}},
        ]},
        "status": {"phase": phase, "startedAt": "2026-03-01T12:00:00Z", "nodes": nodes or {}},
    }


def nested_run(wf: str = "bert-x7k2p", final: str = "Succeeded") -> dict[str, Any]:
    """prep succeeded; train: attempt 0 interrupted (pod deleted), then failed (exit 3), then app retry -> final."""
    n: dict[str, Any] = {
        wf: {"id": wf, "name": wf, "displayName": wf, "type": "DAG", "phase": final, "children": ["prep", "trainR"]},
        "prep": pod_node(wf, "prep", "prep", "Succeeded", template="prep", host="cpu-1",
                         finished="2026-03-01T12:10:00Z", children=["trainR"]),
        "trainR": {"id": "trainR", "name": f"{wf}.train", "displayName": "train", "type": "Retry", "phase": final,
                   "startedAt": "2026-03-01T12:10:00Z", "finishedAt": "2026-03-01T14:10:00Z",
                   "children": ["dag0", "dag1"], "boundaryID": wf},
        "dag0": {"id": "dag0", "name": f"{wf}.train(0)", "displayName": "train(0)", "type": "DAG", "phase": "Failed",
                 "children": ["inner0"], "startedAt": "2026-03-01T12:10:00Z"},
        "inner0": {"id": "inner0", "name": f"{wf}.train(0).train", "displayName": "train", "type": "Retry",
                   "phase": "Failed", "children": ["p0", "p1"], "boundaryID": "dag0",
                   "startedAt": "2026-03-01T12:10:00Z"},
        "p0": pod_node(wf, "p0", "train(0)", "Error", host="gaudi-1", started="2026-03-01T12:10:00Z",
                       finished="2026-03-01T12:40:00Z", message="pod deleted"),
        "p1": pod_node(wf, "p1", "train(1)", "Failed", host="gaudi-2", started="2026-03-01T12:41:00Z",
                       finished="2026-03-01T13:00:00Z", message="Error (exit code 3)"),
        "dag1": {"id": "dag1", "name": f"{wf}.train(1)", "displayName": "train(1)", "type": "DAG", "phase": final,
                 "children": ["inner1"], "startedAt": "2026-03-01T13:01:00Z"},
        "inner1": {"id": "inner1", "name": f"{wf}.train(1).train", "displayName": "train", "type": "Retry",
                   "phase": final, "children": ["p2"], "boundaryID": "dag1", "startedAt": "2026-03-01T13:01:00Z"},
        "p2": pod_node(wf, "p2", "train(0)", final, host="gaudi-2", started="2026-03-01T13:10:00Z",
                       finished="2026-03-01T14:10:00Z", message="" if final == "Succeeded" else "Error (exit code 1)"),
    }
    doc = workflow(wf, final, n)
    doc["status"]["finishedAt"] = "2026-03-01T14:10:00Z"
    return doc


class FakeTransport:
    """Scripted list/watch: each watch() call consumes the next script entry (a list of events or an exception)."""

    def __init__(self, lists: list[Any], watches: list[Any]) -> None:
        self.lists = list(lists)
        self.watches = list(watches)
        self.watched_from: list[str] = []
        self.list_calls = 0
        self.closed = False

    def pages(self) -> Iterator[tuple[list[dict[str, Any]], str]]:
        self.list_calls += 1
        entry = self.lists.pop(0)
        if isinstance(entry, BaseException):
            raise entry
        yield entry

    def watch(self, resource_version: str) -> Iterator[dict[str, Any]]:
        self.watched_from.append(resource_version)
        if not self.watches:
            raise AssertionError("watched more often than scripted")
        entry = self.watches.pop(0)
        if isinstance(entry, BaseException):
            raise entry
        for event in entry:
            if isinstance(event, BaseException):
                raise event
            yield event

    def close(self) -> None:
        self.closed = True


def fallback_run() -> dict[str, Any]:
    """cpu step `shard` (Spot, falls back On-Demand after 2 interruptions): the pod GC failed attempt 0, failed
    attempt 1 before its containers started, attempt 2 ran On-Demand and succeeded."""
    wf = "prep-q8z"
    nodes = {
        wf: {"id": wf, "name": wf, "displayName": wf, "type": "DAG", "phase": "Succeeded", "children": ["r"]},
        "r": {"id": "r", "name": f"{wf}.shard", "displayName": "shard", "type": "Retry", "phase": "Succeeded",
              "startedAt": "2026-03-01T12:00:00Z", "finishedAt": "2026-03-01T13:00:00Z", "children": ["q0", "q1", "q2"],
              "boundaryID": wf},
        "q0": pod_node(wf, "q0", "shard(0)", "Failed", template="shard", host="cpu-spot-1",
                       started="2026-03-01T12:00:00Z", finished="2026-03-01T12:20:00Z",
                       message="pod failed: neither main nor wait container completed successfully"),
        "q1": pod_node(wf, "q1", "shard(1)", "Failed", template="shard", host="cpu-spot-2",
                       started="2026-03-01T12:21:00Z", finished="2026-03-01T12:26:00Z",
                       message="can't find failed message for pod prep-q8z-shard-1 namespace wf"),
        "q2": pod_node(wf, "q2", "shard(2)", "Succeeded", template="shard", host="cpu-od-1",
                       started="2026-03-01T12:30:00Z", finished="2026-03-01T13:00:00Z"),
    }
    doc = workflow(wf, "Succeeded", nodes)
    doc["spec"]["templates"].append(
        {"name": "shard", "metadata": {"annotations": {"wf.dev/spot-fallback-after": "2"}},
         "nodeSelector": {"wf.dev/compute-class": "cpu", "wf.dev/capacity": "spot"},
         "container": {"image": "x", "resources": {"requests": {"cpu": "15", "memory": "8Gi"}}}})
    doc["status"]["finishedAt"] = "2026-03-01T13:00:00Z"
    return doc
