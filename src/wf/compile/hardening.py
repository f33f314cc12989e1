"""What every compiled pod runs with: hardened by default, relaxed per compute class (wf.model.catalog.PodSecurity).

Pod Security Standards' "restricted" profile but for running as root, which training images commonly need: the
runtime's default seccomp profile for every container of the pod (Argo's included), every capability dropped
but those the class needs back, and no privilege escalation (setuid binaries, file capabilities).
"""

from __future__ import annotations

from typing import Any, Final

from wf.argo.defaults import merge
from wf.compile.placement import Placement


def pod_security() -> dict[str, Any]:
    """The pod's securityContext (a new dict each time: no YAML anchors in a manifest)."""
    return {"seccompProfile": {"type": "RuntimeDefault"}}


# What every step container runs with: no privilege escalation, every capability dropped. Written once per workflow,
# in its templateDefaults (Argo merges it into each container template's own securityContext, which then holds only
# what the class adds back), and in full into each replica of a multi-node step's MPIJob, which it does not reach.
CONTAINER_HARDENING: Final = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def container_security(placement: Placement) -> dict[str, Any]:
    """The step container's whole securityContext on `placement`'s class."""
    # The hardening's keys first (merged in their order), what the class adds back after them.
    return merge(added_capabilities(placement), CONTAINER_HARDENING)


def added_capabilities(placement: Placement) -> dict[str, Any]:
    """What a container on `placement`'s class has beyond CONTAINER_HARDENING: the capabilities it adds back ({} for
    none), which Argo merges with the hardening (`drop` and `add` are separate keys of `capabilities`)."""
    return {"capabilities": {"add": list(placement.capabilities)}} if placement.capabilities else {}
