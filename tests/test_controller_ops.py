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
