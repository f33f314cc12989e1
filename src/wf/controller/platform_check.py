"""Read what `wf platform check` compares: the nodes, each object the rendering expects (absent or not), the kinds
the API server does not serve, the local cluster's record of its process components, and what a Prometheus
scrapes (its targets). The comparison itself is pure (`wf.lint.platform.compare`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from wf.controller.client import Kube, api_errors
from wf.controller.report import prometheus_targets, prometheus_url
from wf.core.constants import CATALOG_NAMESPACE
from wf.lint.platform import Key, Live, Scrapes, wanted
from wf.render.platform import LOCAL_MARKER, Expected
from wf.render.scrape import Source


def read_live(kube: Kube, expected: Expected) -> Live:
    """ClusterError (exit 3) when the API server cannot be reached or forbids a read."""
    from kubernetes.client.exceptions import ApiException
    from kubernetes.dynamic import DynamicClient
    from kubernetes.dynamic.exceptions import ResourceNotFoundError

    with api_errors(kube, "reading the cluster's platform objects", CATALOG_NAMESPACE):
        client = DynamicClient(kube.api_client)
        nodes = [_plain(n) for n in client.resources.get(api_version="v1", kind="Node").get().items]
        objects: dict[Key, dict[str, Any] | None] = {}
        unserved: set[tuple[str, str]] = set()
        for api_version, kind, namespace, name in dict.fromkeys(wanted(expected)):
            try:
                resource = client.resources.get(api_version=api_version, kind=kind)
            except ResourceNotFoundError:
                unserved.add((api_version, kind))
                continue
            try:
                objects[(api_version, kind, namespace, name)] = _plain(resource.get(name=name, namespace=namespace))
            except ApiException as exc:
                if exc.status != 404:
                    raise
                objects[(api_version, kind, namespace, name)] = None
    marker = objects.get(("v1", "ConfigMap", CATALOG_NAMESPACE, LOCAL_MARKER))
    return Live(nodes, objects, frozenset(unserved), (marker.get("data") or {}) if marker else None)


def read_scrapes(url: str, origin: str, sources: Sequence[Source],
                 fetch: Callable[[str], bytes] | None = None) -> Scrapes:
    """What the Prometheus at `url` scrapes of the sources' jobs: their targets' health and last error (one GET of
    its targets). ClusterError (exit 3) when it cannot be reached, InputError (exit 2) when what answers is not
    Prometheus."""
    targets: dict[str, list[tuple[str, str]]] = {source.job: [] for source in sources}
    for target in prometheus_targets(url, origin, fetch):
        job = target["labels"].get("job")
        if job in targets:
            targets[job].append((str(target.get("health", "unknown")), str(target.get("lastError") or "")))
    return Scrapes(prometheus_url(url, origin), targets)


def _plain(obj: Any) -> dict[str, Any]:
    """The object as the API server's JSON (the dynamic client's wrapper turned into dicts and lists)."""
    data: dict[str, Any] = obj.to_dict()
    return data
