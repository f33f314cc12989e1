"""`wf stop` through the Kubernetes API: Argo is asked to stop, and what the step kinds leave running is deleted."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from kubernetes.client.exceptions import ApiException

from controller_fakes import workflow
from wf.controller.ops import stop_workflow
from wf.core.constants import MPIJOB, WORKFLOW, WORKFLOW_NAME_LABEL


class Custom:
    def __init__(self, missing_kinds: bool = False) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self.missing_kinds = missing_kinds

    def get_namespaced_custom_object(self, *args: Any) -> dict[str, Any]:
        return workflow("bert-x7k2p", "Running")

    def patch_namespaced_custom_object(self, *args: Any) -> dict[str, Any]:
        self.calls.append(("patch", args, {}))
        return workflow("bert-x7k2p", "Running")

    def delete_collection_namespaced_custom_object(self, *args: Any, **kwargs: Any) -> None:
        self.calls.append(("delete", args, kwargs))
        if self.missing_kinds:
            raise ApiException(status=404)


def kube(custom: Custom) -> Any:
    return SimpleNamespace(custom=custom, namespace="wf", context="test", server="https://127.0.0.1:6443")


def test_stop_asks_argo_to_stop_then_deletes_the_workflows_mpijobs() -> None:
    custom = Custom()
    stop_workflow(kube(custom), "bert-x7k2p")
    assert custom.calls == [
        ("patch", (WORKFLOW.group, WORKFLOW.version, "wf", WORKFLOW.plural, "bert-x7k2p",
                   {"spec": {"shutdown": "Stop"}}), {}),
        ("delete", (MPIJOB.group, MPIJOB.version, "wf", MPIJOB.plural),
         {"label_selector": f"{WORKFLOW_NAME_LABEL}=bert-x7k2p", "propagation_policy": "Background"}),
    ]


def test_stop_on_a_cluster_without_the_mpijob_kind_still_stops() -> None:
    custom = Custom(missing_kinds=True)
    stop_workflow(kube(custom), "bert-x7k2p")
    assert [c[0] for c in custom.calls] == ["patch", "delete"]


def test_a_multi_node_steps_launcher_and_workers_with_their_nodes_and_capacity() -> None:
    from datetime import UTC, datetime

    from rich.console import Console

    from wf.controller.ops import Replica, replicas
    from wf.controller.view import replicas_table

    def pod(name: str, role: str, node: str | None, capacity: str, phase: str, minute: int) -> SimpleNamespace:
        labels = {"wf.dev/step": "pretrain", "training.kubeflow.org/job-name": "bert-pretrain-x2k9q",
                  "training.kubeflow.org/job-role": role, "wf.dev/capacity": capacity}
        created = datetime(2026, 3, 1, 12, minute, tzinfo=UTC)
        return SimpleNamespace(metadata=SimpleNamespace(name=name, labels=labels, creation_timestamp=created),
                               spec=SimpleNamespace(node_name=node), status=SimpleNamespace(phase=phase))

    asked: list[str] = []

    def list_namespaced_pod(namespace: str, label_selector: str) -> SimpleNamespace:
        asked.append(f"{namespace} {label_selector}")
        return SimpleNamespace(items=[pod("l", "launcher", "cpu-od-1", "on-demand", "Running", 2),
                                      pod("w0", "worker", "gaudi-1", "spot", "Running", 1),
                                      pod("w1", "worker", None, "spot", "Pending", 1)])

    found = replicas(SimpleNamespace(core=SimpleNamespace(list_namespaced_pod=list_namespaced_pod), namespace="wf"),
                     "bert-m2p")
    assert asked == [f"wf {WORKFLOW_NAME_LABEL}=bert-m2p"]
    assert found[0] == Replica("pretrain", "bert-pretrain-x2k9q", "worker", "w0", "gaudi-1", "spot", "Running")
    assert [(r.role, r.node, r.capacity) for r in found] == [
        ("worker", "gaudi-1", "spot"), ("worker", None, "spot"), ("launcher", "cpu-od-1", "on-demand")]
    console = Console(width=200, record=True)
    console.print(replicas_table("bert-m2p", found))
    text = console.export_text()
    assert "launcher" in text and "cpu-od-1" in text and "on-demand" in text


def test_a_retry_the_controller_raced_is_planned_again_from_what_the_workflow_holds_now() -> None:
    from wf.controller.ops import retry_workflow

    class Raced(Custom):
        def __init__(self) -> None:
            super().__init__()
            self.version = 0

        def get_namespaced_custom_object(self, *args: Any) -> dict[str, Any]:
            self.version += 1
            return workflow("bert-x7k2p", "Failed", rv=str(self.version))

        def replace_namespaced_custom_object(self, *args: Any) -> dict[str, Any]:
            self.calls.append(("replace", (args[-1]["metadata"]["resourceVersion"],), {}))
            if len(self.calls) == 1:  # the controller wrote the workflow between our read and our PUT
                raise ApiException(status=409, reason="Conflict")
            return args[-1]

    custom = Raced()
    core = SimpleNamespace(delete_namespaced_pod=lambda *a: None,
                           list_namespaced_pod=lambda *a, **k: SimpleNamespace(items=[]))
    retried = retry_workflow(SimpleNamespace(custom=custom, core=core, namespace="wf", context="test",
                                             server="https://127.0.0.1:6443"), "bert-x7k2p")
    assert custom.calls == [("replace", ("1",), {}), ("replace", ("2",), {})]  # the second from a fresh read
    assert retried["status"]["phase"] == "Running"
