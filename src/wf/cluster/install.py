"""Put wf's platform objects into the local cluster: Argo's CRDs and ConfigMap, namespaces, RBAC, the
catalog ConfigMap and the simulated nodes. Everything is server-side applied, so a repeated `up` that has
nothing to change changes nothing.

Imports the Kubernetes client; only the cluster commands import this module.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from wf.cluster import mpi
from wf.cluster.nodes import SIMULATED_ANNOTATION, node_manifests
from wf.compile.artifacts import repository_configmap
from wf.core.constants import ARGO_GROUP, CATALOG_CONFIGMAP, CATALOG_KEY, CATALOG_NAMESPACE
from wf.core.errors import ClusterError
from wf.model.catalog import Catalog, Taint

FIELD_MANAGER = "wf-cluster"
WORKFLOW_NAMESPACE = "wf"
CONTROLLER_NAMESPACE = "argo"
# Applied in this order: namespaces before what lives in them, CRDs before the controller starts.
MANIFEST_FILES = ("namespaces.yaml", "argo-crds.yaml", "workflow-controller-configmap.yaml", "rbac.yaml")


def manifests_dir() -> Path:
    """manifests/ of the repository, which the package carries as wf/manifests (a symlink in the source tree,
    copied into wheels), so an installed wf has the same objects a platform engineer applies by hand."""
    directory = Path(__file__).resolve().parents[1] / "manifests"
    if not (directory / "argo-crds.yaml").is_file():
        raise ClusterError(f"wf's manifests are missing from {directory}: reinstall wf")
    return directory


def _load(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((manifests_dir() / name).read_text()) if d]


def platform_manifests() -> list[dict[str, Any]]:
    return [doc for name in MANIFEST_FILES for doc in _load(name)]


def workflow_namespace_manifests(namespace: str) -> list[dict[str, Any]]:
    """Another namespace where workflows may run: the namespace plus rbac.yaml's service accounts, roles
    and bindings (written for `wf`), re-targeted at it. Without wf-workflow there, Argo could not create
    the pods (the controller's workflowDefaults name that service account)."""
    docs: list[dict[str, Any]] = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}]
    for doc in _load("rbac.yaml"):
        doc = copy.deepcopy(doc)
        doc["metadata"]["namespace"] = namespace
        for subject in doc.get("subjects") or []:
            if subject.get("kind") == "ServiceAccount":
                subject["namespace"] = namespace
        docs.append(doc)
    return docs


def catalog_configmap(catalog: Catalog) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": CATALOG_CONFIGMAP, "namespace": CATALOG_NAMESPACE},
        "data": {CATALOG_KEY: catalog.to_yaml()},
    }


def install(
    kubeconfig: Path, catalog: Catalog, nodes_per_group: int, namespaces: Sequence[str] = (WORKFLOW_NAMESPACE,)
) -> None:
    """Apply the platform objects, the workflow namespaces and the nodes; delete simulated nodes that are
    no longer wanted (namespaces are never deleted: they may hold someone's work)."""
    from kubernetes.dynamic import DynamicClient

    from wf.controller.client import connect

    api_client = connect(kubeconfig=str(kubeconfig)).api_client
    try:
        client = DynamicClient(api_client)
        for manifest in [*platform_manifests(), *mpi.crd_manifests()]:
            apply(client, manifest)
        for namespace in namespaces:
            if namespace != WORKFLOW_NAMESPACE:
                for manifest in workflow_namespace_manifests(namespace):
                    apply(client, manifest)
        for group in (ARGO_GROUP, mpi.CRD_GROUP):
            wait_crds_established(client, group)
        apply(client, catalog_configmap(catalog))
        if catalog.artifacts:  # compiled workflows with artifacts name this repository (artifactRepositoryRef)
            for namespace in namespaces:
                apply(client, repository_configmap(catalog.artifacts, namespace))
        wanted = node_manifests(catalog, nodes_per_group)
        for node in wanted:
            _ensure_node(client, node)
        _delete_unwanted_nodes(client, {n["metadata"]["name"] for n in wanted})
    finally:
        api_client.close()


def apply(client: Any, manifest: dict[str, Any]) -> None:
    """Server-side apply, forcing our field manager's ownership (a repeated `up` changes nothing)."""
    from kubernetes.client.exceptions import ApiException

    resource = client.resources.get(api_version=manifest["apiVersion"], kind=manifest["kind"])
    meta = manifest["metadata"]
    try:
        client.server_side_apply(
            resource,
            body=manifest,
            name=meta["name"],
            namespace=meta.get("namespace"),
            field_manager=FIELD_MANAGER,
            force_conflicts=True,
        )
    except ApiException as exc:
        raise ClusterError(f"applying {manifest['kind']} {meta['name']}: {exc.status} {exc.reason}") from exc


def _ensure_node(client: Any, manifest: dict[str, Any]) -> None:
    """Create the node with its status (capacity), or recreate it if the catalog changed what it should be.

    Not server-side applied: a node's status can only be set at creation (updates ignore it), so applying
    the same manifest again would still rewrite our managed fields; an unchanged node is left alone."""
    from kubernetes.client.exceptions import ApiException

    nodes = client.resources.get(api_version="v1", kind="Node")
    name = manifest["metadata"]["name"]
    try:
        current = nodes.get(name=name).to_dict()
    except ApiException as exc:
        if exc.status != 404:
            raise ClusterError(f"reading node {name}: {exc.status} {exc.reason}") from exc
        current = None
    if current is not None:
        if _node_matches(current, manifest):
            return
        nodes.delete(name=name)
    try:
        nodes.create(body=manifest, field_manager=FIELD_MANAGER)
    except ApiException as exc:
        raise ClusterError(f"creating node {name}: {exc.status} {exc.reason}") from exc


def _node_matches(current: dict[str, Any], wanted: dict[str, Any]) -> bool:
    """Our labels and taints are there (others may add more) and allocatable is the same quantity
    (the API server may rewrite a quantity in canonical form, e.g. 1024Mi as 1Gi)."""
    from wf.core.units import parse_quantity

    labels = current["metadata"].get("labels") or {}
    taints = {Taint.from_kubernetes(t) for t in (current.get("spec") or {}).get("taints") or []}
    allocatable = (current.get("status") or {}).get("allocatable") or {}
    wanted_allocatable = wanted["status"]["allocatable"]
    return (
        wanted["metadata"]["labels"].items() <= labels.items()
        and all(Taint.from_kubernetes(t) in taints for t in wanted["spec"]["taints"])
        and allocatable.keys() == wanted_allocatable.keys()
        and all(parse_quantity(allocatable[k]) == parse_quantity(v) for k, v in wanted_allocatable.items())
    )


def apply_objects(kubeconfig: Path, docs: Sequence[dict[str, Any]]) -> None:
    """Apply `docs` in order; CustomResourceDefinitions first, and established before the rest."""
    from kubernetes.dynamic import DynamicClient

    from wf.controller.client import connect

    crds = [d for d in docs if d["kind"] == "CustomResourceDefinition"]
    api_client = connect(kubeconfig=str(kubeconfig)).api_client
    try:
        client = DynamicClient(api_client)
        for crd in crds:
            apply(client, crd)
        for group in {crd["spec"]["group"] for crd in crds}:
            wait_crds_established(client, group)
        for doc in docs:
            if doc["kind"] != "CustomResourceDefinition":
                apply(client, doc)
    finally:
        api_client.close()


def wait_crds_established(client: Any, group: str, timeout: float = 30.0) -> None:
    crds = client.resources.get(api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition")
    deadline = time.monotonic() + timeout
    while True:
        pending = [
            item.metadata.name
            for item in crds.get(label_selector="").items
            if item.spec.group == group
            and not any(c.type == "Established" and c.status == "True" for c in (item.status.conditions or []))
        ]
        if not pending:
            client.resources.invalidate_cache()
            return
        if time.monotonic() > deadline:
            raise ClusterError(f"CRDs not established after {timeout:.0f}s: {', '.join(pending)}")
        time.sleep(0.2)


def _delete_unwanted_nodes(client: Any, wanted: set[str]) -> None:
    nodes = client.resources.get(api_version="v1", kind="Node")
    for node in nodes.get().items:
        annotations = dict(node.metadata.annotations or {})
        if annotations.get(SIMULATED_ANNOTATION) == "true" and node.metadata.name not in wanted:
            nodes.delete(name=node.metadata.name)
