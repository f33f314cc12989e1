"""`wf lint`: job specs, Argo manifests, catalogs and eksctl configs, checked offline.

Every finding is a Problem (file, line, field, message). Argo manifests are validated strictly (fields from
hera's models) and every pod they would create is checked against the catalog's node groups.

Lint never says ok to what it did not check. A file with no document, and a document meant for a tool wf checks
(an apiVersion of wf's, Argo's, eksctl's or Kueue's group, or a kind like one of theirs) whose kind or apiVersion
wf does not know, are findings (exit 1). Other tools' documents (a ConfigMap, a CI pipeline) are skipped and
listed; when nothing at all is left to check (an empty folder, only other tools' files), the input is bad (exit 2).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from wf import argo
from wf.argo.size import MAX_JOB_SPEC_BYTES, job_spec_problems
from wf.compile.schedulability import explain, pod_constraints
from wf.compile.workflow import Kind, compile_job
from wf.core.constants import ARGO_KINDS, CRON_WORKFLOW, ApiKind
from wf.core.errors import InputError, PathKey, Problem, did_you_mean, listing
from wf.core.loader import Document, extra_documents, load_documents, load_mapping
from wf.jobspec.job import job_from_document
from wf.lint.pod_security import privileges
from wf.lint.queues import inadmissible
from wf.model.catalog import Catalog, catalog_from_document, load_catalog
from wf.model.nodegroups import NodeGroup, mixed_sizes, node_groups
from wf.render.kueue import KINDS as KUEUE_KINDS

YAML_SUFFIXES = (".yaml", ".yml")
# The kinds lint checks, with the apiVersion each is read at.
CHECKED_KINDS = {"TrainingJob": "wf/v1", "Catalog": "wf/v1", "ClusterConfig": "eksctl.io/v1alpha5",
                 **{name: k.api_version for name, k in {**ARGO_KINDS, **KUEUE_KINDS}.items()}}
_CHECKED_GROUPS = {api.partition("/")[0] for api in CHECKED_KINDS.values()}
# Groups whose every kind lint checks: any other kind there is a mistake.
_OWN_GROUPS = ("wf", "eksctl.io")
_FOREIGN = f"not a document wf lint checks ({listing(CHECKED_KINDS)}): nothing to check"
_POD_TEMPLATE_KEYS = ("container", "script", "containerSet", "resource", "data")


@dataclass
class LintResult:
    problems: list[Problem] = field(default_factory=list)
    files: int = 0

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]

    documents: int = 0
    skipped: list[str] = field(default_factory=list)  # documents of kinds lint does not check
    manifests: list[tuple[Document, dict[str, Any]]] = field(default_factory=list)  # for --server
    kueue: list[Document] = field(default_factory=list)  # checked together: the catalog's set, both ways


def yaml_files(paths: Iterable[str | Path]) -> Iterator[Path]:
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = [child for child in sorted(path.rglob("*")) if child.suffix in YAML_SUFFIXES and child.is_file()
                     and not any(p.startswith(".") for p in child.relative_to(path).parts)]
            if not found:
                raise InputError("no YAML files (*.yaml, *.yml) in this folder: nothing to check", file=path)
            yield from found
        elif path.is_file():
            yield path
        else:
            raise InputError(f"no such file or directory: {path}", file=path)


class _CatalogOnDemand:
    """Read the catalog only when a document needs it (a folder of plain Argo manifests may not)."""

    def __init__(self, path: str | Path | None, near: str | Path | None) -> None:
        self.path, self.near = path, near
        self._catalog: Catalog | None = None
        self._groups: list[NodeGroup] | None = None

    @property
    def catalog(self) -> Catalog:
        if self._catalog is None:
            self._catalog = load_catalog(self.path, near=self.near)
        return self._catalog

    @property
    def groups(self) -> list[NodeGroup]:
        if self._groups is None:
            self._groups = node_groups(self.catalog)
        return self._groups


Checker = Callable[[Document, _CatalogOnDemand, LintResult], list[Problem]]


def lint_paths(paths: Iterable[str | Path], catalog: str | Path | None = None) -> LintResult:
    """Every finding about `paths`; the catalog is --catalog's, else found from the first path (the project file
    above it). No catalog, or an invalid one, is bad input (InputError), not a finding about the documents."""
    paths = list(paths)
    result = LintResult()
    source = _CatalogOnDemand(catalog, paths[0] if paths else None)
    foreign: list[Problem] = []  # other tools' documents, skipped
    for path in yaml_files(paths):
        result.files += 1
        if too_big := _oversized_job(path):
            result.problems += too_big
            continue
        try:
            docs = load_documents(path, strict=False)
        except InputError as exc:
            result.problems += exc.problems
            continue
        if not docs:
            result.problems.append(Problem(str(path), 1, None, "no YAML document in this file: nothing to check"))
        elif any(_checker_for(doc) is _lint_job for doc in docs) and (extra := extra_documents(docs)):
            result.problems.append(extra)  # as `wf compile` and `wf submit` refuse the file
        for doc in docs:
            result.documents += 1
            checker = _checker_for(doc)
            if checker is None:
                if unknown := _unknown_kind(doc):
                    result.problems.append(unknown)
                else:
                    foreign.append(Problem(doc.file, doc.line_of(()), None, _FOREIGN))
                    result.skipped.append(f"{doc.file}:{doc.line_of(())}")
                continue
            if checker is not _lint_job:  # a job's are among check_job's findings
                severity = "warning" if checker is _lint_argo else "error"
                result.problems += _duplicates(doc, severity)
            result.problems += checker(doc, source, result)
    if result.kueue:
        from wf.lint.queues import check_kueue_objects

        result.problems += check_kueue_objects(source.catalog, result.kueue)
    if foreign and len(foreign) == result.documents and not result.problems:
        raise InputError(foreign)  # nothing was checked: "ok" would be a false green
    return result


def _checker_for(doc: Document) -> Checker | None:
    data = doc.data
    if not isinstance(data, dict):
        return None
    api, kind = data.get("apiVersion"), data.get("kind")
    if api == "wf/v1" and kind == "TrainingJob":
        return _lint_job
    if api == "wf/v1" and kind == "Catalog":
        return _lint_catalog
    if _one_of(ARGO_KINDS, api, kind):
        return _lint_argo
    if api == "eksctl.io/v1alpha5" and kind == "ClusterConfig":
        return _lint_cluster_config
    if _one_of(KUEUE_KINDS, api, kind):
        return _collect_kueue
    return None


def _unknown_kind(doc: Document) -> Problem | None:
    """The finding for a document meant for a tool wf checks, whose kind or apiVersion wf does not know (a typo
    must not pass as ok); None for another tool's document."""
    data = doc.data
    if not isinstance(data, dict):
        return None
    api, kind = data.get("apiVersion"), data.get("kind")
    group = api.partition("/")[0] if isinstance(api, str) else None
    if group is not None and group not in _CHECKED_GROUPS:
        return None  # another tool's document: a ConfigMap, Kubeflow's TrainJob
    expected = CHECKED_KINDS.get(kind) if isinstance(kind, str) else None
    if expected is not None:
        written = f"not {api!r}" if api is not None else "which is missing"
        return doc.problem(("apiVersion",), f"{kind} is read at apiVersion {expected}, {written}")
    ours = group in _OWN_GROUPS
    # In Argo's and Kueue's groups (or with no apiVersion) only a near miss is a typo: they have kinds wf does not
    # check (WorkflowTaskSet, Workload).
    hint = did_you_mean(kind, CHECKED_KINDS, cutoff=0.6 if ours else 0.8) if isinstance(kind, str) else ""
    if ours or hint:
        return doc.problem(("kind",), f"unknown kind {kind!r}{hint}; wf lint checks {listing(CHECKED_KINDS)}")
    return None


def _one_of(kinds: dict[str, ApiKind], api: Any, kind: Any) -> bool:
    """Whether a document is one of `kinds` at any version of its group: a wrong version is its checker's finding."""
    return isinstance(api, str) and isinstance(kind, str) and kind in kinds and api.startswith(f"{kinds[kind].group}/")


def _lint_job(doc: Document, source: _CatalogOnDemand, result: LintResult) -> list[Problem]:
    catalog, groups = source.catalog, source.groups  # outside check_job: no catalog is bad input, not a finding
    manifest, problems = check_job(doc, catalog, groups)
    if manifest is not None:
        result.manifests.append((doc, manifest))
    return problems


def refuse_oversized(path: Path) -> None:
    """A job spec file too big to compile is refused by its size, before it is parsed (`wf compile`, `wf submit`)."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", file=path) from None
    if too_big := job_spec_problems(size):
        raise InputError([p.in_file(str(path)) for p in too_big])


def load_job_document(path: Path) -> Document:
    """A job spec file as `wf compile` reads it: refused by its size before it is parsed (as lint refuses it),
    duplicate keys left for check_job to report."""
    refuse_oversized(path)
    docs = load_documents(path, strict=False)
    if len(docs) != 1 or not isinstance(docs[0].data, dict):
        load_mapping(path)  # raises its error, in the words of every other one-document file
    return docs[0]


def check_job(doc: Document, catalog: Catalog, groups: list[NodeGroup], kind: Kind | None = None,
              ) -> tuple[dict[str, Any] | None, list[Problem]]:
    """A job spec compiled and checked as `wf compile` and `wf lint` both do, so each refuses what the other does
    in the same words: (the manifest, or None when it did not compile; every finding)."""
    problems = _duplicates(doc, "error")
    if too_big := job_spec_problems(_spec_size(doc)):
        return None, problems + [p.in_file(doc.file) for p in too_big]
    try:
        manifest = compile_job(job_from_document(doc), catalog, kind=kind)
    except InputError as exc:
        return None, problems + exc.problems
    return manifest, problems + check_compiled(manifest, doc, catalog, groups)


def check_compiled(manifest: dict[str, Any], doc: Document, catalog: Catalog, groups: list[NodeGroup]
                   ) -> list[Problem]:
    """The compiler's own output through the same checks as a hand-written manifest (`wf submit` runs them too).
    Their paths are into the compiled manifest, which has no lines: reported at the job's first line."""
    found = argo.validate(manifest) + catalog_problems(manifest, catalog, groups)
    return [replace(p, message=f"compiled workflow: {p.message}").in_file(doc.file, doc.line_of(()))
            for p in found] + _size(doc, manifest)


def catalog_problems(manifest: dict[str, Any], catalog: Catalog, groups: list[NodeGroup]) -> list[Problem]:
    """What the catalog refuses in an Argo manifest's pods: no node group holds them, their team can never admit
    them, they ask for privileges their class does not allow (paths into the manifest, no lines)."""
    return unschedulable(manifest, groups) + inadmissible(manifest, catalog) + privileges(manifest, catalog)


def _oversized_job(path: Path) -> list[Problem]:
    """A job spec file over budget, refused before it is parsed as `wf compile` refuses it: a file that large
    holding one document (no `---` but a leading one) whose top-level kind is TrainingJob. Other large files are
    parsed, and a job among their documents is measured by its own text (check_job)."""
    try:
        size = path.stat().st_size
        if size <= MAX_JOB_SPEC_BYTES:
            return []
        text = path.read_bytes()
    except OSError:
        return []  # load_documents says why it cannot be read
    separators = len(_SEPARATOR.findall(text))
    one_document = separators == 0 or (separators == 1 and text.lstrip().startswith(b"---"))
    if not one_document or not _JOB_KIND.search(text):
        return []
    return [p.in_file(str(path)) for p in job_spec_problems(size)]


_SEPARATOR = re.compile(rb"^---", re.M)
_JOB_KIND = re.compile(rb"""^kind:[ \t]*["']?TrainingJob\b""", re.M)


def _spec_size(doc: Document) -> int:
    """The length of a job's document: its file's when that is within budget (no need to look closer), else its
    own text's (a file may hold several)."""
    try:
        size = Path(doc.file).stat().st_size
    except OSError:
        return 0  # not from a file (a test's text): the manifest's own size is still checked
    return size if size <= MAX_JOB_SPEC_BYTES else doc.node.end_mark.index - doc.node.start_mark.index


def _duplicates(doc: Document, severity: str) -> list[Problem]:
    return [Problem(doc.file, line, None, f"duplicate key {key!r}; the last value wins", severity)
            for line, key in doc.duplicates]


def _lint_catalog(doc: Document, source: _CatalogOnDemand, result: LintResult) -> list[Problem]:
    try:
        catalog = catalog_from_document(doc)
    except InputError as exc:
        return exc.problems
    return [doc.locate(p) for p in mixed_sizes(catalog)]


def _lint_cluster_config(doc: Document, source: _CatalogOnDemand, result: LintResult) -> list[Problem]:
    from wf.lint.consistency import check_cluster_config

    return check_cluster_config(source.catalog, doc)


def _collect_kueue(doc: Document, source: _CatalogOnDemand, result: LintResult) -> list[Problem]:
    result.kueue.append(doc)
    return []


def _lint_argo(doc: Document, source: _CatalogOnDemand, result: LintResult) -> list[Problem]:
    manifest = doc.data
    problems = [doc.locate(p) for p in argo.validate(manifest)]
    problems += _size(doc, manifest)
    if not problems:
        result.manifests.append((doc, manifest))
        problems += [doc.locate(p) for p in catalog_problems(manifest, source.catalog, source.groups)]
    return problems


def _size(doc: Document, manifest: dict[str, Any]) -> list[Problem]:
    size = argo.json_size(manifest)
    found = argo.size_problems(size) + argo.step_limit_problems(manifest, size) + argo.fanout_problems(manifest)
    return [p.in_file(doc.file, doc.line_of(())) for p in found]


def unschedulable(manifest: dict[str, Any], groups: list[NodeGroup]) -> list[Problem]:
    """A finding for every template whose pod no node group can hold."""
    spec = manifest.get("spec") or {}
    at: tuple[PathKey, ...] = ("spec",)
    if manifest.get("kind") == CRON_WORKFLOW.kind:
        spec, at = spec.get("workflowSpec") or {}, ("spec", "workflowSpec")
    defaults = {**(spec.get("templateDefaults") or {})}
    out = []
    # A job's steps ask for a few distinct pods (a class and its size): each is explained once.
    reasons: dict[str, str | None] = {}
    for i, template in enumerate(spec.get("templates") or []):
        if not isinstance(template, dict) or not any(k in template for k in _POD_TEMPLATE_KEYS):
            continue
        pod = pod_constraints(spec, {**defaults, **template})
        if pod is None:
            continue
        # repr, not JSON: the same question asked in another key order is only explained twice.
        key = repr((sorted(pod.node_selector.items()), pod.affinity_terms, pod.tolerations,
                    sorted(pod.requests.items())))
        if key not in reasons:
            reasons[key] = explain(pod, groups)
        if reason := reasons[key]:
            message = f"template {template.get('name')!r} cannot schedule: {reason}"
            out.append(Problem.at((*at, "templates", i), message))
    return out
