"""Merge the local cluster's context into the user's kubeconfig and take it out again, as kind does.

Credentials are embedded (base64 *-data fields) rather than referenced by path, so the context keeps
working from any directory; the file is therefore written with mode 0600.
"""

from __future__ import annotations

import base64
import os
import tempfile
from pathlib import Path
from typing import Any

import yaml

from wf.controller.kubeconfig import kubeconfig_paths, read_kubeconfig


def user_kubeconfig_path() -> Path:
    """The file kubectl would write: the first entry of KUBECONFIG, else ~/.kube/config."""
    return kubeconfig_paths()[0]


def embedded_entry(admin_kubeconfig: Path, name: str, namespace: str) -> dict[str, Any]:
    """A one-context kubeconfig named `name` built from kwokctl's admin kubeconfig, with files inlined."""
    source = yaml.safe_load(admin_kubeconfig.read_text())
    cluster = dict(source["clusters"][0]["cluster"])
    user = dict(source["users"][0]["user"])
    base = admin_kubeconfig.parent
    _inline(cluster, "certificate-authority", base)
    _inline(user, "client-certificate", base)
    _inline(user, "client-key", base)
    return {
        "clusters": [{"name": name, "cluster": cluster}],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name, "namespace": namespace}}],
    }


def _inline(section: dict[str, Any], key: str, base: Path) -> None:
    path = section.pop(key, None)
    if path:
        section[f"{key}-data"] = base64.b64encode((base / path).read_bytes()).decode()


def write_standalone(entry: dict[str, Any], path: Path) -> None:
    """A kubeconfig holding only this context (the cluster's own copy, for tests and the controller)."""
    name = entry["contexts"][0]["name"]
    _write({"apiVersion": "v1", "kind": "Config", "preferences": {}, "current-context": name, **entry}, path)


def merge(entry: dict[str, Any], path: Path) -> None:
    """Add or replace the entry's cluster, user and context in `path`, and make the context current."""
    config = _read(path)
    name = entry["contexts"][0]["name"]
    for section in ("clusters", "users", "contexts"):
        kept = [item for item in config.get(section) or [] if item.get("name") != name]
        config[section] = kept + entry[section]
    config["current-context"] = name
    _write(config, path)


def remove(name: str, path: Path) -> None:
    """Take the named cluster, user and context out of `path`; other entries are left untouched."""
    if not path.exists():
        return
    config = _read(path)
    for section in ("clusters", "users", "contexts"):
        config[section] = [item for item in config.get(section) or [] if item.get("name") != name]
    if config.get("current-context") == name:
        config["current-context"] = ""
    _write(config, path)


def _read(path: Path) -> dict[str, Any]:
    return read_kubeconfig(path) or {"apiVersion": "v1", "kind": "Config", "preferences": {}}


def _write(config: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    # Write-then-rename so a crash never leaves a half-written kubeconfig; mkstemp creates it 0600.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as out:
            yaml.safe_dump(config, out, sort_keys=False)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
