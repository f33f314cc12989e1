"""Which catalog a cluster command uses (README, The catalog): --catalog, WF_CATALOG or the project file's when
one names it; else the one the platform installed in the cluster (ConfigMap wf-system/wf-catalog), so developers
outside a project never hold a copy."""

from __future__ import annotations

from pathlib import Path

from wf.controller.client import Kube, api_errors
from wf.core.constants import CATALOG_CONFIGMAP, CATALOG_KEY, CATALOG_NAMESPACE
from wf.model.catalog import Catalog, catalog_path, load_catalog, no_catalog


def cluster_catalog(kube: Kube) -> Catalog | None:
    """The catalog stored in the cluster, or None when there is none (or this user may not read it)."""
    from kubernetes.client.exceptions import ApiException

    with api_errors(kube, f"reading the catalog ConfigMap {CATALOG_NAMESPACE}/{CATALOG_CONFIGMAP}", CATALOG_NAMESPACE):
        try:
            configmap = kube.core.read_namespaced_config_map(CATALOG_CONFIGMAP, CATALOG_NAMESPACE)
        except ApiException as exc:
            if exc.status in (403, 404):  # no platform catalog, or not ours to read: fall back to the file
                return None
            raise
    text = (configmap.data or {}).get(CATALOG_KEY)
    if not text:
        return None
    return Catalog.from_yaml_text(text, f"configmap {CATALOG_NAMESPACE}/{CATALOG_CONFIGMAP} ({kube.context})")


def resolve_catalog(kube: Kube | None, explicit: str | Path | None = None, *,
                    near: str | Path | None = None) -> Catalog:
    """--catalog, WF_CATALOG or the project file found from `near` (a job file; default: the working directory),
    else the cluster's catalog; InputError naming every place looked in if none."""
    if (path := catalog_path(explicit, near=near)) is not None:
        return load_catalog(path)
    if kube is not None and (catalog := cluster_catalog(kube)) is not None:
        return catalog
    raise no_catalog(near, cluster=kube.context if kube is not None else None)
