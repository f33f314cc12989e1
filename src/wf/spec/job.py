"""The developer's job spec (`kind: TrainingJob`): pydantic models usable from YAML and from Python alike."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Literal, TypeVar

from pydantic import (
    AfterValidator,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from wf.spec import references
from wf.core.errors import PathKey, Problem, format_path
from wf.core.loader import Document, load_mapping
from wf.core.modeling import DEFER_CHECKS, StrictModel, Text, dns_label_problem, labels_problems, parse_model, raise_problems
from wf.spec.references import INPUTS_ROOT
from wf.core.units import parse_duration, parse_quantity

Quantity = int | float | str
M = TypeVar("M", bound=StrictModel)


class SecretRef(StrictModel):
    """An environment value read from a Kubernetes Secret at run time: secrets are referenced, never inlined."""

    secret: str = Field(description="Secret name in the workflow's namespace")
    key: str


class Resources(StrictModel):
    cpu: Quantity | None = Field(default=None, description="vCPUs, e.g. 8 or 500m")
    memory: Quantity | None = Field(default=None, description="e.g. 32Gi")
    ephemeral_storage: Quantity | None = Field(default=None, alias="ephemeral-storage")

    @field_validator("cpu", "memory", "ephemeral_storage")
    @classmethod
    def _quantity(cls, value: Quantity | None) -> Quantity | None:
        if value is not None and parse_quantity(value) <= 0:
            raise ValueError("must be positive")
        return value


def _duration(value: str | int) -> str | int:
    parse_duration(value)
    return value


Duration = Annotated[str | int, AfterValidator(_duration)]

_CRON_FIELD = re.compile(r"^[0-9A-Za-z*?/,\-LW#]+$")
_CRON_MACROS = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")


def _cron(value: str) -> str:
    """Five cron fields or a macro, as Argo's CronWorkflow (robfig/cron) takes them; checked here so a typo is
    an error with its line, not a CronWorkflow the controller refuses later."""
    text = value.strip()
    if text in _CRON_MACROS or text.startswith("@every "):
        return text
    fields = text.split()
    if len(fields) != 5 or not all(_CRON_FIELD.match(f) for f in fields):
        raise ValueError(f"{value!r} is not a cron schedule: five fields (minute hour day month weekday), "
                         "e.g. '0 2 * * *', or @daily / @hourly")
    return text


CronSchedule = Annotated[str, AfterValidator(_cron)]


_OUTPUT_NAME = r"^[A-Za-z][A-Za-z0-9-]*$"
OutputName = Annotated[str, Field(pattern=_OUTPUT_NAME)]
# Absolute, or under a directory a job parameter names.
OutputPath = Annotated[str, Field(pattern=r"^(/|\{\{workflow\.parameters\.)")]
# A literal forEach item: a value, or an object whose fields the step reads as {{item.FIELD}}.
Item = Annotated[Text | dict[str, Text], Field(union_mode="left_to_right")]


class Count(StrictModel):
    """Run the step `count` times; {{item}} is 0, 1, ... count-1."""

    count: int = Field(ge=1, le=10_000)


class Outputs(StrictModel):
    """What a step hands to later steps, each read as {{steps.STEP.outputs.NAME}}."""

    parameters: dict[OutputName, OutputPath] = Field(
        default_factory=dict, description="Small values: NAME -> file the step writes; readers get its content")
    artifacts: dict[OutputName, OutputPath] = Field(
        default_factory=dict, description="Files or folders: NAME -> path; stored in the catalog's artifact store, "
        f"readers get a local path ({INPUTS_ROOT}/STEP/NAME)")

    @model_validator(mode="after")
    def _distinct(self) -> Outputs:
        if both := sorted(set(self.parameters) & set(self.artifacts)):
            raise ValueError(f"{both} named both a parameter and an artifact: one name, one output")
        return self


NO_OUTPUTS = Outputs()


class Step(StrictModel):
    name: str
    command: list[Text] = Field(min_length=1, description="argv list; never a shell string")
    image: str | None = Field(default=None, description="Overrides the job's image")
    needs: list[str] = Field(default_factory=list, description="Steps that must succeed first (DAG edges)")
    compute: str | None = Field(default=None, description="Compute class; default: the job's")
    capacity: Literal["spot", "on-demand"] | None = None
    accelerators: int = Field(default=0, ge=0, description="Devices of the class's accelerator")
    nodes: int | None = Field(default=None, ge=1, description="Multi-node (MPI) step: workers, one whole node each")
    processes_per_node: int | None = Field(
        default=None, ge=1, alias="processesPerNode", description="MPI slots per worker; default: its accelerators"
    )
    resources: Resources = Field(default_factory=Resources)
    timeout: Duration | None = Field(default=None, description="Includes time spent waiting to be scheduled, "
                                     "except in a team's queue: there it counts from the pod's start")
    retries: int | None = Field(default=None, ge=0, le=50, description="Application retries; default: the job's")
    env: dict[str, Text | SecretRef] = Field(default_factory=dict)
    working_dir: str | None = Field(default=None, alias="workingDir")
    labels: dict[str, Text] = Field(default_factory=dict)
    annotations: dict[str, Text] = Field(default_factory=dict)
    for_each: list[Item] | Count | str | None = Field(
        default=None, alias="forEach",
        description="Run once per item: a list, {count: N}, or a reference to a JSON list "
        "({{workflow.parameters.NAME}} or {{steps.STEP.outputs.NAME}}); the step reads {{item}} / {{item.FIELD}}")
    parallelism: int | None = Field(default=None, ge=1, description="At most this many items at once")
    when: str | None = Field(
        default=None, description="Run only if this holds, e.g. \"{{steps.eval.outputs.accuracy}} > 0.9\"; "
        "otherwise the step is skipped and its dependents still run")
    outputs: Outputs | None = None

    @property
    def declared(self) -> Outputs:
        """The step's outputs (none declared: empty), so readers need no None check."""
        return self.outputs or NO_OUTPUTS

    @field_validator("command", mode="before")
    @classmethod
    def _argv(cls, value: object) -> object:
        if isinstance(value, str):
            raise ValueError("command is an argv list, e.g. [python, train.py, --epochs, '40'], not a shell string")
        return value


class EmptyDir(StrictModel):
    medium: Literal["", "Memory"] = Field(default="", description="Memory: a tmpfs, e.g. /dev/shm for data loaders")
    size_limit: Quantity | None = Field(default=None, alias="sizeLimit")


class Volume(StrictModel):
    """Storage mounted into every step: a PersistentVolumeClaim (shared datasets, checkpoints) or scratch space."""

    name: str
    mount_path: str = Field(alias="mountPath", pattern=r"^/")
    claim: str | None = Field(default=None, description="PersistentVolumeClaim in the job's namespace")
    empty_dir: EmptyDir | None = Field(default=None, alias="emptyDir")
    read_only: bool = Field(default=False, alias="readOnly")

    @model_validator(mode="after")
    def _one_source(self) -> Volume:
        if (self.claim is None) == (self.empty_dir is None):
            raise ValueError("give exactly one of claim (a PersistentVolumeClaim) or emptyDir")
        return self


class Metadata(StrictModel):
    name: str
    namespace: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)


class JobSpec(StrictModel):
    image: str
    compute: str | None = Field(
        default=None, description="Default compute class of the steps; default: the catalog's defaultClass")
    capacity: Literal["spot", "on-demand"] | None = Field(default=None, description="Default: the class's default")
    retries: int = Field(default=0, ge=0, le=50, description="Application retries per step")
    timeout: Duration | None = Field(default=None, description="Whole job")
    env: dict[str, Text | SecretRef] = Field(default_factory=dict)
    parameters: dict[str, Text] = Field(default_factory=dict)
    schedule: CronSchedule | None = Field(default=None, description="Cron schedule: compile to a CronWorkflow")
    service_account: str | None = Field(default=None, alias="serviceAccount")
    volumes: list[Volume] = Field(default_factory=list, description="Mounted into every step")
    parallelism: int | None = Field(default=None, ge=1, description="At most this many pods of the job at once")
    team: str | None = Field(default=None, description="Team whose quota the steps use; default: the namespace's")
    priority: str | None = Field(default=None, description="A priority of the catalog's queues, e.g. high")
    steps: list[Step] = Field(min_length=1)
    on_exit: list[Step] = Field(
        default_factory=list, alias="onExit",
        description="Steps run after the job whatever its outcome ({{workflow.status}}: Succeeded, Failed, Error)")

    def step_entries(self) -> list[tuple[tuple[PathKey, ...], Step]]:
        """(document path, step) of every step, the exit handler's included."""
        entries: list[tuple[tuple[PathKey, ...], Step]] = [(("spec", "steps", i), s) for i, s in enumerate(self.steps)]
        return entries + [(("spec", "onExit", i), s) for i, s in enumerate(self.on_exit)]


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
                        out.append(Problem.at(("spec", section, i, "needs", j),
                                    f"unknown step {need!r}; {section}: {sorted(names)}"))
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
        return out or references.problems(self.spec)


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
    job = parse_model(TrainingJob, doc)
    job._source = doc.file
    job._document = replace(doc, data=None)  # for line lookups only: the model holds the values
    return job


def load_job(path: str | Path) -> TrainingJob:
    return job_from_document(load_mapping(path))
