"""Upstream data the tests read in place from ../shared (never copied into the project).

Where it is missing, tests that need it are skipped on a developer's machine but FAIL in CI (CI=true), so a
missing folder can never turn a green run into one that checked nothing.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
ARGO_SCHEMAS = SHARED / "schemas" / "argo-workflows"
EKSCTL_SCHEMA = (SHARED / "schemas" / "eksctl" / "v0.230.0" / "pkg" / "apis" / "eksctl.io" / "v1alpha5" / "assets"
                 / "schema.json")
KUEUE_CRDS = SHARED / "schemas" / "kueue" / "v0.17.0" / "config" / "components" / "crd" / "bases"
CORPUS = SHARED / "corpora" / "argo-examples"
INT_OR_STRING = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"


def require(path: Path) -> Path:
    if not path.exists():
        message = f"upstream data not found at {path} (expected ../shared beside the repository)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path


def with_int_or_string(schema: dict[str, Any]) -> dict[str, Any]:
    """Argo's published schema types IntOrString and Quantity as strings only; the CRDs (and Kubernetes) also
    take numbers. The overlay of shared/schemas/README.md."""
    schema["definitions"][INT_OR_STRING] = {"type": ["integer", "string"]}
    schema["definitions"][QUANTITY] = {"type": ["integer", "number", "string"]}
    return schema


def strictify(node: Any) -> Any:
    """Unknown keys rejected wherever a node lists properties (the recipe of shared/schemas/README.md)."""
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
