"""The protocol every kind of step implements, as Kueue's job integrations implement one interface: how a step of
the kind is placed and rendered, what Kueue admits for it, how `wf get` reads it back and what to delete when its
workflow is stopped."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Protocol

from wf.compile.placement import Placement
from wf.compile.queueing import QueueAssignment
from wf.compile.readback import CompiledPlacement
from wf.core.constants import ApiKind
from wf.core.errors import Problem
from wf.jobspec.job import TrainingJob
from wf.jobspec.steps import Step
from wf.model.catalog import Catalog

# The compiler's pod template of a step for a placement: container, inputs, outputs, labels, retry strategy.
PodRenderer = Callable[[Placement], dict[str, Any]]


@dataclass(frozen=True)
class Demand:
    """What one admission of a queued template asks of one compute class: Kueue admits all of it or none."""

    compute_class: str
    capacities: tuple[str, ...]  # the capacities its attempts may run on; empty: the class's default
    requests: dict[str, Decimal]


@dataclass(frozen=True)
class Cleanup:
    """Objects a stopped workflow's steps leave running, as data (the pure layers import no client): the
    controller deletes every object of `kind` that `label_selector` matches in the workflow's namespace."""

    kind: ApiKind
    label_selector: str


class StepKind(Protocol):
    def matches(self, step: Step) -> bool:
        """Whether `step` (from a job spec) is of this kind."""
        ...

    def matches_template(self, template: dict[str, Any]) -> bool:
        """Whether a compiled (or hand-written) Argo template runs a step of this kind."""
        ...

    def place(self, job: TrainingJob, index: int, catalog: Catalog, section: str
              ) -> tuple[Placement | None, list[Problem]]:
        """The placement of spec[section][index] (its pods'), or the problems in the developer's terms."""
        ...

    def render(self, job: TrainingJob, step: Step, catalog: Catalog, placement: Placement, pod: PodRenderer,
               volumes: list[dict[str, Any]], queue: QueueAssignment | None) -> dict[str, Any]:
        """The Argo template running `step`, from its placement and the compiler's pod template."""
        ...

    def demand(self, template: dict[str, Any]) -> list[Demand]:
        """What Kueue admits at once for one attempt of a queued template (none when it does not queue)."""
        ...

    def read_back(self, template: dict[str, Any]) -> CompiledPlacement:
        """Where the template's step runs, as `wf get` shows it."""
        ...

    def cleanup(self, workflow: str) -> list[Cleanup]:
        """What stopping the workflow named `workflow` must delete beyond Argo's own pods."""
        ...
