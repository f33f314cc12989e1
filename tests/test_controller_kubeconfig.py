"""Kubeconfig handling the kubectl way: several files, first wins, paths relative to their file."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from wf.controller.kubeconfig import kubeconfig_paths, resolve_target
from wf.core.errors import ClusterError, InputError


def write(path: Path, doc: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc))
    return path


def config(current: str | None, clusters: dict[str, str], contexts: dict[str, dict], users: dict[str, dict]) -> dict:
    doc = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": n, "cluster": {"server": s, "certificate-authority": "ca.pem"}}
                     for n, s in clusters.items()],
        "contexts": [{"name": n, "context": c} for n, c in contexts.items()],
        "users": [{"name": n, "user": u} for n, u in users.items()],
    }
    if current:
        doc["current-context"] = current
    return doc


def test_first_file_wins_for_names_and_current_context(tmp_path: Path) -> None:
    a = write(tmp_path / "a" / "config", config("one", {"c1": "https://a:6443"},
                                               {"one": {"cluster": "c1", "user": "u", "namespace": "ml"}},
                                               {"u": {"token": "a"}}))
    b = write(tmp_path / "b" / "config", config("two", {"c1": "https://b:6443", "c2": "https://c2:6443"},
                                               {"two": {"cluster": "c2", "user": "u"}}, {"u": {"token": "b"}}))
    target = resolve_target(env={"KUBECONFIG": f"{a}:{b}"})
    # kubectl: the first file to set current-context wins; the python client would pick "two".
    assert target.context == "one"
    assert target.server == "https://a:6443"
    assert target.namespace == "ml"
    assert target.user == {"token": "a"}
    # A cluster path is resolved against the file that names it.
    ca = {c["name"]: c["cluster"]["certificate-authority"] for c in target.config["clusters"]}
    assert ca == {"c1": str((tmp_path / "a" / "ca.pem").resolve()), "c2": str((tmp_path / "b" / "ca.pem").resolve())}

    other = resolve_target(context="two", env={"KUBECONFIG": f"{a}:{b}"})
    assert (other.server, other.namespace) == ("https://c2:6443", "default")
    assert resolve_target(context="two", namespace="x", env={"KUBECONFIG": f"{a}:{b}"}).namespace == "x"


def test_missing_files_are_skipped_and_no_file_is_a_cluster_error(tmp_path: Path) -> None:
    a = write(tmp_path / "config", config("one", {"c": "https://a"}, {"one": {"cluster": "c", "user": "u"}}, {"u": {}}))
    assert resolve_target(env={"KUBECONFIG": f"{tmp_path}/nope:{a}"}).context == "one"
    with pytest.raises(ClusterError, match="no kubeconfig found"):
        resolve_target(env={"KUBECONFIG": f"{tmp_path}/nope"})


def test_unknown_context_lists_the_known_ones(tmp_path: Path) -> None:
    a = write(tmp_path / "config", config("one", {"c": "https://a"}, {"one": {"cluster": "c", "user": "u"}}, {"u": {}}))
    with pytest.raises(InputError, match=r"context 'zzz' not found .*known: one"):
        resolve_target(str(a), context="zzz")


def test_explicit_kubeconfig_beats_the_environment(tmp_path: Path) -> None:
    assert kubeconfig_paths("/x/config", {"KUBECONFIG": "/y"}) == [Path("/x/config")]
    assert kubeconfig_paths(None, {"KUBECONFIG": "/y:/z"}) == [Path("/y"), Path("/z")]
    assert kubeconfig_paths(None, {}) == [Path("~/.kube/config").expanduser()]


def test_bad_yaml_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "config"
    bad.write_text("clusters: [\n")
    with pytest.raises(InputError) as info:
        resolve_target(str(bad))
    assert str(bad) in str(info.value)
