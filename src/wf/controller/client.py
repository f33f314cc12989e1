"""The official Kubernetes client, set up from a kubeconfig or an EKS cluster name, with errors in our terms.

Every failure to reach or be allowed by the API server becomes a ClusterError (exit 3) carrying the server's
own words (for RBAC: which user may not do what, where), never a traceback.
"""

from __future__ import annotations

import atexit
import json
import os
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wf.controller.kubeconfig import DEFAULT_NAMESPACE, kubeconfig_paths, resolve_target
from wf.core.constants import SERVICE_ACCOUNT_TOKENS_ROOT
from wf.core.errors import ClusterError, InputError

if TYPE_CHECKING:
    from kubernetes.client import ApiClient, CoreV1Api, CustomObjectsApi

    from wf.aws.s3 import Endpoint

DEFAULT_TIMEOUT = (10.0, 60.0)  # (connect, read) seconds for ordinary requests; watches pass their own
# In a pod: the namespace of its service account, beside the token Kubernetes mounts.
SERVICE_ACCOUNT_NAMESPACE = f"{SERVICE_ACCOUNT_TOKENS_ROOT}/kubernetes.io/serviceaccount/namespace"


class RequestCounter:
    """Counts the HTTP requests a client makes, by method (the watch benchmark compares these)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.by_method: Counter[str] = Counter()

    def add(self, method: str) -> None:
        with self._lock:
            self.by_method[method] += 1

    @property
    def total(self) -> int:
        with self._lock:
            return sum(self.by_method.values())


@dataclass(frozen=True)
class Target:
    """The cluster a command acts on, as the user names it: kubectl's choices (kubeconfig, context, namespace) or
    an EKS cluster by name, region and, optionally, a role to assume for its token."""

    context: str | None = None
    namespace: str | None = None
    kubeconfig: str | None = None
    eks_cluster: str | None = None
    region: str | None = None
    role_arn: str | None = None


@dataclass
class Kube:
    """A connected client plus where it points; the one object every controller operation takes."""

    api_client: ApiClient
    namespace: str
    context: str
    server: str
    requests: RequestCounter = field(default_factory=RequestCounter)
    # Where archived logs are when the cluster keeps them in a store of its own rather than AWS's S3 (a local
    # cluster with real nodes: wf.cluster.artifact_store); set by the commands that read them.
    artifact_store: Endpoint | None = None

    @property
    def custom(self) -> CustomObjectsApi:
        from kubernetes.client import CustomObjectsApi

        return CustomObjectsApi(self.api_client)

    @property
    def core(self) -> CoreV1Api:
        from kubernetes.client import CoreV1Api

        return CoreV1Api(self.api_client)

    def impersonating(self, user: str) -> ApiClient:
        """A client with these credentials acting as `user` (the Impersonate-User header; the caller needs the
        impersonate verb), its requests counted and timed out like this client's own."""
        from kubernetes.client import ApiClient

        client = ApiClient(configuration=self.api_client.configuration)
        client.set_default_header("Impersonate-User", user)
        _instrument(client, self.requests)
        return client

    def where(self, namespace: str | None = None) -> str:
        return f"context {self.context}, namespace {namespace or self.namespace}"

    def bearer(self) -> str | None:
        """The `Bearer ...` header this client sends (an EKS token, a kubeconfig's token; refreshed when it
        expires), for a server that acts with the caller's rights (Argo Server); None with client certificates."""
        configuration = self.api_client.configuration
        value = (configuration.get_api_key_with_prefix("BearerToken")
                 or configuration.get_api_key_with_prefix("authorization"))
        return str(value) if value else None


def _instrument(api_client: ApiClient, counter: RequestCounter) -> None:
    """Count requests and give each a timeout: the client's default is to wait forever on a dead peer."""
    rest = api_client.rest_client
    original = rest.request

    def request(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        counter.add(method)
        if kwargs.get("_request_timeout") is None:
            kwargs["_request_timeout"] = DEFAULT_TIMEOUT
        return original(method, url, *args, **kwargs)

    rest.request = request


def _ca_file(pem: bytes) -> str:
    import tempfile

    handle, path = tempfile.mkstemp(prefix="wf-eks-ca-", suffix=".pem")
    with os.fdopen(handle, "wb") as out:  # mkstemp creates it 0600
        out.write(pem)
    def remove() -> None:
        Path(path).unlink(missing_ok=True)

    atexit.register(remove)
    return path


def _use_token_source(configuration: Any, source: Any) -> None:
    def refresh(cfg: Any) -> None:
        cfg.api_key["BearerToken"] = source.token().value
        cfg.api_key_prefix["BearerToken"] = "Bearer"

    configuration.refresh_api_key_hook = refresh
    refresh(configuration)


def connect(target: Target, *, connections: int | None = None) -> Kube:
    """A client for the target: an EKS cluster by name, else the kubeconfig's context. `connections`: how many
    it keeps open for callers in as many threads (the client's default is five a core)."""
    from kubernetes import client as k8s
    from kubernetes import config as k8s_config

    from wf.aws import eks

    configuration = k8s.Configuration()
    if connections:
        configuration.connection_pool_maxsize = connections
    if target.eks_cluster:
        if not target.region:
            raise InputError("--eks-cluster needs --region (e.g. --region us-east-1)")
        session = eks.session_for(role_arn=target.role_arn, region=target.region)
        endpoint = eks.describe_cluster(target.eks_cluster, target.region, session)
        configuration.host = endpoint.server
        configuration.ssl_ca_cert = _ca_file(endpoint.ca_pem)
        _use_token_source(configuration, eks.TokenSource(target.eks_cluster, target.region, session))
        ctx_name, server = endpoint.arn or target.eks_cluster, endpoint.server
        ns = target.namespace or DEFAULT_NAMESPACE
    elif _in_pod(target):
        # As kubectl: inside a pod, without a kubeconfig, the pod's service account (the platform's own wf
        # components, such as the node facts recorder).
        k8s_config.load_incluster_config(client_configuration=configuration)
        ctx_name, server = "in-cluster", str(configuration.host)
        ns = target.namespace or Path(SERVICE_ACCOUNT_NAMESPACE).read_text().strip() or DEFAULT_NAMESPACE
    else:
        resolved = resolve_target(target.kubeconfig, target.context, target.namespace)
        config = resolved.config
        exec_user = eks.eks_exec_user(resolved.user)
        if target.role_arn and exec_user is None:
            raise InputError(f"--role-arn needs an EKS cluster: --eks-cluster, or a context that runs "
                             f"`aws eks get-token` (context {resolved.context!r} does not)")
        if exec_user is not None:
            # The aws CLI may be absent: strip the exec entry and sign the same token in-process.
            config = json.loads(json.dumps(config))
            user_name = next(c["context"].get("user") for c in config["contexts"] if c["name"] == resolved.context)
            for entry in config["users"]:
                if entry["name"] == user_name:
                    entry["user"] = {}
        try:
            k8s_config.load_kube_config_from_dict(
                config, context=resolved.context, client_configuration=configuration, persist_config=False
            )
        except k8s_config.ConfigException as exc:
            raise InputError(f"kubeconfig context {resolved.context!r}: {exc}", file=resolved.sources[0]) from exc
        if exec_user is not None:
            exec_region = (exec_user.region or target.region or os.environ.get("AWS_REGION")
                           or os.environ.get("AWS_DEFAULT_REGION"))
            if not exec_region:
                raise InputError(f"context {resolved.context!r} runs `aws eks get-token` without --region; "
                                 "pass --region")
            session = eks.session_for(exec_user.profile, target.role_arn or exec_user.role_arn, exec_region)
            _use_token_source(configuration, eks.TokenSource(exec_user.cluster_name, exec_region, session))
        ctx_name, server, ns = resolved.context, resolved.server, resolved.namespace
    # Retries are ours (submit's idempotent retry, the watch's reconnect); urllib3's would hide outages.
    configuration.retries = 0
    api_client = k8s.ApiClient(configuration)
    kube = Kube(api_client, ns, ctx_name, server)
    _instrument(api_client, kube.requests)
    return kube


def pod_log(core: CoreV1Api, pod: str, namespace: str, *, container: str, tail_lines: int | None = None) -> str:
    """A container's log as text. Read raw: the client decodes every body as JSON and str()s what is not, so a
    plain-text log would come back as the repr of its bytes ("b'line\\n...'")."""
    response = core.read_namespaced_pod_log(pod, namespace, container=container, tail_lines=tail_lines,
                                            _preload_content=False)
    try:
        return bytes(response.data).decode("utf-8", errors="replace")
    finally:
        response.release_conn()


def _in_pod(target: Target) -> bool:
    """Running in a pod (its service account's token mounted) and pointed at no kubeconfig, context or file."""
    return (not target.kubeconfig and not target.context and "KUBERNETES_SERVICE_HOST" in os.environ
            and Path(SERVICE_ACCOUNT_NAMESPACE).is_file()
            and not any(path.is_file() for path in kubeconfig_paths(None)))


def server_message(exc: Any) -> str:
    """The API server's own explanation from an ApiException body (a Status object), else its reason."""
    body = getattr(exc, "body", None)
    if body:
        try:
            status = json.loads(body)
        except (ValueError, TypeError):
            return str(body).strip()[:500]
        if isinstance(status, dict) and status.get("message"):
            return str(status["message"])
    return str(getattr(exc, "reason", "") or exc)


def is_transient(exc: BaseException) -> bool:
    """Worth retrying: the request may not have been served (connection trouble, overload, server restart)."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    if isinstance(exc, ApiException):
        return exc.status in (0, 429, 500, 502, 503, 504)
    return isinstance(exc, (HTTPError, ConnectionError, TimeoutError))


def lookup_errors() -> tuple[type[BaseException], ...]:
    """What a look-up beside the main work (a node, a queue's workloads, events) may meet and do without: the
    server's refusals and the network's failures. Anything else (a bug, credentials that cannot be renewed) is
    not caught by the look-ups and ends the command."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    return (ApiException, HTTPError, ConnectionError, TimeoutError)


def cluster_error(exc: BaseException, kube: Kube, doing: str, namespace: str | None = None) -> BaseException:
    """Translate a client exception into the error the CLI reports; unknown ones are returned unchanged."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    if isinstance(exc, ApiException):
        message = server_message(exc)
        if exc.status == 0:
            return ClusterError(f"cannot reach the API server at {kube.server} ({kube.where(namespace)}): {message}")
        if exc.status == 401:
            return ClusterError(f"{doing}: the API server at {kube.server} rejected the credentials of "
                                f"{kube.where(namespace)}: {message}")
        if exc.status == 403:
            return ClusterError(f"{doing}: forbidden by RBAC ({kube.where(namespace)}): {message}")
        if exc.status in (400, 404, 409, 422):
            return InputError(f"{doing}: {message}")
        return ClusterError(f"{doing}: API server error {exc.status} ({kube.where(namespace)}): {message}")
    if isinstance(exc, (HTTPError, ConnectionError, TimeoutError)):
        reason = getattr(exc, "reason", None) or exc
        return ClusterError(f"cannot reach the API server at {kube.server} ({kube.where(namespace)}): {reason}")
    return exc


@contextmanager
def api_errors(kube: Kube, doing: str, namespace: str | None = None) -> Iterator[None]:
    """Run API calls, reporting failures as ClusterError/InputError with the server's message."""
    try:
        yield
    except Exception as exc:
        mapped = cluster_error(exc, kube, doing, namespace)
        if mapped is exc:
            raise
        raise mapped from None


def http_address(url: str, origin: str, what: str, example: str) -> str:
    """`url` without a trailing slash if it is an http(s) address of `what` (a service wf reads over HTTP, such as
    Prometheus or Argo Server); InputError (exit 2) naming `origin`, where the address came from, otherwise."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InputError(f"{origin}: {url!r} is not {what} address: give its http(s) URL (e.g. {example})")
    return url.rstrip("/")
