"""Which catalog a cluster command uses (README, Commands): --catalog or WF_CATALOG when given; else the one the
platform installed in the cluster (ConfigMap wf-system/wf-catalog), so developers never hold a copy; else the
project's eksctl/catalog.yaml."""

from __future__ import annotations

import os

from wf.controller.client import Kube, api_errors
from wf.core.constants import CATALOG_CONFIGMAP, CATALOG_KEY, CATALOG_NAMESPACE
from wf.core.errors import InputError
from wf.model.catalog import CATALOG_ENV, DEFAULT_CATALOG, Catalog, load_catalog


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


def resolve_catalog(kube: Kube | None, explicit: str | None = None) -> Catalog:
    """Explicit file or WF_CATALOG, else the cluster's catalog, else eksctl/catalog.yaml; InputError if none."""
    if explicit or os.environ.get(CATALOG_ENV):
        return load_catalog(explicit)
    if kube is not None and (catalog := cluster_catalog(kube)) is not None:
        return catalog
    if DEFAULT_CATALOG.is_file():
        return load_catalog(DEFAULT_CATALOG)
    raise InputError(
        f"no catalog: none in the cluster ({CATALOG_NAMESPACE}/{CATALOG_CONFIGMAP}), no {DEFAULT_CATALOG} here; "
        f"pass --catalog FILE or set {CATALOG_ENV}"
    )
