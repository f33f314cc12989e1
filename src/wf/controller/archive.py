"""Argo's workflow archive, read through Argo Server's HTTP API: the runs whose live object is gone.

Argo's controller archives every finished workflow whole (its nodes hydrated from the offload table first, v4.0.7
workflow/controller/controller.go archiveWorkflow), so an archived run reads as a live one: `wf get` shows the same
steps, attempts, cost and interruptions. Argo Server serves the archive:

* GET /api/v1/archived-workflows?namespace=NS&listOptions.fieldSelector=spec.startedAt>T&listOptions.labelSelector=S
  &listOptions.limit=N&listOptions.continue=OFFSET: a page of runs (name, namespace, uid, phase, progress, message,
  startedAt, finishedAt, labels: no nodes), newest first; `continue` is an offset (server/utils.BuildListOptions);
* GET /api/v1/archived-workflows/{uid}: one run, whole;
* GET /api/v1/workflows/{namespace}/{name}: a live workflow, its offloaded nodes hydrated from the database.

The caller's bearer token goes with each request (Argo Server's `client` auth mode checks it with the API server);
the local cluster's server runs in `server` mode on loopback and ignores it. Failures are wf's errors: a server that
cannot be reached or refuses is ClusterError (exit 3), an address that is not Argo Server's API InputError (exit 2),
each naming the URL and where it came from.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlencode

from wf.controller.client import http_address
from wf.core.errors import ClusterError, InputError

ARGO_SERVER_ENV = "WF_ARGO_SERVER"  # where `wf list --archived` and `wf get`'s fallback find Argo Server
TIMEOUT_SECONDS = 30.0
PAGE = 200

# GETs a URL with headers, returning the body: urllib by default, a fake in tests.
Fetch = Callable[[str, dict[str, str]], bytes]


def argo_server_url(url: str, origin: str) -> str:
    """`url` if it is an http(s) address; InputError (exit 2) naming `origin` otherwise."""
    return http_address(url, origin, "an Argo Server", "https://argo-server.argo:2746")


@dataclass
class Archive:
    """Argo Server's archive at `url` (from `origin`: --argo-server, WF_ARGO_SERVER or the local cluster)."""

    url: str
    origin: str
    token: str | None = None  # "Bearer ..." of the caller, for Argo Server's client auth mode
    fetch: Fetch | None = None

    def __post_init__(self) -> None:
        self.url = argo_server_url(self.url, self.origin)

    @property
    def where(self) -> str:
        return f"Argo Server at {self.url} ({self.origin})"

    def runs(self, namespace: str | None, *, since: datetime | None = None, selector: str = "",
             name: str | None = None) -> Iterator[dict[str, Any]]:
        """Archived runs of `namespace` (None: every namespace the caller may list) that started after `since`,
        with labels matching `selector`, or named `name`; a page at a time, newest first."""
        fields = [*([f"spec.startedAt>{_rfc3339(since)}"] if since else []),
                  *([f"metadata.name={name}"] if name else [])]
        offset = "0"
        while True:
            query = {"listOptions.limit": str(PAGE), "listOptions.continue": offset,
                     **({"namespace": namespace} if namespace else {}),
                     **({"listOptions.fieldSelector": ",".join(fields)} if fields else {}),
                     **({"listOptions.labelSelector": selector} if selector else {})}
            page = self._json(f"/api/v1/archived-workflows?{urlencode(query)}")
            yield from page.get("items") or []
            offset = (page.get("metadata") or {}).get("continue") or ""
            if not offset:
                return

    def run(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The newest archived run of that name, whole (nodes and all); None when the archive has none."""
        listed = next(self.runs(namespace, name=name), None)
        if listed is None:
            return None
        return self.whole(listed)

    def whole(self, listed: dict[str, Any]) -> dict[str, Any] | None:
        """A run `runs` listed, whole (its listing has no nodes); None when the archive no longer has it."""
        metadata = listed.get("metadata") or {}
        uid, namespace = metadata.get("uid"), metadata.get("namespace") or ""
        if not uid:
            raise InputError(f"{self.where} listed {namespace}/{metadata.get('name')} without a uid: is it Argo "
                             "Server's API?")
        found: dict[str, Any] | None = self._json(
            f"/api/v1/archived-workflows/{quote(uid, safe='')}?{urlencode({'namespace': namespace})}",
            missing_ok=True)
        return found

    def hydrated(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The live workflow as Argo Server serves it: nodes offloaded to the database put back (hydrated,
        v4.0.7 server/workflow/workflow_server.go GetWorkflow); None when it does not exist."""
        found: dict[str, Any] | None = self._json(f"/api/v1/workflows/{quote(namespace, safe='')}/"
                                                  f"{quote(name, safe='')}", missing_ok=True)
        return found

    def _json(self, path: str, missing_ok: bool = False) -> Any:
        from http.client import HTTPException
        from urllib.error import HTTPError, URLError

        headers = {"Accept": "application/json", **({"Authorization": self.token} if self.token else {})}
        try:
            body = (self.fetch or _get)(self.url + path, headers)
        except HTTPError as exc:
            said = _message(exc.read() if exc.fp is not None else b"")
            if exc.code == 404 and missing_ok:
                return None
            if exc.code in (401, 403):
                raise ClusterError(f"{self.where} refused: HTTP {exc.code} {said or exc.reason} (its auth mode "
                                   "`client` takes your cluster credentials: may they list workflows here?)") from None
            if said or exc.code >= 500:
                raise ClusterError(f"{self.where} answered HTTP {exc.code}: {said or exc.reason}") from None
            raise InputError(f"{self.where} is not Argo Server's API: {path.split('?')[0]} answered HTTP {exc.code} "
                             f"({exc.reason}); give Argo Server's own address") from None
        except URLError as exc:
            raise ClusterError(f"cannot reach {self.where}: {exc.reason}") from None
        except (OSError, HTTPException) as exc:
            raise ClusterError(f"cannot reach {self.where}: {exc or type(exc).__name__}") from None
        try:
            answer = json.loads(body)
            if not isinstance(answer, dict):
                raise ValueError(f"a JSON {type(answer).__name__}")
            return answer
        except ValueError as exc:
            shown = body[:60].decode("utf-8", "replace").strip()
            raise InputError(f"{self.where} is not Argo Server's API: its answer is not a JSON object ({exc}; it "
                             f"begins {shown!r}); give Argo Server's own address") from None


def _rfc3339(moment: datetime) -> str:
    """In UTC, as Go's time.Parse(RFC3339) reads it (a naive time is taken as UTC)."""
    moment = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _message(body: bytes) -> str | None:
    """grpc-gateway's error body: {"code": 5, "message": "..."}."""
    try:
        said = json.loads(body).get("message")
    except (ValueError, AttributeError):
        return None
    return str(said) if said else None


def _get(url: str, headers: dict[str, str]) -> bytes:
    from urllib.request import Request, urlopen

    with urlopen(Request(url, headers=headers), timeout=TIMEOUT_SECONDS) as response:  # noqa: S310 - http(s) only
        body: bytes = response.read()
        return body
