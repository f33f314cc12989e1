"""Objects of the catalog's artifact store in S3, read with the caller's AWS credentials (the default chain:
environment, profile, SSO, instance role), or a local cluster's store with its keys: what `wf logs` reads when a
step's pod is gone and Argo archived its log (the `main-logs` artifact, wf.controller.archived_logs)."""

from __future__ import annotations

from dataclasses import dataclass, field

from wf.core.errors import ClusterError

# An archived log is the step's whole output: a bound keeps a runaway program's from filling the terminal's memory.
MAX_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class Endpoint:
    """An S3-compatible store other than AWS's, with its own keys: the local cluster's (wf.cluster.artifact_store),
    at its host-side address."""

    url: str
    access_key: str = field(repr=False)
    secret_key: str = field(repr=False)


def read_object(bucket: str, key: str, region: str | None, endpoint: Endpoint | None = None) -> bytes | None:
    """The object's bytes (its last MAX_BYTES); None when there is no such key. ClusterError naming the bucket
    and key for anything else (no credentials, access denied, no network)."""
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    where = f"s3://{bucket}/{key}"
    keyed = ({"endpoint_url": endpoint.url, "aws_access_key_id": endpoint.access_key,
              "aws_secret_access_key": endpoint.secret_key} if endpoint else {})
    try:
        client = boto3.session.Session(region_name=region).client("s3", **keyed)
        head = client.head_object(Bucket=bucket, Key=key)
        size = int(head.get("ContentLength") or 0)
        ranged = {"Range": f"bytes={size - MAX_BYTES}-"} if size > MAX_BYTES else {}
        body: bytes = client.get_object(Bucket=bucket, Key=key, **ranged)["Body"].read()
        return body
    except ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code", ""))
        if code in ("404", "NoSuchKey", "NotFound"):
            return None
        raise ClusterError(f"reading {where}: {code or exc}") from None
    except BotoCoreError as exc:
        raise ClusterError(f"reading {where}: {exc}") from None
