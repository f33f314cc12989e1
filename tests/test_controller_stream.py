"""The namespace stream: resume from the last resourceVersion, relist on 410, reconnect after drops, and
deliver a terminal phase reached while disconnected."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import ProtocolError

from controller_fakes import FakeTransport, workflow
from wf.controller.stream import NamespaceStream


class Stop(Exception):
    pass


def run(transport: FakeTransport, stop_after: int | None = None) -> tuple[NamespaceStream, list[tuple[str, str, str]]]:
    seen: list[tuple[str, str, str]] = []
    sleeps: list[float] = []

    def sink(kind: str, obj: dict[str, Any]) -> None:
        seen.append((kind, obj["metadata"]["name"], (obj.get("status") or {}).get("phase", "")))
        if stop_after is not None and len(seen) >= stop_after:
            stream.stop()

    stream = NamespaceStream(transport, sink, sleep=sleeps.append)
    with pytest.raises(AssertionError, match="watched more often"):
        stream.run()  # ends when the script runs out
    stream.sleeps = sleeps  # type: ignore[attr-defined]
    return stream, seen


def event(kind: str, name: str, phase: str, rv: str) -> dict[str, Any]:
    return {"type": kind, "object": workflow(name, phase, rv=rv)}


def test_resumes_from_the_last_resource_version_including_bookmarks() -> None:
    transport = FakeTransport(
        lists=[([workflow("a", "Running", rv="10")], "10")],
        watches=[[event("MODIFIED", "a", "Running", "11"),
                  {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "15"}}}],
                 [event("MODIFIED", "a", "Succeeded", "16")]],
    )
    stream, seen = run(transport)
    assert transport.watched_from == ["10", "15", "16"]
    assert transport.list_calls == 1
    assert seen == [("ADDED", "a", "Running"), ("MODIFIED", "a", "Running"), ("MODIFIED", "a", "Succeeded")]
    assert stream.stats.bookmarks == 1


def test_gone_relists_and_the_relist_delivers_the_terminal_phase() -> None:
    transport = FakeTransport(
        lists=[([workflow("a", "Running", rv="10"), workflow("b", "Running", rv="10")], "10"),
               ([workflow("a", "Failed", rv="90")], "90")],  # b deleted meanwhile, a failed meanwhile
        watches=[[{"type": "ERROR",
                   "object": {"kind": "Status", "code": 410, "message": "too old resource version: 10 (50)"}}]],
    )
    stream, seen = run(transport)
    assert stream.stats.relists_after_gone == 1 and transport.list_calls == 2
    assert transport.watched_from == ["10", "90"]
    assert ("DELETED", "b", "") in seen and ("ADDED", "a", "Failed") in seen


def test_gone_as_an_http_status_on_the_watch_request_also_relists() -> None:
    from wf.controller.stream import Gone

    transport = FakeTransport(lists=[([], "5"), ([], "7")], watches=[Gone("410"), []])
    stream, _ = run(transport)
    assert transport.watched_from[:2] == ["5", "7"] and stream.stats.relists_after_gone == 1
    assert transport.list_calls == 2


def test_dropped_connections_reconnect_with_backoff_from_the_same_version() -> None:
    transport = FakeTransport(
        lists=[([workflow("a", "Running", rv="10")], "10")],
        watches=[[event("MODIFIED", "a", "Running", "12"), ProtocolError("connection reset")],
                 ApiException(status=0, reason="connection refused"),  # API server restarting
                 ApiException(status=503, reason="not ready"),
                 [event("MODIFIED", "a", "Succeeded", "40")]],
    )
    stream, seen = run(transport)
    assert transport.watched_from == ["10", "12", "12", "12", "40"]
    assert stream.stats.reconnects == 3 and transport.list_calls == 1
    assert len(stream.sleeps) == 3 and stream.sleeps[0] < stream.sleeps[2]  # type: ignore[attr-defined]
    assert seen[-1] == ("MODIFIED", "a", "Succeeded")


def test_errors_before_the_first_success_and_forbidden_are_raised() -> None:
    refused = FakeTransport(lists=[ApiException(status=0, reason="refused")], watches=[])
    with pytest.raises(ApiException):
        NamespaceStream(refused, lambda k, o: None, sleep=lambda s: None).run()
    forbidden = FakeTransport(lists=[([], "1")], watches=[ApiException(status=403, reason="Forbidden")])
    with pytest.raises(ApiException) as info:
        NamespaceStream(forbidden, lambda k, o: None, sleep=lambda s: None).run()
    assert info.value.status == 403


def test_an_overloaded_servers_answer_before_the_first_success_is_waited_out() -> None:
    # kube-apiserver's answer to a list while its watch cache is behind etcd (the full-size day, 2026-12-07): the
    # stream that met it on its first relist ended `wf submit --watch` with exit 3.
    lagging = ApiException(status=504, reason="Timeout: Too large resource version: 111183, current: 107219")
    transport = FakeTransport(lists=[lagging, ApiException(status=429, reason="Too many requests"),
                                     ([workflow("a", "Running", rv="5")], "5")],
                              watches=[[event("MODIFIED", "a", "Succeeded", "6")]])
    stream, seen = run(transport)
    assert seen == [("ADDED", "a", "Running"), ("MODIFIED", "a", "Succeeded")]
    assert transport.list_calls == 3 and len(stream.sleeps) == 2  # type: ignore[attr-defined]


def test_a_list_page_is_asked_again_while_the_api_server_answers_that_it_is_too_busy(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`wf report` run as the full-size day ended failed on its first page: 504 "Too large resource version"."""
    import json
    from types import SimpleNamespace

    from wf.controller.stream import PAGE_TRIES, KubeTransport

    monkeypatch.setattr("wf.controller.stream.time.sleep", lambda seconds: None)
    answers: list[Any] = [ApiException(status=504, reason="Too large resource version"),
                          ApiException(status=429, reason="Too many requests"),
                          {"metadata": {"resourceVersion": "7", "continue": "p2"}, "items": [{"n": 1}]},
                          ApiException(status=503, reason="Unavailable"),
                          {"metadata": {"resourceVersion": "7"}, "items": [{"n": 2}]}]

    def list_call(**kwargs: Any) -> Any:
        answer = answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return SimpleNamespace(data=json.dumps(answer).encode())

    assert [(items, version) for items, version in KubeTransport(list_call).pages()] == [
        ([{"n": 1}], "7"), ([{"n": 2}], "7")]
    answers[:] = [ApiException(status=504, reason="busy")] * PAGE_TRIES
    with pytest.raises(ApiException):
        list(KubeTransport(list_call).pages())
    assert not answers  # asked PAGE_TRIES times, then the caller heard of it
    answers[:] = [ApiException(status=500, reason="boom"), {"metadata": {"resourceVersion": "1"}, "items": []}]
    with pytest.raises(ApiException):  # not a busy server's answer: at once
        list(KubeTransport(list_call).pages())


def test_stop_ends_the_loop_and_closes_the_transport() -> None:
    transport = FakeTransport(lists=[([workflow("a", "Running", rv="1")], "1")],
                              watches=[[event("MODIFIED", "a", "Running", "2"),
                                        event("MODIFIED", "a", "Running", "3")]])
    seen: list[str] = []
    stream = NamespaceStream(transport, lambda k, o: (seen.append(k), stream.stop()), sleep=lambda s: None)
    stream.run()
    assert seen[0] == "ADDED" and len(seen) <= 2  # the second MODIFIED is never delivered
    assert transport.closed


def test_a_list_is_delivered_page_by_page_and_resumes_from_its_version() -> None:
    seen: list[str] = []

    class Paged(FakeTransport):
        def pages(self):  # type: ignore[no-untyped-def]
            self.list_calls += 1
            yield [workflow("a", "Running")], "7"
            assert seen == ["a"], "the first page is delivered before the second is read"
            yield [workflow("b", "Running")], "7"

    transport = Paged(lists=[], watches=[[]])
    stream = NamespaceStream(transport, lambda kind, obj: seen.append(obj["metadata"]["name"]), sleep=lambda s: None)
    with pytest.raises(AssertionError, match="watched more often"):
        stream.run()
    assert seen == ["a", "b"] and transport.watched_from[0] == "7"


def test_a_stream_across_namespaces_keeps_objects_of_the_same_name_apart() -> None:
    """The simulated executor watches pods in every namespace: a relist must replay the deletion of the one
    that went, with its namespace and uid, and not of its namesake."""
    transport = FakeTransport(
        lists=[([workflow("a", "Running", rv="10", namespace="team-0"),
                 workflow("a", "Running", rv="10", namespace="team-1")], "10"),
               ([workflow("a", "Running", rv="90", namespace="team-1")], "90")],
        watches=[[{"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old"}}]],
    )
    deleted: list[dict[str, Any]] = []
    stream = NamespaceStream(transport, lambda kind, obj: kind == "DELETED" and deleted.append(obj["metadata"]),
                             sleep=lambda _: None)
    with pytest.raises(AssertionError, match="watched more often"):
        stream.run()
    assert deleted == [{"namespace": "team-0", "name": "a", "uid": "uid-a"}]


class ScriptedApi:
    """A list call as KubeTransport makes it: each call takes the next scripted page, watch response or error."""

    def __init__(self, *script: Any) -> None:
        self.script = list(script)
        self.calls: list[dict[str, Any]] = []

    def __call__(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        entry = self.script.pop(0)
        if isinstance(entry, BaseException):
            raise entry
        return entry


class Page:
    def __init__(self, names: list[str], version: str, token: str | None = None) -> None:
        import json

        self.data = json.dumps({"metadata": {"resourceVersion": version, **({"continue": token} if token else {})},
                                "items": [workflow(n, "Running", rv=version) for n in names]}).encode()


class WatchResponse:
    """A watch's chunked body: lines, then what the socket does next (an exception, or the server's end)."""

    def __init__(self, events: list[dict[str, Any]], then: BaseException | None = None) -> None:
        self.events, self.then, self.released = events, then, False

    def stream(self, amt: Any = None, decode_content: bool = False) -> Any:
        import json

        for e in self.events:
            yield (json.dumps(e) + "\n").encode()
        if self.then is not None:
            raise self.then

    def release_conn(self) -> None:
        self.released = True


def test_gone_on_a_later_page_of_a_list_relists_from_the_start() -> None:
    """An expired continue token (410 on the second page) once ended the watch with a traceback."""
    from wf.controller.stream import KubeTransport

    api = ScriptedApi(Page(["a"], "10", token="t1"), ApiException(status=410, reason="continue token expired"),
                      Page(["a", "b"], "20"), WatchResponse([]))
    seen: list[tuple[str, str]] = []
    stream = NamespaceStream(KubeTransport(api), lambda kind, obj: seen.append((kind, obj["metadata"]["name"])),
                             sleep=lambda _: None)
    with pytest.raises(IndexError):  # the script ran out: the stream went on watching
        stream.run()
    assert [c.get("_continue") for c in api.calls[:3]] == [None, "t1", None]
    assert api.calls[3]["watch"] is True and api.calls[3]["resource_version"] == "20"
    assert stream.stats.relists_after_gone == 1 and ("ADDED", "b") in seen
    assert not [k for k, _ in seen if k == "DELETED"]  # a half-read list reveals no deletion


def test_a_watch_gone_silent_is_resumed_on_a_new_connection_from_the_same_version() -> None:
    """A stalled connection (no event, no bookmark) was noticed only by a 270 s read timeout, as an outage."""
    from urllib3.exceptions import ReadTimeoutError

    from wf.controller.stream import SILENCE_SECONDS, KubeTransport

    stalled = WatchResponse([event("MODIFIED", "a", "Running", "11")],
                            then=ReadTimeoutError(None, "/apis", "Read timed out."))  # type: ignore[arg-type]
    api = ScriptedApi(Page(["a"], "10"), stalled, WatchResponse([event("MODIFIED", "a", "Succeeded", "12")]))
    troubles: list[str] = []
    sleeps: list[float] = []
    stream = NamespaceStream(KubeTransport(api, silence=5), lambda kind, obj: None, on_trouble=troubles.append,
                             sleep=sleeps.append)
    with pytest.raises(IndexError):
        stream.run()
    assert [c.get("resource_version") for c in api.calls[1:]] == ["10", "11", "12"]
    assert all(c["_request_timeout"] == (10.0, 5) for c in api.calls)  # the bound is the read timeout
    assert stream.stats.silences == 1 and stream.stats.reconnects == 0 and stalled.released
    assert troubles == ["no event or bookmark for 5s: watching again on a new connection"]
    assert not sleeps  # the server answered: no backoff
    assert KubeTransport(api).silence == SILENCE_SECONDS


def test_gone_on_the_first_page_waits_before_listing_again() -> None:
    from wf.controller.stream import KubeTransport

    bookmark = {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "4"}}}
    api = ScriptedApi(ApiException(status=410, reason="Expired"), Page([], "3"), WatchResponse([bookmark]))
    sleeps: list[float] = []
    stream = NamespaceStream(KubeTransport(api), lambda kind, obj: None, sleep=sleeps.append)
    with pytest.raises(IndexError):
        stream.run()
    assert len(sleeps) == 1 and stream.stats.relists_after_gone == 1


def _failing_transports(failures: list[BaseException], made: list[int]) -> Callable[[], Any]:
    """Transports whose list fails with each of `failures` in turn; `made` counts them."""

    class Failing:
        def pages(self) -> Any:
            raise failures[len(made) - 1]

        def watch(self, resource_version: str) -> Any:
            raise AssertionError("never listed")

        def close(self) -> None:
            pass

    def transport() -> Failing:
        made.append(1)
        return Failing()

    return transport


def test_watch_forever_starts_a_stream_over_after_it_gives_up_and_raises_a_refusal(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The long-running watchers' loop (the simulated executor, the node recorder): an API server away (no answer
    at all, before the stream's first success) starts a new stream (a relist), a 403 that lasts ends it, since
    waiting gives no account a right it lacks (here at once: no patience)."""
    import logging

    from wf.controller.stream import watch_forever

    failures: list[BaseException] = [ProtocolError("connection refused"), ApiException(status=0, reason="refused"),
                                      ApiException(status=403, reason="Forbidden")]
    made: list[int] = []
    transport = _failing_transports(failures, made)

    monkeypatch.setattr("wf.controller.stream.time.sleep", lambda seconds: None)
    monkeypatch.setattr("wf.controller.stream.FORBIDDEN_PATIENCE", 0.0)
    with pytest.raises(ApiException) as refused:
        watch_forever("pods", transport, lambda kind, obj: None, logging.getLogger("test"))
    assert refused.value.status == 403 and len(made) == 3


def test_watch_forever_waits_out_a_restarted_api_servers_refusals(monkeypatch: pytest.MonkeyPatch) -> None:
    """Refusals shorter than FORBIDDEN_PATIENCE (an API server whose authorizer has not read RBAC yet) are asked
    again, not raised."""
    import logging

    from wf.controller.stream import watch_forever

    failures: list[BaseException] = [ApiException(status=403, reason="Forbidden"),
                                      ApiException(status=403, reason="Forbidden"), RuntimeError("stop here")]
    made: list[int] = []
    transport = _failing_transports(failures, made)

    monkeypatch.setattr("wf.controller.stream.time.sleep", lambda seconds: None)
    with pytest.raises(RuntimeError, match="stop here"):
        watch_forever("pods", transport, lambda kind, obj: None, logging.getLogger("test"))
    assert len(made) == 3  # both refusals asked again
