"""The watch consumer: follows named workflows to their end through a scripted stream; the node facts it reads."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest
from urllib3.exceptions import ProtocolError

from controller_fakes import FakeTransport, nested_run, workflow
from wf.controller.client import Kube
from wf.controller.cost import NodeFacts
from wf.controller.view import PlainDisplay
from wf.controller.watch import Insight, watch_workflows
from wf.core.constants import CAPACITY_LABEL, EKS_CAPACITY_LABEL, INSTANCE_TYPE_LABEL
from wf.core.errors import ClusterError, InputError

KUBE = Kube(api_client=None, namespace="wf", context="test", server="https://127.0.0.1:6443")


def factory(transport: FakeTransport, calls: list[tuple[str, str, str]]):
    def make(ns: str, label: str, field: str) -> FakeTransport:
        calls.append((ns, label, field))
        return transport
    return make


def modified(obj: dict[str, Any]) -> dict[str, Any]:
    return {"type": "MODIFIED", "object": obj}


def test_watch_ends_at_the_terminal_phase_and_reports_it(capsys: pytest.CaptureFixture[str]) -> None:
    running = workflow("bert-x7k2p", "Running", rv="5")
    transport = FakeTransport(lists=[([running], "5")],
                              watches=[[ProtocolError("dropped")], [modified(nested_run(final="Failed"))]])
    # a drop before anything changed: the stream reconnects; the consumer reports trouble then recovery
    calls: list[tuple[str, str, str]] = []
    import io

    out = io.StringIO()
    outcome = watch_workflows(KUBE, [("wf", "bert-x7k2p")], display=PlainDisplay(out), with_cost=False,
                              transport_factory=factory(transport, calls))
    assert calls == [("wf", "", "metadata.name=bert-x7k2p")]
    view = outcome.views[("wf", "bert-x7k2p")]
    assert view.phase == "Failed" and [s.name for s in view.failed_steps] == ["train"]
    assert ("wf", "bert-x7k2p") in outcome.noticed_at and not outcome.succeeded
    text = out.getvalue()
    assert "lost the API server" in text and "connected again" in text
    assert "bert-x7k2p train: Failed [gaudi/spot] on gaudi-2 retries 1" in text
    assert "interrupted 1x" in text and "Error (exit code 1)" in text


def test_several_workflows_share_one_stream_with_the_label_selector() -> None:
    a, b = workflow("a", "Running", rv="1"), workflow("b", "Running", rv="1")
    other = workflow("c", "Running", rv="1")
    done_a, done_b = workflow("a", "Succeeded", rv="2"), workflow("b", "Succeeded", rv="3")
    transport = FakeTransport(lists=[([a, b, other], "1")],
                              watches=[[modified(done_a), modified(workflow("c", "Failed")), modified(done_b)]])
    calls: list[tuple[str, str, str]] = []
    outcome = watch_workflows(KUBE, [("wf", "a"), ("wf", "b")], label_selector="wf.dev/batch=x", with_cost=False,
                              transport_factory=factory(transport, calls))
    assert calls == [("wf", "wf.dev/batch=x", "")]
    assert outcome.succeeded and set(outcome.views) == {("wf", "a"), ("wf", "b")}


def test_unknown_name_is_input_error() -> None:
    transport = FakeTransport(lists=[([], "1")], watches=[[]] * 5)
    with pytest.raises(InputError, match="no workflow nope in namespace wf"):
        watch_workflows(KUBE, [("wf", "nope")], with_cost=False, transport_factory=factory(transport, []))


def test_deleted_while_watching_ends_the_watch_unsuccessfully() -> None:
    transport = FakeTransport(lists=[([workflow("a", "Running")], "1")],
                              watches=[[{"type": "DELETED", "object": workflow("a", "Running", rv="2")}]])
    outcome = watch_workflows(KUBE, [("wf", "a")], with_cost=False, transport_factory=factory(transport, []))
    assert outcome.deleted == {("wf", "a")} and not outcome.succeeded


def test_forbidden_becomes_a_cluster_error_with_the_server_message() -> None:
    from kubernetes.client.exceptions import ApiException

    forbidden = ApiException(status=403, reason="Forbidden")
    forbidden.body = ('{"kind":"Status","message":"workflows.argoproj.io is forbidden: User \\"dev\\" cannot watch '
                      'resource \\"workflows\\" in API group \\"argoproj.io\\" in the namespace \\"kube-system\\"",'
                      '"code":403}')
    transport = FakeTransport(lists=[forbidden], watches=[])
    with pytest.raises(ClusterError, match='User "dev" cannot watch resource "workflows"'):
        watch_workflows(KUBE, [("kube-system", "a")], with_cost=False, transport_factory=factory(transport, []))


def test_a_selector_alone_follows_every_workflow_it_matches() -> None:
    a, b = workflow("a", "Running", rv="1"), workflow("b", "Succeeded", rv="1")
    transport = FakeTransport(lists=[([a, b], "1")], watches=[[modified(workflow("a", "Failed", rv="2"))]])
    calls: list[tuple[str, str, str]] = []
    import io

    out = io.StringIO()
    outcome = watch_workflows(KUBE, [], label_selector="wf.dev/batch=x", display=PlainDisplay(out), with_cost=False,
                              transport_factory=factory(transport, calls))
    assert calls == [("wf", "wf.dev/batch=x", "")]
    assert outcome.followed == [("wf", "a"), ("wf", "b")] and not outcome.succeeded
    assert "wf/a: Failed" in out.getvalue() and "2 workflows: 1 Failed, 1 Succeeded" in out.getvalue()


def test_neither_names_nor_a_selector_is_input_error() -> None:
    with pytest.raises(InputError, match="name the workflows to watch"):
        watch_workflows(KUBE, [], with_cost=False, transport_factory=factory(FakeTransport([], []), []))


def test_a_node_without_wfs_capacity_label_is_priced_at_its_eks_capacity_type() -> None:
    # EKS labels a managed node group's nodes SPOT or ON_DEMAND; wf's capacity names are spot and on-demand.
    labels = {"a": {INSTANCE_TYPE_LABEL: "r5.4xlarge", EKS_CAPACITY_LABEL: "SPOT"},
              "b": {INSTANCE_TYPE_LABEL: "r5.4xlarge", EKS_CAPACITY_LABEL: "ON_DEMAND"},
              "c": {INSTANCE_TYPE_LABEL: "r5.4xlarge", CAPACITY_LABEL: "spot", EKS_CAPACITY_LABEL: "ON_DEMAND"}}
    core = SimpleNamespace(read_node=lambda name, **_: SimpleNamespace(
        data=json.dumps({"metadata": {"labels": labels[name]}})))
    insight = Insight(SimpleNamespace(core=core), lambda: None)
    assert insight.node("a") == NodeFacts("r5.4xlarge", "spot")
    assert insight.node("b") == NodeFacts("r5.4xlarge", "on-demand")
    assert insight.node("c") == NodeFacts("r5.4xlarge", "spot")  # wf's own label first


def test_a_node_that_is_gone_is_asked_for_once() -> None:
    from kubernetes.client.exceptions import ApiException

    asked: list[str] = []

    def read_node(name: str, **_: Any) -> SimpleNamespace:
        asked.append(name)
        if name != "up":
            raise ApiException(status=404)
        return SimpleNamespace(data=json.dumps({"metadata": {"labels": {INSTANCE_TYPE_LABEL: "r5.4xlarge"}}}))

    insight = Insight(SimpleNamespace(core=SimpleNamespace(read_node=read_node)), lambda: None)
    assert [insight.node(n) for n in ("up", "gone", "up", "gone")] == [NodeFacts("r5.4xlarge", None), None] * 2
    assert asked == ["up", "gone"]


class Unreachable:
    """An API whose every call fails as a network outage does (no HTTP status at all), counting the calls."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        from urllib3.exceptions import MaxRetryError, NewConnectionError

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            raise MaxRetryError(None, "/api", NewConnectionError(None, "Connection refused"))  # type: ignore[arg-type]
        return call


def test_side_look_ups_do_without_what_an_outage_keeps_from_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nodes, events, node counts, the checkpoint ledger, Kueue's workloads and the catalog: each once ended a
    watch with a traceback when the network failed under it."""
    import wf.controller.watch as watch_module
    from wf.controller.queue import QueueReader
    from wf.controller.steps import workflow_view
    from wf.model.catalog import load_catalog

    core, custom = Unreachable(), Unreachable()
    kube = SimpleNamespace(core=core, custom=custom)
    catalog = load_catalog("eksctl/catalog.yaml")
    answers: list[Any] = [ClusterError("cannot reach the API server"), catalog]

    def catalog_loader() -> Any:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(watch_module, "LOOKUP_RETRY_SECONDS", 0.0)
    insight = Insight(kube, catalog_loader)
    assert insight.node("n1") is None  # unknown, asked again after LOOKUP_RETRY_SECONDS
    assert insight._counts("cpu") is None and insight._events("wf", "pod") == []
    done = nested_run()
    view = workflow_view(done)
    assert insight.refine(done, view).steps == view.steps
    assert insight._catalog_or_none() is None  # out of reach: asked again later
    assert insight._catalog_or_none() is catalog
    reader = QueueReader(kube)  # type: ignore[arg-type]
    team = catalog.queues.teams[0]  # type: ignore[union-attr]
    assert reader.workloads(team) is None and reader.pending_flavors(team) == {}
    assert "read_node" in core.calls and "list_namespaced_event" in core.calls and "list_node" in core.calls


def test_an_outage_is_not_asked_about_each_node_on_every_tick() -> None:
    core = Unreachable()
    insight = Insight(SimpleNamespace(core=core), lambda: None)
    assert insight.node("n1") is None and insight.node("n2") is None
    assert core.calls == ["read_node"]  # the second waits out LOOKUP_RETRY_SECONDS


def test_a_watch_ends_normally_when_its_cost_look_ups_fail() -> None:
    transport = FakeTransport(lists=[([workflow("bert-x7k2p", "Running", rv="5")], "5")],
                              watches=[[modified(nested_run(final="Succeeded"))]])
    kube = SimpleNamespace(core=Unreachable(), custom=Unreachable(), namespace="wf", context="test",
                           server=KUBE.server)
    outcome = watch_workflows(kube, [("wf", "bert-x7k2p")], catalog_loader=lambda: None,  # type: ignore[arg-type]
                              transport_factory=factory(transport, []))
    assert outcome.succeeded and outcome.views[("wf", "bert-x7k2p")].phase == "Succeeded"
    assert kube.core.calls  # it tried: cost is unknown rather than the watch lost


def _offloaded(obj: dict[str, Any]) -> dict[str, Any]:
    """The object as the Kubernetes API serves a workflow whose steps Argo offloaded to its database."""
    status = {k: v for k, v in obj["status"].items() if k != "nodes"}
    return {**obj, "status": {**status, "offloadNodeStatusVersion": "fnv:1"}}


def test_an_offloaded_workflow_s_steps_are_read_through_argo_server_and_its_end_always() -> None:
    running = nested_run(final="Running")
    ended = nested_run(final="Failed")
    asked: list[tuple[str, str]] = []
    whole = [running, ended]

    def hydrate(namespace: str, name: str) -> dict[str, Any]:
        asked.append((namespace, name))
        return whole.pop(0)

    transport = FakeTransport(lists=[([_offloaded(running)], "5")],
                              watches=[[modified(_offloaded(running)), modified(_offloaded(ended))]])
    outcome = watch_workflows(KUBE, [("wf", "bert-x7k2p")], with_cost=False, hydrate=hydrate,
                              transport_factory=factory(transport, []))
    view = outcome.views[("wf", "bert-x7k2p")]
    # The list's object is fetched; the running update within HYDRATE_EVERY_SECONDS is not; the end always is.
    assert asked == [("wf", "bert-x7k2p")] * 2
    assert view.phase == "Failed" and not view.offloaded and [s.name for s in view.failed_steps] == ["train"]


def test_without_argo_server_an_offloaded_workflow_says_its_steps_are_away(capsys: pytest.CaptureFixture[str]
                                                                           ) -> None:
    import io

    from wf.core.errors import ClusterError as Unreachable

    def hydrate(namespace: str, name: str) -> dict[str, Any]:
        raise Unreachable("cannot reach Argo Server at http://127.0.0.1:1 (--argo-server): Connection refused")

    out = io.StringIO()
    transport = FakeTransport(lists=[([_offloaded(nested_run(final="Succeeded"))], "5")], watches=[])
    outcome = watch_workflows(KUBE, [("wf", "bert-x7k2p")], display=PlainDisplay(out), with_cost=False,
                              hydrate=hydrate, transport_factory=factory(transport, []))
    view = outcome.views[("wf", "bert-x7k2p")]
    assert view.phase == "Succeeded" and not view.steps and "offloaded to Argo's database" in view.offloaded
    text = out.getvalue()
    assert "its steps are in Argo's database and cannot reach Argo Server" in text
    assert "offloaded to Argo's database" in text
