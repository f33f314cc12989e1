"""The interruption signs: one list, read the same way by Argo's retry expression and by wf's classifier."""

from __future__ import annotations

import pytest
from test_placement import evaluate

from wf.interruptions import (
    APPLICATION_EXPRESSION,
    APPLICATION_SIGNS,
    INTERRUPTION_EXPRESSION,
    INTERRUPTION_SIGNS,
    capacity_expression,
    is_interruption,
)

# How each way of losing a node reaches Argo v4.0.7 (phase and message of the attempt's node), from
# workflow/controller/operator.go: inferFailedReason and the missing-pod check.
PATHS = [
    ("node deleted, pod gone before Argo saw it Failed", "Error", "pod deleted", True),
    ("pod GC failed it, containers still Running", "Failed",
     "pod failed: neither main nor wait container completed successfully", True),
    ("pod GC failed it after main exited 0", "Failed", "pod failed: wait container did not complete successfully", True),
    ("pod GC failed it before any container status", "Failed",
     "can't find failed message for pod train-1 namespace wf", True),
    ("pod GC failed it while main was being created", "Error",
     "Pod failed before main container starts due to ContainerCreating: ", True),
    ("graceful node shutdown", "Failed", "Pod was terminated in response to imminent node shutdown.", True),
    ("node-pressure eviction", "Failed", "The node was low on resource: memory. Threshold quantity: 100Mi.", True),
    ("admission on a node under pressure", "Failed", "Pod was rejected: The node had condition: [DiskPressure]. ", True),
    ("admission after the node changed", "Failed", "Pod was rejected: Node didn't have enough resource: cpu", True),
    ("kubelet critical-pod preemption", "Failed", "Preempted in order to admit critical pod", True),
    ("drain/eviction/preemption: SIGTERM", "Failed", "main: Error (exit code 143)", True),
    ("deletion grace period ran out: SIGKILL", "Failed", "main: Error (exit code 137)", True),
    ("OOM kill", "Failed", "main: OOMKilled (exit code 137)", False),
    ("OOM kill reported with Error", "Error", "main: OOMKilled (exit code 137)", False),
    ("non-zero exit", "Failed", "main: Error (exit code 1)", False),
    ("exit code 14", "Failed", "main: Error (exit code 14)", False),
    ("bad image, pod failed while pulling", "Error",
     "Pod failed before main container starts due to ErrImagePull: rpc error: not found", False),
    ("bad image name", "Error", "Pod failed before main container starts due to InvalidImageName: x", False),
    ("missing secret", "Error",
     "Pod failed before main container starts due to CreateContainerConfigError: secret \"s\" not found", False),
    ("template timeout", "Failed", "Pod was active on the node longer than the specified deadline", False),
]


@pytest.mark.parametrize(("phase", "message", "interruption"), [p[1:] for p in PATHS], ids=[p[0] for p in PATHS])
def test_expression_and_classifier_agree_on_every_path(phase: str, message: str, interruption: bool) -> None:
    last_retry = {"status": phase, "message": message, "exitCode": "-1"}
    assert is_interruption(phase, message) is interruption
    assert evaluate(INTERRUPTION_EXPRESSION, last_retry) is interruption
    # The application budget never pays for an interruption; it retries the program's Failed attempts.
    assert evaluate(APPLICATION_EXPRESSION, last_retry) is (phase == "Failed" and not interruption)


def test_signs_are_literal_text_in_both_regex_engines() -> None:
    # The same strings are a Go RE2 alternation in the expression and substrings in Python: no syntax allowed,
    # and no double quote, which would end the expression's string literal.
    for sign in (*INTERRUPTION_SIGNS, *APPLICATION_SIGNS):
        assert not set(sign.text) & set('\\.^$|?*+()[]{}"'), sign.text
        assert sign.source


def test_capacity_expression_counts_interruptions_with_argo_retries() -> None:
    assert capacity_expression("spot", "on-demand", 2) == "{{=asInt(retries) >= 2 ? 'on-demand' : 'spot'}}"
