"""Submitting: one workflow per submission whatever the network does, rate limiting, parameters, folders."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import V1ContainerImage, V1Node, V1NodeList, V1NodeStatus
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import ReadTimeoutError

from wf.controller.client import Kube
from wf.controller.submit import TokenBucket, UncertainCreate, create, job_files, parse_parameters, set_parameters
from wf.core.errors import InputError


class FakeCustom:
    """An API server's workflow store, by name, whose answers can be lost after the work was done."""

    def __init__(self, script: list[str]) -> None:
        # per create: "ok", "lost" (created, answer lost), "refused" (not served), "503", "interrupt" (Ctrl-C)
        self.script = list(script)
        self.store: dict[str, dict[str, Any]] = {}
        self.calls: list[str] = []

    def _next(self) -> str:
        return self.script.pop(0) if self.script else "ok"

    def create_namespaced_custom_object(self, group, version, namespace, plural, body, **kwargs):
        self.calls.append("create")
        step = self._next()
        if step == "interrupt":
            raise KeyboardInterrupt
        if step in ("refused", "503"):
            raise ApiException(status=0 if step == "refused" else 503, reason=step)
        name = body["metadata"]["name"]
        if name in self.store:
            raise ApiException(status=409, reason="AlreadyExists")
        if not kwargs.get("dry_run"):
            self.store[name] = body
        if step == "lost":
            raise ReadTimeoutError(None, "/apis", "read timed out")  # type: ignore[arg-type]
        return body

    def get_namespaced_custom_object(self, group, version, namespace, plural, name):
        self.calls.append("get")
        if name not in self.store:
            raise ApiException(status=404, reason="NotFound")
        return self.store[name]

    def list_namespaced_custom_object(self, group, version, namespace, plural, label_selector="", **kwargs):
        self.calls.append("list")
        key, value = label_selector.split("=")
        return {"items": [o for o in self.store.values() if o["metadata"]["labels"].get(key) == value]}


class FakeCore:
    """The nodes labelled as real, with the images each holds (None: this user may not list nodes)."""

    def __init__(self, images: list[list[str]] | None) -> None:
        self.images = images
        self.selectors: list[str] = []

    def list_node(self, label_selector: str = "", **kwargs: Any) -> V1NodeList:
        self.selectors.append(label_selector)
        if self.images is None:
            raise ApiException(status=403, reason="Forbidden")
        return V1NodeList(items=[V1Node(status=V1NodeStatus(images=[V1ContainerImage(names=held)]))
                                 for held in self.images])


class FakeKube(Kube):
    def __init__(self, custom: FakeCustom, real_node_images: list[list[str]] | None = None) -> None:
        super().__init__(api_client=None, namespace="wf", context="test", server="https://127.0.0.1:6443")
        self._custom = custom
        self._core = FakeCore(real_node_images if real_node_images is not None else [])

    @property
    def custom(self) -> FakeCustom:  # type: ignore[override]
        return self._custom

    @property
    def core(self) -> FakeCore:  # type: ignore[override]
        return self._core


def manifest(submission: str = "s-1", name: str = "bert-s1abc") -> dict[str, Any]:
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
            "metadata": {"name": name, "namespace": "wf", "labels": {"wf.dev/submission": submission}},
            "spec": {"entrypoint": "Main", "templates": []}}


def test_a_lost_answer_is_sent_again_and_its_409_read_back_as_created() -> None:
    """Once, a POST that timed out after the server created the workflow was sent again as a new workflow."""
    custom = FakeCustom(["lost", "ok"])
    created = create(FakeKube(custom), manifest(), sleep=lambda s: None)
    assert list(custom.store) == ["bert-s1abc"] and created["metadata"]["name"] == "bert-s1abc"
    assert custom.calls == ["create", "create", "get"]


def test_unserved_requests_are_retried_and_create_once() -> None:
    custom = FakeCustom(["refused", "503", "ok"])
    create(FakeKube(custom), manifest(), sleep=lambda s: None)
    assert len(custom.store) == 1 and custom.calls == ["create", "create", "create"]


def test_another_submissions_workflow_of_that_name_is_not_taken_for_ours() -> None:
    custom = FakeCustom([])
    custom.store["bert-s1abc"] = manifest(submission="someone-else")
    with pytest.raises(InputError, match="AlreadyExists"):
        create(FakeKube(custom), manifest(), sleep=lambda s: None)


def test_gives_up_as_uncertain_naming_the_workflow() -> None:
    custom = FakeCustom(["refused"] * 10)
    with pytest.raises(UncertainCreate, match="bert-s1abc.*may exist"):
        create(FakeKube(custom), manifest(), attempts=3, sleep=lambda s: None)
    assert custom.store == {}


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


@pytest.mark.parametrize(("held", "placed"), [
    ([["wf.local/python@sha256:" + "0" * 64, "wf.local/python:3.11"]], True),  # a real node holds the image
    ([["wf.local/busybox:1"]], False),
    ([], False),  # no real node (EKS)
    (None, False),  # a developer who may not list nodes (EKS team roles)
])
def test_a_job_whose_image_only_real_nodes_hold_runs_there(held: list[list[str]] | None, placed: bool) -> None:
    from wf.controller.submit import load_jobs, submit_jobs
    from wf.model.catalog import load_catalog

    root = Path(__file__).resolve().parents[1]
    kube = FakeKube(FakeCustom([]), held)
    (done,) = submit_jobs(kube, load_jobs([str(root / "examples" / "tiny-train.yaml")]),
                          load_catalog(root / "eksctl" / "catalog.yaml"))
    pods = [t for t in done.manifest["spec"]["templates"] if "container" in t]
    assert [t["name"] for t in pods] == ["make-data", "train"]
    assert all((t["nodeSelector"].get("wf.dev/real-node") == "true") is placed for t in pods)
    assert kube.core.selectors == ["wf.dev/real-node"]  # one list for the whole submit


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
    # Named on the client: the job's name and five characters of the submission id.
    assert [s.name for s in done] == [f"data-prep-{s.submission.replace('-', '')[:5]}" for s in done]
    assert len(custom.store) == 2 and labels[0]["wf.dev/batch"] == labels[1]["wf.dev/batch"]
    assert labels[0]["wf.dev/submission"] != labels[1]["wf.dev/submission"]
    assert [s.namespace for s in done] == [s.manifest["metadata"]["namespace"] for s in done]
    # The manifest kept is the one sent; a watch keeps only the light copy.
    assert all(s.manifest["metadata"]["name"] == s.name and "spec" in s.manifest for s in done)
    light = done[0].light()
    assert (light.name, light.namespace, light.batch) == (done[0].name, done[0].namespace, labels[0]["wf.dev/batch"])
    assert "spec" not in light.manifest


def test_submit_refuses_what_compile_and_lint_refuse(tmp_path: Path) -> None:
    from wf.argo.size import MAX_JOB_SPEC_BYTES
    from wf.controller.submit import load_jobs, submit_jobs
    from wf.model.catalog import load_catalog

    root = Path(__file__).resolve().parents[1]
    catalog = load_catalog(root / "eksctl" / "catalog.yaml")
    huge = tmp_path / "huge.yaml"
    huge.write_text((root / "examples" / "data-prep.yaml").read_text() + "#" * MAX_JOB_SPEC_BYTES + "\n")
    with pytest.raises(InputError) as refused:
        load_jobs([str(huge)])
    assert str(huge) in str(refused.value)
    # Within the spec's budget, but compiled into more than etcd takes in one request: lint's finding on the
    # compiled workflow, refused before anything is sent.
    heavy = tmp_path / "heavy.yaml"
    heavy.write_text((root / "examples" / "data-prep.yaml").read_text().replace(
        "    shards: \"4\"\n", f"    shards: \"4\"\n    notes: \"{'x' * 1_700_000}\"\n", 1))
    custom = FakeCustom([])
    with pytest.raises(InputError) as oversized:
        submit_jobs(FakeKube(custom), load_jobs([str(heavy)]), catalog)
    assert str(heavy) in str(oversized.value) and "etcd" in str(oversized.value) and custom.calls == []


def _three_jobs(tmp_path: Path) -> list[str]:
    root = Path(__file__).resolve().parents[1]
    text = (root / "examples" / "data-prep.yaml").read_text()
    paths = []
    for n in range(3):
        path = tmp_path / f"job-{n}.yaml"
        path.write_text(text.replace("name: data-prep", f"name: data-prep-{n}", 1))
        paths.append(str(path))
    return paths


@pytest.mark.parametrize(("script", "uncertain", "refused"), [
    (["ok", "interrupt"], 1, 0),  # Ctrl-C while the second POST was on the wire
    (["ok"] + ["refused"] * 6, 1, 0),  # the API server went away and stayed away
    (["ok", "forbidden"], 0, 1),  # refused: nothing was created for it
])
def test_a_submit_cut_short_says_what_exists_and_a_rerun_finishes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: list[str], uncertain: int, refused: int
) -> None:
    """Once, Ctrl-C after 2 of 5 jobs printed nothing and left the user to guess what existed."""
    from wf.controller import submit as submit_module
    from wf.controller.submit import SubmitInterrupted, load_jobs, submit_jobs
    from wf.model.catalog import load_catalog

    monkeypatch.setattr(submit_module.time, "sleep", lambda s: None)

    class Forbidding(FakeCustom):
        def create_namespaced_custom_object(self, group, version, namespace, plural, body, **kwargs):
            if self.script and self.script[0] == "forbidden":
                self.script.pop(0)
                self.calls.append("create")
                raise ApiException(status=403, reason="Forbidden")
            return super().create_namespaced_custom_object(group, version, namespace, plural, body, **kwargs)

    catalog = load_catalog(Path(__file__).resolve().parents[1] / "eksctl" / "catalog.yaml")
    jobs = _three_jobs(tmp_path)
    custom = Forbidding(script)
    with pytest.raises(SubmitInterrupted) as stopped:
        submit_jobs(FakeKube(custom), load_jobs(jobs), catalog)
    cut = stopped.value
    assert [s.source for s in cut.created] == [jobs[0]]
    assert len(cut.uncertain) == uncertain and len(cut.refused) == refused
    assert [u.source for u in cut.not_sent] == [jobs[2]]
    assert all(u.name.startswith("data-prep-") for u in [*cut.uncertain, *cut.refused, *cut.not_sent])
    assert cut.exit_code == (130 if "interrupt" in script else 3)
    # The same command again, skipping what exists: the rest is created, nothing twice.
    again = submit_jobs(FakeKube(custom), load_jobs(jobs), catalog, skip_existing=True)
    assert [(s.source, s.existing) for s in again] == [(jobs[0], True), (jobs[1], False), (jobs[2], False)]
    assert again[0].name == cut.created[0].name
    assert sorted(o["metadata"]["labels"]["wf.dev/job-identity"] for o in custom.store.values()) == sorted(
        s.manifest["metadata"]["labels"]["wf.dev/job-identity"] for s in again)
    assert len(custom.store) == 3


def test_the_identity_is_the_compiled_job_and_its_file(tmp_path: Path) -> None:
    from wf.controller.submit import IDENTITY_LABEL, prepare
    from wf.jobspec.job import load_job
    from wf.model.catalog import load_catalog

    catalog = load_catalog(Path(__file__).resolve().parents[1] / "eksctl" / "catalog.yaml")
    first, other = _three_jobs(tmp_path)[:2]

    def identity(path: str, parameters: dict[str, str] | None = None, batch: str = "b1") -> str:
        manifest, _, _ = prepare(load_job(path), catalog, "wf", None, parameters or {}, batch)
        return manifest["metadata"]["labels"][IDENTITY_LABEL]

    assert identity(first) == identity(first, batch="b2")  # another run of the same command
    assert identity(first) != identity(other)
    assert identity(first) != identity(first, {"shards": "8"})


@pytest.mark.parametrize("output", [None, "json"])
def test_wf_submit_cut_short_prints_what_exists_and_exits_with_its_cause(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], output: str | None
) -> None:
    import json

    from wf.cli import workflows
    from wf.cli.app import main
    from wf.controller import submit as submit_module
    from wf.model.catalog import load_catalog

    monkeypatch.setattr(submit_module.time, "sleep", lambda s: None)
    custom = FakeCustom(["ok", "interrupt"])
    monkeypatch.setattr(workflows, "connect", lambda target: FakeKube(custom))
    catalog = load_catalog(Path(__file__).resolve().parents[1] / "eksctl" / "catalog.yaml")
    monkeypatch.setattr("wf.controller.catalog_source.resolve_catalog", lambda *a, **k: catalog)
    jobs = _three_jobs(tmp_path)
    with pytest.raises(SystemExit) as ended:
        main(["submit", *jobs, *(["-o", output] if output else [])])
    assert ended.value.code == 130
    out, err = capsys.readouterr()
    if output:
        doc = json.loads(out)
        assert [e["source"] for e in doc["created"]] == [jobs[0]]
        assert [e["source"] for e in doc["uncertain"]] == [jobs[1]] and doc["refused"] == []
        assert [e["source"] for e in doc["notSent"]] == [jobs[2]] and "interrupted" in doc["error"]
    else:
        lines = out.splitlines()
        assert lines[0].startswith("Workflow ml-training/data-prep-0-") and lines[0].endswith(f"created from {jobs[0]}")
        assert "may exist (its request was on the wire)" in lines[1] and lines[2].endswith(f"not sent from {jobs[2]}")
        assert "--skip-existing" in err


def test_a_client_chosen_name_another_submission_holds_passes_to_the_submissions_next_name() -> None:
    """Once, a 250-workflow submit met an earlier workflow's five hex characters and stopped at the 191st."""
    from wf.controller.submit import client_names

    submission = "0f3a9c1e-7b2d-4c55-9e10-2a6b8d4f0c7e"
    first, second, third = client_names("many-", submission)[:3]
    custom = FakeCustom(["ok", "lost", "ok"])
    custom.store[first] = manifest(submission="someone-else", name=first)
    created = create(FakeKube(custom), manifest(submission, first), sleep=lambda s: None)
    # The second name's answer was lost; sent again, its 409 is read back as ours, not passed to a third name.
    assert created["metadata"]["name"] == second and set(custom.store) == {first, second} and third != second
    assert custom.calls == ["create", "get", "create", "create", "get"]
    assert [n[len("many-"):] for n in client_names("many-", submission)] == ["0f3a9", "c1e7b", "2d4c5", "59e10",
                                                                            "2a6b8", "d4f0c"]
