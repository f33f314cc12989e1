"""The parts of a job spec: steps, their resources, outputs, fan-out and volumes (pydantic models usable from YAML
and from Python alike). The whole job and its cross-field rules are in `wf.spec.job`."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator

from wf.core.constants import INPUTS_ROOT
from wf.core.errors import PathKey
from wf.core.modeling import StrictModel, Text
from wf.core.units import parse_duration, parse_quantity

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
