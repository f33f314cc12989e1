"""Argo manifests: strict validation derived from hera's models, and size limits.

`validate(manifest)` returns its problems (`Problem.at(path, message)`), empty when the manifest is valid.
Importing this package loads neither hera nor pydantic (it sits on the `wf compile` hot path).
"""

from wf.argo.schema import KINDS, validate
from wf.argo.size import (
    ARGO_MAX_WORKFLOW_BYTES,
    ETCD_MAX_REQUEST_BYTES,
    fanout_problems,
    json_size,
    size_problems,
    step_limit_problems,
)

__all__ = [
    "ARGO_MAX_WORKFLOW_BYTES",
    "ETCD_MAX_REQUEST_BYTES",
    "KINDS",
    "fanout_problems",
    "json_size",
    "size_problems",
    "step_limit_problems",
    "validate",
]
