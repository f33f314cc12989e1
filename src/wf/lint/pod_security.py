"""Privileges a manifest's pods ask for beyond Pod Security `baseline`: host namespaces, host paths, privileged
containers, added capabilities. Each is an error unless the class the pod runs on allows it (the catalog's
`computeClasses[].podSecurity`, or what its accelerator needs): a hand-written Argo manifest, a template's
`podSpecPatch` or a resource template's object (an MPIJob's replicas) cannot take more than the platform gives
the class. Job specs cannot ask at all (their fields name no host namespace, host path or privilege); their
compiled workflows are checked too, so the compiler and the catalog cannot disagree.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import yaml

from wf.argo.defaults import with_defaults
from wf.compile.readback import read_placement
from wf.core.constants import CRON_WORKFLOW
from wf.core.errors import PathKey, Problem
from wf.model.catalog import Catalog, PodSecurity

Path = tuple[PathKey, ...]
_HOST_NAMESPACES: dict[str, Callable[[PodSecurity], bool]] = {
    "hostNetwork": lambda p: p.host_network, "hostPID": lambda p: p.host_pid, "hostIPC": lambda p: p.host_ipc}
_CONTAINER_LISTS = ("containers", "initContainers", "sidecars")
_NONE = PodSecurity()


@dataclass(frozen=True)
class Ask:
    """One privilege a pod asks for, at `at`, in the words of the message."""

    at: Path
    what: str
    allowed: Callable[[PodSecurity], bool]


def privileges(manifest: dict[str, Any], catalog: Catalog) -> list[Problem]:
    spec = manifest.get("spec") or {}
    at: Path = ("spec",)
    if manifest.get("kind") == CRON_WORKFLOW.kind:
        spec, at = spec.get("workflowSpec") or {}, ("spec", "workflowSpec")
    if not isinstance(spec, dict):
        return []
    out: list[Problem] = []
    classes: list[str | None] = []
    for i, own in enumerate(spec.get("templates") or []):
        if not isinstance(own, dict):
            continue
        template = with_defaults(spec, own, fresh=False)  # what its templateDefaults give it, Argo asks for too
        pods = [(read_placement(template).compute_class, _pod_asks(template, (*at, "templates", i)))]
        pods += _resource_pods(template, (*at, "templates", i))
        for cls, asks in pods:
            classes.append(cls)
            out += _refused(asks, [cls], catalog)
    # The workflow's own pod fields reach every pod: each class must allow them.
    out += _refused(_pod_asks(spec, at), classes or [None], catalog)
    return out


def _refused(asks: list[Ask], classes: list[str | None], catalog: Catalog) -> list[Problem]:
    out = []
    for ask in asks:
        refusing = [c for c in classes if not ask.allowed(_relaxations(catalog, c))]
        if not refusing:
            continue
        named = sorted({c for c in refusing if c is not None})
        whose = (f"compute class {', '.join(repr(c) for c in named)} does not allow it" if named
                 else "the pod names no compute class that could")
        out.append(Problem.at(ask.at, f"{ask.what}: more than Pod Security baseline allows, and {whose} "
                                      "(the catalog's computeClasses[].podSecurity)"))
    return out


def _relaxations(catalog: Catalog, name: str | None) -> PodSecurity:
    if name is None or name not in catalog.class_names:
        return _NONE
    return catalog.compute_class(name).relaxations


def _pod_asks(pod: dict[str, Any], at: Path) -> list[Ask]:
    """What an Argo template, workflow spec or pod spec asks for: its own fields, its containers' and, for Argo,
    those its podSpecPatch sets."""
    asks = [Ask((*at, key), f"{key}: true", allowed) for key, allowed in _HOST_NAMESPACES.items() if pod.get(key)]
    for v, volume in enumerate(pod.get("volumes") or []):
        host = volume.get("hostPath") if isinstance(volume, dict) else None
        if isinstance(host, dict):
            path = str(host.get("path", ""))
            asks.append(Ask((*at, "volumes", v, "hostPath"), f"host path {path!r}", _allows_path(path)))
    for where, container in _containers(pod, at):
        context = container.get("securityContext") or {}
        if not isinstance(context, dict):
            continue
        if context.get("privileged"):
            asks.append(Ask((*where, "securityContext", "privileged"), "a privileged container",
                            lambda p: p.privileged))
        added = (context.get("capabilities") or {}).get("add") or []
        for c, capability in enumerate(added):
            name = str(capability).removeprefix("CAP_")
            asks.append(Ask((*where, "securityContext", "capabilities", "add", c), f"capability {name}",
                            _allows_capability(name)))
    patch = pod.get("podSpecPatch")
    if isinstance(patch, str):
        parsed = _parsed_patch(patch)
        if isinstance(parsed, dict):
            asks += [Ask((*at, "podSpecPatch"), f"podSpecPatch sets {a.what}", a.allowed)
                     for a in _pod_asks(parsed, (*at, "podSpecPatch"))]
    return asks


@functools.lru_cache(maxsize=256)
def _parsed_patch(patch: str) -> Any:
    """A podSpecPatch as Argo reads it (YAML, JSON included), None when it is neither. Once per distinct text: a
    job's steps share a few patches (its Spot fallback), and YAML's parser is slow enough to dominate a big job's
    lint. JSON (what wf compiles) is tried first, being YAML as well and far quicker to parse; callers only read."""
    try:
        return json.loads(patch)
    except ValueError:
        pass
    try:
        return yaml.safe_load(patch)
    except yaml.YAMLError:
        return None  # Argo's schema check and the API server judge a patch that is not YAML


def _allows_path(path: str) -> Callable[[PodSecurity], bool]:
    return lambda relaxed: any(_under(path, allowed) for allowed in relaxed.host_paths)


def _allows_capability(name: str) -> Callable[[PodSecurity], bool]:
    return lambda relaxed: relaxed.privileged or name in relaxed.capabilities


def _containers(pod: dict[str, Any], at: Path) -> Iterator[tuple[Path, dict[str, Any]]]:
    for key in ("container", "script"):
        if isinstance(pod.get(key), dict):
            yield (*at, key), pod[key]
    nested = pod.get("containerSet")
    sources = [(at, pod), ((*at, "containerSet"), nested if isinstance(nested, dict) else {})]
    for base, holder in sources:
        for key in _CONTAINER_LISTS:
            for i, container in enumerate(holder.get(key) or []):
                if isinstance(container, dict):
                    yield (*base, key, i), container


def _resource_pods(template: dict[str, Any], at: Path) -> list[tuple[str | None, list[Ask]]]:
    """The pods of a resource template's object (an MPIJob's replicas, a Job's template), each with its class."""
    resource = template.get("resource")
    manifest = resource.get("manifest") if isinstance(resource, dict) else None
    if not isinstance(manifest, str):
        return []
    try:
        obj = yaml.safe_load(manifest)
    except yaml.YAMLError:
        return []
    where: Path = (*at, "resource", "manifest")
    return [(read_placement(pod).compute_class, [Ask(where, f"{found}: {a.what}", a.allowed)
                                                  for a in _pod_asks(pod["spec"], ())])
            for found, pod in _pod_templates(obj, "")]


def _pod_templates(obj: Any, path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """(dotted path, pod template) of every pod template inside an object: a mapping whose spec has containers."""
    if isinstance(obj, dict):
        spec = obj.get("spec")
        if isinstance(spec, dict) and isinstance(spec.get("containers"), list):
            yield path or "the object", obj
            return
        for key, value in obj.items():
            yield from _pod_templates(value, f"{path}.{key}" if path else str(key))
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            yield from _pod_templates(value, f"{path}[{i}]")


def _under(path: str, allowed: str) -> bool:
    path, allowed = path.rstrip("/") or "/", allowed.rstrip("/") or "/"
    return path == allowed or path.startswith(allowed if allowed == "/" else allowed + "/")
