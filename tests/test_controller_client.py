"""Client failures in the developer's terms: exit 3 for unreachable/forbidden, 2 for what the server rejected."""

from __future__ import annotations

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import MaxRetryError, NewConnectionError

from wf.controller.client import Kube, cluster_error, is_transient
from wf.core.errors import ClusterError, InputError

KUBE = Kube(api_client=None, namespace="wf", context="wf-local", server="https://127.0.0.1:6443")


def api_exception(status: int, message: str) -> ApiException:
    exc = ApiException(status=status, reason="x")
    exc.body = f'{{"kind":"Status","apiVersion":"v1","status":"Failure","message":"{message}","code":{status}}}'
    return exc


def test_forbidden_carries_the_rbac_message_and_where() -> None:
    message = 'workflows.argoproj.io is forbidden: User \\"dev\\" cannot create resource \\"workflows\\"'
    error = cluster_error(api_exception(403, message), KUBE, "creating a Workflow in ml", "ml")
    assert isinstance(error, ClusterError) and error.exit_code == 3
    assert 'User "dev" cannot create resource "workflows"' in str(error)
    assert "context wf-local, namespace ml" in str(error)


def test_unreachable_and_unauthorized_are_cluster_errors() -> None:
    refused = MaxRetryError(None, "/apis", NewConnectionError(None, "Connection refused"))
    assert isinstance(cluster_error(refused, KUBE, "listing"), ClusterError)
    assert "cannot reach the API server at https://127.0.0.1:6443" in str(cluster_error(refused, KUBE, "listing"))
    assert isinstance(cluster_error(api_exception(401, "Unauthorized"), KUBE, "listing"), ClusterError)
    assert isinstance(cluster_error(ApiException(status=0, reason="SSLError"), KUBE, "listing"), ClusterError)


def test_rejected_input_is_exit_2_and_unknown_errors_pass_through() -> None:
    refusal = 'Workflow.argoproj.io \\"x\\" is invalid: spec.templates: Required value'
    invalid = cluster_error(api_exception(422, refusal), KUBE, "creating")
    assert isinstance(invalid, InputError) and "spec.templates: Required value" in str(invalid)
    bug = ValueError("a bug")
    assert cluster_error(bug, KUBE, "x") is bug


def test_what_is_worth_retrying() -> None:
    assert is_transient(ApiException(status=503)) and is_transient(ApiException(status=429))
    assert is_transient(MaxRetryError(None, "/", None))
    assert not is_transient(ApiException(status=403)) and not is_transient(ApiException(status=422))


def test_a_pod_log_is_the_text_the_api_server_sent() -> None:
    """Through the real client against a loopback server: the client's own decoding of a text body would give the
    repr of its bytes."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from kubernetes.client import ApiClient, Configuration, CoreV1Api

    from wf.controller.client import pod_log

    body = "step 1 loss=0.5\n{\"not\": \"the whole line\"} é\n"
    asked: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            asked.append(self.path)
            data = body.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        config = Configuration(host=f"http://127.0.0.1:{server.server_address[1]}")
        with ApiClient(config) as client:
            text = pod_log(CoreV1Api(client), "p", "ns", container="main", tail_lines=5)
    finally:
        server.shutdown()
        server.server_close()
    assert text == body
    assert asked == ["/api/v1/namespaces/ns/pods/p/log?container=main&tailLines=5"]
