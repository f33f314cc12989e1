"""The namespace stream: resume from the last resourceVersion, relist on 410, reconnect after drops, and
deliver a terminal phase reached while disconnected."""

from __future__ import annotations

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
