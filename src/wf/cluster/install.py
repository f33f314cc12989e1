"""Put wf's platform objects into the local cluster: Argo's CRDs, the MPIJob CRD, and, from the same rendering
as `wf platform render` (wf.render.platform), namespaces, RBAC, Argo's ConfigMap, the catalog and artifact
repository ConfigMaps; then the record of the components the local cluster runs as processes, and the simulated
nodes. Everything is server-side applied, so a repeated `up` that has nothing to change changes nothing.

Imports the Kubernetes client; only the cluster commands import this module.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from wf.cluster import build, mpi
from wf.cluster.nodes import SIMULATED_ANNOTATION, node_manifests
from wf.compile.artifacts import KeyedEndpoint
from wf.core.constants import MPIJOB, WORKFLOW
from wf.core.errors import ClusterError
from wf.model.catalog import Catalog, Taint
from wf.render import platform
from wf.render.platform import WORKFLOW_NAMESPACE, Versions

FIELD_MANAGER = "wf-cluster"


def pinned_versions() -> Versions:
    """The versions the local cluster builds, which the platform bundle pins too."""
    built = {c.name: c.version for c in build.components()}
    return Versions(argo=built["argo"], kueue=built["kueue"], mpi_operator=built[mpi.OPERATOR])


def install(
    kubeconfig: Path, catalog: Catalog, nodes_per_group: int, namespaces: Sequence[str] = (WORKFLOW_NAMESPACE,),
    database: platform.ArgoDatabase | None = None, artifact_endpoint: KeyedEndpoint | None = None,
) -> None:
    """Apply the platform objects (Argo's ConfigMap with its persistence in `database`, the artifact repository at
    `artifact_endpoint` when the cluster runs its own store), the workflow namespaces and the nodes; delete
    simulated nodes that are no longer wanted (namespaces are never deleted: they may hold someone's work)."""
    from kubernetes.dynamic import DynamicClient

    from wf.controller.client import Target, connect

    api_client = connect(Target(kubeconfig=str(kubeconfig))).api_client
    try:
        client = DynamicClient(api_client)
        rendered = platform.local_objects(catalog, namespaces, database, artifact_endpoint)
        namespaces_first = [o for o in rendered if o["kind"] == "Namespace"]
        for manifest in [*namespaces_first, *platform.load_manifest("argo-crds.yaml"), *mpi.crd_manifests()]:
            apply(client, manifest)
        for group in (WORKFLOW.group, MPIJOB.group):
            wait_crds_established(client, group)
        for manifest in rendered:
            if manifest["kind"] != "Namespace":
                apply(client, manifest)
        # Kueue, when the cluster runs it, adds itself to this record once it serves (wf.cluster.kueue).
        apply(client, platform.local_marker(pinned_versions(), kueue_running=False))
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

    from wf.controller.client import Target, connect

    crds = [d for d in docs if d["kind"] == "CustomResourceDefinition"]
    api_client = connect(Target(kubeconfig=str(kubeconfig))).api_client
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


def delete_nodes(kubeconfig: Path, names: Sequence[str]) -> None:
    """Delete these Node objects (a real node that was stopped); one already gone is fine."""
    from kubernetes.client.exceptions import ApiException
    from kubernetes.dynamic import DynamicClient

    from wf.controller.client import Target, connect

    api_client = connect(Target(kubeconfig=str(kubeconfig))).api_client
    try:
        nodes = DynamicClient(api_client).resources.get(api_version="v1", kind="Node")
        for name in names:
            try:
                nodes.delete(name=name)
            except ApiException as exc:
                if exc.status != 404:
                    raise
    finally:
        api_client.close()
