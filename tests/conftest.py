"""Shared fixtures of the unit tests: the repository's catalog and examples, YAML files in a temp dir, and
validators built from upstream's Argo schemas and CRDs (read in place from the Go module cache: tests/upstream.py)."""

from __future__ import annotations

import copy
import json
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from upstream import ARGO, ARGO_V3, strictify, with_int_or_string
from wf.jobspec.job import TrainingJob
from wf.model.catalog import Catalog, load_catalog

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
CATALOG_FILE = ROOT / "eksctl" / "catalog.yaml"
# The Argo majors generated manifests are checked against: the one the local cluster runs, and v3.7.
ARGO_MAJORS = {"v4": ARGO, "v3": ARGO_V3}
CRD_FILES = {
    "Workflow": "argoproj.io_workflows.yaml",
    "WorkflowTemplate": "argoproj.io_workflowtemplates.yaml",
    "CronWorkflow": "argoproj.io_cronworkflows.yaml",
}

# End-to-end files that share a session fixture of their own (the real-node cluster, `real_cluster`): one
# pytest-xdist worker runs them all, or each worker would start it for itself.
SAME_WORKER = {"tests/e2e/test_real_images.py": "real nodes", "tests/e2e/test_real_node.py": "real nodes"}


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`make test`'s scheduling on two workers (`--dist loadfile`): each end-to-end file's tests on one worker, as
    loadfile does, so that a module's cluster starts once; the files of SAME_WORKER on one; the unit tests dealt one
    at a time. (xdist's own loadgroup marks are lost on pytest 9.2: pytest-xdist issue 1386.)"""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class Scheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return SAME_WORKER.get(path, path) if path.startswith("tests/e2e/") else nodeid

    return Scheduling(config, log)


@pytest.fixture(scope="session")
def catalog() -> Catalog:
    return load_catalog(CATALOG_FILE)


@pytest.fixture(scope="session")
def mixed_catalog(catalog: Catalog) -> Catalog:
    """The repository's catalog with its cpu class listing two sizes (r5.4xlarge and r5.8xlarge), the case
    cluster-autoscaler handles badly and wf judges against every type (wf.model.nodegroups)."""
    classes = [c.model_copy(update={"instance_types": ["r5.4xlarge", "r5.8xlarge"]}) if c.name == "cpu" else c
               for c in catalog.compute_classes]
    return catalog.model_copy(update={"compute_classes": classes})


@pytest.fixture
def write(tmp_path: Path) -> Callable[..., Path]:
    """write("job.yaml", text) -> path of the dedented text in a fresh temp dir."""

    def _write(name: str, text: str | bytes) -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
        return path

    return _write


def _job_data(steps: list[dict[str, Any]] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "wf/v1",
        "kind": "TrainingJob",
        "metadata": {"name": "demo", "labels": {"team": "ml"}},
        "spec": {"image": "busybox:1.36", "compute": "cpu",
                 "steps": steps if steps is not None else [{"name": "main", "command": ["echo", "hi"]}], **spec},
    }


@pytest.fixture
def job_data() -> Callable[..., dict[str, Any]]:
    """job_data(steps, **spec): a valid TrainingJob document as plain data; keywords override spec fields."""
    return _job_data


@pytest.fixture
def make_job() -> Callable[..., TrainingJob]:
    """make_job(steps, **spec): the same document validated into a TrainingJob (Python API path)."""
    return lambda steps=None, **spec: TrainingJob.model_validate(_job_data(steps, **spec))


class ArgoSchemas:
    """Strict validators per (Argo major, kind): upstream's JSON Schema with the int-or-string overlay, and the
    v4 full CRDs' openAPIV3Schema (what the API server enforces), each loaded once per session."""

    def __init__(self) -> None:
        self._json: dict[str, dict[str, Any]] = {}
        self._crd: dict[str, Any] = {}

    def json_errors(self, major: str, manifest: dict[str, Any]) -> list[str]:
        from jsonschema import Draft202012Validator

        if major not in self._json:
            module = ARGO_MAJORS[major]
            doc = json.loads(module.file("api/jsonschema/schema.json").read_text(encoding="utf-8"))
            self._json[major] = strictify(with_int_or_string(doc))
        root = copy.copy(self._json[major])
        root.pop("oneOf", None)
        root["$ref"] = f"#/definitions/io.argoproj.workflow.v1alpha1.{manifest['kind']}"
        validator = Draft202012Validator(root)
        return [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(manifest)]

    def crd_errors(self, manifest: dict[str, Any]) -> list[str]:
        from jsonschema import Draft4Validator

        kind = manifest["kind"]
        if kind not in self._crd:
            path = ARGO.file(f"manifests/base/crds/full/{CRD_FILES[kind]}")
            with path.open("rb") as stream:
                crd = yaml.load(stream, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
            schema = next(v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1")["schema"]["openAPIV3Schema"]
            self._crd[kind] = Draft4Validator(strictify(schema))
        return [f"{list(e.absolute_path)}: {e.message}" for e in self._crd[kind].iter_errors(manifest)]


@pytest.fixture(scope="session")
def argo_schemas() -> ArgoSchemas:
    return ArgoSchemas()
