"""Why a step is Pending, in catalog terms: waiting for capacity, or never going to schedule; or, scheduled, why
its program cannot start (its image).

Inputs are what the API already says: the scheduler's FailedScheduling message (Argo copies it into the
node's message), the cluster-autoscaler's TriggeredScaleUp/NotTriggerScaleUp events when it runs, the pod's
constraints (from its template, read back by wf.compile.readback) and the catalog's node groups. "Never" is
decided from the catalog, not the scheduler: a node group scaled to zero looks the same to the scheduler as one
that does not exist.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from wf.compile.readback import read_placement
from wf.compile.schedulability import Verdict, judge, pod_constraints
from wf.compile.schedulability import explain as unschedulable_reason
from wf.core.constants import REAL_NODE_LABEL

if TYPE_CHECKING:
    from wf.model.catalog import Catalog

_INSUFFICIENT = re.compile(r"Insufficient ([A-Za-z0-9./_-]+)")
# How the kubelet names the image in its message (`image "x"`; escaped inside Argo's JSON, hence the backslashes).
_QUOTED_IMAGE = re.compile(r'image \\?"([^"\\]+)\\?"')
# The kubelet's reasons for a container it cannot start because of its image (pkg/kubelet/images/types.go), which
# Argo copies into the Pending step's message: the pod keeps trying, and Argo never ends the step.
IMAGE_REASONS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull", "ImageInspectError")


@dataclass(frozen=True)
class Explanation:
    kind: Literal["capacity", "never", "unknown"]
    text: str


def _autoscaler_verdict(events: list[tuple[str, str]]) -> tuple[str, str] | None:
    for reason, message in reversed(events):  # the newest event decides
        if reason in ("TriggeredScaleUp", "NotTriggerScaleUp"):
            return reason, message
    return None


def image_problem(template: dict[str, Any], message: str) -> Explanation | None:
    """Why a scheduled step's program cannot start because of its image: the job's own error, never an
    interruption (wf.compile.interruptions' application signs), and no retry mends it."""
    found = [r for r in IMAGE_REASONS if r in message]
    if not found:
        return None
    reason = min(found, key=message.index)  # the container's reason now, before any earlier one it quotes
    # The kubelet names the image it failed on (it may be Argo's own executor's, not the program's).
    quoted = _QUOTED_IMAGE.search(message)
    image = quoted.group(1) if quoted else (template.get("container") or template.get("script") or {}).get("image")
    named = f"image {image!r}" if image else "the step's image"
    return Explanation("never", f"{named} cannot be pulled ({reason}): the step waits until it can be, which an "
                                f"image that does not exist never is; fix the job's image and submit again. "
                                f"The kubelet said: {message}")


def explain(
    template: dict[str, Any],
    scheduler_message: str,
    catalog: Catalog | None,
    *,
    nodes_per_group: dict[str, int] | None = None,
    events: list[tuple[str, str]] | None = None,
) -> Explanation:
    """Explain a Pending pod. nodes_per_group: current node count by node group name when readable."""
    if (template.get("nodeSelector") or {}).get(REAL_NODE_LABEL):
        # Placed on the local cluster's real nodes (wf.compile.placement.on_real_nodes), which no node group of
        # the catalog describes: it waits for one, gone (its machine lost) or busy, not for the catalog's capacity.
        return Explanation("capacity", "waiting for a real node of the local cluster (its image is on those only): "
                                       "each runs as many such pods as its machine has room for; `wf cluster up` "
                                       f"starts again one that is lost. The scheduler: {scheduler_message}")
    placed = read_placement(template)
    cls_name, capacity = placed.compute_class, placed.capacity
    if catalog is None or not cls_name:
        return Explanation("unknown", scheduler_message or "waiting to be scheduled")
    if cls_name not in catalog.class_names:
        return Explanation("never", f"compute class {cls_name!r} is not in the cluster's catalog "
                                    f"(known: {', '.join(catalog.class_names)})")
    groups = placed.node_groups(catalog)
    if not groups:
        offered = ", ".join(catalog.compute_class(cls_name).capacity)
        return Explanation("never", f"compute class {cls_name!r} has no {capacity} node groups (capacity: {offered})")

    # The same verdict `wf lint` gives offline, so the two never disagree about what can schedule.
    pod = pod_constraints({}, template)
    verdicts: list[Verdict] = [] if pod is None else [judge(pod, g) for g in groups]
    fitting = groups if pod is None else [v.group for v in verdicts if v.fits]
    where = f"a {cls_name}{f' ({capacity})' if capacity else ''} node"
    if pod is not None and not fitting:
        return Explanation("never", f"can never schedule on {where}: {unschedulable_reason(pod, groups)}")

    verdict = _autoscaler_verdict(events or [])
    if verdict and verdict[0] == "NotTriggerScaleUp" and "max node group size reached" not in verdict[1]:
        return Explanation("never", f"the cluster autoscaler will not add {where}: {verdict[1]}")

    types = sorted({it for g in fitting for it in g.instance_types})
    zones = sorted({g.zone for g in fitting})
    short = list(dict.fromkeys(_INSUFFICIENT.findall(scheduler_message or "")))
    accelerator = catalog.compute_class(cls_name).accelerator
    if accelerator and accelerator.resource in short:
        # The devices are what the step waits for; cpu, memory and hugepages come with them.
        short = [f"{accelerator.count} {accelerator.resource}"]
    up = sum(nodes_per_group.get(g.name, 0) for g in fitting) if nodes_per_group is not None else None
    if up == 0:
        in_use = f"no {'/'.join(types)} node is up in {', '.join(zones)}"
    elif short:
        in_use = f"all {', '.join(short)} on {'/'.join(types)} nodes in {', '.join(zones)} are in use"
    else:
        in_use = f"no {'/'.join(types)} node in {', '.join(zones)} has room"
    text = f"waiting for {where}: {in_use}"
    if too_small := sorted({s.instance for v in verdicts if v.fits for s in v.shortfalls}):
        # wf.model.nodegroups: cluster-autoscaler may model the scale-up on a type the pod does not fit.
        text += (f" (it does not fit {'/'.join(too_small)}, which cluster-autoscaler may model the node group on, "
                 "so it may never add a node for it)")
    if verdict and verdict[0] == "TriggeredScaleUp":
        return Explanation("capacity", f"{text}; the cluster autoscaler is adding a node ({verdict[1]})")
    if up is not None:
        have = up
        most = sum(g.max_size for g in fitting)
        if have >= most:
            return Explanation("capacity", f"{text}; its node groups are at their maximum ({have} of {most} nodes), "
                                           "so it starts when a running step frees room")
        return Explanation("capacity", f"{text}; the node groups can grow ({have} of {most} nodes), "
                                       "so the cluster autoscaler can add one")
    return Explanation("capacity", text)
