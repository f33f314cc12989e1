"""The everyday verbs of kubectl and argo users: `wf wait`, `wf logs STEP --tail/--follow/--attempt`, `wf delete`
by selection, `wf suspend`/`wf resume` and `-o name`, against fake API clients."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest

from controller_fakes import pod_node, workflow
from test_cli import run_main
from wf.controller.client import Kube
from wf.core.constants import MPIJOB, WORKFLOW, WORKFLOW_NAME_LABEL
from wf.core.errors import InputError

NAME = "bert-x7k2p"


# --- wf wait ---------------------------------------------------------------------------------------------------


class Endless:
    """A stream on which the workflow never changes: its watch blocks until the consumer closes it."""

    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = items
        self.closed = threading.Event()

    def pages(self) -> Iterator[tuple[list[dict[str, Any]], str]]:
        yield self.items, "1"

    def watch(self, resource_version: str) -> Iterator[dict[str, Any]]:
        self.closed.wait(10)
        yield from ()

    def close(self) -> None:
        self.closed.set()


def test_a_watch_with_a_timeout_stops_at_it_and_says_so() -> None:
    from wf.controller.watch import watch_workflows

    kube = Kube(api_client=None, namespace="wf", context="test", server="https://127.0.0.1:6443")
    transport = Endless([workflow("a", "Running")])
    outcome = watch_workflows(kube, [("wf", "a")], with_cost=False, timeout=0.2,
                              transport_factory=lambda ns, label, field: transport)
    assert outcome.timed_out and not outcome.stopped and outcome.views[("wf", "a")].phase == "Running"
    assert transport.closed.is_set()


def _runs(*phases: tuple[str, str], timed_out: bool = False) -> Any:
    from wf.controller.api import Run, Runs
    from wf.controller.watch import WatchOutcome

    failed = (("train", "Error (exit code 3)"),)
    return Runs(tuple(Run(name, "wf", phase, failed if phase == "Failed" else (), "", None) for name, phase in phases),
                False, WatchOutcome(timed_out=timed_out))


@pytest.mark.parametrize(("phases", "timed_out", "code", "out", "err"), [
    ((("a", "Succeeded"), ("b", "Succeeded")), False, 0, "workflow/a\nworkflow/b\n", ""),
    ((("a", "Succeeded"), ("b", "Failed")), False, 1, "workflow/a\nworkflow/b\n", "step train failed"),
    ((("a", "Succeeded"), ("b", "Running")), True, 1, "workflow/a\n", "wf/b: still Running after --timeout 5m"),
], ids=["succeeded", "failed", "timed-out"])
def test_wait_exits_by_how_the_workflows_ended(phases: tuple[tuple[str, str], ...], timed_out: bool, code: int,
                                               out: str, err: str, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    from wf.cli import workflows
    from wf.controller import api

    asked: dict[str, Any] = {}

    def watch(names: list[str], **kwargs: Any) -> Any:
        asked.update(kwargs, names=names)
        return _runs(*phases, timed_out=timed_out)

    monkeypatch.setattr(workflows, "connect", lambda target: None)
    monkeypatch.setattr(api, "watch", watch)
    assert run_main("wait", "a", "b", "--timeout", "5m", "-o", "name") == code
    captured = capsys.readouterr()
    assert captured.out == out and err in captured.err
    assert asked["names"] == ["a", "b"] and asked["timeout"] == 300 and asked["with_cost"] is False


def test_wait_refuses_a_timeout_that_is_no_duration(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_main("wait", "a", "--timeout", "soon") == 2
    assert "--timeout: 'soon' is not a duration" in capsys.readouterr().err


# --- wf logs STEP ----------------------------------------------------------------------------------------------


def retrying(*phases: str, step: str = "Running", whole: str = "Running") -> dict[str, Any]:
    """Step `train` as a Retry node whose attempts (pods on gaudi-0, gaudi-1, ...) have these phases."""
    pods = {f"p{i}": pod_node(NAME, f"p{i}", f"train({i})", phase, host=f"gaudi-{i}",
                              started=f"2026-03-01T12:0{i}:00Z",
                              finished=None if phase in ("Pending", "Running") else f"2026-03-01T12:0{i}:30Z")
            for i, phase in enumerate(phases)}
    retry = {"id": "trainR", "name": f"{NAME}.train", "displayName": "train", "type": "Retry", "phase": step,
             "children": list(pods), "boundaryID": NAME, "startedAt": "2026-03-01T12:00:00Z"}
    return workflow(NAME, whole, {"trainR": retry, **pods})


class LogKube:
    """get returns the scripted workflows in turn (the last one from then on); pod logs are scripted by pod."""

    def __init__(self, workflows: list[dict[str, Any]], logs: dict[str, str]) -> None:
        self.workflows, self.logs = list(workflows), logs
        self.asked: list[tuple[str, bool, int | None]] = []
        self.namespace, self.context, self.server = "wf", "test", "https://127.0.0.1:6443"
        self.custom = SimpleNamespace(get_namespaced_custom_object=self._get)
        self.core = SimpleNamespace(read_namespaced_pod_log=self._log)

    def _get(self, *args: Any) -> dict[str, Any]:
        return self.workflows.pop(0) if len(self.workflows) > 1 else self.workflows[0]

    def _log(self, pod: str, namespace: str, container: str, follow: bool = False, tail_lines: int | None = None,
             **kwargs: Any) -> Any:
        self.asked.append((pod, follow, tail_lines))
        text = self.logs[pod]
        if follow:
            return SimpleNamespace(stream=lambda **kw: iter([text.encode()]))
        assert kwargs.get("_preload_content") is False  # read raw: the client would return b'...' for plain text
        return SimpleNamespace(data=text.encode(), release_conn=lambda: None)


def test_a_steps_latest_attempt_under_a_header_saying_which_and_where() -> None:
    from wf.controller.ops import choose_attempt, step_log_lines
    from wf.controller.steps import pod_name, workflow_view

    done = retrying("Error", "Failed", "Succeeded", step="Succeeded", whole="Succeeded")
    pods = [pod_name(done, a) for a in workflow_view(done).steps[0].attempts]
    kube: Any = LogKube([done], {pods[0]: "first\n", pods[2]: "loss 0.1\nloss 0.05\n"})
    lines = list(step_log_lines(kube, NAME, None, "train", tail=2))
    assert lines == [f"== step train, attempt 3 of 3 (pod {pods[2]}, node gaudi-2, spot)", "loss 0.1", "loss 0.05"]
    assert kube.asked == [(pods[2], False, 2)]
    first = choose_attempt(done, "train", 1)
    assert first is not None and first.pod == pods[0] and first.header.startswith("== step train, attempt 1 of 3")
    with pytest.raises(InputError, match="--attempt takes 1 to 3"):
        choose_attempt(done, "train", 4)
    with pytest.raises(InputError, match="has no step 'eval'"):
        choose_attempt(done, "eval")
    unstarted: Any = LogKube([workflow(NAME, "Running")], {})
    with pytest.raises(InputError, match="has not started"):
        list(step_log_lines(unstarted, NAME, None, "train"))


def test_a_fan_out_steps_attempts_are_its_items() -> None:
    """`wf logs NAME train` of a fanned-out step names its items rather than saying it has not started; `--step
    train` takes every item's attempts (of_step), the archived ones of gone pods too."""
    from wf.controller.ops import choose_attempt, of_step

    items = {f"n{i}": pod_node(NAME, f"n{i}", f"train({i}:lr:0.{i})", "Succeeded", template="train")
             for i in (1, 2)}
    with pytest.raises(InputError, match=r"fans out: name one of its items \(train\(1:lr:0.1\), train\(2:lr:0.2\)\)"):
        choose_attempt(workflow(NAME, "Succeeded", items), "train")
    chosen = choose_attempt(workflow(NAME, "Succeeded", items), "train(2:lr:0.2)")
    assert chosen is not None and chosen.attempt.node_id == "n2"
    assert of_step("train(1:lr:0.1)", "train") and of_step("train", "train")
    assert not of_step("trainer", "train") and not of_step("trainer(1:x)", "train")


def test_follow_moves_on_to_the_next_attempts_pod_when_a_retry_starts() -> None:
    from wf.controller.ops import step_log_lines
    from wf.controller.steps import pod_name, workflow_view

    states = [retrying("Running"), retrying("Failed"), retrying("Failed", "Pending"), retrying("Failed", "Running"),
              retrying("Failed", "Succeeded", step="Succeeded", whole="Succeeded")]
    pods = [pod_name(states[-1], a) for a in workflow_view(states[-1]).steps[0].attempts]
    kube: Any = LogKube(states, {pods[0]: "epoch 1\n", pods[1]: "resumed at epoch 1\nepoch 2\n"})
    lines = list(step_log_lines(kube, NAME, None, "train", follow=True, tail=10, poll_seconds=0,
                                sleep=lambda seconds: None))
    assert lines == [f"== step train, attempt 1 of 1 (pod {pods[0]}, node gaudi-0, spot)", "epoch 1",
                     f"== step train, attempt 2 of 2 (pod {pods[1]}, node gaudi-1, spot)", "resumed at epoch 1",
                     "epoch 2"]
    assert kube.asked == [(pods[0], True, 10), (pods[1], True, 10)]


def test_logs_takes_the_step_once_and_an_attempt_only_with_a_step(monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from wf.cli import workflows
    from wf.controller import ops

    monkeypatch.setattr(workflows, "connect", lambda target: SimpleNamespace(context="elsewhere"))
    assert run_main("logs", NAME, "--attempt", "2") == 2
    assert "--attempt needs a STEP" in capsys.readouterr().err
    assert run_main("logs", NAME, "train", "--step", "prep") == 2
    asked: list[Any] = []

    def step_log_lines(*args: Any, **kwargs: Any) -> Iterator[str]:
        asked.append((args[1:], kwargs))
        return iter(["== step"])

    monkeypatch.setattr(ops, "step_log_lines", step_log_lines)
    assert run_main("logs", NAME, "train", "--attempt", "2", "--tail", "5", "-f") == 0
    assert asked == [((NAME, None, "train"), {"attempt": 2, "tail": 5, "follow": True})]


# --- wf delete -------------------------------------------------------------------------------------------------


def _ended(name: str, phase: str, finished: str | None) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase, **({"finishedAt": finished} if finished else {})}
    return {"metadata": {"name": name, "namespace": "wf"}, "status": status}


def test_completed_and_older_than_select_what_ended_long_enough_ago() -> None:
    from wf.controller.ops import deletion_candidates

    now = datetime(2026, 3, 10, tzinfo=UTC)
    items = [_ended("old", "Succeeded", "2026-03-01T00:00:00Z"), _ended("recent", "Failed", "2026-03-09T00:00:00Z"),
             _ended("running", "Running", None)]

    def names(**selection: Any) -> list[str]:
        return [w["metadata"]["name"] for w in deletion_candidates(items, now=now, **selection)]

    assert names(completed=False, older_than=None) == ["old", "recent", "running"]
    assert names(completed=True, older_than=None) == ["old", "recent"]
    assert names(completed=False, older_than=7 * 86400) == ["old"]


class DeleteCustom:
    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = items
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def list_namespaced_custom_object(self, *args: Any, **kwargs: Any) -> SimpleNamespace:
        self.calls.append(("list", args, {"label_selector": kwargs.get("label_selector", "")}))
        return SimpleNamespace(data=json.dumps({"items": list(self.items), "metadata": {"resourceVersion": "1"}}))

    def delete_namespaced_custom_object(self, *args: Any, **kwargs: Any) -> None:
        self.calls.append(("delete", args, kwargs))

    def delete_collection_namespaced_custom_object(self, *args: Any, **kwargs: Any) -> None:
        self.calls.append(("delete-collection", args, kwargs))


def _cluster(monkeypatch: pytest.MonkeyPatch, custom: Any) -> None:
    from wf.cli import workflows

    kube = SimpleNamespace(custom=custom, namespace="wf", context="test", server="https://127.0.0.1:6443")
    monkeypatch.setattr(workflows, "connect", lambda target: kube)


def test_delete_by_selection_deletes_each_workflow_and_its_mpijobs(monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    custom = DeleteCustom([_ended("old", "Succeeded", "2026-03-01T00:00:00Z"), _ended("running", "Running", None)])
    _cluster(monkeypatch, custom)
    assert run_main("delete", "-l", "wf.dev/job=bert", "--completed", "--dry-run") == 0
    assert capsys.readouterr().out == "wf/old would be deleted (dry run)\n"
    assert [c[0] for c in custom.calls] == ["list"] and custom.calls[0][2] == {"label_selector": "wf.dev/job=bert"}
    custom.calls.clear()
    assert run_main("delete", "--older-than", "7d") == 0
    assert capsys.readouterr().out == "wf/old deleted\n"
    assert custom.calls[1:] == [
        ("delete", (WORKFLOW.group, WORKFLOW.version, "wf", WORKFLOW.plural, "old"),
         {"propagation_policy": "Background"}),
        ("delete-collection", (MPIJOB.group, MPIJOB.version, "wf", MPIJOB.plural),
         {"label_selector": f"{WORKFLOW_NAME_LABEL}=old", "propagation_policy": "Background"}),
    ]


@pytest.mark.parametrize("args", [(), ("a", "-l", "x=y"), ("--older-than", "a week")], ids=repr)
def test_delete_refuses_to_guess_what_to_delete(args: tuple[str, ...], monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    custom = DeleteCustom([_ended("old", "Succeeded", "2026-03-01T00:00:00Z")])
    _cluster(monkeypatch, custom)
    assert run_main("delete", *args) == 2
    assert custom.calls == [] and "Traceback" not in capsys.readouterr().err


# --- wf suspend / resume ---------------------------------------------------------------------------------------


class PatchCustom:
    def __init__(self, phase: str) -> None:
        self.phase = phase
        self.patches: list[dict[str, Any]] = []

    def get_namespaced_custom_object(self, *args: Any) -> dict[str, Any]:
        return workflow(NAME, self.phase)

    def patch_namespaced_custom_object(self, *args: Any) -> dict[str, Any]:
        self.patches.append(args[-1])
        return workflow(NAME, self.phase)


def test_suspend_and_resume_set_and_clear_spec_suspend(monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    custom = PatchCustom("Running")
    _cluster(monkeypatch, custom)
    assert run_main("suspend", NAME) == 0 and run_main("resume", NAME) == 0
    assert custom.patches == [{"spec": {"suspend": True}}, {"spec": {"suspend": None}}]
    assert capsys.readouterr().out == f"wf/{NAME} suspended\nwf/{NAME} resumed\n"
    ended = PatchCustom("Succeeded")
    _cluster(monkeypatch, ended)
    assert run_main("suspend", NAME) == 2 and ended.patches == []
    assert "has already ended (Succeeded)" in capsys.readouterr().err


# --- -o name ---------------------------------------------------------------------------------------------------


def test_submit_o_name_prints_kind_and_name_of_what_exists(monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    from wf.cli import workflows
    from wf.controller import api
    from wf.controller.submit import Submitted

    def submitted(kind: str, name: str) -> Submitted:
        return Submitted(kind, name, "wf", "s", "job.yaml", False, {"metadata": {"name": name}})

    monkeypatch.setattr(workflows, "connect", lambda target: None)
    monkeypatch.setattr(api, "submit", lambda *a, **k: [submitted("Workflow", "bert-a"),
                                                       submitted("CronWorkflow", "nightly")])
    assert run_main("submit", "job.yaml", "-o", "name") == 0
    assert capsys.readouterr().out == "workflow/bert-a\ncronworkflow/nightly\n"
