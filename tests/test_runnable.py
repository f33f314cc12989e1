"""Jobs that would compile but could never run are refused with their field: image references the kubelet cannot
parse, paths into Argo's or Kubernetes' places, volumes over them, a step name Argo refuses as a DAG task, a
memory or cpu too small to start, a NUL in a program's argument or environment."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from wf.core.errors import InputError
from wf.jobspec.images import REPOSITORY_NAME_MAX, reference_problem
from wf.jobspec.job import DIGIT_START, TrainingJob
from wf.jobspec.steps import Outputs, Resources, Step, Volume

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize("image", [
    "busybox", "busybox:1.36", "library/python:3.11-slim", "docker.io/library/python:3.11-slim",
    "ghcr.io/team/train:1.0", "localhost:5000/a/b:tag", "[::1]:5000/a/b", "127.0.0.1:5000/x", "Registry.Example.com/a",
    f"ghcr.io/team/train@{DIGEST}", f"ghcr.io/team/train:1.0@{DIGEST}", "a/b__c/d-e.f_g:T_1.x-y",
    "public.ecr.aws/neuron/pytorch-training-neuronx:2.1.2", "x" * 200, "a:" + "t" * 128,
])
def test_image_references_the_kubelet_parses_are_taken(image: str) -> None:
    assert reference_problem(image) is None


@pytest.mark.parametrize(("image", "words"), [
    ("ghcr.io/Team/train:1.0", "must be lowercase"),
    ("Busybox", "must be lowercase"),
    ("ghcr.io/team/train:1.0 ", "not an image reference"),
    (" busybox", "not an image reference"),
    ("ghcr.io/team/train:bad tag", "not an image reference"),
    ("ghcr.io/team//train", "not an image reference"),
    ("ghcr.io/team/-train", "not an image reference"),
    ("ghcr.io/team/train:", "not an image reference"),
    ("ghcr.io/team/train:" + "t" * 129, "not an image reference"),
    ("ghcr.io/tëam/train", "not an image reference"),
    ("busybox:1.36\n", "not an image reference"),
    ("ghcr.io/team/train@sha256:0123", "not an image reference"),  # under 32 hex digits: not even a digest
    ("ghcr.io/team/train@sha256:" + "0" * 40, "a sha256 digest is 64 lowercase hex digits"),
    ("ghcr.io/team/train@md5:" + "0" * 32, "digest algorithm 'md5'"),
    ("ab" * 32, "bare 64-digit hex identifier"),
    ("ghcr.io/" + "a" * (REPOSITORY_NAME_MAX + 1), "more than 255 characters"),
    ("a" * (REPOSITORY_NAME_MAX - len("library/") + 1), "more than 255 characters"),  # Docker Hub's library/ counts
])
def test_image_references_the_kubelet_refuses_say_why(image: str, words: str) -> None:
    problem = reference_problem(image)
    assert problem is not None and words in problem


def test_an_image_with_a_reference_is_left_to_the_reference_check(job_data: Any) -> None:
    data = job_data([{"name": "a", "command": ["x"], "image": "ghcr.io/team/{{workflow.parameters.repo}}:1"}],
                    parameters={"repo": "train"})
    TrainingJob.model_validate(data)


def _refusal(model: type[Any], data: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as exc:
        model.model_validate(data)
    return str(exc.value.errors()[0]["msg"])


@pytest.mark.parametrize(("path", "words"), [
    ("/out/../etc/passwd", "'..' segment"),
    ("/out/..", "'..' segment"),
    ("{{workflow.parameters.dir}}/../x", "'..' segment"),
    ("out/model", "not an absolute path"),
    ("/out/mo\0del", "NUL"),
    ("/var/run/secrets/kubernetes.io/serviceaccount/token", "reaches /var/run/secrets"),
    ("/var/run/secrets/eks.amazonaws.com/serviceaccount", "reaches /var/run/secrets"),
    ("/var/run/argo/argoexec", "reaches /var/run/argo"),
    ("/argo/inputs/artifacts/x", "reaches /argo"),
    ("/proc/self/environ", "reaches /proc"),
    ("/var", "reaches /var/run/argo"),  # the folder above: its artifact would hold the place
    ("/", "reaches"),
    ("//var/./run/secrets", "reaches /var/run/secrets"),
])
def test_output_paths_stay_out_of_argos_and_kubernetes_places(path: str, words: str) -> None:
    assert words in _refusal(Outputs, {"artifacts": {"o": path}})
    assert words in _refusal(Outputs, {"parameters": {"o": path}})


@pytest.mark.parametrize("path", ["/tmp/model", "/wf/out/x.json", "/var/run/mine", "/argonaut/x", "/variables",
                                  "{{workflow.parameters.dir}}/model", "/data/./x"])
def test_output_paths_of_a_steps_own_files_are_taken(path: str) -> None:
    Outputs.model_validate({"artifacts": {"o": path}, "parameters": {"p": path}})


@pytest.mark.parametrize(("path", "words"), [
    ("/var/run/argo", "inside /var/run/argo"),
    ("/var/run/argo/x", "inside /var/run/argo"),
    ("/argo", "inside /argo"),
    ("/argo/staging", "inside /argo"),
    ("/var/run/secrets/kubernetes.io/serviceaccount", "inside /var/run/secrets"),
    ("/proc/sys", "inside /proc"),
    ("/data/../var/run/argo", "'..' segment"),
    ("/data/..", "'..' segment"),
    ("data", "not an absolute path"),
    ("{{workflow.parameters.dir}}", "not an absolute path"),
    ("/", "whole filesystem"),
    ("//", "whole filesystem"),
])
def test_volumes_are_not_mounted_over_argos_paths(path: str, words: str) -> None:
    assert words in _refusal(Volume, {"name": "v", "mountPath": path, "emptyDir": {}})


@pytest.mark.parametrize("path", ["/data", "/dev/shm", "/var/run", "/var", "/wf/checkpoints"])
def test_volumes_elsewhere_are_taken(path: str) -> None:
    Volume.model_validate({"name": "v", "mountPath": path, "emptyDir": {}})


@pytest.mark.parametrize(("path", "words"), [("work", "not an absolute path"), ("/work/..", "'..' segment"),
                                             ("/wo\0rk", "NUL")])
def test_a_working_dir_is_absolute_and_names_its_place(path: str, words: str) -> None:
    assert words in _refusal(Step, {"name": "a", "command": ["x"], "workingDir": path})


@pytest.mark.parametrize("path", ["/work", "{{workflow.parameters.dir}}", "/work/{{item}}"])
def test_working_dirs_taken(path: str) -> None:
    Step.model_validate({"name": "a", "command": ["x"], "workingDir": path})


@pytest.mark.parametrize("memory", [1, 512, "4Mi", "12M", "12582911"])
def test_a_memory_no_runtime_starts_is_refused(memory: Any) -> None:
    assert "at least 12Mi" in _refusal(Resources, {"memory": memory})


@pytest.mark.parametrize("memory", ["12Mi", 12 * 2**20, "1Gi", "13M"])
def test_a_memory_at_the_floor_is_taken(memory: Any) -> None:
    Resources.model_validate({"memory": memory})


@pytest.mark.parametrize("cpu", ["100u", 0.0005, "999n"])
def test_a_cpu_under_a_thousandth_is_refused(cpu: Any) -> None:
    assert "at least 1m" in _refusal(Resources, {"cpu": cpu})


@pytest.mark.parametrize("cpu", ["1m", 0.001, "250m", 8])
def test_a_cpu_of_a_thousandth_or_more_is_taken(cpu: Any) -> None:
    Resources.model_validate({"cpu": cpu})


@pytest.mark.parametrize("where", ["command", "env"])
def test_a_nul_in_an_argument_or_environment_is_refused(job_data: Any, where: str) -> None:
    step: dict[str, Any] = {"name": "a", "command": ["python", "tr\0ain.py"] if where == "command" else ["x"]}
    if where == "env":
        step["env"] = {"MODE": "fa\0st"}
    with pytest.raises(ValidationError, match="NUL character"):
        TrainingJob.model_validate(job_data([step]))


def test_other_escaped_control_characters_in_text_are_taken(job_data: Any) -> None:
    TrainingJob.model_validate(job_data([{"name": "a", "command": ["printf", "a\tb\n\x1b[0m"]}]))


@pytest.mark.parametrize("section", ["steps", "onExit"])
def test_a_step_that_needs_others_cannot_start_with_a_digit(job_data: Any, section: str) -> None:
    steps = [{"name": "1prep", "command": ["x"]}, {"name": "2train", "command": ["x"], "needs": ["1prep"]}]
    data = job_data(steps) if section == "steps" else job_data(onExit=steps)
    with pytest.raises(InputError) as exc:
        TrainingJob.model_validate(data)
    assert [(p.field, p.message) for p in exc.value.problems] == [(f"spec.{section}[1].name", DIGIT_START)]


def test_a_digit_start_without_needs_is_taken(job_data: Any) -> None:
    """Argo refuses the name only on a task with `dependencies` (what `needs` compiles to)."""
    TrainingJob.model_validate(job_data([{"name": "1prep", "command": ["x"]},
                                         {"name": "train", "command": ["x"], "needs": ["1prep"]}]))


def test_a_path_or_image_a_parameter_completes_is_checked_with_its_default(job_data: Any) -> None:
    step = {"name": "a", "command": ["x"], "workingDir": "{{workflow.parameters.dir}}/w",
            "image": "ghcr.io/team/{{ workflow.parameters.repo }}:1",
            "outputs": {"artifacts": {"m": "{{workflow.parameters.dir}}/m"}}}
    with pytest.raises(InputError) as exc:
        TrainingJob.model_validate(job_data([step], parameters={"dir": "/argo/x/..", "repo": "Train"}))
    found = {p.field: p.message for p in exc.value.problems}
    assert found.keys() == {"spec.steps[0].workingDir", "spec.steps[0].image", "spec.steps[0].outputs.artifacts.m"}
    assert found["spec.steps[0].workingDir"].startswith("with the default dir='/argo/x/..': ")
    assert "must be lowercase" in found["spec.steps[0].image"]


def test_defaults_that_lead_somewhere_a_step_may_go_are_taken(job_data: Any) -> None:
    step = {"name": "a", "command": ["x"], "workingDir": "{{workflow.parameters.dir}}",
            "outputs": {"artifacts": {"m": "{{workflow.parameters.dir}}/{{workflow.name}}",
                                      "n": "{{workflow.parameters.dir}}"}}}
    TrainingJob.model_validate(job_data([step], parameters={"dir": "/out"}))
