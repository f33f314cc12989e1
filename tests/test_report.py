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
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from controller_fakes import nested_run
from wf.compile.interruptions import SPOT_FALLBACK_ANNOTATION
from wf.controller.cost import NodeFacts, job_cost
from wf.controller.queue import parse_workload
from wf.controller.report import (
    OUTCOMES,
    REPORT_VERSION,
    Digest,
    Facts,
    Report,
    build_report,
    percentile,
    prometheus_queue_waits,
    window,
)
from wf.controller.steps import pod_name, with_facts, workflow_view
from wf.core.errors import InputError
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


def report(workflows: list[dict[str, Any]] | None = None, team: str | None = None, **facts: Any) -> Report:
    return build_report(fixtures() if workflows is None else workflows, Facts(NODES, **facts), CATALOG,
                        window("300d", NOW), team)


def line(built: Report, team: str, compute_class: str) -> Any:
    return next(u for u in built.lines if (u.team, u.compute_class) == (team, compute_class))


def test_totals_are_the_sum_of_wf_gets_costs() -> None:
    """Every workflow through `wf get`'s functions (view, facts, job_cost), summed: the report's total."""
    costs = [job_cost(with_facts(workflow_view(w), w, {}, lambda _: None), w, NODES, NOW, CATALOG)
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
        "cardHours", "quotaCards", "quotaShare", "queueWait", "interruptions", "fallbacks"]
    assert list(document["usage"][0]["workflows"]) == list(OUTCOMES)
    assert list(document["usage"][0]["queueWait"]) == ["count", "p50Seconds", "p95Seconds"]
    assert list(document["workflows"][0]) == [
        "namespace", "name", "team", "phase", "started", "finished", "nodeHours", "onDemandUsd", "estimateUsd",
        "redoneNodeHours", "redoneUsd", "interruptions"]
    assert document["usage"][-1]["team"] == document["usage"][-1]["class"] == "*"


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


def test_prometheus_seam_reads_kueues_histogram_per_team() -> None:
    asked: list[str] = []

    def fetch(url: str) -> bytes:
        asked.append(url)
        value = "12.5" if "0.5" in url.split("query=")[1][:30] else "90"
        return json.dumps({"status": "success", "data": {"resultType": "vector", "result": [
            {"metric": {"cluster_queue": "perception"}, "value": [0, value]},
            {"metric": {"cluster_queue": "mapping"}, "value": [0, "NaN"]}]}}).encode()

    waits = prometheus_queue_waits("http://127.0.0.1:9090/", window("24h", NOW), fetch)
    assert waits == {"perception": (12.5, 90.0)}
    assert all(u.startswith("http://127.0.0.1:9090/api/v1/query?") and "kueue_admission_wait_time_seconds" in u
               for u in asked)
    with pytest.raises(InputError):
        prometheus_queue_waits("file:///etc/passwd", window("24h", NOW), fetch)


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
    from wf.controller import ops

    held = fixtures()

    class Kube:
        context = "test"

    monkeypatch.setattr(command, "connect", lambda target: Kube())
    monkeypatch.setattr(ops, "iter_workflows", lambda kube, namespace=None, **_: iter(
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
