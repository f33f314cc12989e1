"""The developer's job spec (`kind: TrainingJob`): pydantic models usable from YAML and from Python alike."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal, TypeVar

from pydantic import (
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    model_validator,
)

from wf.core.constants import ARGO_KINDS, JOB_LABEL, WORKFLOW_TEMPLATE
from wf.core.errors import InputError, PathKey, Problem, did_you_mean, format_path, listing
from wf.core.loader import Document, load_mapping
from wf.core.modeling import (
    DEFER_CHECKS,
    StrictModel,
    dns_label_problem,
    labels_problems,
    parse_model,
    raise_problems,
)
from wf.core.paths import mount_path, output_path, working_dir
from wf.jobspec import references
from wf.jobspec.steps import JobSpec, Metadata, Step, Volume, check_image

M = TypeVar("M", bound=StrictModel)
# Argo's rule for a DAG task with `dependencies`, which a step's `needs` become (validateDAG,
# workflow/validate/validate.go: "name cannot begin with a digit when using either 'depends' or 'dependencies'").
# Its other name rules (alphanumerics and '-', at most 128) hold for every DNS-1123 label.
DIGIT_START = "a step that needs others cannot start with a digit: Argo refuses it as a DAG task name"


class TrainingJob(StrictModel):
    api_version: Literal["wf/v1"] = Field(default="wf/v1", alias="apiVersion")
    kind: Literal["TrainingJob"] = "TrainingJob"
    metadata: Metadata
    spec: JobSpec
    _source: str = PrivateAttr(default="<python>")  # where it was read from, for messages
    _document: Document | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _checked(self, info: ValidationInfo) -> TrainingJob:
        if not (info.context or {}).get(DEFER_CHECKS):
            raise_problems(self.problems(), self._source)
        return self

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def document(self) -> Document | None:
        """The YAML document the job was read from: later checks (placement) report its lines."""
        return self._document

    @property
    def source(self) -> str:
        return self._source

    def problems(self) -> list[Problem]:
        """Rules the types can't express: names, labels, DAG edges, cycles and references."""
        return _Parts(self.metadata, list(enumerate(self.spec.steps)), list(enumerate(self.spec.on_exit)),
                      list(enumerate(self.spec.volumes)), self.spec).problems()

    @classmethod
    def salvaged_problems(cls, data: object) -> list[Problem]:
        """The same rules over the parts of a document that do validate, so one load reports every error
        in the file, not only the type errors that stopped the whole model."""
        raw_spec = data.get("spec") if isinstance(data, dict) else None
        spec: dict[str, object] = raw_spec if isinstance(raw_spec, dict) else {}
        meta = data.get("metadata") if isinstance(data, dict) else None
        raw_steps = [raw for key in ("steps", "onExit") for raw in _as_list(spec.get(key))]
        return _Parts(_valid(Metadata, meta), _valid_items(Step, spec.get("steps")),
                      _valid_items(Step, spec.get("onExit")), _valid_items(Volume, spec.get("volumes")), None,
                      raw_names={_name(raw) for raw in raw_steps}).problems()


def _valid(model: type[M], raw: object) -> M | None:
    try:
        return model.model_validate(raw, context={DEFER_CHECKS: True})
    except ValidationError:
        return None


def _as_list(raw: object) -> list[object]:
    return raw if isinstance(raw, list) else []


def _valid_items(model: type[M], raw: object) -> list[tuple[int, M]]:
    return [(i, value) for i, item in enumerate(_as_list(raw)) if (value := _salvaged(model, item)) is not None]


def _salvaged(model: type[M], raw: object) -> M | None:
    """`raw` validated without its broken fields (already reported), so its other fields are still checked;
    a missing or broken command stands in as a placeholder that no rule looks at."""
    try:
        return model.model_validate(raw, context={DEFER_CHECKS: True})
    except ValidationError as exc:
        if not isinstance(raw, dict):
            return None
        broken = {error["loc"][0] for error in exc.errors() if error["loc"]}
        kept = {k: v for k, v in raw.items() if k not in broken}
        if model is Step:
            kept.setdefault("command", ["-"])
        return _valid(model, kept)


def _name(raw: object) -> str | None:
    return raw.get("name") if isinstance(raw, dict) and isinstance(raw.get("name"), str) else None


@dataclass
class _Parts:
    """What the semantic rules look at; built from a whole job, or from the valid parts of a broken document
    (spec None: the job-level fields did not validate, so the checks that need them wait for a fix)."""

    metadata: Metadata | None
    steps: list[tuple[int, Step]]
    on_exit: list[tuple[int, Step]]
    volumes: list[tuple[int, Volume]]
    spec: JobSpec | None
    raw_names: set[str | None] = field(default_factory=set)

    @property
    def complete(self) -> bool:
        return self.spec is not None

    def problems(self) -> list[Problem]:
        out: list[Problem] = []
        if self.metadata is not None:
            out += _metadata_problems(self.metadata)
        sections = (("steps", self.steps), ("onExit", self.on_exit))
        first: dict[str, tuple[PathKey, ...]] = {}
        for section, steps in sections:
            for i, step in steps:
                at: tuple[PathKey, ...] = ("spec", section, i)
                if problem := dns_label_problem(step.name, "step name"):
                    out.append(Problem.at((*at, "name"), problem))
                elif step.needs and step.name[:1].isdigit():
                    out.append(Problem.at((*at, "name"), DIGIT_START))
                if step.name in first:
                    out.append(Problem.at((*at, "name"),
                                f"duplicate step name {step.name!r} (first at {format_path(first[step.name][1:])})"))
                first.setdefault(step.name, at)
                out += labels_problems(step.labels, (*at, "labels"))
        out += _volume_problems(self.volumes)
        for section, steps in sections:
            # Exit handler steps run in their own DAG, after the job: their needs name each other.
            names = {s.name for _, s in steps} | ({n for n in self.raw_names if n} if not self.complete else set())
            for i, step in steps:
                for j, need in enumerate(step.needs):
                    if need not in names:
                        out.append(Problem.at(("spec", section, i, "needs", j), f"unknown step {need!r}"
                                              f"{did_you_mean(need, names)}; {section}: {listing(sorted(names))}"))
                    elif need == step.name:
                        out.append(Problem.at(("spec", section, i, "needs", j), "a step cannot need itself"))
        if out or not self.complete:
            return out
        assert self.spec is not None
        for section, steps in sections:
            if cycle := find_cycle([s for _, s in steps]):
                first_at = next(i for i, s in steps if s.name == cycle[0])
                out.append(Problem.at(("spec", section, first_at, "needs"),
                                      f"steps form a cycle: {' -> '.join(cycle)}"))
        return out or references.problems(self.spec) or _default_problems(self.spec)


def _default_problems(spec: JobSpec) -> list[Problem]:
    """The images and paths that a job parameter completes, checked with its default as a literal one is: a
    default into Argo's places, or that makes no image reference, would not run either."""
    return parameter_problems(spec, spec.parameters, "the default ")


def parameter_problems(spec: JobSpec, values: dict[str, str], given: str = "-p ") -> list[Problem]:
    """The images and paths that the parameters in `values` complete (the other parameters at their defaults),
    checked as literal ones are; `given` says where the values came from in the message (a `-p` value on the
    command line passes the rules a value in the file does)."""
    checks: list[tuple[tuple[PathKey, ...], str, Callable[[str], str]]] = [(("spec", "image"), spec.image,
                                                                          check_image)]
    checks += [(("spec", "volumes", i, "mountPath"), v.mount_path, mount_path) for i, v in enumerate(spec.volumes)]
    for at, step in spec.step_entries():
        checks += [((*at, field), text, check) for field, text, check in (
            ("image", step.image, check_image), ("workingDir", step.working_dir, working_dir)) if text]
        for kind, paths in (("parameters", step.declared.parameters), ("artifacts", step.declared.artifacts)):
            checks += [((*at, "outputs", kind, name), path, output_path) for name, path in paths.items()]
    out: list[Problem] = []
    for at, text, check in checks:
        resolved, used = references.with_defaults(text, {**spec.parameters, **values}) if "{{" in text else (text, [])
        if not set(used) & set(values) or "{{" in resolved:  # the rest is decided when the job runs
            continue
        try:
            check(resolved)
        except ValueError as exc:
            named = ", ".join(f"{name}={values[name]!r}" for name in dict.fromkeys(used) if name in values)
            out.append(Problem.at(at, f"with {given}{named}: {exc}"))
    return out


def _metadata_problems(metadata: Metadata) -> list[Problem]:
    out: list[Problem] = []
    if problem := dns_label_problem(metadata.name, "job name"):
        out.append(Problem.at(("metadata", "name"), problem))
    elif len(metadata.name) > 57:
        out.append(Problem.at(("metadata", "name"), "job name is at most 57 characters (Argo appends a suffix)"))
    if metadata.namespace and (problem := dns_label_problem(metadata.namespace, "namespace")):
        out.append(Problem.at(("metadata", "namespace"), problem))
    return out + labels_problems(metadata.labels, ("metadata", "labels"))


def _volume_problems(volumes: list[tuple[int, Volume]]) -> list[Problem]:
    out: list[Problem] = []
    seen_volumes: set[str] = set()
    mounts: set[str] = set()
    for v, volume in volumes:
        at: tuple[PathKey, ...] = ("spec", "volumes", v)
        if problem := dns_label_problem(volume.name, "volume name"):
            out.append(Problem.at((*at, "name"), problem))
        if volume.name in seen_volumes:
            out.append(Problem.at((*at, "name"), f"duplicate volume name {volume.name!r}"))
        if volume.mount_path in mounts:
            out.append(Problem.at((*at, "mountPath"), f"two volumes are mounted at {volume.mount_path}"))
        seen_volumes.add(volume.name)
        mounts.add(volume.mount_path)
    return out


def find_cycle(steps: list[Step]) -> list[str] | None:
    """A cycle among `needs`, as step names, or None. Iterative: a 4,000-step chain must not hit recursion limits."""
    needs = {s.name: s.needs for s in steps}
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    for root in needs:
        if state.get(root):
            continue
        stack: list[tuple[str, int]] = [(root, 0)]
        path: list[str] = [root]
        state[root] = 1
        while stack:
            node, i = stack[-1]
            edges = needs.get(node, [])
            if i < len(edges):
                stack[-1] = (node, i + 1)
                nxt = edges[i]
                if state.get(nxt) == 1:
                    return [*path[path.index(nxt):], nxt]
                if not state.get(nxt) and nxt in needs:
                    state[nxt] = 1
                    stack.append((nxt, 0))
                    path.append(nxt)
            else:
                state[node] = 2
                stack.pop()
                path.pop()
    return None


def job_from_document(doc: Document) -> TrainingJob:
    """A validated job that remembers its document, so later checks (placement) report its lines."""
    if (compiled := _compiled_manifest(doc)) is not None:
        raise InputError([compiled])
    job = parse_model(TrainingJob, doc)
    job._source = doc.file
    job._document = replace(doc, data=None)  # for line lookups only: the model holds the values
    return job


def _compiled_manifest(doc: Document) -> Problem | None:
    """A compiled Argo manifest given where a job spec belongs: one finding saying why it is not taken as it is.
    A job's placement, queue and priority are decided when it is compiled, with the catalog and for the namespace
    it will run in; a manifest compiled elsewhere (workflows/*.yaml: the repository's catalog, no namespace)
    fixed them already, and checking each against what compiling would give is compiling, from its job spec."""
    data = doc.data if isinstance(doc.data, dict) else {}
    kind, api = data.get("kind"), str(data.get("apiVersion") or "")
    if kind not in ARGO_KINDS or not api.startswith(f"{ARGO_KINDS[kind].group}/"):
        return None
    job = ((data.get("metadata") or {}).get("labels") or {}).get(JOB_LABEL)
    made = f" compiled by wf from job {job!r}" if job else ""
    hint = ("; to run a template already in the cluster: wf submit --from workflowtemplate/NAME"
            if kind == WORKFLOW_TEMPLATE.kind else "")
    return doc.problem(("kind",), f"an Argo {kind}{made}, not a job spec (kind: TrainingJob): wf compiles a job "
                                  f"spec with the catalog and for the namespace it runs in, which decide its "
                                  f"placement and queue; pass the job spec it came from{hint}")


def load_job(path: str | Path) -> TrainingJob:
    return job_from_document(load_mapping(path))
