"""Upstream data the tests read in place: files of the pinned Go modules (schemas, CRDs, example manifests),
fetched by the Go tool into its module cache, as the local cluster's build fetches them (wf.cluster.build).
The project keeps no copies, and a clone needs nothing beside it.

A module's directory is resolved on first use (one `go mod download -json` per module and session, never at
import, so collection stays fast). Where it cannot be fetched (no `go`, no module proxy), tests that need it
are skipped on a developer's machine but FAIL in CI (CI=true), so a missing module can never turn a green run
into one that checked nothing.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import pytest

from wf.cluster import build, mpi

INT_OR_STRING = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
# A cold fetch is seconds per module (Karpenter's needs its Go toolchain too); a hung proxy must not hang the run.
DOWNLOAD_TIMEOUT = 600


@dataclass(frozen=True)
class Module:
    """A Go module at a version; `toolchain` names the Go that must read it when its go.mod asks for a newer
    one than the local Go (`go` fetches that toolchain from the module proxy, as the build does)."""

    path: str
    version: str
    toolchain: str = "local"

    def file(self, relative: str) -> Path:
        """The file or folder at `relative` inside the module (its path in the upstream repository)."""
        directory = _directory(self)
        if isinstance(directory, str):
            unavailable(f"{self.path}@{self.version}: {directory}")
        path = directory / relative
        if not path.exists():
            unavailable(f"{self.path}@{self.version} has no {relative}")
        return path


def _built(name: str) -> Module:
    """The module the local cluster builds for the component `name`, at the same version."""
    comp = next(c for c in build.components() if c.name == name)
    return Module(comp.module, comp.tag, comp.toolchain or "local")


ARGO = _built("argo")
# Argo v3.7 (the newest tag the proxy serves): generated Workflows must stay valid on clusters not yet on v4.
ARGO_V3 = Module("github.com/argoproj/argo-workflows/v3", "v3.7.18")
KUEUE = _built("kueue")
KUEUE_CRDS = "config/components/crd/bases"  # in KUEUE
MPI_OPERATOR = _built(mpi.OPERATOR)
# EKS's Karpenter is the AWS provider (NodePool and EC2NodeClass CRDs), at the release the local cluster's kwok
# provider (sigs.k8s.io/karpenter, which has no EC2NodeClass) is built from; its go.mod needs the same Go.
KARPENTER_AWS = Module("github.com/aws/karpenter-provider-aws", f"v{build.KARPENTER_RELEASE}", build.KARPENTER_GO)
# eksctl moved to github.com/eksctl-io, but its go.mod still names the old path, so only that one downloads.
EKSCTL = Module("github.com/weaveworks/eksctl", "v0.230.0")


@functools.cache
def _directory(module: Module) -> Path | str:
    """The module's directory in the module cache, or why it cannot be had (kept too: asked once per session)."""
    go = shutil.which("go")
    if not go:
        return "the Go toolchain (`go`) is not on PATH"
    env = {**os.environ, "GOFLAGS": "-mod=mod", "GOTOOLCHAIN": module.toolchain}
    argv = [go, "mod", "download", "-json", f"{module.path}@{module.version}"]
    try:
        # Outside any module (the repository has no go.mod, but a parent folder might).
        proc = subprocess.run(argv, cwd=tempfile.gettempdir(), env=env, capture_output=True, text=True,
                              timeout=DOWNLOAD_TIMEOUT, check=False)
    except subprocess.TimeoutExpired:
        return f"`go mod download` took over {DOWNLOAD_TIMEOUT}s"
    try:
        info = json.loads(proc.stdout)
    except json.JSONDecodeError:
        info = {}
    if proc.returncode != 0 or "Dir" not in info:
        reason = info.get("Error") or (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        return f"`go mod download` failed: {reason}"
    return Path(info["Dir"])


def unavailable(message: str) -> NoReturn:
    message = " ".join(f"upstream data unavailable: {message}".split())  # one line, whatever `go` printed
    if os.environ.get("CI", "").lower() not in ("", "0", "false"):
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def with_int_or_string(schema: dict[str, Any]) -> dict[str, Any]:
    """Argo's published schema types IntOrString and Quantity as strings only; the CRDs (and Kubernetes) also
    take numbers."""
    schema["definitions"][INT_OR_STRING] = {"type": ["integer", "string"]}
    schema["definitions"][QUANTITY] = {"type": ["integer", "number", "string"]}
    return schema


def strictify(node: Any) -> Any:
    """Unknown keys rejected wherever a node lists properties, as the API server prunes (and `kubectl
    --validate=strict` rejects) them."""
    if isinstance(node, dict):
        if "properties" in node and "additionalProperties" not in node and not node.get(
            "x-kubernetes-preserve-unknown-fields"
        ):
            node["additionalProperties"] = False
        for value in node.values():
            strictify(value)
    elif isinstance(node, list):
        for value in node:
            strictify(value)
    return node
