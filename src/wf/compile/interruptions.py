"""What counts as an interruption (the node went away) rather than the program's failure: one list of signs, from
which both the Argo retry expressions and the Python classifier behind `wf get` are built.

Argo's retry expression sees only `lastRetry.status`, `.message`, `.exitCode` and `.duration` of the attempt
(workflow/controller/operator.go, v4.0.7): not the pod's `DisruptionTarget` condition, its reason or its node. So
every way a node loss reaches a pod is recognised by the message Argo derives from the pod (inferFailedReason) or
by the phase Argo gives it. The signs are literal text without regular-expression syntax but for dots and
parentheses (escaped as `[.]`, `[(]`, `[)]`), so the same strings are a Go RE2 alternation in the expression and
substring tests in Python. An application sign wins over an interruption sign: the program's failures are never
retried on the interruption budget.

Argo's `Error` phase alone says nothing about the node (a missing output file, a failed artifact upload or an
executor error is `Error` too): only the signs do. Exit codes 143 and 137 alone say nothing either: a drain's
SIGTERM (or the SIGKILL after its grace period) and a program killed by itself or its supervisor end alike. What
tells them apart is the main container's stop hook (STOP_HOOK), which the kubelet runs only when it stops the
container from outside: its mark in the attempt's message is an interruption sign, and an exit 143 or 137 without
it is the program's own, retried on the application budget.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from wf.core.constants import ARGOEXEC_IN_MAIN, DOMAIN, MPI_WORKER_LOST_ANNOTATION

# What a multi-node step's failure condition reads of its MPIJob's workers (wf.compile.kinds.mpijob): the status
# counter of failed worker pods, and the mark of a worker lost while the launcher ran. Argo's message names the
# condition that matched.
MPI_WORKER_FAILED: Final = "replicaStatuses.Worker.failed"
MPI_WORKER_LOST: Final = f"metadata.annotations.{MPI_WORKER_LOST_ANNOTATION}"


@dataclass(frozen=True)
class Sign:
    text: str  # literal text of Argo's node message
    source: str  # what produces it: kept next to the text so the list documents itself


# The main container's preStop hook. The kubelet runs it only when it stops the container from outside (the pod
# deleted or evicted: a drain, Karpenter's or the AWS node termination handler's interruption handling, scheduler
# preemption; node shutdown; node-pressure eviction), before its SIGTERM, never when the program ends by itself
# (kuberuntime_container.go, killContainer). The one binary every step's main container holds is Argo's executor
# (mounted there to run the program under it); asked for a command it lacks, it writes the error to the container's
# termination message (argoexec's main.go, v4.0.7), which the kubelet keeps in the container's terminated state and
# Argo appends to the attempt's message (inferFailedReason): `main: Error (exit code 143): unknown command
# "wf-stopped-from-outside" for "argoexec"`. The hook's non-zero exit costs a FailedPreStopHook event, nothing more.
STOPPED_FROM_OUTSIDE: Final = "wf-stopped-from-outside"
STOP_HOOK: Final = {"preStop": {"exec": {"command": [ARGOEXEC_IN_MAIN, STOPPED_FROM_OUTSIDE]}}}

INTERRUPTION_SIGNS: Final = (
    Sign("pod deleted", "Argo: the pod vanished before it reached a terminal phase (node deleted and pod GC, drain or "
                        "eviction on a node whose kubelet is gone, scheduler preemption, taint manager)"),
    Sign("neither main nor wait container completed successfully",
         "Argo: the pod Failed though no container failed: the pod GC marking the pods of a vanished node Failed "
         "(DisruptionTarget DeletionByPodGC) while their containers' last status is still Running"),
    Sign("container did not complete successfully", "Argo: as above, after one of main and wait had exited 0"),
    Sign("can't find failed message for pod", "Argo: the pod Failed with no container status at all: the pod GC "
                                              "failing a pod bound to a vanished node before its containers started"),
    Sign("before main container starts due to ContainerCreating",
         "Argo: the pod failed while its containers were being created: the pod GC failing the pods of a vanished "
         "node (a program that never started cannot have failed)"),
    Sign("ContainerStatusUnknown", "kubelet: a container it last saw Running is gone from the runtime: the node's "
                                   "machine was replaced under the same node name, or rebooted"),
    Sign("Unknown (exit code 255)", "containerd's CRI: it lost the container's exit status (unknownExitReason and "
                                    "unknownExitCode, internal/cri/server/helpers.go, set when containerd restarts "
                                    "without the task or loses its shim), never a program's own exit: seen on a real "
                                    "node whose machine went and came back under its name, where the new kubelet ran "
                                    "the old pods again and they ended so"),
    Sign("imminent node shutdown", "kubelet graceful node shutdown (pod reason NodeShutdown), Spot reclaim on a node "
                                   "with shutdownGracePeriod"),
    Sign("node was low on resource", "kubelet node-pressure eviction (pod reason Evicted)"),
    Sign("node had condition", "kubelet admission refused on a node under pressure"),
    Sign("Pod was rejected", "kubelet admission refused after the node changed under the pod "
                             "(UnexpectedAdmissionError, OutOfcpu, NodeAffinity)"),
    Sign("Preempted in order to admit critical pod", "kubelet critical-pod preemption"),
    Sign(STOPPED_FROM_OUTSIDE, "the main container's stop hook (STOP_HOOK): the kubelet stopped the program from "
                               "outside (a drain, an eviction, preemption, node shutdown), whatever its exit code"),
    Sign(MPI_WORKER_FAILED, "Argo's resource wait on a multi-node step's MPIJob, naming compile.kinds.mpijob's "
                            "failure condition that matched: a worker pod failed, which is its node going away (a "
                            "program that fails ends the launcher's mpirun, and the launcher's condition is named "
                            "instead)"),
    Sign(MPI_WORKER_LOST, "Argo's resource wait on a multi-node step's MPIJob, naming the failure condition that "
                          "reads the MPIJob's mark of a worker that stopped running while its launcher ran "
                          "(wf.controller.gangs): mpirun, which fails when a rank's node goes, failed for that "
                          "reason, which the MPIJob's status no longer shows once its launcher has failed"),
)

APPLICATION_SIGNS: Final = (
    Sign("OOMKilled", "the container exceeded its memory limit: the program's own failure"),
    Sign("ErrImagePull", "bad image reference or registry credentials"),
    Sign("ImagePullBackOff", "bad image reference or registry credentials"),
    Sign("InvalidImageName", "bad image reference"),
    Sign("CreateContainerConfigError", "missing Secret or ConfigMap the step refers to"),
)


def is_interruption(message: str | None) -> bool:
    """An attempt that ended because its node went away or the kubelet stopped it, not because the program failed:
    the rule of INTERRUPTION_EXPRESSION, for attempts Argo already finished."""
    text = message or ""
    return (not any(sign.text in text for sign in APPLICATION_SIGNS)
            and any(sign.text in text for sign in INTERRUPTION_SIGNS))


def _alternation(signs: tuple[Sign, ...]) -> str:
    # Dots and parentheses, the only regular-expression syntax in the signs, as classes of one character.
    return "|".join(sign.text.replace(".", "[.]").replace("(", "[(]").replace(")", "[)]") for sign in signs)


# The pod template's retryStrategy: retry only interruptions, on their own budget.
INTERRUPTION_EXPRESSION: Final = (
    f'lastRetry.message matches "{_alternation(INTERRUPTION_SIGNS)}"'
    f' && !(lastRetry.message matches "{_alternation(APPLICATION_SIGNS)}")'
)
# The wrapper's retryStrategy: retry the program's failures, never an interruption.
# Argo's `Error` (a missing output, a failed upload, an executor error) is the program's too.
APPLICATION_EXPRESSION: Final = (
    f'(lastRetry.status == "Failed" || lastRetry.status == "Error") && !({INTERRUPTION_EXPRESSION})')


# Each expression is written once per workflow, as an annotation of its spec.workflowMetadata (Argo makes every
# such annotation the global variable `workflow.annotations.KEY`, substituted into a template before its
# retryStrategy is read); each retryStrategy names it (retry_expression): some 500 bytes a template otherwise.
INTERRUPTION_ANNOTATION: Final = f"{DOMAIN}/retry-interruptions"
APPLICATION_ANNOTATION: Final = f"{DOMAIN}/retry-application-failures"
RETRY_EXPRESSIONS: Final = {INTERRUPTION_ANNOTATION: INTERRUPTION_EXPRESSION,
                            APPLICATION_ANNOTATION: APPLICATION_EXPRESSION}


def retry_expression(annotation: str) -> str:
    """A retryStrategy's `expression`: the one of RETRY_EXPRESSIONS under `annotation`, by reference."""
    return "{{workflow.annotations." + annotation + "}}"


# On the pod template, the number of interruptions after which the Spot fallback moves the step On-Demand: read
# back by `wf get` to tell where each attempt asked to run (the podSpecPatch itself is an expression).
SPOT_FALLBACK_ANNOTATION: Final = f"{DOMAIN}/spot-fallback-after"
ON_DEMAND: Final = "on-demand"


def capacity_expression(capacity: str, fallback: str, after: int) -> str:
    """An Argo expression template giving an attempt's capacity: `capacity` until `after` attempts were interrupted,
    then `fallback`. Inside the pod template's Retry node every earlier attempt was an interruption (the expression
    above retries nothing else), so `retries`, the attempt's index there, counts them."""
    return f"{{{{=asInt(retries) >= {after} ? '{fallback}' : '{capacity}'}}}}"


_CAPACITY_EXPRESSION = re.compile(r"^\{\{=asInt\(retries\) >= \d+ \? '[^']*' : '([^']*)'\}\}$")


def first_capacity(value: str) -> str | None:
    """The first attempt's capacity in a capacity_expression() (where a manifest can hold no podSpecPatch, the
    expression is the selector itself: a multi-node step's workers); None when `value` is no such expression."""
    match = _CAPACITY_EXPRESSION.match(value)
    return match.group(1) if match else None
