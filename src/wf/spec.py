"""The developer's job spec (`kind: TrainingJob`): pydantic models usable from YAML and from Python alike."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, PrivateAttr, ValidationInfo, field_validator, model_validator

from wf.loader import Document, PathKey, load_mapping
from wf.modeling import DEFER_CHECKS, StrictModel, Text, dns_label_problem, labels_problems, parse_model, raise_problems
from wf.units import parse_duration, parse_quantity

ProblemList = list[tuple[tuple[PathKey, ...], str]]
Quantity = int | float | str


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
    timeout: Duration | None = Field(default=None, description="Includes time spent waiting to be scheduled")
    retries: int | None = Field(default=None, ge=0, le=50, description="Application retries; default: the job's")
    env: dict[str, Text | SecretRef] = Field(default_factory=dict)
    working_dir: str | None = Field(default=None, alias="workingDir")
    labels: dict[str, Text] = Field(default_factory=dict)
    annotations: dict[str, Text] = Field(default_factory=dict)

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
    compute: str = Field(description="Default compute class of the steps (a name from the catalog)")
    capacity: Literal["spot", "on-demand"] | None = Field(default=None, description="Default: the class's default")
    retries: int = Field(default=0, ge=0, le=50, description="Application retries per step")
    timeout: Duration | None = Field(default=None, description="Whole job")
    env: dict[str, Text | SecretRef] = Field(default_factory=dict)
    parameters: dict[str, Text] = Field(default_factory=dict)
    schedule: CronSchedule | None = Field(default=None, description="Cron schedule: compile to a CronWorkflow")
    service_account: str | None = Field(default=None, alias="serviceAccount")
    volumes: list[Volume] = Field(default_factory=list, description="Mounted into every step")
    steps: list[Step] = Field(min_length=1)


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

    def problems(self) -> ProblemList:
        """Rules the types can't express: names, labels, DAG edges and cycles."""
        out: ProblemList = []
        if problem := dns_label_problem(self.metadata.name, "job name"):
            out.append((("metadata", "name"), problem))
        elif len(self.metadata.name) > 57:
            out.append((("metadata", "name"), "job name is at most 57 characters (Argo appends a suffix)"))
        if self.metadata.namespace and (problem := dns_label_problem(self.metadata.namespace, "namespace")):
            out.append((("metadata", "namespace"), problem))
        out += labels_problems(self.metadata.labels, ("metadata", "labels"))
        index: dict[str, int] = {}
        for i, step in enumerate(self.spec.steps):
            at = ("spec", "steps", i)
            if problem := dns_label_problem(step.name, "step name"):
                out.append(((*at, "name"), problem))
            if step.name in index:
                out.append(((*at, "name"), f"duplicate step name {step.name!r} (first at steps[{index[step.name]}])"))
            index.setdefault(step.name, i)
            out += labels_problems(step.labels, (*at, "labels"))
        seen_volumes: set[str] = set()
        mounts: set[str] = set()
        for v, volume in enumerate(self.spec.volumes):
            at = ("spec", "volumes", v)
            if problem := dns_label_problem(volume.name, "volume name"):
                out.append(((*at, "name"), problem))
            if volume.name in seen_volumes:
                out.append(((*at, "name"), f"duplicate volume name {volume.name!r}"))
            if volume.mount_path in mounts:
                out.append(((*at, "mountPath"), f"two volumes are mounted at {volume.mount_path}"))
            seen_volumes.add(volume.name)
            mounts.add(volume.mount_path)
        for i, step in enumerate(self.spec.steps):
            for j, need in enumerate(step.needs):
                if need not in index:
                    out.append((("spec", "steps", i, "needs", j), f"unknown step {need!r}; steps: {sorted(index)}"))
                elif need == step.name:
                    out.append((("spec", "steps", i, "needs", j), "a step cannot need itself"))
        if not out and (cycle := find_cycle(self.spec.steps)):
            first = index[cycle[0]]
            out.append((("spec", "steps", first, "needs"), f"steps form a cycle: {' -> '.join(cycle)}"))
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
    job._document = doc
    return job


def load_job(path: str | Path) -> TrainingJob:
    return job_from_document(load_mapping(path))
