"""Pending explained in catalog terms: waiting for capacity vs never schedulable."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller_fakes import workflow
from wf.controller.pending import explain, image_problem
from wf.model.catalog import Catalog, load_catalog

CATALOG = load_catalog(Path(__file__).resolve().parents[1] / "eksctl" / "catalog.yaml")
SCHEDULER = ("0/12 nodes are available: 2 Insufficient habana.ai/gaudi, 10 node(s) didn't match Pod's node "
             "affinity/selector. preemption: 0/12 nodes are available: 12 Preemption is not helpful.")


def train_template(gaudi: str = "8") -> dict:
    template = next(t for t in workflow()["spec"]["templates"] if t["name"] == "train")
    template["container"]["resources"]["requests"]["habana.ai/gaudi"] = gaudi
    template["container"]["resources"]["limits"]["habana.ai/gaudi"] = gaudi
    template["container"]["resources"]["requests"]["memory"] = "100Gi"
    return template


def test_all_gaudi_in_use_and_the_group_can_grow() -> None:
    result = explain(train_template(), "Unschedulable: " + SCHEDULER, CATALOG,
                     nodes_per_group={"gaudi-spot-us-east-1a": 2})
    assert result.kind == "capacity"
    assert ("waiting for a gaudi (spot) node: all 8 habana.ai/gaudi on dl1.24xlarge nodes in us-east-1a are in use"
            in result.text)
    assert "can grow (2 of 16 nodes)" in result.text


def test_group_at_its_maximum_waits_for_room() -> None:
    result = explain(train_template(), SCHEDULER, CATALOG, nodes_per_group={"gaudi-spot-us-east-1a": 16})
    assert result.kind == "capacity" and "at their maximum (16 of 16 nodes)" in result.text


def test_more_devices_than_a_node_has_can_never_schedule() -> None:
    result = explain(train_template("16"), SCHEDULER, CATALOG)
    assert result.kind == "never"
    assert "no gaudi node offers 16 habana.ai/gaudi; dl1.24xlarge has 8" in result.text


def test_missing_toleration_can_never_schedule() -> None:
    template = train_template()
    template["tolerations"] = []
    result = explain(template, SCHEDULER, CATALOG)
    assert result.kind == "never" and "untolerated taint habana.ai/gaudi=true:NoSchedule" in result.text


def test_unknown_class_or_capacity_can_never_schedule() -> None:
    template = train_template()
    template["nodeSelector"] = {"wf.dev/compute-class": "tpu"}
    assert explain(template, SCHEDULER, CATALOG).kind == "never"
    template["nodeSelector"] = {"wf.dev/compute-class": "gaudi", "wf.dev/capacity": "on-demand"}
    result = explain(template, SCHEDULER, CATALOG)
    assert result.kind == "never" and "no on-demand node groups (capacity: spot)" in result.text


@pytest.mark.parametrize(("reason", "message", "kind"), [
    ("TriggeredScaleUp", "pod triggered scale-up: [{gaudi-spot-us-east-1a 2->3 (max: 16)}]", "capacity"),
    ("NotTriggerScaleUp", "pod didn't trigger scale-up: 1 max node group size reached", "capacity"),
    ("NotTriggerScaleUp", "pod didn't trigger scale-up: 1 node(s) had untolerated taint", "never"),
])
def test_the_autoscalers_verdict_is_used(reason: str, message: str, kind: str) -> None:
    result = explain(train_template(), SCHEDULER, CATALOG, events=[("FailedScheduling", SCHEDULER), (reason, message)])
    assert result.kind == kind


def test_without_catalog_the_scheduler_message_is_passed_on() -> None:
    result = explain(train_template(), SCHEDULER, None)
    assert result.kind == "unknown" and result.text == SCHEDULER


def test_the_devices_are_named_when_the_whole_node_is_taken() -> None:
    # What the scheduler says when an 8-card step waits behind another: every resource of the node is short.
    message = ("0/13 nodes are available: 1 Insufficient cpu, 1 Insufficient habana.ai/gaudi, 1 Insufficient "
               "hugepages-2Mi, 1 Insufficient memory, 1 Insufficient vpc.amazonaws.com/efa, 12 node(s) didn't match "
               "Pod's node affinity/selector.")
    result = explain(train_template(), message, CATALOG, nodes_per_group={"gaudi-spot-us-east-1a": 1})
    assert "all 8 habana.ai/gaudi on dl1.24xlarge nodes in us-east-1a are in use" in result.text, result.text


def test_a_pod_only_the_larger_type_fits_says_the_autoscaler_may_not_add_a_node(mixed_catalog: Catalog) -> None:
    template = {"nodeSelector": {"wf.dev/compute-class": "cpu", "wf.dev/capacity": "spot"},
                "container": {"image": "x", "resources": {"requests": {"cpu": "20", "memory": "1Gi"}}}}
    result = explain(template, "0/3 nodes are available: 3 Insufficient cpu.", mixed_catalog,
                     nodes_per_group={"cpu-spot-us-east-1a": 0})
    assert result.kind == "capacity"
    assert "it does not fit r5.4xlarge, which cluster-autoscaler may model the node group on" in result.text


@pytest.mark.parametrize(("message", "reason", "image"), [
    # Argo's message for a Pending pod is its first waiting container's reason and message (getPendingReason).
    ('ImagePullBackOff: Back-off pulling image "registry.invalid/none:1": ErrImagePull: failed to pull and unpack',
     "ImagePullBackOff", "registry.invalid/none:1"),
    ('ErrImagePull: failed to pull and unpack image "registry.invalid/none:1": dial tcp 127.0.0.1:9: connect: '
     "connection refused", "ErrImagePull", "registry.invalid/none:1"),
    ('ErrImageNeverPull: Container image "python:3.11" is not present with pull policy of Never', "ErrImageNeverPull",
     "python:3.11"),
    ("InvalidImageName: Failed to apply default image tag", "InvalidImageName", "python:3.11"),
])
def test_an_image_that_cannot_be_pulled_is_named_and_never_starts(message: str, reason: str, image: str) -> None:
    template = {"name": "train", "container": {"image": "python:3.11"}}
    problem = image_problem(template, message)
    assert problem is not None and problem.kind == "never"
    assert problem.text.startswith(f"image {image!r} cannot be pulled ({reason})"), problem.text
    assert problem.text.endswith(f"The kubelet said: {message}")


def test_a_step_waiting_for_a_node_has_no_image_problem() -> None:
    assert image_problem(train_template(), "Unschedulable: " + SCHEDULER) is None
    assert image_problem(train_template(), "PodInitializing") is None


def test_a_step_placed_on_the_real_nodes_waits_for_one_whatever_the_catalog_says() -> None:
    template = train_template()
    template["nodeSelector"]["wf.dev/real-node"] = "true"  # no node group has it: the catalog would say never
    result = explain(template, "Unschedulable: 0/4 nodes are available", CATALOG)
    assert result.kind == "capacity" and result.text.startswith("waiting for a real node of the local cluster")
