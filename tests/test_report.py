"""`wf report`: the aggregation per team and class (totals are `wf get`'s costs summed), percentiles, quota share,
queue waits from Kueue's workloads, the JSON document's keys, the HTML page needing nothing from the network, and
the command's exit codes."""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.error import URLError
from urllib.parse import parse_qs, urlsplit

import pytest

from controller_fakes import nested_run
from wf.compile.interruptions import SPOT_FALLBACK_ANNOTATION
from wf.compile.node_facts import NodeRecord
from wf.controller import report as report_module
from wf.controller.checkpoints import AttemptRecord, Ledger, Saved
from wf.controller.cost import NodeFacts, job_cost
from wf.controller.queue import parse_workload
from wf.controller.report import (
    NO_TEAM,
    OUTCOMES,
    REPORT_VERSION,
    Counted,
    Digest,
    Facts,
    PrometheusReading,
    Report,
    Waits,
    build_report,
    percentile,
    read_prometheus,
    window,
)
from wf.controller.steps import pod_name, with_facts, workflow_view
from wf.core.constants import NODE_FACTS_ANNOTATION
from wf.core.errors import ClusterError, InputError
from wf.model.catalog import load_catalog

ROOT = Path(__file__).resolve().parents[1]
CATALOG_PATH = ROOT / "eksctl" / "catalog.yaml"
CATALOG = load_catalog(CATALOG_PATH)
REAL_RUN = json.loads((ROOT / "tests" / "controller_data" / "bert-large-pretrain-run.json").read_text())
NOW = datetime(2026, 12, 1, tzinfo=UTC)
NODES = {
    "gaudi-1": NodeFacts("dl1.24xlarge", "spot"), "gaudi-2": NodeFacts("dl1.24xlarge", "spot"),
    "cpu-1": NodeFacts("r5.4xlarge", "on-demand"),
    "gaudi-spot-us-east-1a-0": NodeFacts("dl1.24xlarge", "spot"),
    "cpu-spot-us-east-1a-0": NodeFacts("r5.4xlarge", "spot"), "cpu-spot-us-east-1b-0": NodeFacts("r5.4xlarge", "spot"),
}


def _in(namespace: str, workflow: dict[str, Any]) -> dict[str, Any]:
    workflow = copy.deepcopy(workflow)
    workflow["metadata"]["namespace"] = namespace
    return workflow


def _running() -> dict[str, Any]:
    """bert-r: still training (its last attempt has no end)."""
    workflow = nested_run("bert-r", final="Running")
    del workflow["status"]["finishedAt"]
    del workflow["status"]["nodes"]["p2"]["finishedAt"]
    return _in("perception", workflow)


def _fallback() -> dict[str, Any]:
    """bert-f: its train step falls back to On-Demand after one interruption."""
    workflow = _in("mapping", nested_run("bert-f"))
    train = next(t for t in workflow["spec"]["templates"] if t["name"] == "train")
    train["metadata"] = {"annotations": {SPOT_FALLBACK_ANNOTATION: "1"}}
    return workflow


def fixtures() -> list[dict[str, Any]]:
    return [_in("ml-training", nested_run("bert-a")), _in("mapping", nested_run("bert-b", final="Failed")),
            _in("perception", REAL_RUN), _running(), _fallback()]


def report(workflows: list[dict[str, Any]] | None = None, team: str | None = None,
           prometheus: PrometheusReading | None = None, **facts: Any) -> Report:
    return build_report(fixtures() if workflows is None else workflows, Facts(NODES, **facts), CATALOG,
                        window("300d", NOW), team, prometheus)


def line(built: Report, team: str, compute_class: str) -> Any:
    return next(u for u in built.lines if (u.team, u.compute_class) == (team, compute_class))


def test_totals_are_the_sum_of_wf_gets_costs() -> None:
    """Every workflow through `wf get`'s functions (view, facts, job_cost), summed: the report's total."""
    costs = [job_cost(with_facts(workflow_view(w), w, Ledger()), w, NODES, NOW, CATALOG)
             for w in fixtures()]
    total = report().total
    assert costs and total.node_hours > 0 and total.redone_node_hours > 0
    for figure in ("node_hours", "on_demand_usd", "estimate_usd", "redone_node_hours", "redone_usd"):
        assert getattr(total, figure) == pytest.approx(sum(getattr(c, figure) for c in costs)), figure
    # Each team's total is the sum of its classes', and the teams' add up to the total.
    built = report()
    teams = [u for u in built.lines if u.compute_class == "*" and u.team != "*"]
    assert sum(u.estimate_usd for u in teams) == pytest.approx(total.estimate_usd)
    for team in teams:
        classes = [u for u in built.lines if u.team == team.team and u.compute_class != "*"]
        assert sum(u.node_hours for u in classes) == pytest.approx(team.node_hours)


def test_outcomes_per_team_count_each_workflow_once() -> None:
    built = report()
    assert dict(line(built, "perception", "*").workflows) == {"Succeeded": 2, "Running": 1}
    assert dict(line(built, "mapping", "*").workflows) == {"Failed": 1, "Succeeded": 1}
    assert sum(built.total.workflows.values()) == len(built.runs) == 5
    assert set(built.total.workflows) <= set(OUTCOMES)


def test_card_hours_and_quota_share() -> None:
    built = report()
    gaudi = line(built, "perception", "gaudi")
    assert gaudi.card_hours == pytest.approx(gaudi.node_hours * 8)  # dl1.24xlarge: 8 cards a node
    assert gaudi.quota_cards == 64  # the catalog's perception quota
    assert gaudi.quota_share == pytest.approx(gaudi.card_hours / (64 * 300 * 24))
    cpu = line(built, "perception", "cpu")
    assert cpu.card_hours is None and cpu.quota_share is None
    # The usage series cover the same card-hours: their area is the line's figure.
    series = next(s for s in built.usage if (s.team, s.compute_class) == ("perception", "gaudi"))
    bin_hours = built.window.hours / len(series.values)
    assert series.unit == "cards" and series.quota == 64
    assert sum(series.values) * bin_hours == pytest.approx(gaudi.card_hours, rel=1e-6)


def test_interruptions_fallbacks_and_redone_work() -> None:
    built = report()
    mapping = line(built, "mapping", "gaudi")
    assert mapping.interruptions == 2 and mapping.fallbacks == 1  # bert-b's and bert-f's; only bert-f fell back
    fallen = next(r for r in built.runs if r.name == "bert-f").view.steps[-1]
    assert [a.capacity for a in fallen.attempts] == ["spot", "on-demand", "spot"]
    assert mapping.redone_node_hours > 0 and mapping.redone_usd > 0
    assert len(built.interruptions) == built.total.interruptions == 4
    assert all(e.compute_class == "gaudi" and e.capacity == "spot" for e in built.interruptions)


def test_team_filter_and_window() -> None:
    only = report(team="mapping")
    assert {r.team for r in only.runs} == {"mapping"}
    assert only.total.node_hours == line(report(), "mapping", "*").node_hours
    recent = build_report(fixtures(), Facts(NODES), CATALOG, window("3d", NOW))
    assert [r.name for r in recent.runs] == ["bert-large-pretrain-fzd27"]  # the March runs are out of the window


@pytest.mark.parametrize("since", ["24", "1y", "h", "", "-2h", "0s"])
def test_a_malformed_since_is_bad_input(since: str) -> None:
    with pytest.raises(InputError, match="--since"):
        window(since, NOW)


def test_percentiles() -> None:
    assert percentile([], 50) is None
    assert percentile([7.0], 95) == 7.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile(list(map(float, range(1, 101))), 95) == pytest.approx(95.05)
    assert percentile([5.0, 1.0, 3.0], 0) == 1.0 and percentile([5.0, 1.0, 3.0], 100) == 5.0


def _workload(workflow: dict[str, Any], attempt: Any, created: str, reserved: str | None) -> Any:
    condition = {"type": "QuotaReserved", "status": "True" if reserved else "False",
                 "message": "" if reserved else "insufficient unused quota", "lastTransitionTime": reserved or created}
    metadata = {"name": f"pod-{attempt.node_id}", "namespace": workflow["metadata"]["namespace"],
                "creationTimestamp": created, "ownerReferences": [{"kind": "Pod", "name": pod_name(workflow, attempt)}]}
    return parse_workload({"metadata": metadata, "spec": {"priority": 100}, "status": {"conditions": [condition]}})


def test_queue_waits_from_kueue_workloads() -> None:
    workflows = fixtures()
    first = workflows[0]
    attempts = [a for row in workflow_view(first).steps for a in row.attempts]
    waits = [_workload(first, attempts[0], "2026-03-01T12:00:00Z", "2026-03-01T12:00:10Z"),
             _workload(first, attempts[1], "2026-03-01T12:10:00Z", "2026-03-01T12:20:00Z"),
             _workload(first, attempts[2], "2026-03-01T12:41:00Z", "2026-03-01T12:42:00Z"),
             _workload(first, attempts[3], "2026-11-30T23:00:00Z", None),  # still waiting: an hour so far
             parse_workload({"metadata": {"name": "other", "namespace": "ml-training",  # not the window's pod
                                          "creationTimestamp": "2026-03-01T12:00:00Z",
                                          "ownerReferences": [{"kind": "Pod", "name": "not-a-window-pod"}]}})]
    built = report(workflows, workloads=waits)
    gaudi, cpu = line(built, "perception", "gaudi"), line(built, "perception", "cpu")
    assert cpu.queue_waits == 1 and cpu.queue_wait_p50 == 10
    assert gaudi.queue_waits == 3 and gaudi.queue_wait_p50 == 600  # 60 s, 600 s and an hour (still waiting)
    assert gaudi.queue_wait_p95 == pytest.approx(600 + 0.9 * 3000)
    assert report().total.queue_wait_p50 is None  # no workloads readable: unknown, and said so
    assert any("queue waits unknown" in a for a in report().assumptions)


def test_json_document_keys_are_stable() -> None:
    document = json.loads(report().dumps())
    assert list(document) == ["kind", "version", "window", "usage", "workflows", "assumptions"]
    assert document["kind"] == "WorkflowReport" and document["version"] == REPORT_VERSION == 1
    assert list(document["window"]) == ["since", "start", "end"]
    assert list(document["usage"][0]) == [
        "team", "class", "workflows", "nodeHours", "onDemandUsd", "estimateUsd", "redoneNodeHours", "redoneUsd",
        "cardHours", "quotaCards", "quotaShare", "queueWait", "interruptions", "fallbacks", "prometheus"]
    assert list(document["usage"][0]["workflows"]) == list(OUTCOMES)
    assert list(document["usage"][0]["queueWait"]) == ["count", "p50Seconds", "p95Seconds"]
    assert list(document["workflows"][0]) == [
        "namespace", "name", "team", "phase", "started", "finished", "nodeHours", "onDemandUsd", "estimateUsd",
        "redoneNodeHours", "redoneUsd", "interruptions", "unpricedAttempts"]
    assert document["usage"][-1]["team"] == document["usage"][-1]["class"] == "*"
    assert {u["prometheus"] for u in document["usage"]} == {None}  # no Prometheus was asked


def test_the_digest_reads_back_as_it_was_written() -> None:
    """The page's data crosses to the drawing process as JSON: every figure, time and bar the same."""
    digest = report().digest()
    assert Digest.loads(digest.dumps()) == digest
    assert sum(len(s.attempts) for r in digest.runs for s in r.steps) == sum(
        len(row.attempts) for r in report().runs for row in r.view.steps)
    fallen = next(r for r in digest.runs if r.name == "bert-f").steps[-1]
    assert [(b.outcome, b.capacity) for b in fallen.attempts] == [
        ("interrupted", "spot"), ("failed", "on-demand"), ("succeeded", "spot")]


def assert_self_contained(page: str) -> None:
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert page.count('src="data:image/png;base64,') == 3
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page, re.IGNORECASE)
    assert "<script" not in page and "@import" not in page and "url(" not in page


def test_html_is_one_self_contained_page_with_the_pictures() -> None:
    from wf.cli.report_page import html_page

    page = html_page(report().digest())
    assert_self_contained(page)
    assert "<td>perception</td>" in page and "Assumptions" in page


def test_png_export(tmp_path: Path) -> None:
    from wf.cli.report_page import save_png

    save_png(report().digest(), str(tmp_path / "report.png"))
    assert (tmp_path / "report.png").read_bytes().startswith(b"\x89PNG")


# A Prometheus that scraped Kueue and Argo's controller: its answer to each of the report's queries.
SERIES: dict[str, list[tuple[str | None, str]]] = {
    "histogram_quantile(0.5": [("perception", "12.5"), ("mapping", "NaN"), (None, "20")],
    "histogram_quantile(0.95": [("perception", "90"), ("mapping", "NaN"), (None, "120")],
    "_count[": [("perception", "4"), ("mapping", "0"), (None, "4")],
    "wf_step_attempts_total": [("perception", "10.2"), (None, "2")],  # team "": outside every team
    "wf_step_interruptions_total": [("perception", "3")],
}
COMPLETIONS = [("perception", "Succeeded", "2"), ("perception", "Failed", "1"), ("mapping", "Succeeded", "1")]


def prometheus_answer(query: str) -> dict[str, Any]:
    """Prometheus' /api/v1/query answer, an instant vector, as the fake Prometheus gives it."""
    if "wf_workflow_completions_total" in query:
        result = [{"metric": {"team": team, "status": status}, "value": [0, n]} for team, status, n in COMPLETIONS]
    else:
        [series] = [v for k, v in SERIES.items() if k in query]
        label = "cluster_queue" if "kueue_" in query else "team"
        result = [{"metric": {label: team} if team else {}, "value": [0, value]} for team, value in series]
    return {"status": "success", "data": {"resultType": "vector", "result": result}}


def fake_fetch(asked: list[str]) -> Callable[[str], bytes]:
    def fetch(url: str) -> bytes:
        asked.append(url)
        return json.dumps(prometheus_answer(parse_qs(urlsplit(url).query)["query"][0])).encode()
    return fetch


def reading(url: str = "http://127.0.0.1:9090/") -> PrometheusReading:
    return read_prometheus(url, window("300d", NOW), "--prometheus", fake_fetch([]))


def test_prometheus_reads_kueues_histogram_and_wfs_counters_per_team() -> None:
    asked: list[str] = []
    read = read_prometheus("http://127.0.0.1:9090/", window("24h", NOW), "--prometheus", fake_fetch(asked))
    assert read.url == "http://127.0.0.1:9090"
    assert read.waits == {"perception": Waits(4, 12.5, 90.0), "mapping": Waits(0, None, None), "*": Waits(4, 20, 120)}
    assert read.counted == {
        "perception": Counted(10.2, 3.0, {"Succeeded": 2.0, "Failed": 1.0}), NO_TEAM: Counted(2.0, 0.0, {}),
        "mapping": Counted(0.0, 0.0, {"Succeeded": 1.0})}
    assert read.count("*") == Counted(12.2, 3.0, {"Succeeded": 3.0, "Failed": 1.0})
    queries = [parse_qs(urlsplit(u).query) for u in asked]
    assert all(u.startswith("http://127.0.0.1:9090/api/v1/query?") for u in asked)
    assert all(q["time"] == [str(NOW.timestamp())] and "[86400s]" in q["query"][0] for q in queries)
    assert sum("(wf_" in q["query"][0] and "argo_workflows" not in q["query"][0] for q in queries) == 3
    only = read.of_team("mapping")
    assert only.wait("*") == Waits(0, None, None) and only.count("*") == Counted(0.0, 0.0, {"Succeeded": 1.0})


def test_prometheus_figures_in_the_report() -> None:
    """Each team's queue waits (and the total's) are Kueue's histogram's; the classes' stay the workloads'; the
    counters go to the JSON document and one line beside the cluster's."""
    built = report(prometheus=reading())
    perception, total = line(built, "perception", "*"), built.total
    assert (perception.queue_waits, perception.queue_wait_p50, perception.queue_wait_p95) == (4, 12.5, 90)
    assert (total.queue_waits, total.queue_wait_p50, total.queue_wait_p95) == (4, 20, 120)
    assert line(built, "mapping", "*").queue_wait_p50 is None
    assert line(built, "perception", "gaudi").queue_waits == 0  # no workloads read: the class has no wait
    assert any("admission-wait histogram" in a and "http://127.0.0.1:9090" in a for a in built.assumptions)
    assert not any(a == "queue waits unknown" for a in built.assumptions)
    document = json.loads(built.dumps())
    usage = {(u["team"], u["class"]): u for u in document["usage"]}
    assert usage[("perception", "*")]["prometheus"] == {
        "url": "http://127.0.0.1:9090", "interruptions": 3, "attempts": 10.2,
        "completions": {"Succeeded": 2, "Failed": 1}}
    assert usage[("*", "*")]["prometheus"]["attempts"] == pytest.approx(12.2)
    assert usage[("perception", "gaudi")]["prometheus"] is None
    attempts = sum(len(row.attempts) for r in built.runs for row in r.view.steps)
    assert built.comparison == (
        "Prometheus at http://127.0.0.1:9090: 12 attempts, 3 interruptions, 4 workflows ended (3 Succeeded, "
        f"1 Failed) in the window; the cluster's workflows of the window: {attempts} attempts, 4 interruptions, "
        "4 workflows ended (3 Succeeded, 1 Failed)")
    assert Digest.loads(built.digest().dumps()).comparison == built.comparison
    # --team: the team's figures are the total's.
    mapping = report(team="mapping", prometheus=reading())
    assert mapping.total.queue_waits == 0 and "1 workflows ended (1 Succeeded)" in (mapping.comparison or "")


@pytest.mark.parametrize("url", ["file:///etc/passwd", "127.0.0.1:9090", "http://", "ftp://host/"])
def test_a_prometheus_url_that_is_not_http_is_bad_input(url: str) -> None:
    with pytest.raises(InputError, match="--prometheus: .* is not a Prometheus address"):
        read_prometheus(url, window("24h", NOW), "--prometheus", fake_fetch([]))


@pytest.fixture
def prometheus_server() -> Iterator[tuple[str, dict[str, Any]]]:
    """A loopback HTTP server that answers as `behaviour["as"]` says: prometheus, html, error, 503 or hang."""
    behaviour: dict[str, Any] = {"as": "prometheus"}
    hung = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            answer = behaviour["as"]
            if answer == "hang":
                hung.wait(5)
                return
            status, kind, body = {
                "prometheus": (200, "application/json",
                               json.dumps(prometheus_answer(parse_qs(urlsplit(self.path).query)["query"][0]))),
                "html": (200, "text/html", "<!DOCTYPE html><html><body>Grafana</body></html>"),
                "error": (400, "application/json",
                          '{"status":"error","errorType":"bad_data","error":"parse error at char 3"}'),
                "503": (503, "text/plain", "Service Unavailable"),
            }[answer]
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", behaviour
    finally:
        hung.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def closed_port() -> int:
    """A loopback port nothing listens on."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_prometheus_errors_name_the_url_and_where_it_came_from(prometheus_server: tuple[str, dict[str, Any]],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    url, behaviour = prometheus_server
    span = window("24h", NOW)
    assert read_prometheus(url, span, "--prometheus").waits["perception"] == Waits(4, 12.5, 90.0)  # over HTTP
    behaviour["as"] = "html"
    with pytest.raises(InputError, match=rf"Prometheus at {url} \(--prometheus\) is not Prometheus' HTTP API.*"
                                         r"begins '<!DOCTYPE html>"):
        read_prometheus(url, span, "--prometheus")
    behaviour["as"] = "error"
    with pytest.raises(ClusterError, match=rf"Prometheus at {url} \(--prometheus\) answered HTTP 400: parse error"):
        read_prometheus(url, span, "--prometheus")
    behaviour["as"] = "503"
    with pytest.raises(ClusterError, match="answered HTTP 503: Service Unavailable"):
        read_prometheus(url, span, "--prometheus")
    behaviour["as"] = "hang"
    monkeypatch.setattr(report_module, "PROMETHEUS_TIMEOUT", 0.2)
    with pytest.raises(ClusterError, match=rf"cannot reach Prometheus at {url} \(--prometheus\): .*timed out"):
        read_prometheus(url, span, "--prometheus")
    away = f"http://127.0.0.1:{closed_port()}"
    with pytest.raises(ClusterError, match=rf"cannot reach Prometheus at {away} \(WF_PROMETHEUS_URL\): .*refused"):
        read_prometheus(away, span, "WF_PROMETHEUS_URL")

    def no_such_host(_url: str) -> bytes:
        raise URLError(OSError(-2, "Name or service not known"))

    with pytest.raises(ClusterError, match=r"cannot reach Prometheus at http://prometheus.invalid .*not known"):
        read_prometheus("http://prometheus.invalid", span, "--prometheus", no_such_host)


# The command.

def run_main(*args: str) -> int:
    from wf.cli.app import main

    with pytest.raises(SystemExit) as ended:
        main(list(args))
    return int(ended.value.code or 0)


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """A cluster holding the fixtures' workflows (list them with the fake's iter_workflows)."""
    from wf.cli import report as command
    from wf.controller import listing

    held = fixtures()

    class Kube:
        context = "test"

    monkeypatch.delenv(command.PROMETHEUS_ENV, raising=False)
    monkeypatch.setattr(command, "connect", lambda target: Kube())
    monkeypatch.setattr(listing, "iter_workflows", lambda kube, namespace=None, **_: iter(
        [w for w in held if namespace is None or w["metadata"]["namespace"] == namespace]))
    monkeypatch.setattr(command, "_facts", lambda kube, catalog, team: Facts(NODES))
    monkeypatch.setattr(command, "datetime", type("Clock", (), {"now": staticmethod(lambda tz=None: NOW)}))
    return held


def test_command_prints_the_table_json_and_html(cluster: list[dict[str, Any]], tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    base = ("report", "--since", "300d", "--catalog", str(CATALOG_PATH))
    assert run_main(*base) == 0
    text = capsys.readouterr().out
    assert "perception" in text and "gaudi" in text and "assumption:" in text
    assert run_main(*base, "-o", "table") == 0 and capsys.readouterr().out == text
    assert run_main(*base, "-o", "json", "--team", "mapping") == 0
    document = json.loads(capsys.readouterr().out)
    assert {w["name"] for w in document["workflows"]} == {"bert-b", "bert-f"}
    # In-process (main with arguments: a test) the page is drawn here, by the drawing program's own function.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert run_main(*base, "-o", "html", "--file", str(tmp_path / "r.html")) == 0
    assert (tmp_path / "r.html").read_text().count("data:image/png;base64,") == 3
    assert not list(tmp_path.glob("wf-report-*.json"))  # the digest went once read


def test_unknown_team_is_bad_input(cluster: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]) -> None:
    assert run_main("report", "--team", "perceptoin", "--catalog", str(CATALOG_PATH)) == 2
    err = capsys.readouterr().err
    assert "unknown team 'perceptoin' (did you mean 'perception'?)" in err
    assert "perception, mapping, serving" in err and "Traceback" not in err


def test_a_window_without_runs_says_so_and_exits_1(cluster: list[dict[str, Any]], tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    page = tmp_path / "r.html"
    assert run_main("report", "--since", "1h", "-o", "html", "--file", str(page), "--catalog", str(CATALOG_PATH)) == 1
    assert "no workflow started in any namespace in the last 1h" in capsys.readouterr().err
    assert not page.exists()  # never an empty page presented as a result


def test_command_shows_what_prometheus_says(cluster: list[dict[str, Any]],
                                            prometheus_server: tuple[str, dict[str, Any]],
                                            capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    url, _ = prometheus_server
    base = ("report", "--since", "300d", "--catalog", str(CATALOG_PATH))
    assert run_main(*base, "--prometheus", url) == 0
    text = capsys.readouterr().out
    assert f"Prometheus at {url}: 12 attempts, 3 interruptions, 4 workflows ended" in text
    assert "admission-wait histogram" in text
    monkeypatch.setenv("WF_PROMETHEUS_URL", url)
    assert run_main(*base, "-o", "json") == 0
    assert json.loads(capsys.readouterr().out)["usage"][-1]["prometheus"]["url"] == url


def test_command_prometheus_errors(cluster: list[dict[str, Any]], prometheus_server: tuple[str, dict[str, Any]],
                                   capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    url, behaviour = prometheus_server
    base = ("report", "--since", "300d", "--catalog", str(CATALOG_PATH))
    away = f"http://127.0.0.1:{closed_port()}"
    assert run_main(*base, "--prometheus", away) == 3
    err = capsys.readouterr().err
    assert f"error: cannot reach Prometheus at {away} (--prometheus): " in err and "Traceback" not in err
    monkeypatch.setenv("WF_PROMETHEUS_URL", away)
    assert run_main(*base) == 3
    assert f"cannot reach Prometheus at {away} (WF_PROMETHEUS_URL)" in capsys.readouterr().err
    monkeypatch.delenv("WF_PROMETHEUS_URL")
    behaviour["as"] = "html"
    assert run_main(*base, "--prometheus", url) == 2
    err = capsys.readouterr().err
    assert f"Prometheus at {url} (--prometheus) is not Prometheus' HTTP API" in err and "Traceback" not in err
    assert run_main(*base, "--prometheus", "localhost:9090") == 2
    assert "--prometheus: 'localhost:9090' is not a Prometheus address" in capsys.readouterr().err


def test_a_local_clusters_context_reads_its_prometheus(cluster: list[dict[str, Any]],
                                                       prometheus_server: tuple[str, dict[str, Any]], tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Without --prometheus, the context of a cluster `wf cluster up` started reads that cluster's Prometheus."""
    from wf.cli import report as command

    url, _ = prometheus_server
    workdir = tmp_path / "clusters" / "rep"
    workdir.mkdir(parents=True)
    state = {"name": "rep", "context": "wf-rep", "workdir": str(workdir), "kubeconfig": str(workdir / "kubeconfig"),
             "merged_into": None, "controller_health_port": 1, "nodes_per_group": 1, "namespaces": ["wf"],
             "prometheus_port": int(url.rsplit(":", 1)[1])}
    (workdir / "state.json").write_text(json.dumps(state))
    monkeypatch.setenv("WF_DATA_HOME", str(tmp_path))
    monkeypatch.setattr(command, "connect", lambda target: type("Kube", (), {"context": "wf-rep"})())
    base = ("report", "--since", "300d", "--catalog", str(CATALOG_PATH))
    assert run_main(*base) == 0
    assert f"Prometheus at {url}: 12 attempts" in capsys.readouterr().out
    (workdir / "state.json").write_text(json.dumps({**state, "prometheus_port": closed_port()}))
    assert run_main(*base) == 3
    err = capsys.readouterr().err
    assert "the local cluster rep's: `wf cluster up --name rep` restarts it, --prometheus names another" in err
    assert run_main(*base, "--prometheus", url) == 0  # --prometheus wins over the local cluster's
    capsys.readouterr()


def wf_report(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The real command, as a process of its own."""
    return subprocess.run([sys.executable, "-m", "wf", "report", "--catalog", str(CATALOG_PATH), *args],
                          capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)


def kubeconfig_for(path: Path, server: str) -> Path:
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "test",
        "clusters": [{"name": "test", "cluster": {"server": server}}],
        "users": [{"name": "test", "user": {"token": "x"}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}]}))
    return path


def test_malformed_since_and_unreachable_cluster(tmp_path: Path) -> None:
    bad = wf_report("--since", "yesterday")
    assert bad.returncode == 2 and "--since" in bad.stderr and "Traceback" not in bad.stderr
    away = wf_report("--kubeconfig", str(kubeconfig_for(tmp_path / "kubeconfig", "http://127.0.0.1:9")))
    assert away.returncode == 3 and "cannot reach the API server" in away.stderr, away.stderr


@pytest.fixture
def api_server(tmp_path: Path) -> Iterator[Path]:
    """The report benchmark's fake API server on loopback, serving a day of 12 workflows; its kubeconfig."""
    server = subprocess.Popen([sys.executable, str(ROOT / "benchmarks" / "report.py"), "--serve", "--workflows", "12",
                               "--steps", "12"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert server.stdin is not None and server.stdout is not None
    try:
        yield kubeconfig_for(tmp_path / "kubeconfig", f"http://127.0.0.1:{int(server.stdout.readline())}")
    finally:
        server.stdin.close()  # the server's signal to stop
        server.wait(timeout=30)


def test_the_real_command_draws_the_page_in_a_process_without_the_kubernetes_client(
        api_server: Path, tmp_path: Path) -> None:
    """`wf report -o html` reads in one process and replaces it with the drawing program: each interpreter's
    imports (PYTHONPROFILEIMPORTTIME survives the exec) show the Kubernetes client and matplotlib never together."""
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    env = {**os.environ, "TMPDIR": str(temporary), "PYTHONPROFILEIMPORTTIME": "1"}
    page = tmp_path / "report.html"
    done = wf_report("--since", "24h", "--kubeconfig", str(api_server), "-o", "html", "--file", str(page), env=env)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.stdout == ""
    assert_self_contained(page.read_text())
    assert "<p>12 workflows;" in page.read_text()
    imports = [line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")]
    starts = [i for i, name in enumerate(imports) if name == "site"]
    assert len(starts) == 2, "one interpreter for reading, one for drawing"
    reading, drawing = imports[:starts[1]], imports[starts[1]:]
    assert "kubernetes.client" in reading and not any(name.startswith("matplotlib") for name in reading)
    assert "matplotlib" in drawing and not any(name.startswith("kubernetes") for name in drawing)
    assert not list(temporary.glob("wf-report-*.json"))  # the drawing program removed the digest

    printed = wf_report("--since", "24h", "--kubeconfig", str(api_server), "-o", "html")
    assert printed.returncode == 0, printed.stderr[-3000:]
    assert_self_contained(printed.stdout)
    # The drawing program's errors are wf's: a line, exit 2 for a --file that cannot be written, no traceback.
    nowhere = wf_report("--since", "24h", "--kubeconfig", str(api_server), "-o", "html",
                        "--file", str(tmp_path / "missing" / "report.html"), env={**env, "PYTHONPROFILEIMPORTTIME": ""})
    assert nowhere.returncode == 2, nowhere.stderr
    assert nowhere.stderr.strip().endswith("report.html: cannot write: No such file or directory")
    assert "Traceback" not in nowhere.stderr and not list(temporary.glob("wf-report-*.json"))


def test_the_drawing_program_says_what_is_wrong_with_its_digest(tmp_path: Path) -> None:
    def draw(digest: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "wf.cli.report_page", str(digest)], capture_output=True,
                              text=True, timeout=60, cwd=ROOT)

    broken = tmp_path / "digest.json"
    broken.write_text('{"window": {}}')
    done = draw(broken)
    assert done.returncode == 2 and "digest.json: not a report digest (KeyError: 'since')" in done.stderr
    assert "Traceback" not in done.stderr and not broken.exists()
    gone = draw(tmp_path / "gone.json")
    assert gone.returncode == 2 and "gone.json: cannot read the report's digest" in gone.stderr


def test_matplotlib_is_imported_by_the_html_path_only() -> None:
    code = ("import sys, wf.cli.app, wf.cli.report, wf.cli.report_page, wf.controller.report; "
            "sys.exit('matplotlib' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT, timeout=60).returncode == 0
    drawing = "import sys, wf.cli.report_page; sys.exit(any(m.startswith('kubernetes') for m in sys.modules))"
    assert subprocess.run([sys.executable, "-c", drawing], cwd=ROOT, timeout=60).returncode == 0


def _with_record_copied(workflow: dict[str, Any]) -> dict[str, Any]:
    """The workflow as the node recorder leaves it once it has ended: its record copied onto it."""
    hosts = {n["hostNodeName"] for n in (workflow.get("status") or {}).get("nodes", {}).values()
             if n.get("hostNodeName") in NODES}
    record = NodeRecord({host: NODES[host] for host in sorted(hosts)}).encode()
    meta = {**workflow["metadata"], "annotations": {**(workflow["metadata"].get("annotations") or {}),
                                                    NODE_FACTS_ANNOTATION: record}}
    return {**workflow, "metadata": meta}


def test_a_ledger_is_read_only_for_a_workflow_whose_figures_it_can_change() -> None:
    # What a ledger adds counts for interrupted attempts (a program's run time, a checkpoint's share) and, until the
    # node recorder has copied its record onto the ended workflow, for where the attempts ran: the report asks for
    # the ledgers of those workflows, not a GET for each of a day's workflows.
    asked: list[tuple[str, str]] = []
    interrupted = {w["metadata"]["name"] for w in fixtures() if workflow_view(w).interruptions}
    copied = [_with_record_copied(w) for w in fixtures()]
    built = report(copied, ledger=lambda namespace, name: asked.append((namespace, name)) or Ledger())
    assert interrupted and len(interrupted) < len(built.runs)
    assert sorted(name for _, name in asked) == sorted(interrupted)
    # No record copied yet (a running workflow, or a cluster without the recorder): asked for only where the record
    # could change a figure: an attempt on a Node no longer listed, a gang, a failed attempt.
    plain = next(w for w in fixtures() if w["metadata"]["name"] not in interrupted
                 and not any(a.roles or a.phase in ("Failed", "Error")
                             for row in workflow_view(w).steps for a in row.attempts))
    hosts = {n["hostNodeName"] for n in plain["status"]["nodes"].values() if n.get("hostNodeName")}
    asked.clear()
    report([plain], ledger=lambda namespace, name: asked.append((namespace, name)) or Ledger())
    assert hosts and asked == []  # every node still listed
    gone = {name: facts for name, facts in NODES.items() if name not in hosts}
    build_report([plain], Facts(gone, lambda namespace, name: asked.append((namespace, name)) or Ledger()), CATALOG,
                 window("300d", NOW), None, None)
    assert asked == [(plain["metadata"]["namespace"], plain["metadata"]["name"])]
    # And a ledger that is read changes the figures as `wf get`'s refinement does.
    workflow = next(w for w in fixtures() if w["metadata"]["name"] in interrupted)
    view = workflow_view(workflow)
    attempt = next(a for row in view.steps for a in row.attempts if a.interrupted)
    record = AttemptRecord("s3://b/ckpt", Saved(), Saved(5, 0.5), kept_seconds=attempt.seconds(NOW))
    kept = report([workflow], ledger=lambda namespace, name: Ledger({pod_name(workflow, attempt): record}))
    assert kept.total.redone_node_hours < report([workflow]).total.redone_node_hours
    # Its node record prices an attempt whose node is gone, before any copy is on the workflow.
    hosts = {n["hostNodeName"] for n in REAL_RUN["status"]["nodes"].values() if n.get("hostNodeName")}
    gone = Facts({name: facts for name, facts in NODES.items() if name not in hosts},
                 lambda namespace, name: Ledger(nodes=NodeRecord({h: NODES[h] for h in hosts if h in NODES})))
    document = json.loads(build_report(fixtures(), gone, CATALOG, window("300d", NOW), None, None).dumps())
    assert {w["unpricedAttempts"] for w in document["workflows"]} == {0}


def test_a_workflow_whose_attempt_ran_on_a_node_nothing_recorded_says_how_many_attempts_its_figures_leave_out() -> None:
    """Its node-hours are then a lower bound: the document says so per workflow, as `wf get` says `node gone`."""
    priced = json.loads(report().dumps())["workflows"]
    assert {w["unpricedAttempts"] for w in priced} == {0}
    hosts = {n["hostNodeName"] for n in REAL_RUN["status"]["nodes"].values() if n.get("hostNodeName")}
    gone = {name: facts for name, facts in NODES.items() if name not in hosts}
    document = json.loads(build_report(fixtures(), Facts(gone), CATALOG, window("300d", NOW), None, None).dumps())
    assert [w["name"] for w in document["workflows"] if w["unpricedAttempts"]] == [REAL_RUN["metadata"]["name"]]


@pytest.mark.parametrize("steps", [3, 4, 7, 12, 32])
def test_the_report_benchmarks_day_runs_each_step_once_whatever_its_size(steps: int) -> None:
    """Its groups of shards stop before the train step: `--steps 4` drew the train step twice, and crashed."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("report_benchmark", ROOT / "benchmarks" / "report.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    workflows, _ = module.day(4, steps, datetime(2026, 12, 7, tzinfo=UTC))
    assert len(workflows) == 4
    groups = module.Job(1, steps).groups()
    names = [step.name for group in groups for step in group]
    assert len(names) == len(set(names)) == steps and names[-1] == "train"
