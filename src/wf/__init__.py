"""wf: typed training jobs compiled to Argo Workflows and placed on node groups from one compute-class catalog.

    from wf import TrainingJob, Step, load_catalog, compile_job
    job = TrainingJob(metadata={"name": "bert"}, spec={"image": "...", "compute": "gaudi",
                      "steps": [Step(name="train", command=["python", "train.py"], accelerators=8)]})
    manifest = compile_job(job, load_catalog())

Names are imported on first use, so `import wf.argo` stays free of pydantic and cluster operations (`wf.submit`,
`wf.watch`, ...) load the Kubernetes client only when called.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "wf.model.catalog": ("Catalog", "ComputeClass", "load_catalog"),
    "wf.compile.workflow": ("compile_job",),
    "wf.core.errors": ("ClusterError", "InputError", "Problem", "WfError", "WorkFailed"),
    "wf.jobspec.steps": ("Count", "JobSpec", "Metadata", "Outputs", "Resources", "SecretRef", "Step"),
    "wf.jobspec.job": ("TrainingJob", "load_job"),
    "wf.controller.api": ("submit", "watch", "get", "list_workflows", "logs", "retry", "stop", "delete"),
}
_HOME = {name: module for module, names in _EXPORTS.items() for name in names}

# Spelled out for type checkers and IDEs, which cannot follow __getattr__; a test keeps it equal to _EXPORTS.
if TYPE_CHECKING:
    from wf.compile.workflow import compile_job
    from wf.controller.api import delete, get, list_workflows, logs, retry, stop, submit, watch
    from wf.core.errors import ClusterError, InputError, Problem, WfError, WorkFailed
    from wf.jobspec.job import TrainingJob, load_job
    from wf.jobspec.steps import Count, JobSpec, Metadata, Outputs, Resources, SecretRef, Step
    from wf.model.catalog import Catalog, ComputeClass, load_catalog

__all__ = [
    "Catalog", "ClusterError", "ComputeClass", "Count", "InputError", "JobSpec", "Metadata", "Outputs", "Problem",
    "Resources",
    "SecretRef", "Step", "TrainingJob", "WfError", "WorkFailed", "compile_job", "delete", "get", "list_workflows",
    "load_catalog", "load_job", "logs", "retry", "stop", "submit", "watch",
]


def __getattr__(name: str) -> Any:
    if name in _HOME:
        value = getattr(import_module(_HOME[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'wf' has no attribute {name!r}")

