"""EKS tokens signed like `aws eks get-token` (checked against an independent SigV4 computation) and
describe_cluster against moto's server."""

from __future__ import annotations

import base64
import hashlib
import hmac
import socket
from datetime import UTC, datetime, timedelta
from unittest import mock
from urllib.parse import parse_qsl, quote, urlsplit

import boto3
import pytest
from botocore.credentials import ReadOnlyCredentials

from wf.aws import eks
from wf.core.errors import ClusterError

CREDS = ReadOnlyCredentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", None)
FROZEN = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


def decode(token: str) -> str:
    assert token.startswith("k8s-aws-v1.")
    body = token[len("k8s-aws-v1."):]
    assert "=" not in body  # padding stripped
    return base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode()


def sigv4_query_signature(url: str, secret: str, cluster: str) -> str:
    """Recompute the signature by the SigV4 spec, independently of botocore."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "X-Amz-Signature"]
    canonical_query = "&".join(f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}" for k, v in sorted(query))
    q = dict(query)
    headers = {"host": parts.netloc, "x-k8s-aws-id": cluster}
    signed = q["X-Amz-SignedHeaders"]
    canonical_headers = "".join(f"{h}:{headers[h]}\n" for h in signed.split(";"))
    canonical = "\n".join(["GET", parts.path or "/", canonical_query, canonical_headers, signed,
                           hashlib.sha256(b"").hexdigest()])
    date, scope = q["X-Amz-Date"], q["X-Amz-Credential"].split("/", 1)[1]
    to_sign = "\n".join(["AWS4-HMAC-SHA256", date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = ("AWS4" + secret).encode()
    for part in scope.split("/"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()


def test_token_is_a_presigned_get_caller_identity_with_the_cluster_header_signed() -> None:
    with mock.patch("botocore.auth.get_current_datetime", return_value=FROZEN.replace(tzinfo=None)):
        token = eks.presign_token("ml-workflows", CREDS, "us-east-1", "https://sts.us-east-1.amazonaws.com")
    url = decode(token.value)
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    assert parts.scheme == "https" and parts.netloc == "sts.us-east-1.amazonaws.com"
    assert query["Action"] == "GetCallerIdentity" and query["Version"] == "2011-06-15"
    assert query["X-Amz-Expires"] == "60"
    assert query["X-Amz-Date"] == "20260301T120000Z"
    assert query["X-Amz-Credential"] == "AKIDEXAMPLE/20260301/us-east-1/sts/aws4_request"
    assert query["X-Amz-SignedHeaders"] == "host;x-k8s-aws-id"
    assert query["X-Amz-Signature"] == sigv4_query_signature(url, CREDS.secret_key, "ml-workflows")
    # A token for another cluster name signs differently: the header really is inside the signature.
    assert query["X-Amz-Signature"] != sigv4_query_signature(url, CREDS.secret_key, "other")
    assert token.signed_at == FROZEN and token.expires_at == FROZEN + timedelta(minutes=14)
    assert len(token.value) < 4096  # aws-iam-authenticator rejects longer tokens
    assert token.value not in repr(token)


def test_token_source_refreshes_a_minute_before_fourteen_minutes() -> None:
    session = boto3.Session(aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="secret", region_name="us-east-1")
    now = [FROZEN]
    source = eks.TokenSource("ml-workflows", "us-east-1", session, clock=lambda: now[0])
    with mock.patch("botocore.auth.get_current_datetime", side_effect=lambda: now[0].replace(tzinfo=None)):
        first = source.token()
        now[0] = FROZEN + timedelta(minutes=12, seconds=59)
        assert source.token() is first
        now[0] = FROZEN + timedelta(minutes=13)
        second = source.token()
    assert second is not first and second.signed_at == now[0]
    assert dict(parse_qsl(urlsplit(decode(second.value)).query))["X-Amz-Date"] == "20260301T121300Z"


def test_no_credentials_is_a_cluster_error(monkeypatch: pytest.MonkeyPatch) -> None:
    session = mock.Mock()
    session.get_credentials.return_value = None
    with pytest.raises(ClusterError, match="no AWS credentials"):
        eks.TokenSource("c", "us-east-1", session).token()


def test_exec_user_from_aws_eks_update_kubeconfig_is_recognised() -> None:
    user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": "aws",
                     "args": ["--region", "us-west-2", "eks", "get-token", "--cluster-name", "ml",
                              "--role-arn", "arn:aws:iam::1:role/x"],
                     "env": [{"name": "AWS_PROFILE", "value": "dev"}]}}
    assert eks.eks_exec_user(user) == eks.ExecEksUser("ml", "us-west-2", "arn:aws:iam::1:role/x", "dev")
    assert eks.eks_exec_user({"token": "x"}) is None
    assert eks.eks_exec_user({"exec": {"command": "kubelogin", "args": ["get-token"]}}) is None


@pytest.fixture
def moto_server(monkeypatch: pytest.MonkeyPatch):
    from moto.server import ThreadedMotoServer

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    yield f"http://127.0.0.1:{port}"
    server.stop()


def test_describe_cluster_reads_endpoint_and_ca(moto_server: str) -> None:
    session = boto3.Session(region_name="us-east-1")
    client = session.client("eks")
    client.create_cluster(name="ml-workflows", roleArn="arn:aws:iam::123456789012:role/eks",
                          resourcesVpcConfig={"subnetIds": []})
    endpoint = eks.describe_cluster("ml-workflows", "us-east-1", session)
    described = client.describe_cluster(name="ml-workflows")["cluster"]
    assert endpoint.server == described["endpoint"] and endpoint.server.startswith("https://")
    assert endpoint.ca_pem == base64.b64decode(described["certificateAuthority"]["data"])
    assert endpoint.status == "ACTIVE"
    with pytest.raises(ClusterError, match="nope"):
        eks.describe_cluster("nope", "us-east-1", session)


def test_connect_with_eks_cluster_sets_host_ca_and_bearer(moto_server: str) -> None:
    from wf.controller.client import Target, connect

    session = boto3.Session(region_name="us-east-1")
    session.client("eks").create_cluster(name="ml", roleArn="arn:aws:iam::123456789012:role/eks",
                                         resourcesVpcConfig={"subnetIds": []})
    kube = connect(Target(eks_cluster="ml", region="us-east-1", namespace="team"))
    cfg = kube.api_client.configuration
    assert cfg.host.startswith("https://") and kube.namespace == "team"
    with open(cfg.ssl_ca_cert, "rb") as handle:
        cluster = session.client("eks").describe_cluster(name="ml")["cluster"]
        assert handle.read() == base64.b64decode(cluster["certificateAuthority"]["data"])
    import os
    import stat

    assert stat.S_IMODE(os.stat(cfg.ssl_ca_cert).st_mode) == 0o600
    bearer = cfg.get_api_key_with_prefix("BearerToken")
    assert bearer.startswith("Bearer k8s-aws-v1.")
    assert "x-k8s-aws-id" in decode(bearer.split(" ", 1)[1])


def test_role_arn_signs_the_token_as_the_assumed_role(moto_server: str) -> None:
    from wf.controller.client import Target, connect

    boto3.Session(region_name="us-east-1").client("eks").create_cluster(
        name="ml-dev", roleArn="arn:aws:iam::123456789012:role/eks", resourcesVpcConfig={"subnetIds": []})
    kube = connect(Target(eks_cluster="ml-dev", region="us-east-1", role_arn="arn:aws:iam::123456789012:role/dev"))
    token = kube.api_client.configuration.get_api_key_with_prefix("BearerToken").split(" ", 1)[1]
    credential = dict(parse_qsl(urlsplit(decode(token)).query))["X-Amz-Credential"]
    assert credential.startswith("ASIA")  # temporary credentials from sts:AssumeRole, not the caller's "testing"


def test_role_arn_without_an_eks_cluster_is_refused(tmp_path) -> None:
    from wf.controller.client import Target, connect
    from wf.core.errors import InputError

    kubeconfig = tmp_path / "config"
    kubeconfig.write_text("""
apiVersion: v1
kind: Config
current-context: local
contexts: [{name: local, context: {cluster: local, user: local}}]
clusters: [{name: local, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: local, user: {token: abc}}]
""")
    with pytest.raises(InputError, match="--role-arn needs an EKS cluster"):
        connect(Target(kubeconfig=str(kubeconfig), role_arn="arn:aws:iam::1:role/x"))


def test_an_assumed_role_renews_its_credentials_before_they_expire(moto_server: str) -> None:
    """A watch outlives the hour STS gives an assumed role: the token signed after the hour is signed with new
    credentials, not with the expired ones (once, `--role-arn` was assumed once and a day's watch exited 3)."""
    session = eks.session_for(role_arn="arn:aws:iam::123456789012:role/dev", region="us-east-1")
    now = [datetime.now(UTC)]
    source = eks.TokenSource("ml-dev", "us-east-1", session, clock=lambda: now[0])
    credential = session.get_credentials()
    expiry = credential._expiry_time
    credential._time_fetcher = lambda: min(now[0], expiry - timedelta(minutes=5))  # botocore's own clock

    def signed_with() -> str:
        return dict(parse_qsl(urlsplit(decode(source.token().value)).query))["X-Amz-Credential"].split("/")[0]

    first = signed_with()
    assert first.startswith("ASIA")
    # 55 minutes on: the role's credentials expire in 5 (moto gives the new ones a real hour from now).
    now[0] += timedelta(minutes=55)
    second = signed_with()
    assert second.startswith("ASIA") and second != first
    assert credential._expiry_time > expiry - timedelta(minutes=5)


def test_an_assumed_role_that_cannot_renew_is_a_cluster_error(moto_server: str,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import botocore.exceptions

    session = eks.session_for(role_arn="arn:aws:iam::123456789012:role/dev", region="us-east-1")
    credential = session.get_credentials()
    credential._time_fetcher = lambda: credential._expiry_time + timedelta(minutes=1)

    def refused(*args: object, **kwargs: object) -> None:
        raise botocore.exceptions.EndpointConnectionError(endpoint_url="https://sts.amazonaws.com")

    monkeypatch.setattr("botocore.client.BaseClient._make_api_call", refused)
    with pytest.raises(ClusterError, match="cannot assume arn:aws:iam::123456789012:role/dev: Could not connect"):
        credential.get_frozen_credentials()
