"""Step kinds: what running a step of each kind means, behind one protocol (`base.StepKind`), the way Kueue's job
integrations implement one interface.

A kind places and renders its steps (the compiler, wf.compile.workflow), says what Kueue admits for one attempt
(Kueue lint, wf.lint.queues), reads a compiled template back for `wf get` (wf.controller.steps) and names what
stopping a workflow must delete (wf.controller.ops). Kinds: a pod step (`pod.POD`, any step no other kind
claims) and a multi-node step (`mpijob.MPIJOB_STEP`, `nodes: N`, a Kubeflow MPIJob).

Adding a kind (a Kubeflow TrainJob, say) is one new module implementing `StepKind` and its line in `KINDS`,
before the pod step, which matches everything.
"""

from __future__ import annotations

from typing import Any

from wf.compile.kinds.base import StepKind
from wf.compile.kinds.mpijob import MPIJOB_STEP
from wf.compile.kinds.pod import POD
from wf.jobspec.steps import Step

# The first kind that matches a step or a template is its kind.
KINDS: tuple[StepKind, ...] = (MPIJOB_STEP, POD)


def kind_of(step: Step) -> StepKind:
    return next(kind for kind in KINDS if kind.matches(step))


def kind_of_template(template: dict[str, Any]) -> StepKind:
    return next(kind for kind in KINDS if kind.matches_template(template))
