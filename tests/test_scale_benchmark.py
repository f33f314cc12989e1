"""The scale benchmark's patience with a loaded API server (benchmarks/scale.py): a storm or a reading that died on
one server timeout lost a drain wave or a day's figures."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def scale() -> ModuleType:
    spec = importlib.util.spec_from_file_location("scale_benchmark", ROOT / "benchmarks" / "scale.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


class Answers:
    """A call that fails with these statuses first, then answers."""

    def __init__(self, *statuses: int) -> None:
        self.statuses = list(statuses)
        self.calls = 0

    def __call__(self, *args: Any, **kwargs: Any) -> str:
        self.calls += 1
        if self.statuses:
            raise ApiException(status=self.statuses.pop(0))
        return "answer"


def test_a_server_timeout_is_tried_again_and_a_refusal_is_not(scale: ModuleType,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(scale.time, "sleep", slept.append)
    busy = Answers(504, 503, 429, 504)
    assert scale._patient_call(busy) == "answer" and busy.calls == 5
    gone = Answers(404)
    assert scale._patient_call(gone, tolerate=(404,)) is None and gone.calls == 1
    forbidden = Answers(403)
    with pytest.raises(ApiException):
        scale._patient_call(forbidden)
    assert forbidden.calls == 1
    always = Answers(*[504] * scale._BUSY_TRIES)
    with pytest.raises(ApiException):
        scale._patient_call(always)
    assert always.calls == scale._BUSY_TRIES
    # what it waited for the busy server before giving up: minutes, not the 15 s five 504s once took
    assert 60 < sum(slept[-(scale._BUSY_TRIES - 1):]) <= 30 * scale._BUSY_TRIES


class Pages:
    """list_pod_for_all_namespaces, a page at a time: each page's first request is dropped once; a token in
    `expired` gets 410 Expired with a fresh token for the same page ("<page>-fresh")."""

    def __init__(self, pages: list[list[str]], expired: tuple[str, ...] = ()) -> None:
        self.pages = pages
        self.expired = expired
        self.asked: list[tuple[int, str | None]] = []

    def __call__(self, *, limit: int, _continue: str | None, _request_timeout: int) -> Any:
        import json
        from types import SimpleNamespace

        from urllib3.exceptions import ProtocolError

        self.asked.append((limit, _continue))
        if self.asked.count((limit, _continue)) == 1 and _continue not in self.expired:
            raise ProtocolError("Connection aborted.")  # what the loaded API server did to the one big list
        if _continue in self.expired:
            expired = ApiException(status=410, reason="Gone")
            expired.body = json.dumps({"kind": "Status", "reason": "Expired",
                                       "metadata": {"continue": f"{_continue}-fresh"}})
            raise expired
        index = int((_continue or "0").removesuffix("-fresh"))
        following = str(index + 1) if index + 1 < len(self.pages) else None
        return SimpleNamespace(items=self.pages[index], metadata=SimpleNamespace(_continue=following))


def test_the_drain_lists_every_pod_a_page_at_a_time_each_page_tried_again(
        scale: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scale.time, "sleep", lambda _: None)
    pages = Pages([["a", "b"], ["c"], ["d"]])
    core = type("Core", (), {"list_pod_for_all_namespaces": staticmethod(pages)})()
    assert scale._every_pod(core) == ["a", "b", "c", "d"]
    assert [token for _, token in pages.asked] == [None, None, "1", "1", "2", "2"]
    assert {limit for limit, _ in pages.asked} == {scale._PAGE}


def test_a_token_that_expired_between_pages_goes_on_with_the_one_the_410_gives(
        scale: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    """The full-size day's drain wave died on `410 Expired` (the token outlived etcd's compaction)."""
    monkeypatch.setattr(scale.time, "sleep", lambda _: None)
    pages = Pages([["a", "b"], ["c"], ["d"]], expired=("1",))
    core = type("Core", (), {"list_pod_for_all_namespaces": staticmethod(pages)})()
    assert scale._every_pod(core) == ["a", "b", "c", "d"]
    assert [token for _, token in pages.asked] == [None, None, "1", "1-fresh", "1-fresh", "2", "2"]
    first = Pages([["a"]], expired=(None,))  # type: ignore[arg-type]
    with pytest.raises(ApiException):  # a 410 with no token of ours to continue is not a page to skip to
        scale._every_pod(type("Core", (), {"list_pod_for_all_namespaces": staticmethod(first)})())


@pytest.mark.parametrize(("resumed_last", "wrong"), [((2, 0.2), False), ((0, 0.0), True)])
def test_a_retry_after_attempts_that_never_started_their_program_is_expected_from_the_start(
        scale: ModuleType, catalog: Any, resumed_last: tuple[int, float], wrong: bool) -> None:
    """Attempt 0 was taken away before its program started (no ledger record: it saved nothing), so attempt 1
    rightly starts over; attempt 2 must resume from attempt 1's save. The full-size day flagged the first as wrong."""
    from controller_fakes import fallback_run
    from wf.controller.checkpoints import AttemptRecord, Ledger, Saved
    from wf.controller.steps import pod_name, workflow_view

    doc = fallback_run()
    pods = [pod_name(doc, a) for a in workflow_view(doc).steps[0].attempts]
    location = "s3://b/checkpoints/wf/prep-q8z/shard"
    ledger = {pods[1]: AttemptRecord(location, Saved(), Saved(2, 0.2), 60.0),
              pods[2]: AttemptRecord(location, Saved(*resumed_last))}
    meta = doc["metadata"]
    report = scale.checkpoint_report([doc], {(meta["namespace"], meta["name"]): Ledger(ledger)}, {}, catalog)
    assert bool(report["resumed_wrongly"]) is wrong, report["resumed_wrongly"]
    (half,) = (v for k, v in report.items() if k.endswith("checkpoints"))
    assert half["resumed_from_start"] == 1 and half.get("resumed_from_checkpoint", 0) == (0 if wrong else 1)


def _series(value: float, **labels: str) -> dict[str, Any]:
    return {"metric": labels, "value": [0, str(value)]}


def _answering(scale: ModuleType, monkeypatch: pytest.MonkeyPatch,
               answers: dict[str, list[dict[str, Any]]]) -> list[str]:
    """Prometheus answering each query by the first key that the query holds; the queries asked."""
    queries: list[str] = []

    def query(state: Any, text: str) -> list[dict[str, Any]]:
        queries.append(text)
        return next(rows for key, rows in answers.items() if key in text)

    monkeypatch.setattr(scale, "prometheus_query", query)
    return queries


def test_the_api_servers_load_pairs_each_requests_time_with_its_count_and_each_resources_events_with_bytes(
        scale: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    queries = _answering(scale, monkeypatch, {
        "apiserver_request_duration_seconds_sum{}": [_series(455.4, verb="PUT", resource="workflows"),
                                                     _series(170.2, verb="POST", resource="pods",
                                                             subresource="binding")],
        'apiserver_request_total{code="409"}': [_series(256.3, verb="PUT", resource="workflows"),
                                                _series(0.4, verb="POST", resource="pods")],
        "apiserver_request_total{}": [_series(1189, verb="PUT", resource="workflows"),
                                      _series(852, verb="POST", resource="pods", subresource="binding"),
                                      _series(860, verb="POST", resource="pods")],
        "apiserver_watch_events_sizes_sum{}": [_series(634 * 2**20, resource="pods")],
        "apiserver_watch_events_total{}": [_series(41313, resource="pods"), _series(7980, resource="workflows")],
    })
    load = scale.api_server_load(None, 229.6)
    assert load == {"requests": [{"request": "PUT workflows", "seconds": 455, "count": 1189},
                                 {"request": "POST pods binding", "seconds": 170, "count": 852}],
                    # under one conflict over the day is Prometheus's extrapolation, not a conflict
                    "conflicts": [{"request": "PUT workflows", "count": 256}],
                    "watch_events": [{"resource": "pods", "mib": 634, "events": 41313}]}
    assert all("[289s]" in q for q in queries)  # the day and a minute: Prometheus's increase() over it


def test_argos_load_is_its_operations_their_mean_time_its_queue_its_busiest_workers_and_its_requests(
        scale: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    queries = _answering(scale, monkeypatch, {
        "argo_workflows_operation_duration_seconds_count": [_series(1371.2)],
        "argo_workflows_operation_duration_seconds_sum": [_series(3811.4)],
        'argo_workflows_queue_adds_count{queue_name="workflow_queue"}': [_series(3454.0)],
        "argo_workflows_workers_busy_count": [_series(32, worker_type="workflow_queue")],
        "argo_workflows_k8s_request_total": [_series(971, kind="workflows", verb="Update", status_code="200"),
                                             _series(258, kind="workflows", verb="Update", status_code="409")],
    })
    assert scale.argo_controller_load(None, 229.6) == {
        "operations": 1371, "operation_mean_seconds": 2.78, "workflow_queue_adds": 3454, "workers_busy_peak": 32.0,
        "requests": [{"request": "workflows Update 200", "count": 971},
                     {"request": "workflows Update 409", "count": 258}]}
    assert all("[289s]" in q for q in queries)
