"""The local cluster's mpi-operator component: what is built, and where `up` finds its CRD."""

from __future__ import annotations

from pathlib import Path

import pytest

from upstream import MPI_OPERATOR
from wf.cluster import build, mpi
from wf.core.constants import MPIJOB
from wf.core.errors import ClusterError


def test_the_operator_is_built_from_its_module_with_its_crd_and_a_loopback_health_patch() -> None:
    comp = next(c for c in build.components() if c.name == mpi.OPERATOR)
    assert comp.module == "github.com/kubeflow/mpi-operator" and comp.version == build.MPI_OPERATOR_RELEASE
    assert comp.binaries == ("mpi-operator",)
    assert comp.assets == ("manifests/base/kubeflow.org_mpijobs.yaml",)
    (patch,) = comp.patches
    patched = patch.apply('server := &http.Server{\n\t\tAddr:    fmt.Sprintf(":%d", healthCheckPort),\n}\n')
    assert "wfHealthAddr()" in patched and '"127.0.0.1:8080"' in patched and "WF_HEALTH_ADDR" in patched


def test_crd_comes_from_the_build_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WF_CACHE_DIR", str(tmp_path))
    with pytest.raises(ClusterError, match="wf cluster build mpi-operator"):
        mpi.crd_manifests()
    comp = next(c for c in build.components() if c.name == mpi.OPERATOR)
    comp.asset(tmp_path, comp.assets[0]).parent.mkdir(parents=True)
    comp.asset(tmp_path, comp.assets[0]).write_text(MPI_OPERATOR.file(comp.assets[0]).read_text())
    (crd,) = mpi.crd_manifests()
    assert crd["kind"] == "CustomResourceDefinition" and crd["spec"]["group"] == MPIJOB.group
    assert [v["name"] for v in crd["spec"]["versions"]] == ["v2beta1"]
