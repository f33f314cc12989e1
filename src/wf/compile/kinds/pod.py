"""A pod step: one Argo pod template per attempt, placed on the step's class (wf.compile.placement); the kind of
every step that is no other kind's."""

from __future__ import annotations

from typing import Any

from wf.compile.kinds.base import Cleanup, Demand, PodRenderer
from wf.compile.placement import Placement, place_step
from wf.compile.queueing import QueueAssignment
from wf.compile.readback import CompiledPlacement, read_placement
from wf.compile.schedulability import template_requests
from wf.core.errors import PathKey, Problem
from wf.jobspec.job import TrainingJob
from wf.jobspec.steps import Step
from wf.model.catalog import Catalog


class PodStep:
    def matches(self, step: Step) -> bool:
        return True

    def matches_template(self, template: dict[str, Any]) -> bool:
        return True

    def place(self, job: TrainingJob, index: int, catalog: Catalog, section: str
              ) -> tuple[Placement | None, list[Problem]]:
        placement, problems = place_step(job, index, catalog, section)
        step = (job.spec.on_exit if section == "onExit" else job.spec.steps)[index]
        if step.processes_per_node is not None:
            at: tuple[PathKey, ...] = ("spec", section, index, "processesPerNode")
            problems = [*problems, Problem.at(at, "processesPerNode needs nodes (a multi-node step)")]
        return placement, problems

    def render(self, job: TrainingJob, step: Step, catalog: Catalog, placement: Placement, pod: PodRenderer,
               volumes: list[dict[str, Any]], queue: QueueAssignment | None) -> dict[str, Any]:
        return pod(placement)

    def demand(self, template: dict[str, Any]) -> list[Demand]:
        """A queued pod: Kueue's plain-pod integration admits each pod on its own."""
        placed = read_placement(template)
        if placed.queue is None or placed.compute_class is None:
            return []
        return [Demand(placed.compute_class, placed.capacities, template_requests(template))]

    def read_back(self, template: dict[str, Any]) -> CompiledPlacement:
        return read_placement(template)

    def cleanup(self, workflow: str) -> list[Cleanup]:
        return []  # Argo stops its own pods


POD = PodStep()
