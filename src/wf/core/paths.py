"""Where a path in a step's container may lead: one rule set for its output files, its volumes' mount points (the
job's and the catalog's checkpoint volumes) and its working directory, so that a job Argo or the container runtime
would refuse, or one whose artifact would carry a service account token to the bucket, is refused with its line
when it is compiled or linted.

The rules, in words:
- no `..` segment: a path names its place directly (Argo refuses artifact paths that climb, Artifact.CleanPath
  in pkg/apis/workflow/v1alpha1/workflow_types.go), and no NUL (no system call takes one);
- absolute, or under a directory a job parameter names (runc: "Cwd must be an absolute path", utils_linux.go;
  Kubernetes: a mountPath is absolute);
- out of the places below. An output may be neither in one nor above one (its artifact would hold the place);
  a volume may not be mounted in one (it would hide what Argo or Kubernetes put there), nor at `/`.
"""

from __future__ import annotations

import posixpath
import re
from typing import Annotated, Final

from pydantic import AfterValidator

from wf.core.constants import ARGO_EXECUTOR_ROOT, ARGO_VAR_RUN_PATH, SERVICE_ACCOUNT_TOKENS_ROOT

# Places no path of a step reaches, and why (in the message).
RESERVED: Final = {
    ARGO_VAR_RUN_PATH: "Argo's executor, mounted in every container of the pod",
    ARGO_EXECUTOR_ROOT: "Argo's own input artifacts, staging, secrets and config",
    SERVICE_ACCOUNT_TOKENS_ROOT: "the service account tokens Kubernetes and EKS mount",
    # runc refuses a mount inside /proc (checkProcMount, libcontainer/rootfs_linux.go); an artifact of it would
    # hold the process's environment, secrets included.
    "/proc": "the kernel's view of the process",
}
# A path may start at a job parameter's value (`{{workflow.parameters.DIR}}/model`), decided when the job runs.
_PARAMETER_START = "{{workflow.parameters."
_SLASHES = re.compile("/+")


def _plain(value: str, start: str | None = _PARAMETER_START) -> str:
    """The path's segments checked (NUL, `..`, absolute); the path as the kernel resolves it (`//`, `.` gone),
    or "" when a reference (one beginning with `start`) decides where it starts."""
    if "\0" in value:
        raise ValueError("holds a NUL character, which no path can")
    if ".." in value.split("/"):
        raise ValueError(f"{value!r} has a '..' segment: a path names its place directly")
    if not value.startswith("/") and not (start and value.startswith(start)):
        also = f" (or one under {_PARAMETER_START}NAME}}}})" if start else ""
        raise ValueError(f"{value!r} is not an absolute path{also}")
    return posixpath.normpath(_SLASHES.sub("/", value)) if value.startswith("/") else ""


def _inside(path: str, place: str) -> bool:
    return path == place or path.startswith(place.rstrip("/") + "/")


def output_path(value: str) -> str:
    path = _plain(value)
    for place, why in RESERVED.items():
        if path and (_inside(path, place) or _inside(place, path)):
            raise ValueError(f"{value!r} reaches {place} ({why}): a step's outputs are files of its own")
    return value


def mount_path(value: str) -> str:
    path = _plain(value, start=None)
    if path == "/":
        raise ValueError("a volume at / would hide the image's whole filesystem")
    for place, why in RESERVED.items():
        if _inside(path, place):
            raise ValueError(f"{value!r} is inside {place} ({why}): mount the volume elsewhere")
    return value


def working_dir(value: str) -> str:
    _plain(value, start="{{")  # wf.jobspec.references checks the reference
    return value


# A file or folder a step writes and hands on (an output parameter's or artifact's path).
OutputPath = Annotated[str, AfterValidator(output_path)]
# Where a volume is mounted in every step's container.
MountPath = Annotated[str, AfterValidator(mount_path)]
# The directory a step's program starts in.
WorkingDir = Annotated[str, AfterValidator(working_dir)]
