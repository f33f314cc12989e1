"""Merging and removing the local cluster's context in a user kubeconfig (kind's behaviour)."""

from __future__ import annotations

import base64
import stat
from pathlib import Path

import yaml

from wf.cluster import kubeconfig


def _admin(tmp_path: Path) -> Path:
    (tmp_path / "pki").mkdir()
    (tmp_path / "pki" / "ca.crt").write_bytes(b"CA")
    (tmp_path / "pki" / "admin.crt").write_bytes(b"CERT")
    (tmp_path / "pki" / "admin.key").write_bytes(b"KEY")
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "kwok-x", "cluster": {"server": "https://127.0.0.1:32766",
                                                            "certificate-authority": "pki/ca.crt"}}],
                "users": [{"name": "kwok-x", "user": {"client-certificate": "pki/admin.crt",
                                                      "client-key": "pki/admin.key"}}],
                "contexts": [{"name": "kwok-x", "context": {"cluster": "kwok-x", "user": "kwok-x"}}],
            }
        )
    )
    return path


def test_entry_inlines_credentials(tmp_path: Path) -> None:
    entry = kubeconfig.embedded_entry(_admin(tmp_path), "wf-local", "wf")
    cluster = entry["clusters"][0]["cluster"]
    user = entry["users"][0]["user"]
    assert base64.b64decode(cluster["certificate-authority-data"]) == b"CA"
    assert base64.b64decode(user["client-key-data"]) == b"KEY"
    assert "client-key" not in user
    context = {"cluster": "wf-local", "user": "wf-local", "namespace": "wf"}
    assert entry["contexts"] == [{"name": "wf-local", "context": context}]


def test_merge_keeps_other_entries_sets_current_and_is_private(tmp_path: Path) -> None:
    target = tmp_path / "home" / ".kube" / "config"
    target.parent.mkdir(parents=True)
    other = {"name": "prod", "context": {"cluster": "prod", "user": "me"}}
    target.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "contexts": [other],
                                      "current-context": "prod"}))
    entry = kubeconfig.embedded_entry(_admin(tmp_path), "wf-local", "wf")
    kubeconfig.merge(entry, target)
    kubeconfig.merge(entry, target)  # twice: still one entry
    merged = yaml.safe_load(target.read_text())
    assert [c["name"] for c in merged["contexts"]] == ["prod", "wf-local"]
    assert merged["current-context"] == "wf-local"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600

    kubeconfig.remove("wf-local", target)
    after = yaml.safe_load(target.read_text())
    assert after["contexts"] == [other]
    assert after["clusters"] == [] and after["users"] == []
    assert after["current-context"] == ""


def test_merge_creates_a_missing_file(tmp_path: Path) -> None:
    target = tmp_path / "new" / "config"
    kubeconfig.merge(kubeconfig.embedded_entry(_admin(tmp_path), "wf-a", "wf"), target)
    assert yaml.safe_load(target.read_text())["current-context"] == "wf-a"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


def test_user_kubeconfig_path_follows_kubeconfig_env(monkeypatch, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path}/a:{tmp_path}/b")
    assert kubeconfig.user_kubeconfig_path() == tmp_path / "a"
    monkeypatch.delenv("KUBECONFIG")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert kubeconfig.user_kubeconfig_path() == tmp_path / ".kube" / "config"
