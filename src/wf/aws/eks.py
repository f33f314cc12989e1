"""EKS without the aws CLI: the cluster endpoint from `eks.describe_cluster`, bearer tokens from a presigned STS URL.

What `aws eks get-token` does (aws-cli `customizations/eks/get_token.py`): presign an STS GetCallerIdentity GET
with the header `x-k8s-aws-id: <cluster>` included in the signature; the token is `k8s-aws-v1.` + the URL in
unpadded base64url. STS ignores X-Amz-Expires=60 and honours the URL for 15 minutes after X-Amz-Date
(aws-iam-authenticator `pkg/token/token.go`); like the CLI we treat it as good for 14 and refresh a minute
before that. Tokens are secrets: nothing here logs or prints one.
"""

from __future__ import annotations

import base64
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from wf.core.errors import ClusterError

if TYPE_CHECKING:
    import boto3
    from botocore.credentials import Credentials, ReadOnlyCredentials

TOKEN_PREFIX = "k8s-aws-v1."
CLUSTER_ID_HEADER = "x-k8s-aws-id"
PRESIGN_EXPIRES_SECONDS = 60
TOKEN_LIFETIME = timedelta(minutes=14)
REFRESH_MARGIN = timedelta(minutes=1)
STS_API_VERSION = "2011-06-15"
ROLE_SESSION_NAME = "EKSGetTokenAuth"


@dataclass(frozen=True)
class EksToken:
    value: str
    signed_at: datetime
    expires_at: datetime  # when we stop trusting it (signed_at + 14 min)

    def __repr__(self) -> str:  # keep the secret out of tracebacks and debug output
        return f"EksToken(signed_at={self.signed_at.isoformat()}, expires_at={self.expires_at.isoformat()})"


@dataclass(frozen=True)
class EksEndpoint:
    name: str
    arn: str
    server: str
    ca_pem: bytes
    status: str


def presign_token(cluster_name: str, credentials: ReadOnlyCredentials, region: str, sts_endpoint: str) -> EksToken:
    """Sign GetCallerIdentity as a GET URL carrying the cluster header, with botocore's SigV4 query signer."""
    from botocore.auth import SigV4QueryAuth
    from botocore.awsrequest import AWSRequest

    request = AWSRequest(
        method="GET",
        url=f"{sts_endpoint.rstrip('/')}/?Action=GetCallerIdentity&Version={STS_API_VERSION}",
        headers={CLUSTER_ID_HEADER: cluster_name},
    )
    SigV4QueryAuth(credentials, "sts", region, expires=PRESIGN_EXPIRES_SECONDS).add_auth(request)
    url = request.prepare().url
    signed_at = datetime.strptime(request.context["timestamp"], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    encoded = base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")
    return EksToken(TOKEN_PREFIX + encoded, signed_at, signed_at + TOKEN_LIFETIME)


def session_for(profile: str | None = None, role_arn: str | None = None, region: str | None = None) -> boto3.Session:
    """A session of the profile (or the default chain), or of `role_arn` assumed from it. The assumed role's
    credentials renew themselves before they expire (botocore's refreshable credentials, as for a role named in
    an AWS profile): STS gives them for an hour, and a watch of a day's training outlives many."""
    import boto3
    import botocore.exceptions
    import botocore.session
    from botocore.credentials import CredentialResolver, DeferredRefreshableCredentials

    try:
        session = boto3.Session(profile_name=profile, region_name=region)
    except botocore.exceptions.ProfileNotFound as exc:
        raise ClusterError(f"AWS profile {profile!r} not found") from exc
    if not role_arn:
        return session

    def assume() -> dict[str, Any]:
        try:
            found = session.client("sts", region_name=region).assume_role(
                RoleArn=role_arn, RoleSessionName=ROLE_SESSION_NAME)["Credentials"]
            return {"access_key": found["AccessKeyId"], "secret_key": found["SecretAccessKey"],
                    "token": found["SessionToken"], "expiry_time": found["Expiration"].isoformat()}
        except botocore.exceptions.ClientError as exc:
            message = exc.response.get("Error", {}).get("Message", exc)
            raise ClusterError(f"cannot assume {role_arn}: {message}") from exc
        except botocore.exceptions.BotoCoreError as exc:
            raise ClusterError(f"cannot assume {role_arn}: {exc}") from exc

    credentials = DeferredRefreshableCredentials(assume, "assume-role")
    credentials.get_frozen_credentials()  # a role that can't be assumed is an error now, not at the first request
    assumed = botocore.session.Session()
    assumed.register_component("credential_provider", CredentialResolver([_Given(credentials)]))
    return boto3.Session(botocore_session=assumed, region_name=region)


class _Given:
    """A credential provider holding credentials made elsewhere (the assumed role's, which refresh themselves)."""

    METHOD = "assume-role"
    CANONICAL_NAME = "wf-assume-role"

    def __init__(self, credentials: Credentials) -> None:
        self._credentials = credentials

    def load(self) -> Credentials:
        return self._credentials


class TokenSource:
    """Hands out a valid token, signing a fresh one a minute before the current one is 14 minutes old."""

    def __init__(
        self,
        cluster_name: str,
        region: str,
        session: boto3.Session,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.cluster_name = cluster_name
        self.region = region
        self._session = session
        self._clock = clock
        self._token: EksToken | None = None
        self._lock = threading.Lock()

    def token(self) -> EksToken:
        with self._lock:
            if self._token is None or self._clock() >= self._token.expires_at - REFRESH_MARGIN:
                credentials = self._session.get_credentials()
                if credentials is None:
                    raise ClusterError(
                        "no AWS credentials found (environment, shared config/credentials file, SSO or instance role)"
                    )
                endpoint = self._session.client("sts", region_name=self.region).meta.endpoint_url
                self._token = presign_token(
                    self.cluster_name, credentials.get_frozen_credentials(), self.region, endpoint
                )
            return self._token


def describe_cluster(name: str, region: str, session: boto3.Session) -> EksEndpoint:
    """Endpoint and CA of an EKS cluster, as `aws eks update-kubeconfig` reads them."""
    import botocore.exceptions

    try:
        cluster = session.client("eks", region_name=region).describe_cluster(name=name)["cluster"]
    except botocore.exceptions.ClientError as exc:
        error = exc.response.get("Error", {})
        raise ClusterError(f"EKS cluster {name!r} in {region}: {error.get('Code')}: {error.get('Message')}") from exc
    except botocore.exceptions.BotoCoreError as exc:
        raise ClusterError(f"EKS cluster {name!r} in {region}: {exc}") from exc
    status = cluster.get("status", "")
    if status not in ("ACTIVE", "UPDATING"):
        raise ClusterError(f"EKS cluster {name!r} in {region} is {status or 'in an unknown state'}, not ACTIVE")
    try:
        ca_pem = base64.b64decode(cluster["certificateAuthority"]["data"], validate=True)
    except (KeyError, TypeError, ValueError) as exc:
        raise ClusterError(f"EKS cluster {name!r} returned no usable certificate authority") from exc
    return EksEndpoint(name, cluster.get("arn", ""), cluster["endpoint"], ca_pem, status)


@dataclass(frozen=True)
class ExecEksUser:
    """A kubeconfig user that runs `aws eks get-token`: we produce the same token in-process."""

    cluster_name: str
    region: str | None
    role_arn: str | None
    profile: str | None


def eks_exec_user(user: dict[str, Any]) -> ExecEksUser | None:
    """Recognise the user entry `aws eks update-kubeconfig` writes; None for any other kind of user."""
    spec = user.get("exec")
    if not isinstance(spec, dict) or str(spec.get("command", "")).rsplit("/", 1)[-1] != "aws":
        return None
    args = [str(a) for a in spec.get("args") or []]
    if "get-token" not in args or "eks" not in args:
        return None

    def flag(name: str) -> str | None:
        for i, arg in enumerate(args):
            if arg == name and i + 1 < len(args):
                return args[i + 1]
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
        return None

    cluster = flag("--cluster-name") or flag("--cluster-id")
    if not cluster:
        return None
    env = {e.get("name"): e.get("value") for e in spec.get("env") or [] if isinstance(e, dict)}
    return ExecEksUser(cluster, flag("--region"), flag("--role-arn"), env.get("AWS_PROFILE"))
