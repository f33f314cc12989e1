"""References in a job spec (`{{item}}`, `{{steps.S.outputs.O}}`, `{{workflow.parameters.P}}`), found and
resolved offline, so an unknown step, output or parameter, or a step that does not precede its reader, is an
error with its file, line and field before anything reaches a cluster.

A reference is written one way everywhere (command, env, `when`, `forEach`). The compiler turns each into what
Argo resolves at that place: a step's input parameter (or, for an artifact, the path it is downloaded to).

Argo reads `{{` as the start of a tag in every field it templates, so every such field is checked here: a `{{`
without its `}}`, braces nested in braces, and any name Argo would not resolve are errors at their field.

A literal `{{` is written `{{='{{'}}`, Argo's expression tag for the text `{{` (Argo's docs, Workflow Variables:
expression tags), in the fields that reach the step's pod: command, env, workingDir, image and annotations.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from wf.core.constants import INPUTS_ROOT
from wf.core.errors import PathKey, Problem, did_you_mean, listing

if TYPE_CHECKING:
    from wf.jobspec.steps import JobSpec, Step

PATTERN = re.compile(r"\{\{\s*([^{}]*?)\s*\}\}")
_STEP_OUTPUT = re.compile(r"^steps\.([^.]+)\.outputs\.([^.]+)$")
_ITEM = re.compile(r"^item(?:\.([A-Za-z0-9_-]+))?$")
_PARAMETER = re.compile(r"^workflow\.parameters\.(.+)$")
# Argo's own variables that need no declaration: the workflow's identity and result (exit handlers read
# `workflow.status` and `workflow.failures`), and the pod's name (Argo's docs/variables.md, global variables).
ARGO_GLOBALS = ("workflow.name", "workflow.namespace", "workflow.uid", "workflow.mainEntrypoint",
                "workflow.serviceAccountName", "workflow.status", "workflow.failures", "workflow.duration",
                "workflow.priority", "workflow.scheduledTime", "workflow.creationTimestamp", "pod.name")
_ARGO_GLOBALS = re.compile(
    "^(" + "|".join(re.escape(name) for name in ARGO_GLOBALS) + r"|workflow\.creationTimestamp\.[A-Za-z0-9]+"
    r"|workflow\.(labels|annotations)\.(json|.+)|workflow\.outputs\.(parameters|artifacts)\.[^.]+)$")
FORMS = ("{{item}}, {{item.FIELD}}, {{steps.STEP.outputs.NAME}}, {{workflow.parameters.NAME}} or {{workflow.status}}"
         "; a literal '{{' is written {{='{{'}}")
LITERAL_BRACES = "{{='{{'}}"
# The fields of a step whose text reaches its pod, where the compiler can hand Argo a literal `{{`.
LITERAL_FIELDS = ("command", "env", "workingDir", "image", "annotations")
# Where a fanned-in artifact is unpacked in the reading step's container.

Kind = Literal["item", "output", "parameter", "global"]


@dataclass(frozen=True)
class Reference:
    text: str  # as written, braces included
    kind: Kind
    step: str = ""  # output: the producing step
    name: str = ""  # output: its name; parameter: the parameter; item: the field ("" for the whole item)

    @property
    def input_name(self) -> str:
        """The reading template's input for this reference. Step names have no '_', output names do not start
        with one and item inputs start with 'item', so the names cannot collide."""
        if self.kind == "item":
            return f"item__{self.name}" if self.name else "item"
        return f"{self.step}_{self.name}"

    @property
    def artifact_path(self) -> str:
        return f"{INPUTS_ROOT}/{self.step}/{self.name}"


def parse(expression: str) -> Reference | None:
    """The reference inside one pair of braces, or None when it is no form wf knows."""
    body = PATTERN.fullmatch(expression)
    inner = body.group(1) if body else expression
    text = "{{" + inner + "}}"
    if m := _ITEM.match(inner):
        return Reference(text, "item", name=m.group(1) or "")
    if m := _STEP_OUTPUT.match(inner):
        return Reference(text, "output", step=m.group(1), name=m.group(2))
    if m := _PARAMETER.match(inner):
        return Reference(text, "parameter", name=m.group(1))
    if _ARGO_GLOBALS.match(inner):
        return Reference(text, "global")
    return None


def sites(step: Step) -> Iterator[tuple[tuple[PathKey, ...], str]]:
    """(path within the step, text) of every place of a step that holds references: every field Argo templates."""
    for i, arg in enumerate(step.command):
        if "{{" in arg:
            yield ("command", i), arg
    for key, value in step.env.items():
        if isinstance(value, str) and "{{" in value:
            yield ("env", key), value
    for field, text in (("workingDir", step.working_dir), ("image", step.image)):
        if text and "{{" in text:
            yield (field,), text
    for key, value in step.annotations.items():
        if "{{" in value:
            yield ("annotations", key), value
    if isinstance(step.for_each, list):
        for i, item in enumerate(step.for_each):
            fields: list[tuple[tuple[PathKey, ...], str]] = (
                [((key,), text) for key, text in item.items()] if isinstance(item, dict) else [((), item)])
            for below, text in fields:
                if "{{" in text:
                    yield ("forEach", i, *below), text
    if step.when is not None:
        yield ("when",), step.when
    if isinstance(step.for_each, str):
        yield ("forEach",), step.for_each
    if step.outputs is not None:
        for kind, declared in (("parameters", step.outputs.parameters), ("artifacts", step.outputs.artifacts)):
            for name, path in declared.items():
                yield ("outputs", kind, name), path


def references_in(text: str) -> Iterator[tuple[str, Reference | None]]:
    for m in PATTERN.finditer(text):
        yield m.group(0), parse(m.group(0))


def with_defaults(text: str, parameters: dict[str, str]) -> tuple[str, list[str]]:
    """`text` with its job parameter references replaced by their defaults, and the parameters so replaced."""
    used: list[str] = []

    def default(m: re.Match[str]) -> str:
        ref = parse(m.group(0))
        if ref is None or ref.kind != "parameter" or ref.name not in parameters:
            return m.group(0)
        used.append(ref.name)
        return parameters[ref.name]
    return PATTERN.sub(default, text), used


def step_inputs(step: Step) -> list[Reference]:
    """The references the step's container reads (item fields and other steps' outputs), once each, in order:
    what its pod template takes as inputs."""
    found: dict[str, Reference] = {}
    for where, text in sites(step):
        if where[0] in ("command", "env"):
            for _, ref in references_in(text):
                if ref is not None and ref.kind in ("item", "output"):
                    found.setdefault(ref.input_name, ref)
    return list(found.values())


class _Dag:
    """Which steps precede which, through `needs`; asked only for steps that read outputs, each walk linear."""

    def __init__(self, steps: Sequence[Step]) -> None:
        self.needs = {s.name: s.needs for s in steps}
        self._ancestors: dict[str, set[str]] = {}

    def precedes(self, earlier: str, later: str) -> bool:
        if later not in self._ancestors:
            seen: set[str] = set()
            stack = list(self.needs.get(later, []))
            while stack:
                name = stack.pop()
                if name not in seen:
                    seen.add(name)
                    stack.extend(self.needs.get(name, []))
            self._ancestors[later] = seen
        return earlier in self._ancestors[later]


def _job_sites(spec: JobSpec) -> Iterator[tuple[tuple[PathKey, ...], str]]:
    """(path, text) of the job-level fields Argo templates: they may hold workflow references only."""
    for key, value in spec.env.items():
        if isinstance(value, str):
            yield ("spec", "env", key), value
    for name, value in spec.parameters.items():
        yield ("spec", "parameters", name), value
    for i, volume in enumerate(spec.volumes):
        yield ("spec", "volumes", i, "mountPath"), volume.mount_path
        if volume.claim is not None:
            yield ("spec", "volumes", i, "claim"), volume.claim
    if spec.service_account is not None:
        yield ("spec", "serviceAccount"), spec.service_account


def _unclosed(text: str) -> str | None:
    """Argo takes each `{{` to the next `}}` as one tag: one left over after the references is unclosed, or
    nested in another pair of braces (`{{ {{item}} }}`)."""
    if "{{" in PATTERN.sub("", text):
        return f"'{{{{' without its '}}}}', or braces inside braces: write references as {FORMS}"
    return None


def problems(spec: JobSpec) -> list[Problem]:
    """Every reference of the job that does not resolve, at the field that holds it."""
    out: list[Problem] = []
    for at, text in _job_sites(spec):
        if "{{" not in text:
            continue
        text, literal = _literals(text, at[1] == "env", at)
        out += literal
        if message := _unclosed(text):
            out.append(Problem.at(at, message))
        for written, ref in references_in(text):
            if ref is None:
                out.append(Problem.at(at, _unknown(written)))
            elif ref.kind in ("item", "output"):
                out.append(Problem.at(at, f"{written}: job-level {at[1]} may use only workflow references"))
            elif ref.kind == "parameter" and ref.name not in spec.parameters:
                out.append(Problem.at(at, _unknown_parameter(ref, spec)))
    for section, steps in (("steps", spec.steps), ("onExit", spec.on_exit)):
        dag = _Dag(steps)
        by_name = {s.name: s for s in steps}
        for i, step in enumerate(steps):
            for where, text in sites(step):
                at = ("spec", section, i, *where)
                text, literal = _literals(text, where[0] in LITERAL_FIELDS, at)
                out += literal
                if message := _unclosed(text):
                    out.append(Problem.at(at, message))
                # A literal item is handed to Argo as it is: only workflow references resolve there.
                field = "forEach items" if where[0] == "forEach" and len(where) > 1 else where[0]
                for written, ref in references_in(text):
                    if message := _problem(written, ref, step, field, spec, section, by_name, dag):
                        out.append(Problem.at(at, message))
            if isinstance(step.for_each, str):
                out += _for_each_problems(step, ("spec", section, i, "forEach"))
    return out + _cache_key_problems(spec)


# A cache key is part of what identifies a step's result across runs (wf.compile.cache), so it may read job
# parameters only: the step's image, command, env, items and the outputs it reads are in the key already. What
# differs per run is refused by name: with it in the key, no later run would ever find an earlier run's result.
_RUN_DEPENDENT = re.compile(
    r"(?<![\w.])(workflow\.(name|uid|creationTimestamp|duration|scheduledTime|status|failures|labels|annotations)"
    r"\b|retries\b|lastRetry\b|pod\.name\b|node\.name\b)"
    r"|\b(now|date|unixEpoch|dateInZone|dateModify|ago)\s*\(")


def _cache_key_problems(spec: JobSpec) -> list[Problem]:
    """Every cache key's references that are not the job's parameters, at the key."""
    keys: list[tuple[tuple[PathKey, ...], str | None]] = [(("spec", "cache", "key"), getattr(spec.cache, "key", None))]
    keys += [(("spec", section, i, "cache", "key"), getattr(step.cache, "key", None))
             for section, steps in (("steps", spec.steps), ("onExit", spec.on_exit)) for i, step in enumerate(steps)]
    out: list[Problem] = []
    for at, key in keys:
        if not key:
            continue
        if message := _unclosed(key):
            out.append(Problem.at(at, message))
        for written, ref in references_in(key):
            if ref is not None and ref.kind == "parameter":
                if ref.name not in spec.parameters:
                    out.append(Problem.at(at, _unknown_parameter(ref, spec)))
            elif _RUN_DEPENDENT.search(written[2:-2]):
                out.append(Problem.at(at, f"{written} depends on the run (its name, uid, creation time, attempt, "
                                          "pod or the clock): no later run would find this one's result; a cache "
                                          "key may read job parameters only ({{workflow.parameters.NAME}})"))
            else:
                out.append(Problem.at(at, f"{written}: a cache key may read job parameters only "
                                          "({{workflow.parameters.NAME}}); the step's image, command, env, items "
                                          "and the outputs it reads are in the key already"))
    return out


def _literals(text: str, allowed: bool, at: tuple[PathKey, ...]) -> tuple[str, list[Problem]]:
    """`text` without its literal braces (checked as text, not as references), and the problem when its field
    cannot hold them."""
    if LITERAL_BRACES not in text:
        return text, []
    found = [] if allowed else [Problem.at(at, f"a literal '{{{{' ({LITERAL_BRACES}) can be written in "
                                               f"{', '.join(LITERAL_FIELDS)} only")]
    return text.replace(LITERAL_BRACES, ""), found


def _for_each_problems(step: Step, at: tuple[PathKey, ...]) -> list[Problem]:
    source = step.for_each
    assert isinstance(source, str)
    ref = parse(source.strip())
    if not PATTERN.fullmatch(source.strip()) or ref is None or ref.kind not in ("parameter", "output"):
        return [Problem.at(at, "forEach takes a list, {count: N}, or one reference to a JSON list: "
                               "{{workflow.parameters.NAME}} or {{steps.STEP.outputs.NAME}}")]
    return []


def _problem(written: str, ref: Reference | None, step: Step, field: PathKey, spec: JobSpec, section: str,
             by_name: dict[str, Step], dag: _Dag) -> str | None:
    if ref is None:
        return _unknown(written)
    if ref.kind == "parameter":
        return _unknown_parameter(ref, spec) if ref.name not in spec.parameters else None
    if field in ("outputs", "workingDir", "image", "annotations", "forEach items") and ref.kind != "global":
        return f"{ref.text}: {field} may use only workflow references (items and outputs: command and env)"
    if ref.kind == "item":
        return _item_problem(ref, step, field)
    if ref.kind != "output":
        return None
    producer = by_name.get(ref.step)
    if producer is None:
        if section == "onExit" and any(s.name == ref.step for s in spec.steps):
            return (f"{ref.text}: exit handlers run after the job and cannot read its steps' outputs; "
                    "write results where the handler can read them (a job parameter names the place)")
        return (f"{ref.text}: unknown step {ref.step!r}{did_you_mean(ref.step, by_name)}; "
                f"{section}: {listing(sorted(by_name))}")
    outputs = producer.declared
    if ref.name not in outputs.parameters and ref.name not in outputs.artifacts:
        declared = sorted([*outputs.parameters, *outputs.artifacts])
        return (f"{ref.text}: step {ref.step!r} has no output {ref.name!r}{did_you_mean(ref.name, declared)}; "
                f"its outputs: {listing(declared)}")
    if not dag.precedes(ref.step, step.name):
        return (f"{ref.text}: step {ref.step!r} does not precede {step.name!r}; "
                f"add it to needs (directly or through a step that needs it)")
    if producer.for_each is not None:
        return f"{ref.text}: step {ref.step!r} runs once per item; its outputs cannot be read by other steps"
    if ref.name in outputs.artifacts and field in ("when", "forEach"):
        return f"{ref.text} is an artifact (a file or folder); {field} reads parameters only"
    return None


def _item_problem(ref: Reference, step: Step, field: PathKey) -> str | None:
    items = step.for_each
    if items is None:
        return f"{ref.text}: step {step.name!r} has no forEach, so there is no item"
    if field in ("forEach", "when"):
        return f"{ref.text}: items are read in command and env; {field} cannot refer to them"
    if not ref.name:
        return None
    if isinstance(items, list):
        missing = [i for i, item in enumerate(items) if not isinstance(item, dict) or ref.name not in item]
        if missing:
            return f"{ref.text}: forEach item {missing[0]} has no field {ref.name!r}"
    elif not isinstance(items, str):
        return f"{ref.text}: forEach count items are numbers, without fields"
    return None


def _unknown(written: str) -> str:
    inner = written[2:-2].strip()
    hint = did_you_mean(inner, ARGO_GLOBALS, shared=inner.partition(".")[0] + ".")
    return f"unknown reference {written}{hint}; use {FORMS}"


def _unknown_parameter(ref: Reference, spec: JobSpec) -> str:
    return (f"{ref.text}: unknown parameter {ref.name!r}{did_you_mean(ref.name, spec.parameters)}; "
            f"spec.parameters has: {listing(sorted(spec.parameters))}")
