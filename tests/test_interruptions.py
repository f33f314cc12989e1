"""The interruption signs: one list, read the same way by Argo's retry expression and by wf's classifier."""

from __future__ import annotations

import json
from typing import Any

import pytest

from test_catalog import catalog_problems, only
from test_placement import STOP_MARK, evaluate
from wf.compile.interruptions import (
    APPLICATION_EXPRESSION,
    APPLICATION_SIGNS,
    INTERRUPTION_EXPRESSION,
    INTERRUPTION_SIGNS,
    SPOT_FALLBACK_ANNOTATION,
    STOP_HOOK,
    STOPPED_FROM_OUTSIDE,
    capacity_expression,
    is_interruption,
)
from wf.compile.placement import place_step
from wf.compile.workflow import compile_job
from wf.core.constants import CAPACITY_LABEL
from wf.model.catalog import Catalog

# How each way of losing a node reaches Argo v4.0.7 (phase and message of the attempt's node), from
# workflow/controller/operator.go: inferFailedReason and the missing-pod check.
PATHS = [
    ("node deleted, pod gone before Argo saw it Failed", "Error", "pod deleted", True),
    ("pod GC failed it, containers still Running", "Failed",
     "pod failed: neither main nor wait container completed successfully", True),
    ("pod GC failed it after main exited 0", "Failed",
     "pod failed: wait container did not complete successfully", True),
    ("pod GC failed it before any container status", "Failed",
     "can't find failed message for pod train-1 namespace wf", True),
    ("pod GC failed it while main was being created", "Error",
     "Pod failed before main container starts due to ContainerCreating: ", True),
    ("graceful node shutdown", "Failed", "Pod was terminated in response to imminent node shutdown.", True),
    ("node-pressure eviction", "Failed", "The node was low on resource: memory. Threshold quantity: 100Mi.", True),
    ("admission on a node under pressure", "Failed",
     "Pod was rejected: The node had condition: [DiskPressure]. ", True),
    ("admission after the node changed", "Failed", "Pod was rejected: Node didn't have enough resource: cpu", True),
    ("kubelet critical-pod preemption", "Failed", "Preempted in order to admit critical pod", True),
    ("drain/eviction/preemption: SIGTERM", "Failed", f"main: Error (exit code 143): {STOP_MARK}", True),
    ("deletion grace period ran out: SIGKILL", "Failed", f"main: Error (exit code 137): {STOP_MARK}", True),
    ("the program's own SIGTERM exit", "Failed", "main: Error (exit code 143)", False),
    ("the program killed by a signal (argoexec's emissary exits 137)", "Failed", "main: Error (exit code 137)",
     False),
    ("OOM kill", "Failed", "main: OOMKilled (exit code 137)", False),
    ("OOM kill reported with Error", "Error", "main: OOMKilled (exit code 137)", False),
    ("the machine back under the node's name: the new kubelet ran the old pod again, containerd lost it",
     "Failed", "main: Unknown (exit code 255)", True),
    ("the program's own exit 255", "Failed", "main: Error (exit code 255)", False),
    ("non-zero exit", "Failed", "main: Error (exit code 1)", False),
    ("exit code 14", "Failed", "main: Error (exit code 14)", False),
    ("bad image, pod failed while pulling", "Error",
     "Pod failed before main container starts due to ErrImagePull: rpc error: not found", False),
    ("bad image name", "Error", "Pod failed before main container starts due to InvalidImageName: x", False),
    ("missing secret", "Error",
     "Pod failed before main container starts due to CreateContainerConfigError: secret \"s\" not found", False),
    ("template timeout", "Failed", "Pod was active on the node longer than the specified deadline", False),
    ("Error: an output file the program did not write", "Error",
     "open /tmp/accuracy.txt: no such file or directory", False),
    ("Error: an artifact upload failed", "Error",
     "failed to save outputs: failed to put file: AccessDenied: Access Denied", False),
    ("Error: the executor failed", "Error", "failed to establish pod watch: unknown (get pods)", False),
    ("multi-node step: a worker's node lost", "Failed", "main: Error (exit code 1): failure condition "
     "'{status.replicaStatuses.Worker.failed gt [0]}' evaluated true", True),
    ("multi-node step: mpirun failed after a worker was lost", "Failed", "main: Error (exit code 1): failure "
     "condition '{metadata.annotations.wf-worker-lost exists []}' evaluated true", True),
    ("multi-node step: the launcher failed", "Failed", "main: Error (exit code 1): failure condition "
     "'{status.replicaStatuses.Launcher.failed gt [0]}' evaluated true", False),
]


@pytest.mark.parametrize(("phase", "message", "interruption"), [p[1:] for p in PATHS], ids=[p[0] for p in PATHS])
def test_expression_and_classifier_agree_on_every_path(phase: str, message: str, interruption: bool) -> None:
    last_retry = {"status": phase, "message": message, "exitCode": "-1"}
    assert is_interruption(message) is interruption
    assert evaluate(INTERRUPTION_EXPRESSION, last_retry) is interruption
    # The application budget never pays for an interruption; it retries the program's failures, Argo's Error too.
    assert evaluate(APPLICATION_EXPRESSION, last_retry) is not interruption


@pytest.mark.parametrize("message", ["main: Error (exit code 143)", "main: Error (exit code 137)"])
def test_a_sigterm_or_sigkill_is_the_programs_unless_the_stop_hook_marked_it(message: str) -> None:
    assert not is_interruption(message)
    assert is_interruption(f"{message}: {STOP_MARK}")
    assert is_interruption(f"pod deleted; {message}")  # a node-loss sign of its own


def test_every_container_template_gets_the_stop_hook(catalog: Catalog, make_job: Any) -> None:
    """Through the workflow's templateDefaults, which Argo merges into container templates only: the hook runs
    argoexec, which every main container holds, with the command whose error is the mark."""
    manifest = compile_job(make_job([{"name": "a", "command": ["x"]}]), catalog)
    assert manifest["spec"]["templateDefaults"]["container"]["lifecycle"] == STOP_HOOK
    assert STOP_HOOK["preStop"]["exec"]["command"] == ["/var/run/argo/argoexec", STOPPED_FROM_OUTSIDE]
    assert STOPPED_FROM_OUTSIDE in STOP_MARK


def test_signs_are_literal_text_in_both_regex_engines() -> None:
    # The same strings are a Go RE2 alternation in the expression and substrings in Python: no syntax allowed
    # but dots and parentheses (escaped), and no double quote, which would end the expression's string literal.
    for sign in (*INTERRUPTION_SIGNS, *APPLICATION_SIGNS):
        assert not set(sign.text) & set('\\^$|?*+[]{}"'), sign.text
        assert sign.source


def test_capacity_expression_counts_interruptions_with_argo_retries() -> None:
    assert capacity_expression("spot", "on-demand", 2) == "{{=asInt(retries) >= 2 ? 'on-demand' : 'spot'}}"


# --- Spot fallback: the catalog field, the placement and the compiled pod template ---------------------------

def test_spot_fallback_needs_both_capacities_and_enough_interruption_retries(write: Any) -> None:
    def spot_only(d: dict[str, Any]) -> None:
        d["computeClasses"][1].update(spotFallbackAfter=2)

    field, message = only(catalog_problems(write, spot_only))
    assert field == "computeClasses[1].spotFallbackAfter" and "needs capacity [spot, on-demand]" in message

    def unreachable(d: dict[str, Any]) -> None:
        d["computeClasses"][0].update(spotFallbackAfter=3, interruptionRetries=2)

    field, message = only(catalog_problems(write, unreachable))
    assert field == "computeClasses[0].spotFallbackAfter" and "never reached" in message


def test_only_spot_steps_of_a_class_offering_on_demand_fall_back(catalog: Catalog, make_job: Any) -> None:
    # The default catalog: cpu offers both and falls back after 2; gaudi and graviton are Spot only.
    placements = {(s, c): place_step(make_job([{"name": "a", "command": ["x"], "compute": s, "capacity": c,
                                                **({"accelerators": 8} if s == "gaudi" else {})}]), 0, catalog)[0]
                  for s, c in (("cpu", "spot"), ("cpu", "on-demand"), ("gaudi", "spot"), ("graviton", "spot"))}
    assert {key: p.on_demand_after for key, p in placements.items() if p} == {
        ("cpu", "spot"): 2, ("cpu", "on-demand"): None, ("gaudi", "spot"): None, ("graviton", "spot"): None}


def test_the_fallback_patches_the_pod_and_keeps_other_patches(catalog: Catalog, make_job: Any) -> None:
    data = catalog.model_dump(by_alias=True, exclude_none=True)
    gaudi = next(c for c in data["computeClasses"] if c["name"] == "gaudi")
    gaudi.update(capacity=["spot", "on-demand"], spotFallbackAfter=3)
    manifest = compile_job(make_job([{"name": "t", "command": ["x"], "compute": "gaudi", "accelerators": 8},
                                     {"name": "od", "command": ["x"], "capacity": "on-demand"}]),
                           Catalog.model_validate(data))
    templates = {t["name"]: t for t in manifest["spec"]["templates"]}
    pod = templates["t"]
    expression = "{{=asInt(retries) >= 3 ? 'on-demand' : 'spot'}}"
    assert json.loads(pod["podSpecPatch"]) == {"hostIPC": True, "nodeSelector": {CAPACITY_LABEL: expression}}
    assert pod["nodeSelector"][CAPACITY_LABEL] == "spot"  # what lint and the Pending explanations read
    assert pod["metadata"]["labels"][CAPACITY_LABEL] == expression
    assert pod["metadata"]["annotations"][SPOT_FALLBACK_ANNOTATION] == "3"
    # An On-Demand step has nothing to fall back from.
    assert "podSpecPatch" not in templates["od"]
    assert templates["od"]["metadata"]["labels"][CAPACITY_LABEL] == "on-demand"


def test_the_first_capacity_is_read_back_from_a_fallback_expression() -> None:
    from wf.compile.interruptions import first_capacity

    assert first_capacity(capacity_expression("spot", "on-demand", 3)) == "spot"
    assert first_capacity("spot") is None and first_capacity("{{workflow.name}}") is None
