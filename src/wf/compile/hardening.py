"""What every compiled pod runs with: hardened by default, relaxed per compute class (wf.model.catalog.PodSecurity).

Pod Security Standards' "restricted" profile but for running as root, which training images commonly need: the
runtime's default seccomp profile for every container of the pod (Argo's included), every capability dropped
but those the class needs back, and no privilege escalation (setuid binaries, file capabilities).
"""

from __future__ import annotations

from typing import Any

from wf.compile.placement import Placement


def pod_security() -> dict[str, Any]:
    """The pod's securityContext (a new dict each time: no YAML anchors in a manifest)."""
    return {"seccompProfile": {"type": "RuntimeDefault"}}


def container_security(placement: Placement) -> dict[str, Any]:
    """The step container's securityContext on `placement`'s class."""
    capabilities: dict[str, Any] = {"drop": ["ALL"]}
    if placement.capabilities:
        capabilities["add"] = list(placement.capabilities)
    return {"allowPrivilegeEscalation": False, "capabilities": capabilities}
