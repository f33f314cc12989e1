"""Argo on the local cluster: workflows run to the end through the real scheduler and kwok's stages."""

from __future__ import annotations

import time
import uuid
from datetime import datetime
from typing import Any

import pytest

from wf.controller.client import Kube, pod_log
from wf.core.constants import (
    CATALOG_CONFIGMAP,
    CATALOG_KEY,
    CATALOG_NAMESPACE,
    CLASS_LABEL,
    SIM_DURATION,
    SIM_EXIT_CODE,
)
from wf.model.catalog import Catalog, load_catalog

from .conftest import ClusterHandle

pytestmark = pytest.mark.cluster


def _workflow(name: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    template: dict[str, Any] = {
        "name": "main",
        "nodeSelector": {CLASS_LABEL: "cpu"},
        "container": {"image": "busybox", "command": ["echo", "hello"], "resources": {"requests": {"cpu": "1"}}},
    }
    if annotations:
        template["metadata"] = {"annotations": annotations}
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": f"{name}-{uuid.uuid4().hex[:6]}"},
        "spec": {"entrypoint": "main", "templates": [template]},
    }


def _run(
    kube: Kube, workflow: dict[str, Any], timeout: float = 90, namespace: str | None = None
) -> tuple[dict[str, Any], Any]:
    """Submit, wait for a final phase, return (workflow, its pod)."""
    namespace = namespace or kube.namespace
    custom = kube.custom
    name = workflow["metadata"]["name"]
    custom.create_namespaced_custom_object("argoproj.io", "v1alpha1", namespace, "workflows", workflow)
    deadline = time.monotonic() + timeout
    while True:
        wf = custom.get_namespaced_custom_object("argoproj.io", "v1alpha1", namespace, "workflows", name)
        phase = (wf.get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed", "Error"):
            break
        assert time.monotonic() < deadline, f"workflow {name} still {phase!r} after {timeout}s: {wf.get('status')}"
        time.sleep(0.3)
    pods = kube.core.list_namespaced_pod(namespace, label_selector=f"workflows.argoproj.io/workflow={name}").items
    assert len(pods) == 1, [p.metadata.name for p in pods]
    return wf, pods[0]


def test_trivial_workflow_succeeds_on_a_node_the_scheduler_chose(local_cluster: ClusterHandle, kube: Kube) -> None:
    wf, pod = _run(kube, _workflow("trivial"))
    assert wf["status"]["phase"] == "Succeeded", wf["status"]
    assert pod.status.phase == "Succeeded"
    assert pod.spec.service_account_name == "wf-workflow"  # the controller ConfigMap's workflowDefaults
    statuses = {s.name: s for s in pod.status.container_statuses + (pod.status.init_container_statuses or [])}
    assert {"init", "wait", "main"} <= statuses.keys()
    assert all(s.state.terminated and s.state.terminated.exit_code == 0 for s in statuses.values())
    node = kube.core.read_node(pod.spec.node_name)
    assert node.metadata.labels[CLASS_LABEL] == "cpu"
    events = kube.core.list_namespaced_event(
        local_cluster.namespace, field_selector=f"involvedObject.name={pod.metadata.name},reason=Scheduled"
    ).items
    assert events and events[0].reporting_component == "default-scheduler"


def test_workflows_run_in_every_provisioned_namespace(local_cluster: ClusterHandle, kube: Kube) -> None:
    others = [n for n in local_cluster.state.namespaces if n != local_cluster.namespace]
    assert others, "the fixture provisions the examples' namespaces too"
    wf, pod = _run(kube, _workflow("elsewhere"), namespace=others[0])
    assert wf["status"]["phase"] == "Succeeded", wf["status"]
    assert pod.spec.service_account_name == "wf-workflow"


def test_exit_code_annotation_fails_the_step_with_that_code(kube: Kube) -> None:
    wf, pod = _run(kube, _workflow("fails", {SIM_EXIT_CODE: "3"}))
    assert wf["status"]["phase"] == "Failed", wf["status"]
    assert pod.status.phase == "Failed"
    main = next(s for s in pod.status.container_statuses if s.name == "main")
    wait = next(s for s in pod.status.container_statuses if s.name == "wait")
    assert main.state.terminated.exit_code == 3
    assert wait.state.terminated.exit_code == 0
    node = next(n for n in wf["status"]["nodes"].values() if n["type"] == "Pod")
    assert "exit code 3" in node.get("message", ""), node


def test_duration_annotation_holds_the_pod_running(kube: Kube) -> None:
    wf, pod = _run(kube, _workflow("slow", {SIM_DURATION: "4s"}))
    assert wf["status"]["phase"] == "Succeeded"
    main = next(s for s in pod.status.container_statuses if s.name == "main")
    ran = _seconds(main.state.terminated.finished_at) - _seconds(pod.status.start_time)
    assert ran >= 3.5, ran


def test_unschedulable_pod_stays_pending_with_the_schedulers_reason(local_cluster: ClusterHandle, kube: Kube) -> None:
    name = f"too-big-{uuid.uuid4().hex[:6]}"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {CLASS_LABEL: "gaudi"},
            "tolerations": [{"key": "habana.ai/gaudi", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": "c", "image": "x", "resources": {"limits": {"habana.ai/gaudi": "9"}}}],
        },
    }
    core = kube.core
    core.create_namespaced_pod(local_cluster.namespace, pod)
    try:
        deadline = time.monotonic() + 30
        condition = None
        while time.monotonic() < deadline:
            got = core.read_namespaced_pod(name, local_cluster.namespace)
            condition = next((c for c in got.status.conditions or [] if c.type == "PodScheduled"), None)
            if condition is not None:
                break
            time.sleep(0.3)
        assert condition is not None, "the scheduler never looked at the pod"
        assert got.status.phase == "Pending"
        assert condition.status == "False" and condition.reason == "Unschedulable"
        assert "Insufficient habana.ai/gaudi" in condition.message, condition.message
    finally:
        core.delete_namespaced_pod(name, local_cluster.namespace, grace_period_seconds=0)


def test_pod_logs_are_served_through_the_api_server(local_cluster: ClusterHandle, kube: Kube) -> None:
    _, pod = _run(kube, _workflow("logs"))
    text = pod_log(kube.core, pod.metadata.name, local_cluster.namespace, container="main")
    assert "simulated by kwok" in text and not text.startswith("b'"), text  # the text, not its bytes' repr


def test_catalog_is_stored_in_the_cluster(kube: Kube) -> None:
    cm = kube.core.read_namespaced_config_map(CATALOG_CONFIGMAP, CATALOG_NAMESPACE)
    stored = Catalog.from_yaml_text(cm.data[CATALOG_KEY], f"{CATALOG_NAMESPACE}/{CATALOG_CONFIGMAP}")
    assert stored.model_dump() == load_catalog().model_dump()


@pytest.mark.parametrize(
    ("verb", "group", "resource", "namespace", "allowed"),
    [
        ("create", "argoproj.io", "workflows", "wf", True),
        ("watch", "argoproj.io", "workflows", "wf", True),
        ("get", "", "pods", "wf", True),
        ("get", "", "pods/log", "wf", True),
        ("list", "", "events", "wf", True),
        ("delete", "argoproj.io", "workflows", "wf", False),
        ("create", "argoproj.io", "workflows", "default", False),
        ("list", "", "secrets", "wf", False),
        ("create", "", "pods", "wf", False),
    ],
)
def test_developer_role_is_least_privilege(
    kube: Kube, verb: str, group: str, resource: str, namespace: str, allowed: bool
) -> None:
    assert _can(kube, "system:serviceaccount:wf:wf-developer", verb, group, resource, namespace) is allowed


def _can(kube: Kube, user: str, verb: str, group: str, resource: str, namespace: str) -> bool:
    from kubernetes import client

    resource, _, subresource = resource.partition("/")
    review = client.V1SubjectAccessReview(
        spec=client.V1SubjectAccessReviewSpec(
            user=user,
            groups=["system:serviceaccounts", f"system:serviceaccounts:{user.split(':')[2]}", "system:authenticated"],
            resource_attributes=client.V1ResourceAttributes(
                verb=verb, group=group, resource=resource, subresource=subresource or None, namespace=namespace
            ),
        )
    )
    return bool(client.AuthorizationV1Api(kube.api_client).create_subject_access_review(review).status.allowed)


def _seconds(value: datetime | str) -> float:
    if isinstance(value, str):
        value = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return value.timestamp()

