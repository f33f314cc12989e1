"""One Kubernetes watch per namespace, serving any number of workflows, that never misses a change.

List, then watch from the list's resourceVersion with bookmarks; resume from the last resourceVersion seen
after the server ends a watch or the connection drops (backoff while the API server is away); relist on
410 Gone, from a watch or from any page of a list (the version or the list's continue token was compacted
away). A relist replays the current state of everything, so a terminal phase reached while disconnected is
still delivered. A watch on which nothing arrives for SILENCE_SECONDS, not even a bookmark (the API server
sends one about every minute), is taken as a connection gone silent (a dead peer, a stalled proxy or NAT) and
resumed on a new connection. The transport is injected so the algorithm is tested without a cluster.
"""

from __future__ import annotations

import functools
import json
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from wf.controller.client import Kube, is_transient, server_message
from wf.core.constants import WORKFLOW

# Objects per list request: a relist is held a page at a time, not whole. Workflows are big (a day's run up to
# 173 KB each): ten at a time; pods and nodes are small: kubectl's chunk size, so a list of 8,000 is 16 requests.
WORKFLOW_PAGE = 10
LIST_PAGE = 500
WATCH_SECONDS = 240  # the server ends each watch after this; we resume from the last resourceVersion
# The kube-apiserver's watch cache sends each watcher that asked for them a bookmark about every minute
# (k8s.io/apiserver pkg/storage/cacher: bookmarkFrequency); two missed in a row mean a dead connection.
SILENCE_SECONDS = 150.0
CONNECT_TIMEOUT = 10.0
# An API server too busy to serve a list page now answers 429, 503 or 504 (a 504 "Too large resource version" when
# its watch cache is behind etcd, with Retry-After: 1; client-go's reflector asks again). Each page is asked up to
# this many times, backing off (18 to 35 s in all, the jitter's), before its caller hears of it: on the full-size
# day (2026-12-07) `wf report`, run as the day ended, failed on its first page.
PAGE_TRIES = 8
BUSY: Final = (429, 503, 504)  # the statuses of those answers


class Gone(Exception):
    """The resourceVersion we resume from is too old (HTTP 410): relist."""


class Silent(Exception):
    """Nothing arrived on an open watch for the silence bound, not even a bookmark: resume on a new connection."""


class Transport(Protocol):
    def pages(self) -> Iterator[tuple[list[dict[str, Any]], str]]: ...

    def watch(self, resource_version: str) -> Iterator[dict[str, Any]]: ...

    def close(self) -> None: ...


@dataclass
class Backoff:
    """Exponential backoff with jitter, capped; reset after a success."""

    initial: float = 0.5
    cap: float = 10.0
    attempt: int = 0

    def next(self) -> float:
        delay = min(self.cap, self.initial * 2**self.attempt)
        self.attempt += 1
        return delay * (0.5 + random.random() / 2)

    def reset(self) -> None:
        self.attempt = 0


class KubeTransport:
    """One collection through the API server (a list call such as `core.list_pod_for_all_namespaces`),
    filtered by label and field selectors. Bodies are read as JSON, not as the client's models: a watch of
    thousands of pods would spend most of its CPU building and dropping model objects. `decode` turns a list
    page's bytes into its object: a caller that keeps a few fields of each item decodes only those."""

    def __init__(self, list_call: Callable[..., Any], label_selector: str = "", field_selector: str = "",
                 silence: float = SILENCE_SECONDS, page: int = LIST_PAGE,
                 decode: Callable[[bytes], dict[str, Any]] = json.loads) -> None:
        self.list_call = list_call
        self.silence = silence
        self.page = page
        self.decode = decode
        self.selectors = {
            k: v for k, v in (("label_selector", label_selector), ("field_selector", field_selector)) if v
        }
        self._response: Any = None
        self._lock = threading.Lock()

    @classmethod
    def workflows(cls, kube: Kube, namespace: str, label_selector: str = "", field_selector: str = "") -> KubeTransport:
        list_call = functools.partial(kube.custom.list_namespaced_custom_object, WORKFLOW.group, WORKFLOW.version,
                                      namespace, WORKFLOW.plural)
        return cls(list_call, label_selector, field_selector, page=WORKFLOW_PAGE)

    def pages(self) -> Iterator[tuple[list[dict[str, Any]], str]]:
        """The list, a page at a time with its resourceVersion (the same for every page of one list)."""
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"limit": self.page, **self.selectors}
            if token:
                kwargs["_continue"] = token
            page = self.decode(_when_served(self.list_call, _preload_content=False,
                                            _request_timeout=(CONNECT_TIMEOUT, self.silence), **kwargs).data)
            token = (page.get("metadata") or {}).get("continue")
            items, version = page.get("items") or [], str(page["metadata"]["resourceVersion"])
            del page  # one page in memory at a time: the caller drops its items before asking for the next
            yield items, version
            del items
            if not token:
                return

    def watch(self, resource_version: str) -> Iterator[dict[str, Any]]:
        from kubernetes.watch.watch import iter_resp_lines
        from urllib3.exceptions import ReadTimeoutError

        response = _gone_on_410(
            self.list_call, watch=True, resource_version=resource_version, allow_watch_bookmarks=True,
            timeout_seconds=WATCH_SECONDS, _preload_content=False, _request_timeout=(CONNECT_TIMEOUT, self.silence),
            **self.selectors,
        )
        with self._lock:
            self._response = response
        try:
            for line in iter_resp_lines(response):
                if line.strip():
                    yield json.loads(line)
        except ReadTimeoutError as exc:
            raise Silent(f"no event or bookmark for {self.silence:.0f}s") from exc
        finally:
            with self._lock:
                self._response = None
            response.release_conn()

    def close(self) -> None:
        """Unblock a watch read from another thread (Ctrl-C, or the caller has all it needs)."""
        with self._lock:
            response = self._response
        if response is not None:
            import contextlib
            import socket

            sock = getattr(getattr(response, "connection", None), "sock", None)
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


def _when_served(call: Callable[..., Any], **kwargs: Any) -> Any:
    """`_gone_on_410(call, **kwargs)`, asked again while the API server answers that it is too busy (PAGE_TRIES)."""
    from kubernetes.client.exceptions import ApiException

    backoff = Backoff()
    while True:
        try:
            return _gone_on_410(call, **kwargs)
        except ApiException as exc:
            if exc.status not in BUSY or backoff.attempt >= PAGE_TRIES - 1:
                raise
        time.sleep(backoff.next())


def _gone_on_410(call: Callable[..., Any], **kwargs: Any) -> Any:
    """`call(**kwargs)`, with HTTP 410 (a compacted resourceVersion, an expired continue token) as Gone."""
    from kubernetes.client.exceptions import ApiException

    try:
        return call(**kwargs)
    except ApiException as exc:
        if exc.status == 410:
            raise Gone(str(exc.reason)) from exc
        raise


def _key(metadata: dict[str, Any]) -> tuple[str, str]:
    return metadata.get("namespace", ""), metadata.get("name", "")


Sink = Callable[[str, dict[str, Any]], None]  # (event type, object): ADDED, MODIFIED, DELETED


@dataclass
class StreamStats:
    lists: int = 0
    watches: int = 0
    relists_after_gone: int = 0
    reconnects: int = 0
    silences: int = 0
    events: int = 0
    bookmarks: int = 0


@dataclass
class NamespaceStream:
    """Feeds a sink every change to the selected workflows of one namespace until stopped."""

    transport: Transport
    sink: Sink
    on_trouble: Callable[[str], None] = lambda message: None
    on_synced: Callable[[], None] = lambda: None  # after each (re)list: every selected object has been delivered
    sleep: Callable[[float], object] | None = None  # default: wait on stop_event, so stop() interrupts it
    give_up_after: float = 600.0  # seconds of continuous outage before the error is raised
    backoff: Backoff = field(default_factory=Backoff)
    stats: StreamStats = field(default_factory=StreamStats)
    stop_event: threading.Event = field(default_factory=threading.Event)
    resource_version: str | None = None
    # (namespace, name) -> uid, to replay deletions missed in a gap (one stream may span every namespace)
    _known: dict[tuple[str, str], str] = field(default_factory=dict)
    _connected: bool = False
    _outage_since: float | None = None

    def stop(self) -> None:
        self.stop_event.set()
        self.transport.close()

    def _wait(self, message: str) -> None:
        delay = self.backoff.next()
        self.on_trouble(f"{message}; retrying in {delay:.1f}s")
        if self.sleep is None:
            self.stop_event.wait(delay)
        else:
            self.sleep(delay)

    def _healthy(self) -> None:
        self.backoff.reset()
        self._connected = True
        self._outage_since = None

    def _relist(self) -> None:
        """Deliver every listed object as it arrives (a page is dropped before the next is read), then the
        deletions the list reveals; the resourceVersion is taken only once the whole list has been read."""
        listed: dict[tuple[str, str], str] = {}
        version = None
        for items, page_version in self.transport.pages():
            for item in items:
                listed[_key(item["metadata"])] = item["metadata"].get("uid", "")
                self.sink("ADDED", item)
            del items
            version = page_version
        for (namespace, name), uid in self._known.items():
            if (namespace, name) not in listed:
                self.sink("DELETED", {"metadata": {"namespace": namespace, "name": name, "uid": uid}})
        self._known = listed
        self.resource_version = version
        self.stats.lists += 1
        self.on_synced()

    def _deliver(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise Gone(obj.get("message", "resourceVersion too old"))
            from kubernetes.client.exceptions import ApiException

            raise ApiException(status=obj.get("code") or 500, reason=f"{obj.get('reason')}: {obj.get('message')}")
        metadata = obj.get("metadata") or {}
        if metadata.get("resourceVersion"):
            self.resource_version = str(metadata["resourceVersion"])
        if kind == "BOOKMARK":
            self.stats.bookmarks += 1
            return
        self.stats.events += 1
        if kind == "DELETED":
            self._known.pop(_key(metadata), None)
        else:
            self._known[_key(metadata)] = metadata.get("uid", "")
        self.sink(str(kind), obj)

    def run(self) -> None:
        """Loop until stopped; errors that retrying cannot fix (403, bad selector) are raised."""
        while not self.stop_event.is_set():
            try:
                if self.resource_version is None:
                    self._relist()
                    self._healthy()
                resume_from = self.resource_version
                assert resume_from is not None, "every list (even an empty one) has a page with a resourceVersion"
                self.stats.watches += 1
                started, delivered = time.monotonic(), 0
                for event in self.transport.watch(resume_from):
                    self._deliver(event)
                    self._healthy()
                    delivered += 1
                    if self.stop_event.is_set():
                        return
                if not delivered and time.monotonic() - started < 1.0:
                    # An API server shutting down may end watches at once; don't spin on it.
                    self._wait("the API server ended the watch at once")
            except Gone:
                self.stats.relists_after_gone += 1
                if self.resource_version is None:
                    # The list itself was gone (its continue token expired mid-way): list again, not in a loop.
                    self._wait("the list expired while it was read")
                self.resource_version = None
            except Silent as exc:
                # The server answered the watch: not an outage. The next watch resumes where this one stopped.
                self.stats.silences += 1
                self.on_trouble(f"{exc}: watching again on a new connection")
            except Exception as exc:
                if self.stop_event.is_set():
                    return
                # Before the first success, no answer means a wrong or absent cluster: report it (exit 3). An
                # overloaded server's answer (429; 504 "Too large resource version", its watch cache behind etcd, seen
                # on the full-size day) is waited out like any later one.
                answered = getattr(exc, "status", 0) not in (0, None)  # an ApiException with an HTTP status
                if not is_transient(exc) or not (self._connected or answered):
                    raise
                now = time.monotonic()
                self._outage_since = self._outage_since or now
                if now - self._outage_since > self.give_up_after:
                    raise
                self.stats.reconnects += 1
                self._wait(f"lost the API server ({type(exc).__name__})")


# How long a 403 must last to be the account's missing right rather than a restarted API server's authorizer that
# has not read RBAC's objects yet (seen here: refusals for a few seconds after a restart).
FORBIDDEN_PATIENCE: Final = 30.0


class Refusals:
    """403s in a row: waited out for FORBIDDEN_PATIENCE from the first, then taken as the account's missing right."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.since: float | None = None

    def patient(self) -> bool:
        """One more refusal: True while they have not lasted FORBIDDEN_PATIENCE."""
        now = self.clock()
        if self.since is None:
            self.since = now
        return now - self.since < FORBIDDEN_PATIENCE

    def clear(self) -> None:
        """A request got through: the next refusal starts a new count."""
        self.since = None



def watch_forever(what: str, transport: Callable[[], Transport], sink: Sink, log: Any,
                  on_synced: Callable[[], None] = lambda: None) -> None:
    """Deliver every change of `what` to `sink` for as long as the process lives: a stream that gives up on the
    API server is started over on a fresh transport (a relist). A 403 that lasts (Refusals) is raised: waiting gives
    no account a right it lacks (the caller names the right); a shorter one is a restarted API server's. `on_synced`
    follows each (re)list."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    refusals = Refusals()

    def synced() -> None:
        refusals.clear()
        on_synced()

    while True:
        stream = NamespaceStream(transport(), sink=sink, on_synced=synced,
                                 on_trouble=lambda message: log.warning("watching %s: %s", what, message))
        try:
            stream.run()
        except ApiException as exc:
            if exc.status == 403 and not refusals.patient():
                raise
            log.warning("watching %s: %s; listing again", what, server_message(exc))
        except (HTTPError, OSError) as exc:
            log.warning("watching %s: %s; listing again", what, exc)
        time.sleep(1)
