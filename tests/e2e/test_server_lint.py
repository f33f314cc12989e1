"""`wf lint --server` against Argo's FULL CRDs (of the release the cluster runs, read in place from the Go module
cache: tests/upstream.py): what the API server itself accepts, with every field of every compiled example checked
by the CRDs' OpenAPI schemas.

The local cluster installs Argo's minimal CRDs (an object, nothing more), as Argo's own install does. The module
fixture swaps in the full ones for these tests and puts the minimal ones back: with the full CRDs the API server
prunes unknown fields and validates every status the controller writes, so leaving them would change what the
other tests run against (and a later `wf cluster up` re-applies the minimal ones anyway).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from upstream import ARGO
from wf.controller.client import Kube
from wf.core.constants import CLASS_LABEL, CRON_WORKFLOW, WORKFLOW, WORKFLOW_TEMPLATE

from .conftest import ClusterHandle

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
FULL_CRDS = "manifests/base/crds/full"  # in Argo's module
CRD_FILES = ("argoproj.io_workflows.yaml", "argoproj.io_workflowtemplates.yaml", "argoproj.io_cronworkflows.yaml")
KINDS = {k.plural: k for k in (WORKFLOW, WORKFLOW_TEMPLATE, CRON_WORKFLOW)}
SCHEDULE = "30 3 * * *"


@pytest.fixture(scope="module")
def full_crds(kube: Kube) -> Iterator[list[str]]:
    """Argo's full CRDs server-side applied in place of the minimal ones for this module, then restored."""
    from wf.render.platform import load_manifest

    crds = ARGO.file(FULL_CRDS)
    started = time.monotonic()
    # 2.4-2.6 MB of YAML each: the C loader reads them in a fraction of the pure-Python loader's time.
    full = [yaml.load((crds / name).read_text(), Loader=yaml.CSafeLoader) for name in CRD_FILES]
    names = [crd["metadata"]["name"] for crd in full]
    minimal = [m for m in load_manifest("argo-crds.yaml")
               if m["kind"] == "CustomResourceDefinition" and m["metadata"]["name"] in names]
    assert len(minimal) == len(full), "manifests/argo-crds.yaml lacks one of " + ", ".join(names)
    _apply_crds(kube, full)
    _wait_schema_served(kube, full, strict=True)
    print(f"\nfull CRDs applied and served in {time.monotonic() - started:.1f}s")
    try:
        yield names
    finally:
        _apply_crds(kube, minimal)
        _wait_schema_served(kube, minimal, strict=False)


def _apply_crds(kube: Kube, crds: list[dict[str, Any]]) -> None:
    """Server-side apply, forced, as the cluster's own field manager: the CRD's one owner swaps its whole
    definition, so nothing of the other version lingers (and `wf cluster up` would restore minimal ones)."""
    from kubernetes import client

    from wf.cluster.install import FIELD_MANAGER

    extensions = client.ApiextensionsV1Api(kube.api_client)
    for crd in crds:
        extensions.patch_custom_resource_definition(crd["metadata"]["name"], crd, field_manager=FIELD_MANAGER,
                                                    force=True, _content_type="application/apply-patch+yaml")


def _wait_schema_served(kube: Kube, crds: list[dict[str, Any]], *, strict: bool, timeout: float = 60) -> None:
    """Each CRD stored as given and Established, and the API server validating with it: the CRD's handler is
    rebuilt asynchronously, so a probe whose `spec` is not an object must be refused (full) or accepted (minimal)."""
    import json

    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    extensions, custom = client.ApiextensionsV1Api(kube.api_client), kube.custom
    deadline = time.monotonic() + timeout
    for crd in crds:
        name = crd["metadata"]["name"]
        plural = crd["spec"]["names"]["plural"]
        probe = {"apiVersion": KINDS[plural].api_version, "kind": KINDS[plural].kind,
                 "metadata": {"generateName": "probe-"},
                 "spec": "not an object"}
        while True:
            stored = json.loads(extensions.read_custom_resource_definition(name, _preload_content=False).data)
            established = any(c["type"] == "Established" and c["status"] == "True"
                              for c in (stored.get("status") or {}).get("conditions") or [])
            refused = None
            if established and stored["spec"]["versions"] == crd["spec"]["versions"]:
                try:
                    custom.create_namespaced_custom_object(WORKFLOW.group, WORKFLOW.version, "wf", plural, probe,
                                                           dry_run="All")
                    refused = False
                except ApiException as exc:
                    if exc.status != 422:
                        raise
                    refused = True
            if refused is strict:
                break
            served = "full" if strict else "minimal"
            assert time.monotonic() < deadline, f"{name}: the API server does not serve the {served} schema"
            time.sleep(0.2)


def wf_lint_server(handle: ClusterHandle, *paths: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": str(handle.kubeconfig)}
    env.pop("WF_CATALOG", None)
    argv = [sys.executable, "-m", "wf", "lint", "--server", "--context", handle.context, *map(str, paths)]
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_every_compiled_example_passes_the_full_crds(full_crds: list[str], local_cluster: ClusterHandle,
                                                     tmp_path: Path) -> None:
    from wf.compile.workflow import compile_job
    from wf.jobspec.job import load_job
    from wf.model.catalog import load_catalog

    jobs = sorted(EXAMPLES.glob("*.yaml"))
    assert jobs
    result = wf_lint_server(local_cluster, EXAMPLES)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "documents: ok" in result.stderr, result.stderr

    # The same jobs as a WorkflowTemplate and as a CronWorkflow (given a schedule when they have none).
    catalog = load_catalog()
    written = []
    for path in jobs:
        doc = yaml.safe_load(path.read_text())
        doc["spec"].setdefault("schedule", SCHEDULE)
        scheduled = tmp_path / "jobs" / path.name
        scheduled.parent.mkdir(exist_ok=True)
        scheduled.write_text(yaml.safe_dump(doc, sort_keys=False))
        job = load_job(scheduled)
        for kind in ("Workflow", "WorkflowTemplate", "CronWorkflow"):
            manifest = compile_job(job, catalog, kind=kind)
            out = tmp_path / "argo" / f"{path.stem}.{kind.lower()}.yaml"
            out.parent.mkdir(exist_ok=True)
            out.write_text(yaml.safe_dump(manifest, sort_keys=False))
            written.append(out)
    result = wf_lint_server(local_cluster, tmp_path / "argo")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(written)} files, {len(written)} documents: ok" in result.stderr, result.stderr


def manifest(kind: str, **spec: Any) -> dict[str, Any]:
    """A small, valid Argo manifest of `kind` on the cpu class; `spec` fields added to the workflow spec."""
    workflow_spec = {
        "entrypoint": "main",
        "templates": [{"name": "main", "nodeSelector": {CLASS_LABEL: "cpu"},
                       "container": {"image": "busybox:1.36", "command": ["true"],
                                     "resources": {"requests": {"cpu": "1"}}}}],
        **spec,
    }
    if kind == "Workflow":
        return {"apiVersion": WORKFLOW.api_version, "kind": kind, "metadata": {"generateName": "typo-"},
                "spec": workflow_spec}
    return {"apiVersion": WORKFLOW.api_version, "kind": kind, "metadata": {"name": "typo"}, "spec": workflow_spec}


def test_a_value_only_the_crd_schema_refuses_fails_with_file_line_and_the_servers_message(
        full_crds: list[str], local_cluster: ClusterHandle, tmp_path: Path) -> None:
    # Second document of a file (created by dry run: generateName) and a named template (dry-run applied).
    first = yaml.safe_dump(manifest("WorkflowTemplate"), sort_keys=False)
    workflow = tmp_path / "workflows.yaml"
    second = yaml.safe_dump(manifest("Workflow", podGC={"strategy": "OnPodSucess"}), sort_keys=False)
    workflow.write_text(first + "---\n" + second)
    # The problems point at the field the server names: the second document starts after first's lines and '---'.
    line = first.count("\n") + 2 + second.splitlines().index("    strategy: OnPodSucess")
    bad_template = manifest("WorkflowTemplate")
    bad_template["spec"]["templates"][0]["retryStrategy"] = {"limit": 2, "retryPolicy": "Sometimes"}
    template = tmp_path / "template.yaml"
    template.write_text(yaml.safe_dump(bad_template, sort_keys=False))

    env = {**os.environ, "KUBECONFIG": str(local_cluster.kubeconfig)}
    offline = subprocess.run([sys.executable, "-m", "wf", "lint", str(workflow), str(template)], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=60)
    assert offline.returncode == 0, offline.stdout + offline.stderr  # only the API server's schema knows these enums

    result = wf_lint_server(local_cluster, workflow, template)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    problems = result.stdout.splitlines()
    assert len(problems) == 2, result.stdout
    server = f"the API server ({local_cluster.context})"
    assert problems[0].startswith(f"{workflow}:{line}: {server} rejects this Workflow:"), problems
    assert 'spec.podGC.strategy: Unsupported value: "OnPodSucess"' in problems[0], problems
    policy_line = template.read_text().splitlines().index("      retryPolicy: Sometimes") + 1
    assert problems[1].startswith(f"{template}:{policy_line}: {server} rejects this WorkflowTemplate:"), problems
    assert 'spec.templates[0].retryStrategy.retryPolicy: Unsupported value: "Sometimes"' in problems[1], problems
    assert "1 files" not in result.stderr and "2 errors" in result.stderr, result.stderr
