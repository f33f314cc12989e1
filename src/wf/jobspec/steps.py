"""The parts of a job spec: steps, their resources, outputs, fan-out and volumes (pydantic models usable from YAML
and from Python alike). The whole job and its cross-field rules are in `wf.jobspec.job`."""

from __future__ import annotations

import re
from collections.abc import Callable
from decimal import Decimal
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator

from wf.core.constants import DNS1123_SUBDOMAIN, DNS1123_SUBDOMAIN_MAX, INPUTS_ROOT
from wf.core.errors import PathKey, listing
from wf.core.modeling import StrictModel, Text
from wf.core.paths import MountPath, OutputPath, WorkingDir
from wf.core.units import parse_duration, parse_quantity
from wf.jobspec.images import reference_problem

# Counts Kubernetes and Argo hold in 32 bits: a larger one is a typo, refused here rather than by the API server.
COUNT_MAX = 2**31 - 1
# Kubernetes holds quantities as 64-bit integers (of milli-units for cpu).
_QUANTITY_MAX = 2**63 // 1000
# Go's longest time.Duration, in seconds (about 292 years): Argo and Kubernetes parse timeouts into it.
_DURATION_MAX = 2**63 // 10**9


def _checked(pattern: str, what: str) -> Callable[[str], str]:
    """A validator refusing text that `pattern` does not match, saying what the text must be."""
    compiled = re.compile(pattern)

    def check(value: str) -> str:
        if not compiled.match(value):
            raise ValueError(f"{value!r} is not {what}")
        return value
    return check


def _positive_quantity(value: int | float | str) -> int | float | str:
    amount = parse_quantity(value)
    if not amount.is_finite():
        raise ValueError("must be a finite quantity (examples: 8, 500m, 32Gi)")
    if amount <= 0:
        raise ValueError("must be positive")
    if amount > _QUANTITY_MAX:
        raise ValueError("is more than any node holds")
    return value


Quantity = Annotated[int | float | str, AfterValidator(_positive_quantity)]

# The least memory runc starts a container in: CRI-O refuses a smaller limit, a floor "arrived at for runc on x86_64
# hardware" (minMemoryLimit, internal/config/cgmgr/cgmgr_linux.go: "set memory limit N too low; should be at least
# 12582912"); containerd passes any limit on to runc, whose init is then OOM-killed ("container init was OOM-killed
# (memory limit too low?)", libcontainer/process_linux.go). A step's memory is its container's limit.
MEMORY_MIN = 12 * 2**20
# Kubernetes counts cpu in thousandths of a core: less is no cpu to ask for.
CPU_MIN = Decimal("0.001")


def _at_least(least: Decimal, words: str) -> Callable[[int | float | str], int | float | str]:
    def check(value: int | float | str) -> int | float | str:
        if parse_quantity(value) < least:
            raise ValueError(f"must be at least {words}")
        return value
    return check


Memory = Annotated[Quantity, AfterValidator(_at_least(
    Decimal(MEMORY_MIN), "12Mi: container runtimes do not start a container in less (runc's floor, which CRI-O "
    "enforces)"))]
Cpu = Annotated[Quantity, AfterValidator(_at_least(CPU_MIN, "1m, a thousandth of a core: Kubernetes' "
                                                            "smallest cpu amount"))]


def check_image(value: str) -> str:
    if not value.strip():
        raise ValueError("must name a container image, e.g. ghcr.io/team/train:1.0")
    # One with a reference is read when the job runs (wf.jobspec.references checks the reference).
    if "{{" not in value and (problem := reference_problem(value)):
        raise ValueError(f"{value!r}: {problem}")
    return value


Image = Annotated[str, AfterValidator(check_image)]
# Kubernetes' rule for environment variable names (a C identifier, with '-' and '.' allowed).
EnvName = Annotated[str, AfterValidator(_checked(
    r"^[-._a-zA-Z][-._a-zA-Z0-9]*$",
    "an environment variable name (letters, digits, '_', '-' and '.', not starting with a digit)"))]
# Argo's rule for parameter names; a job parameter is also read as {{workflow.parameters.NAME}}.
ParameterName = Annotated[str, AfterValidator(_checked(
    r"^[-a-zA-Z0-9_]+$", "a parameter name (letters, digits, '_' and '-')"))]


def _secret_name(value: str) -> str:
    if len(value) > DNS1123_SUBDOMAIN_MAX or not DNS1123_SUBDOMAIN.match(value):
        raise ValueError(f"{value!r} is not a Secret name (lowercase letters, digits, '-' and '.', at most 253)")
    return value


class SecretRef(StrictModel):
    """An environment value read from a Kubernetes Secret at run time: secrets are referenced, never inlined."""

    secret: Annotated[str, AfterValidator(_secret_name)] = Field(description="Secret name in the workflow's namespace")
    key: Annotated[str, Field(max_length=253), AfterValidator(_checked(
        r"^[-._a-zA-Z0-9]+$", "a Secret key (letters, digits, '_', '-' and '.')"))]


class Resources(StrictModel):
    cpu: Cpu | None = Field(default=None, description="vCPUs, e.g. 8 or 500m")
    memory: Memory | None = Field(default=None, description="e.g. 32Gi; at least 12Mi")
    ephemeral_storage: Quantity | None = Field(default=None, alias="ephemeral-storage")


def _duration(value: str | int) -> str | int:
    try:
        seconds = parse_duration(value)
    except OverflowError:  # more digits than a float holds
        seconds = _DURATION_MAX + 1
    if seconds > _DURATION_MAX:
        raise ValueError("must be at most about 292 years (the longest duration Kubernetes takes)")
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


OutputName = Annotated[str, AfterValidator(_checked(
    r"^[A-Za-z][A-Za-z0-9-]*$", "an output name (letters, digits and '-', starting with a letter)"))]
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
            raise ValueError(f"{listing(both)}: named both a parameter and an artifact; one name, one output")
        return self


NO_OUTPUTS = Outputs()


# Checkpoint locations are relative to the step's own place under the job's run: no absolute path, no '..',
# no scheme, so no attempt can write outside its job's prefix.
CheckpointPath = Annotated[str, AfterValidator(_checked(
    r"^(?!.*(^|/)\.\.?(/|$))[A-Za-z0-9][-._A-Za-z0-9/]*$",
    "a relative path under the job's own checkpoint prefix (letters, digits, '-', '_', '.', '/'; no '..')"))]
ARTIFACT_STORE = "artifacts"  # a checkpoint store naming the catalog's artifact store rather than a shared volume


class Checkpoint(StrictModel):
    """Where a step keeps its checkpoints across attempts: the same place for every attempt of the step, its own
    per fan-out item. The program reads WF_CHECKPOINT_URI (S3) or WF_CHECKPOINT_DIR (a mounted volume),
    WF_RESUME and WF_ATTEMPT, and on Spot saves on SIGTERM within `gracePeriod`."""

    store: str = Field(default=ARTIFACT_STORE, description="`artifacts` (the catalog's artifact store, under the "
                       "run's prefix) or a shared volume the catalog names in artifacts.checkpoints.volumes")
    path: CheckpointPath | None = Field(default=None, description="Sub-path of the step's checkpoint location")
    grace_period: Duration = Field(
        default="90s", alias="gracePeriod",
        description="Time between SIGTERM and SIGKILL to save a checkpoint; on Spot it must fit in the "
                    "two-minute interruption notice")


CacheVersion = Annotated[str, Field(max_length=63), AfterValidator(_checked(
    r"^[A-Za-z0-9][-._A-Za-z0-9]*$", "a cache version (letters, digits, '-', '_' and '.', e.g. v2)"))]


class StepCache(StrictModel):
    """Reuse the step's result from an earlier run whose step had the same image, command, env, inputs, items and
    key: no pod is created and its outputs go to later steps (Argo's memoization, wf.compile.cache)."""

    key: Annotated[str, Field(max_length=1024)] | None = Field(
        default=None, description="What else the result depends on, e.g. \"{{workflow.parameters.snapshot}}\"; "
        "job parameters only (wf.jobspec.references checks it)")
    version: CacheVersion | None = Field(default=None, description="Change it to drop every earlier result")


# `cache: true` is a StepCache without key or version; `cache: false` on a step turns the job's cache off.
Cache = Annotated[bool | StepCache, Field(union_mode="left_to_right")]


class Step(StrictModel):
    name: str
    command: list[Text] = Field(min_length=1, description="argv list; never a shell string")
    image: Image | None = Field(default=None, description="Overrides the job's image")
    needs: list[str] = Field(default_factory=list, description="Steps that must succeed first (DAG edges)")
    compute: str | None = Field(default=None, description="Compute class; default: the job's")
    capacity: Literal["spot", "on-demand"] | None = None
    accelerators: int = Field(default=0, ge=0, le=COUNT_MAX, description="Devices of the class's accelerator")
    nodes: int | None = Field(default=None, ge=1, le=COUNT_MAX,
                              description="Multi-node (MPI) step: workers, one whole node each")
    processes_per_node: int | None = Field(
        default=None, ge=1, le=COUNT_MAX, alias="processesPerNode",
        description="MPI slots per worker; default: its accelerators")
    resources: Resources = Field(default_factory=Resources)
    timeout: Duration | None = Field(default=None, description="Includes time spent waiting to be scheduled, "
                                     "except in a team's queue: there it counts from the pod's start")
    retries: int | None = Field(default=None, ge=0, le=50, description="Application retries; default: the job's")
    env: dict[EnvName, Text | SecretRef] = Field(default_factory=dict)
    working_dir: WorkingDir | None = Field(default=None, alias="workingDir")
    labels: dict[str, Text] = Field(default_factory=dict)
    annotations: dict[str, Text] = Field(default_factory=dict)
    for_each: list[Item] | Count | str | None = Field(
        default=None, alias="forEach",
        description="Run once per item: a list, {count: N}, or a reference to a JSON list "
        "({{workflow.parameters.NAME}} or {{steps.STEP.outputs.NAME}}); the step reads {{item}} / {{item.FIELD}}")
    parallelism: int | None = Field(default=None, ge=1, le=COUNT_MAX, description="At most this many items at once")
    when: str | None = Field(
        default=None, description="Run only if this holds, e.g. \"{{steps.eval.outputs.accuracy}} > 0.9\"; "
        "otherwise the step is skipped and its dependents still run")
    outputs: Outputs | None = None
    checkpoint: Checkpoint | None = Field(default=None, description="Keep checkpoints across attempts; "
                                          "default: the job's")
    cache: Cache | None = Field(default=None, description="Reuse the result of an earlier run with the same "
                                "inputs (true, or {key, version}; false: not even the job's); default: the job's")

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
    mount_path: MountPath = Field(alias="mountPath")
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
    labels: dict[str, Text] = Field(default_factory=dict)


class JobSpec(StrictModel):
    image: Image
    compute: str | None = Field(
        default=None, description="Default compute class of the steps; default: the catalog's defaultClass")
    capacity: Literal["spot", "on-demand"] | None = Field(default=None, description="Default: the class's default")
    retries: int = Field(default=0, ge=0, le=50, description="Application retries per step")
    timeout: Duration | None = Field(default=None, description="Whole job")
    env: dict[EnvName, Text | SecretRef] = Field(default_factory=dict)
    parameters: dict[ParameterName, Text] = Field(default_factory=dict)
    schedule: CronSchedule | None = Field(default=None, description="Cron schedule: compile to a CronWorkflow")
    service_account: str | None = Field(default=None, alias="serviceAccount")
    volumes: list[Volume] = Field(default_factory=list, description="Mounted into every step")
    parallelism: int | None = Field(default=None, ge=1, le=COUNT_MAX,
                                    description="At most this many pods of the job at once")
    team: str | None = Field(default=None, description="Team whose quota the steps use; default: the namespace's")
    priority: str | None = Field(default=None, description="A priority of the catalog's queues, e.g. high")
    steps: list[Step] = Field(min_length=1)
    checkpoint: Checkpoint | None = Field(default=None, description="Checkpoints of every step (a step's own "
                                          "`checkpoint` replaces it)")
    cache: Cache | None = Field(default=None, description="Cache every step's result (a step's own `cache` "
                                "replaces it)")
    on_exit: list[Step] = Field(
        default_factory=list, alias="onExit",
        description="Steps run after the job whatever its outcome ({{workflow.status}}: Succeeded, Failed, Error)")

    def step_entries(self) -> list[tuple[tuple[PathKey, ...], Step]]:
        """(document path, step) of every step, the exit handler's included."""
        entries: list[tuple[tuple[PathKey, ...], Step]] = [(("spec", "steps", i), s) for i, s in enumerate(self.steps)]
        return entries + [(("spec", "onExit", i), s) for i, s in enumerate(self.on_exit)]
