"""wf: typed training jobs compiled to Argo Workflows and placed on node groups from one compute-class catalog.

    from wf import TrainingJob, Step, load_catalog, compile_job
    job = TrainingJob(metadata={"name": "bert"}, spec={"image": "...", "compute": "gaudi",
                      "steps": [Step(name="train", command=["python", "train.py"], accelerators=8)]})
    manifest = compile_job(job, load_catalog())

Cluster operations (`wf.submit`, `wf.watch`, ...) load the Kubernetes client on first use only.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from wf.catalog import Catalog, ComputeClass, load_catalog
from wf.compile import compile_job
from wf.errors import ClusterError, InputError, Problem, WfError, WorkFailed
from wf.spec import JobSpec, Metadata, Resources, SecretRef, Step, TrainingJob, load_job

__version__ = "0.1.0"

# Imported on first use: the Kubernetes client costs 0.4 s that `wf compile` and `wf lint` must not pay.
_CLUSTER_API = ("submit", "watch", "get", "list_workflows", "logs", "retry", "stop", "delete")


def __getattr__(name: str) -> Any:
    if name in _CLUSTER_API:
        return getattr(import_module("wf.controller.api"), name)
    raise AttributeError(f"module 'wf' has no attribute {name!r}")


__all__ = [
    "Catalog", "ClusterError", "ComputeClass", "InputError", "JobSpec", "Metadata", "Problem", "Resources",
    "SecretRef", "Step", "TrainingJob", "WfError", "WorkFailed", "compile_job", "load_catalog", "load_job",
    *_CLUSTER_API,
]
