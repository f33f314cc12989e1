"""What grows and shrinks the node groups: cluster-autoscaler for eksctl's managed groups, or Karpenter's
NodePools and EC2NodeClasses, as the catalog's `cluster.autoscaler` says.

cluster-autoscaler finds the groups by the Auto Scaling group tags EKS puts on every managed node group
(`k8s.io/cluster-autoscaler/enabled`, `k8s.io/cluster-autoscaler/<cluster>`; EKS user guide, "Managed node
groups") and sizes a scale-up from zero from the node-template tags `wf eksctl generate` writes
(`NodeGroup.autoscaler_tags`). It reaches the AWS API through IAM roles for service accounts: the ServiceAccount
names the role (`eksctl create iamserviceaccount` makes one with the autoscaler's policy). Manifest after
kubernetes/autoscaler cluster-autoscaler/cloudprovider/aws/examples/cluster-autoscaler-autodiscover.yaml; the
image's minor version must be the cluster's (its README, "Releases").

Karpenter itself (its controller, IAM roles and interruption queue) is installed with its Helm chart, which
needs those AWS resources first; the bundle holds the NodePools that make its nodes wf's node groups.
"""

from __future__ import annotations

from typing import Any

from wf.core.errors import InputError, Problem
from wf.model.catalog import Catalog
from wf.render import karpenter

CLUSTER_AUTOSCALER = "cluster-autoscaler"
KARPENTER = "karpenter"
NAMESPACE = "kube-system"
NAME = "cluster-autoscaler"
ROLE_ARN_ANNOTATION = "eks.amazonaws.com/role-arn"
DISCOVERY_TAGS = ("k8s.io/cluster-autoscaler/enabled", "k8s.io/cluster-autoscaler/{cluster}")
IMAGE = "registry.k8s.io/autoscaling/cluster-autoscaler:v{version}.0"
_RBAC = "rbac.authorization.k8s.io/v1"
_META = {"name": NAME, "namespace": NAMESPACE}
_LABELS = {"app": NAME}
_CLUSTER_RULES: list[dict[str, Any]] = [
    {"apiGroups": [""], "resources": ["events", "endpoints"], "verbs": ["create", "patch"]},
    {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
    {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["update"]},
    {"apiGroups": [""], "resources": ["endpoints"], "resourceNames": [NAME], "verbs": ["get", "update"]},
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["watch", "list", "get", "update"]},
    {"apiGroups": [""], "resources": ["namespaces", "pods", "services", "replicationcontrollers",
                                      "persistentvolumeclaims", "persistentvolumes"],
     "verbs": ["watch", "list", "get"]},
    {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": ["watch", "list"]},
    {"apiGroups": ["apps"], "resources": ["statefulsets", "replicasets", "daemonsets"],
     "verbs": ["watch", "list", "get"]},
    {"apiGroups": ["storage.k8s.io"], "resources": ["storageclasses", "csinodes", "csidrivers",
                                                    "csistoragecapacities", "volumeattachments"],
     "verbs": ["watch", "list", "get"]},
    {"apiGroups": ["batch"], "resources": ["jobs", "cronjobs"], "verbs": ["watch", "list", "get"]},
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": [NAME],
     "verbs": ["get", "update"]},
]
_NAMESPACE_RULES: list[dict[str, Any]] = [
    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create", "list", "watch"]},
    {"apiGroups": [""], "resources": ["configmaps"],
     "resourceNames": ["cluster-autoscaler-status", "cluster-autoscaler-priority-expander"],
     "verbs": ["delete", "get", "update", "watch"]},
]


def check_choice(catalog: Catalog) -> None:
    """InputError where the autoscaler cannot keep what the node groups ask for: Karpenter keeps no minimum
    number of nodes (it launches for pending pods and removes empty nodes), so a class's minSize needs
    cluster-autoscaler's node groups."""
    if catalog.cluster.autoscaler != KARPENTER:
        return
    problems = [
        Problem.at(("computeClasses", c, "minSize"),
                   f"minSize {cls.min_size}: Karpenter (cluster.autoscaler) keeps no minimum of nodes; set minSize "
                   f"0, or use cluster-autoscaler with eksctl's node groups")
        for c, cls in enumerate(catalog.compute_classes) if cls.min_size
    ]
    if problems:
        raise InputError(problems)


def image(catalog: Catalog) -> str:
    return IMAGE.format(version=catalog.cluster.version)


def role_arn(catalog: Catalog, account: str) -> str:
    return f"arn:aws:iam::{account}:role/{catalog.cluster.name}-cluster-autoscaler"


def objects(catalog: Catalog, account: str | None) -> list[dict[str, Any]]:
    """The catalog's autoscaler; `account` (the AWS account id) names cluster-autoscaler's IAM role."""
    check_choice(catalog)
    if catalog.cluster.autoscaler == KARPENTER:
        return karpenter.manifests(catalog)
    if not account:
        raise InputError([Problem.at(("cluster", "autoscaler"), (
            "cluster-autoscaler reaches the Auto Scaling API through an IAM role for its service account: give the "
            f"AWS account id (--aws-account-id) of the role {catalog.cluster.name}-cluster-autoscaler"))])
    return cluster_autoscaler(catalog, account)


def deployment(catalog: Catalog) -> dict[str, Any]:
    discovery = ",".join(tag.format(cluster=catalog.cluster.name) for tag in DISCOVERY_TAGS)
    args = [
        "--cloud-provider=aws",
        f"--node-group-auto-discovery=asg:tag={discovery}",
        # One group per zone of a class x capacity: balancing keeps a class's nodes spread over its zones.
        "--balance-similar-node-groups",
        # Groups of a class differ only by zone; least-waste picks the group whose nodes the pending pods
        # fill best when classes overlap.
        "--expander=least-waste",
        # Training pods write scratch to emptyDir; a node running one is not idle.
        "--skip-nodes-with-local-storage=false",
        "--skip-nodes-with-system-pods=false",
        "--stderrthreshold=info",
        "--v=2",
    ]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {**_META, "labels": _LABELS},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": _LABELS},
            "template": {
                "metadata": {"labels": _LABELS},
                "spec": {
                    "serviceAccountName": NAME,
                    "priorityClassName": "system-cluster-critical",
                    "securityContext": {"runAsNonRoot": True, "runAsUser": 65534, "fsGroup": 65534,
                                        "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [{
                        "name": NAME,
                        "image": image(catalog),
                        "command": ["./cluster-autoscaler", *args],
                        # Its simulation holds every node and pod of the cluster: ~3,000 nodes need about 1Gi.
                        "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "2Gi"}},
                        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                            "capabilities": {"drop": ["ALL"]}},
                    }],
                },
            },
        },
    }


def cluster_autoscaler(catalog: Catalog, account: str) -> list[dict[str, Any]]:
    meta, labels = _META, _LABELS
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {**meta, "labels": labels, "annotations": {ROLE_ARN_ANNOTATION: role_arn(catalog, account)}}},
        {"apiVersion": _RBAC, "kind": "ClusterRole", "metadata": {"name": NAME, "labels": labels},
         "rules": _CLUSTER_RULES},
        {"apiVersion": _RBAC, "kind": "Role", "metadata": {**meta, "labels": labels}, "rules": _NAMESPACE_RULES},
        {"apiVersion": _RBAC, "kind": "ClusterRoleBinding", "metadata": {"name": NAME, "labels": labels},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME},
         "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}]},
        {"apiVersion": _RBAC, "kind": "RoleBinding", "metadata": {**meta, "labels": labels},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": NAME},
         "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}]},
        deployment(catalog),
    ]
