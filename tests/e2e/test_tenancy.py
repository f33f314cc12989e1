"""Tenancy on the local cluster: a step's accounts cannot touch other pods, secrets or workflows; compiled pods
carry no API token for the step's program and run hardened; each workflow namespace's Pod Security admission
refuses what its classes do not need."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from wf.controller.client import Kube, Target, connect
from wf.core.constants import EXECUTOR_ACCOUNT, MPIJOB_EXECUTOR_ACCOUNT, STEP_ACCOUNT, WORKFLOW

from .conftest import ClusterHandle
from .test_cluster_workflows import _can
from .test_controller_e2e import job_file, step, wf_cli

pytestmark = pytest.mark.cluster
WORKFLOW_ACCOUNTS = (STEP_ACCOUNT, EXECUTOR_ACCOUNT, MPIJOB_EXECUTOR_ACCOUNT)
KUEUE_GATE = "kueue.x-k8s.io/admission"
TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"


@pytest.mark.parametrize("account", WORKFLOW_ACCOUNTS)
@pytest.mark.parametrize(("verb", "group", "resource"), [
    ("get", "", "pods"), ("watch", "", "pods"), ("patch", "", "pods"), ("update", "", "pods"),
    ("delete", "", "pods"), ("create", "", "pods/exec"), ("get", "", "secrets"), ("list", "", "secrets"),
    ("create", WORKFLOW.group, WORKFLOW.plural), ("patch", WORKFLOW.group, WORKFLOW.plural),
    ("create", "", "serviceaccounts/token"),
])
def test_no_workflow_account_may_touch_pods_secrets_or_workflows(
    local_cluster: ClusterHandle, kube: Kube, account: str, verb: str, group: str, resource: str
) -> None:
    for namespace in local_cluster.state.namespaces:
        assert not _can(kube, f"system:serviceaccount:{namespace}:{account}", verb, group, resource, namespace)


@pytest.mark.parametrize(("account", "verb", "group", "resource", "allowed"), [
    (EXECUTOR_ACCOUNT, "create", "argoproj.io", "workflowtaskresults", True),
    (EXECUTOR_ACCOUNT, "patch", "argoproj.io", "workflowtaskresults", True),
    (EXECUTOR_ACCOUNT, "create", "kubeflow.org", "mpijobs", False),
    (MPIJOB_EXECUTOR_ACCOUNT, "create", "argoproj.io", "workflowtaskresults", True),
    (MPIJOB_EXECUTOR_ACCOUNT, "create", "kubeflow.org", "mpijobs", True),
    (MPIJOB_EXECUTOR_ACCOUNT, "get", "kubeflow.org", "mpijobs", True),
    # A multi-node step's release init container deletes the MPIJob an earlier attempt left and waits until it is
    # gone (kubectl delete --wait: get, list, watch).
    (MPIJOB_EXECUTOR_ACCOUNT, "delete", "kubeflow.org", "mpijobs", True),
    (MPIJOB_EXECUTOR_ACCOUNT, "watch", "kubeflow.org", "mpijobs", True),
    (MPIJOB_EXECUTOR_ACCOUNT, "deletecollection", "kubeflow.org", "mpijobs", False),
    (MPIJOB_EXECUTOR_ACCOUNT, "delete", "batch", "jobs", False),
    (STEP_ACCOUNT, "create", "argoproj.io", "workflowtaskresults", False),
])
def test_the_executors_hold_what_argo_needs(
    local_cluster: ClusterHandle, kube: Kube, account: str, verb: str, group: str, resource: str, allowed: bool
) -> None:
    for namespace in local_cluster.state.namespaces:
        user = f"system:serviceaccount:{namespace}:{account}"
        assert _can(kube, user, verb, group, resource, namespace) is allowed, (user, verb, resource)


@contextmanager
def acting_as(handle: ClusterHandle, kube: Kube, account: str, tmp_path: Path) -> Iterator[Kube]:
    """A client holding a token of `account` in the cluster's workflow namespace, as a step's program would."""
    from kubernetes import client

    request = client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=600))
    token = kube.core.create_namespaced_service_account_token(account, handle.namespace, request).status.token
    config = yaml.safe_load(handle.kubeconfig.read_text())
    context = next(c for c in config["contexts"] if c["name"] == handle.context)
    config["users"] = [{"name": context["context"]["user"], "user": {"token": token}}]
    config["contexts"], config["current-context"] = [context], handle.context
    path = tmp_path / f"{account}.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    acting = connect(Target(kubeconfig=str(path), context=handle.context))
    try:
        yield acting
    finally:
        acting.api_client.close()


def _status(call: Any) -> int:
    from kubernetes.client.exceptions import ApiException

    try:
        call()
    except ApiException as exc:
        return int(exc.status)
    return 200


@pytest.mark.parametrize("account", [STEP_ACCOUNT, EXECUTOR_ACCOUNT])
def test_a_step_cannot_ungate_a_queued_pod_read_a_secret_or_submit(
    local_cluster: ClusterHandle, kube: Kube, account: str, tmp_path: Path
) -> None:
    namespace = local_cluster.namespace
    name = f"gated-{uuid.uuid4().hex[:6]}"
    kube.core.create_namespaced_pod(namespace, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"schedulingGates": [{"name": KUEUE_GATE}], "containers": [{"name": "c", "image": "busybox"}]}})
    try:
        with acting_as(local_cluster, kube, account, tmp_path) as step_client:
            core = step_client.core
            ungate = {"spec": {"schedulingGates": None}}
            assert _status(lambda: core.patch_namespaced_pod(name, namespace, ungate)) == 403
            assert _status(lambda: core.patch_namespaced_pod(
                name, namespace, {"metadata": {"labels": {"kueue.x-k8s.io/queue-name": "other"}}})) == 403
            assert _status(lambda: core.read_namespaced_secret(f"{EXECUTOR_ACCOUNT}.service-account-token",
                                                               namespace)) == 403
            workflow = {"apiVersion": WORKFLOW.api_version, "kind": WORKFLOW.kind, "metadata": {"generateName": "x-"},
                        "spec": {"entrypoint": "m", "templates": [{"name": "m", "container": {"image": "busybox"}}]}}
            assert _status(lambda: step_client.custom.create_namespaced_custom_object(
                WORKFLOW.group, "v1alpha1", namespace, WORKFLOW.plural, workflow)) == 403
        assert kube.core.read_namespaced_pod(name, namespace).spec.scheduling_gates  # still gated
    finally:
        kube.core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)


def test_a_compiled_step_gets_no_token_and_runs_hardened(local_cluster: ClusterHandle, kube: Kube,
                                                          tmp_path: Path) -> None:
    path = job_file(tmp_path, "hardened", [step("one")])
    result = wf_cli(local_cluster, "submit", str(path), "--watch", "--plain", "--context", local_cluster.context)
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"  # the executor's own work still succeeds
    name = next(line.split()[1].split("/")[1] for line in result.stdout.splitlines() if line.startswith("Workflow "))
    pods = kube.core.list_namespaced_pod(local_cluster.namespace,
                                         label_selector=f"workflows.argoproj.io/workflow={name}").items
    assert pods
    for pod in pods:
        spec = pod.spec
        assert spec.service_account_name == STEP_ACCOUNT and spec.automount_service_account_token is False
        assert spec.security_context.seccomp_profile.type == "RuntimeDefault"
        containers = {c.name: c for c in [*spec.containers, *(spec.init_containers or [])]}
        main = containers["main"]
        assert not [m for m in main.volume_mounts or [] if m.mount_path == TOKEN_PATH]
        assert main.security_context.allow_privilege_escalation is False
        assert main.security_context.capabilities.drop == ["ALL"]
        for argo in ("init", "wait"):
            mounts = {m.mount_path: m.name for m in containers[argo].volume_mounts or []}
            assert mounts.get(TOKEN_PATH) == "exec-sa-token", (argo, mounts)
        volume = next(v for v in spec.volumes if v.name == "exec-sa-token")
        assert volume.secret.secret_name == f"{EXECUTOR_ACCOUNT}.service-account-token"


def test_namespaces_enforce_pod_security(local_cluster: ClusterHandle, kube: Kube) -> None:
    from kubernetes.client.exceptions import ApiException

    levels = {ns: kube.core.read_namespace(ns).metadata.labels.get("pod-security.kubernetes.io/enforce")
              for ns in local_cluster.state.namespaces}
    assert set(levels.values()) <= {"baseline", "privileged"} and None not in levels.values(), levels
    baseline = [ns for ns, level in levels.items() if level == "baseline"]
    assert baseline, levels  # the examples' serving namespace runs no class that needs more
    host = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "host-path"},
            "spec": {"containers": [{"name": "c", "image": "busybox"}],
                     "volumes": [{"name": "root", "hostPath": {"path": "/"}}]}}
    with pytest.raises(ApiException) as refused:
        kube.core.create_namespaced_pod(baseline[0], host, dry_run="All")
    assert refused.value.status == 403 and "violates PodSecurity" in str(refused.value.body)
