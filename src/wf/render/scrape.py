"""What a Prometheus scrapes of the platform, one definition per metrics endpoint (`Source`) for every cluster: the
local cluster's Prometheus scrapes the same jobs on loopback (wf.cluster.prometheus), a real cluster's finds them
through the Kubernetes API (a scrape configuration) or through the Prometheus Operator (ServiceMonitors). Series
carry the source's `job` on each, which is what `wf report` and `wf platform check` ask Prometheus by.

Argo's controller (metricsConfig `secure`, its default) and Kueue (controller-runtime's secure serving) sign their
own serving certificates, so an in-cluster scrape has no CA to verify them with and skips the verification (wf's
node facts recorder serves its metrics as plain HTTP: counts of workflows, nothing secret);
Kueue asks the API server whether the caller may GET /metrics (TokenReview, SubjectAccessReview), so its scrape
presents Prometheus' own service account token.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

SERVICE_MONITOR_API = "monitoring.coreos.com/v1"
# Where a pod finds its service account's token (Prometheus' own, in the cluster).
IN_CLUSTER_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"
SELF_SIGNED = {"insecure_skip_verify": True}


@dataclass(frozen=True)
class Source:
    """One component's metrics endpoint, and the Service in front of it on a cluster."""

    job: str  # the `job` label of its series
    component: str  # the component serving it (wf.render.platform.Component.name)
    namespace: str
    service: str
    port: str  # the Service's port name
    labels: Mapping[str, str]  # the Service's labels, by which a ServiceMonitor selects it
    authorized: bool  # the endpoint asks the API server whether the caller may GET /metrics: send a bearer token
    https: bool = True  # served over TLS with a certificate it signed itself; False: plain HTTP (wf's recorder)


def scrape_job(source: Source, targets: Mapping[str, Any], *, tls: Mapping[str, Any] | None,
               token_file: str) -> dict[str, Any]:
    """A Prometheus scrape job of `source`: `targets` say where (static_configs, or Kubernetes discovery and its
    relabelling); HTTPS with `tls` (a tls_config) unless None; the token in `token_file` where the endpoint
    authorizes its caller."""
    job: dict[str, Any] = {"job_name": source.job}
    if tls is not None:
        job |= {"scheme": "https", "tls_config": dict(tls)}
    if source.authorized:
        job["authorization"] = {"type": "Bearer", "credentials_file": token_file}
    return {**job, **targets}


def discovered_job(source: Source) -> dict[str, Any]:
    """The scrape job of a Prometheus running in the cluster: the endpoints of the source's Service port, found
    through the API (EndpointSlices of its namespace only)."""
    return scrape_job(source, {
        "kubernetes_sd_configs": [{"role": "endpointslice", "namespaces": {"names": [source.namespace]}}],
        "relabel_configs": [{"action": "keep", "regex": f"{source.service};{source.port}",
                             "source_labels": ["__meta_kubernetes_service_name",
                                               "__meta_kubernetes_endpointslice_port_name"]}],
    }, tls=SELF_SIGNED if source.https else None, token_file=IN_CLUSTER_TOKEN)


def service_monitor(source: Source) -> dict[str, Any]:
    """The Prometheus Operator's word for `discovered_job`: its job label set to the source's (the operator would
    name it after the Service), the token by file (a ServiceMonitor's `authorization` takes only a Secret, not
    Prometheus' own account's token)."""
    endpoint: dict[str, Any] = {
        "port": source.port, "scheme": "https" if source.https else "http",
        **({"tlsConfig": {"insecureSkipVerify": True}} if source.https else {}),
        "relabelings": [{"action": "replace", "targetLabel": "job", "replacement": source.job}],
    }
    if source.authorized:
        endpoint["bearerTokenFile"] = IN_CLUSTER_TOKEN
    return {"apiVersion": SERVICE_MONITOR_API, "kind": "ServiceMonitor",
            "metadata": {"name": f"wf-{source.job}", "namespace": source.namespace},
            "spec": {"selector": {"matchLabels": dict(source.labels)}, "endpoints": [endpoint]}}
