"""Kubeconfig loading the way kubectl does it: KUBECONFIG with several files, --context, the context's namespace.

The Kubernetes Python client merges several files too, but lets the *last* file's current-context win and
resolves relative file references against the working directory; kubectl lets the first file that sets a
value win and resolves paths against the file that names them. We merge here and hand the client one dict.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wf.core.errors import ClusterError, InputError

DEFAULT_NAMESPACE = "default"

# Fields holding file paths, per section, that kubectl resolves relative to the kubeconfig file naming them.
_PATH_FIELDS: dict[str, tuple[str, ...]] = {
    "clusters": ("certificate-authority",),
    "users": ("client-certificate", "client-key", "tokenFile"),
}


@dataclass(frozen=True)
class KubeTarget:
    """Which cluster, as whom and where: everything the API client needs, resolved once."""

    config: dict[str, Any]  # merged kubeconfig, paths absolute
    context: str
    namespace: str
    server: str
    user: dict[str, Any]
    sources: tuple[str, ...]  # the files read, for error messages


def kubeconfig_paths(explicit: str | None = None, env: dict[str, str] | None = None) -> list[Path]:
    """The files kubectl would read: --kubeconfig, else every existing entry of KUBECONFIG, else ~/.kube/config."""
    if explicit:
        return [Path(explicit).expanduser()]
    variables: Mapping[str, str] = os.environ if env is None else env
    listed = [Path(p).expanduser() for p in variables.get("KUBECONFIG", "").split(os.pathsep) if p]
    return listed or [Path("~/.kube/config").expanduser()]


def _absolutize(section: str, entry: dict[str, Any], base: Path) -> dict[str, Any]:
    entry = dict(entry)
    body_key = section[:-1]  # "clusters" -> "cluster"
    body = dict(entry.get(body_key) or {})
    for field in _PATH_FIELDS.get(section, ()):
        value = body.get(field)
        if isinstance(value, str) and value and not os.path.isabs(value):
            body[field] = str((base / value).resolve())
    exec_spec = body.get("exec")
    if isinstance(exec_spec, dict):
        command = exec_spec.get("command")
        # kubectl resolves a command relative to the file only when it names a path, not a $PATH lookup.
        if isinstance(command, str) and os.sep in command and not os.path.isabs(command):
            body["exec"] = {**exec_spec, "command": str((base / command).resolve())}
    entry[body_key] = body
    return entry


def merge_kubeconfigs(documents: list[tuple[Path, dict[str, Any]]]) -> dict[str, Any]:
    """Merge parsed kubeconfigs in order; the first file to define a name or current-context wins (kubectl rules)."""
    merged: dict[str, Any] = {"apiVersion": "v1", "kind": "Config", "clusters": [], "contexts": [], "users": []}
    seen: dict[str, set[str]] = {"clusters": set(), "contexts": set(), "users": set()}
    for path, doc in documents:
        base = path.resolve().parent
        if not merged.get("current-context") and doc.get("current-context"):
            merged["current-context"] = doc["current-context"]
        for section in ("clusters", "contexts", "users"):
            for entry in doc.get(section) or []:
                name = entry.get("name") if isinstance(entry, dict) else None
                if not name or name in seen[section]:
                    continue
                seen[section].add(name)
                merged[section].append(_absolutize(section, entry, base))
    return merged


def read_kubeconfig(path: Path) -> dict[str, Any] | None:
    """One kubeconfig file as a mapping; None when it does not exist or is empty."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ClusterError(f"cannot read kubeconfig {path}: {exc.strerror}") from exc
    import yaml  # here: the CLI imports this module at start-up (client.Target), and `wf --help` reads no YAML

    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        raise InputError(f"kubeconfig is not valid YAML{f' (line {line})' if line else ''}: {exc}", file=path) from exc
    if doc is None:
        return None
    if not isinstance(doc, dict):
        raise InputError("kubeconfig must be a mapping", file=path)
    return doc


def _named(config: dict[str, Any], section: str, name: str) -> dict[str, Any] | None:
    for entry in config.get(section) or []:
        if entry.get("name") == name:
            body = entry.get(section[:-1])
            return body if isinstance(body, dict) else {}
    return None


def resolve_target(
    kubeconfig: str | None = None,
    context: str | None = None,
    namespace: str | None = None,
    env: dict[str, str] | None = None,
) -> KubeTarget:
    """Load and merge the kubeconfig files and pick context and namespace as kubectl would."""
    paths = kubeconfig_paths(kubeconfig, env)
    documents = [(p, doc) for p in paths if (doc := read_kubeconfig(p)) is not None]
    sources = tuple(str(p) for p in paths)
    if not documents:
        raise ClusterError(
            f"no kubeconfig found (looked at {', '.join(sources)}); start the local cluster with "
            "`wf cluster up`, pass --kubeconfig, or use --eks-cluster NAME --region R"
        )
    merged = merge_kubeconfigs(documents)
    chosen = context or merged.get("current-context")
    contexts = [c.get("name") for c in merged["contexts"]]
    if not chosen:
        raise InputError(f"no current context in {', '.join(sources)}; pass --context "
                         f"(known: {', '.join(contexts) or 'none'})")
    ctx = _named(merged, "contexts", chosen)
    if ctx is None:
        raise InputError(f"context {chosen!r} not found in {', '.join(sources)} "
                         f"(known: {', '.join(contexts) or 'none'})")
    cluster = _named(merged, "clusters", str(ctx.get("cluster", "")))
    if cluster is None or not cluster.get("server"):
        raise InputError(f"context {chosen!r} names cluster {ctx.get('cluster')!r}, which has no server in "
                         f"{', '.join(sources)}")
    user = _named(merged, "users", str(ctx.get("user", ""))) or {}
    merged["current-context"] = chosen
    return KubeTarget(
        config=merged,
        context=chosen,
        namespace=namespace or ctx.get("namespace") or DEFAULT_NAMESPACE,
        server=str(cluster["server"]),
        user=user,
        sources=sources,
    )
