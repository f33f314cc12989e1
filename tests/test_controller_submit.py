"""Submitting: one workflow per submission whatever the network does, rate limiting, parameters, folders."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import ReadTimeoutError

from wf.controller.client import Kube
from wf.controller.submit import TokenBucket, create, job_files, parse_parameters, set_parameters
from wf.core.errors import ClusterError, InputError


class FakeCustom:
    """An API server's workflow store whose answers can be lost after the work was done."""

    def __init__(self, script: list[str]) -> None:
        self.script = list(script)  # per call: "ok", "lost" (created, answer lost), "refused", "503", "fail-list"
        self.store: list[dict[str, Any]] = []
        self.calls: list[str] = []

    def _next(self) -> str:
        return self.script.pop(0) if self.script else "ok"

    def create_namespaced_custom_object(self, group, version, namespace, plural, body, **kwargs):
        self.calls.append("create")
        step = self._next()
        if step in ("refused", "503"):
            raise ApiException(status=0 if step == "refused" else 503, reason=step)
        obj = {**body, "metadata": {**body["metadata"], "name": f"bert-{len(self.store)}"}}
        if not kwargs.get("dry_run"):
            self.store.append(obj)
        if step == "lost":
            raise ReadTimeoutError(None, "/apis", "read timed out")
        return obj

    def list_namespaced_custom_object(self, group, version, namespace, plural, label_selector="", **kwargs):
        self.calls.append("list")
        if self._next() == "fail-list":
            raise ApiException(status=0, reason="refused")
        key, value = label_selector.split("=")
        return {"items": [o for o in self.store if o["metadata"]["labels"].get(key) == value]}


class FakeKube(Kube):
    def __init__(self, custom: FakeCustom) -> None:
        super().__init__(api_client=None, namespace="wf", context="test", server="https://127.0.0.1:6443")
        self._custom = custom

    @property
    def custom(self) -> FakeCustom:  # type: ignore[override]
        return self._custom


def manifest(submission: str = "s-1") -> dict[str, Any]:
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
            "metadata": {"generateName": "bert-", "namespace": "wf", "labels": {"wf.dev/submission": submission}},
            "spec": {"entrypoint": "Main", "templates": []}}


def test_lost_answer_is_looked_up_not_recreated() -> None:
    custom = FakeCustom(["lost", "ok"])
    created = create(FakeKube(custom), manifest(), sleep=lambda s: None)
    assert len(custom.store) == 1 and created["metadata"]["name"] == "bert-0"
    assert custom.calls == ["create", "list"]


def test_no_create_while_the_lookup_cannot_be_made() -> None:
    custom = FakeCustom(["lost", "fail-list", "fail-list", "ok"])
    create(FakeKube(custom), manifest(), sleep=lambda s: None)
    assert len(custom.store) == 1
    assert custom.calls == ["create", "list", "list", "list"]


def test_refused_then_created_once() -> None:
    # create refused, list finds none, create 503, list none, create ok
    custom = FakeCustom(["refused", "ok", "503", "ok", "ok"])
    create(FakeKube(custom), manifest(), sleep=lambda s: None)
    assert len(custom.store) == 1 and custom.calls == ["create", "list", "create", "list", "create"]


def test_gives_up_as_cluster_error_naming_the_submission() -> None:
    custom = FakeCustom(["refused"] + ["ok", "refused"] * 10)
    with pytest.raises(ClusterError, match="wf.dev/submission=s-1"):
        create(FakeKube(custom), manifest(), attempts=3, sleep=lambda s: None)
    assert custom.store == []


def test_invalid_is_input_error_and_not_retried() -> None:
    class Invalid(FakeCustom):
        def create_namespaced_custom_object(self, *a, **k):
            self.calls.append("create")
            raise ApiException(status=422, reason="Unprocessable Entity")

    custom = Invalid([])
    with pytest.raises(InputError):
        create(FakeKube(custom), manifest(), sleep=lambda s: None)
    assert custom.calls == ["create"]


def test_token_bucket_allows_bursts_then_paces() -> None:
    now = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    bucket = TokenBucket(rate=10, burst=5, clock=lambda: now[0], sleep=sleep)
    for _ in range(25):
        bucket.acquire()
    assert slept[:1] == [pytest.approx(0.1)] and len(slept) == 20
    assert now[0] == pytest.approx(2.0)  # 5 at once, then 20 at 10/s


def test_parameters(tmp_path: Path) -> None:
    assert parse_parameters(["epochs=3", "lr=0.1=x"]) == {"epochs": "3", "lr": "0.1=x"}
    with pytest.raises(InputError, match="key=value"):
        parse_parameters(["epochs"])
    doc = {"kind": "Workflow", "spec": {"arguments": {"parameters": [{"name": "epochs", "value": "40"}]}}}
    set_parameters(doc, {"epochs": "3"}, "job.yaml")
    assert doc["spec"]["arguments"]["parameters"] == [{"name": "epochs", "value": "3"}]
    with pytest.raises(InputError, match="unknown parameter lr .*declares: epochs"):
        set_parameters(doc, {"lr": "1"}, "job.yaml")


def test_folders_expand_to_the_yaml_files_directly_in_them(tmp_path: Path) -> None:
    (tmp_path / "jobs" / "more").mkdir(parents=True)
    for name in ("b.yaml", "a.yml", "more/c.yaml", "notes.txt"):
        (tmp_path / "jobs" / name).write_text("x")
    files = job_files([str(tmp_path / "jobs")])
    assert [f.relative_to(tmp_path / "jobs").as_posix() for f in files] == ["a.yml", "b.yaml"]
    with pytest.raises(InputError, match="no such file"):
        job_files([str(tmp_path / "missing.yaml")])


def test_submit_compiles_everything_before_creating_anything(tmp_path: Path) -> None:
    from wf.controller.submit import load_jobs, submit_jobs
    from wf.model.catalog import load_catalog

    root = Path(__file__).resolve().parents[1]
    good = root / "examples" / "data-prep.yaml"
    bad = tmp_path / "bad.yaml"
    bad.write_text(good.read_text() + "\nbogus: 1\n")  # an unknown key: the whole submit is refused
    custom = FakeCustom([])
    with pytest.raises(InputError):
        submit_jobs(FakeKube(custom), load_jobs([str(good), str(bad)]), load_catalog(root / "eksctl" / "catalog.yaml"))
    assert custom.calls == []
    catalog = load_catalog(root / "eksctl" / "catalog.yaml")
    done = submit_jobs(FakeKube(custom), load_jobs([str(good), str(good)]), catalog)
    labels = [s.manifest["metadata"]["labels"] for s in done]
    assert len(custom.store) == 2 and labels[0]["wf.dev/batch"] == labels[1]["wf.dev/batch"]
    assert labels[0]["wf.dev/submission"] != labels[1]["wf.dev/submission"]
    assert [s.namespace for s in done] == [s.manifest["metadata"]["namespace"] for s in done]
    # The manifest kept is the one sent, named as the server named it; a watch keeps only the light copy.
    assert all(s.manifest["metadata"]["name"] == s.name and "spec" in s.manifest for s in done)
    light = done[0].light()
    assert (light.name, light.namespace, light.batch) == (done[0].name, done[0].namespace, labels[0]["wf.dev/batch"])
    assert "spec" not in light.manifest
