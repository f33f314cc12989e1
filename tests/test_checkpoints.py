"""Checkpoints in the job spec: one location per step (and fan-out item) for every attempt, what the program is
told, the grace period inside Spot's notice, the catalog's stores and retention, and the refusals with lines."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from wf.compile.artifacts import lifecycle_configuration
from wf.compile.checkpoints import (
    APPLICATION_ATTEMPT_ENV,
    APPLICATION_ATTEMPT_INPUT,
    ATTEMPT_ENV,
    DIR_ENV,
    MAX_SPOT_GRACE_SECONDS,
    RESUME_ENV,
    RESUME_EXPRESSION,
    URI_ENV,
)
from wf.compile.interruptions import INTERRUPTION_ANNOTATION, INTERRUPTION_EXPRESSION
from wf.compile.workflow import compile_job
from wf.core.constants import RERUN_FROM_ANNOTATION, RETRIED_ANNOTATION
from wf.core.errors import InputError
from wf.jobspec.job import load_job
from wf.lint.documents import lint_paths
from wf.model.catalog import Catalog

ROOT = Path(__file__).resolve().parents[1]
CATALOG_FILE = ROOT / "eksctl" / "catalog.yaml"
BUCKET = "s3://ml-workflows-artifacts-123456789012/checkpoints"


def _templates(manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in manifest["spec"]["templates"]}


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}


def with_volume(catalog: Catalog, **volume: Any) -> Catalog:
    data = catalog.model_dump(by_alias=True, exclude_none=True)
    data["artifacts"]["checkpoints"] = {"keepDays": 3, "volumes": {"fsx": {"claim": "fsx-checkpoints", **volume}}}
    return Catalog.model_validate(data)


def test_every_attempt_gets_the_steps_location_its_numbers_and_a_grace_period(catalog: Catalog,
                                                                             make_job: Any) -> None:
    job = make_job([{"name": "train", "command": ["python", "train.py"], "checkpoint": {"path": "bert"}}],
                   retries=2)
    templates = _templates(compile_job(job, catalog))
    pod = templates["train"]
    env = _env(pod["container"])
    assert env[URI_ENV] == f"{BUCKET}/{{{{workflow.namespace}}}}/{{{{workflow.name}}}}/train/bert"
    assert env[ATTEMPT_ENV] == "{{retries}}"
    # After the step's first attempt (either count), or once `wf retry` marked the workflow (its Retry nodes new).
    assert env[RESUME_ENV] == (f"{{{{=asInt(retries) + asInt(inputs.parameters['{APPLICATION_ATTEMPT_INPUT}']) > 0 "
                               f"|| workflow.annotations.json contains '\"{RETRIED_ANNOTATION}\":' "
                               "? 'true' : 'false'}}")
    assert env[APPLICATION_ATTEMPT_ENV] == f"{{{{inputs.parameters.{APPLICATION_ATTEMPT_INPUT}}}}}"
    assert {"name": APPLICATION_ATTEMPT_INPUT, "default": "0"} in pod["inputs"]["parameters"]
    # The application-retry wrapper hands its own `retries` down: the pod's count only its interruptions.
    (task,) = templates["train-Attempts"]["dag"]["tasks"]
    assert {"name": APPLICATION_ATTEMPT_INPUT, "value": "{{retries}}"} in task["arguments"]["parameters"]
    assert json.loads(pod["podSpecPatch"])["terminationGracePeriodSeconds"] == 90
    # The program writes to the bucket with the namespace's role.
    assert compile_job(job, catalog, namespace="ml-training")["spec"]["serviceAccountName"] == \
        "wf-workflow"


@pytest.mark.parametrize(("annotations", "retried"), [
    ({}, False),
    ({INTERRUPTION_ANNOTATION: INTERRUPTION_EXPRESSION, RERUN_FROM_ANNOTATION: "train"}, False),
    ({"note": RETRIED_ANNOTATION}, False),  # the key's text in a value, bare or as JSON
    ({"note": json.dumps({RETRIED_ANNOTATION: "1"})}, False),
    ({"kubectl.kubernetes.io/last-applied-configuration": json.dumps(
        {"metadata": {"annotations": {RETRIED_ANNOTATION: "1"}}})}, False),
    ({RETRIED_ANNOTATION: "1"}, True),
    ({INTERRUPTION_ANNOTATION: INTERRUPTION_EXPRESSION, RETRIED_ANNOTATION: "12", "z": "last"}, True),
])
def test_wf_resume_finds_the_retry_mark_as_a_key_of_the_workflows_annotations(annotations: dict[str, str],
                                                                             retried: bool) -> None:
    # What the expression searches: Argo's `workflow.annotations.json`, Go's json.Marshal of the workflow's
    # annotations (keys sorted, no spaces, a value's quotes escaped).
    (text,) = re.findall(r"workflow\.annotations\.json contains '([^']*)'", RESUME_EXPRESSION)
    assert (text in json.dumps(annotations, sort_keys=True, separators=(",", ":"))) is retried


def test_a_program_writing_to_the_store_may_take_a_local_stores_endpoint_and_keys(catalog: Catalog,
                                                                                make_job: Any) -> None:
    """On the local cluster the namespace's Secret names its S3 store (wf.cluster.artifact_store); on EKS there
    is none (optional) and the pod's role serves: one compiled workflow for both. Only a program that writes its
    checkpoints to the bucket gets it, as only it keeps the pod's role on EKS."""
    job = make_job([{"name": "s3", "command": ["x"], "checkpoint": {}},
                    {"name": "volume", "command": ["x"], "checkpoint": {"store": "fsx"}},
                    {"name": "plain", "command": ["x"]}])
    templates = _templates(compile_job(job, with_volume(catalog)))
    assert templates["s3"]["container"]["envFrom"] == [{"secretRef": {"name": "wf-artifact-store",
                                                                      "optional": True}}]
    assert "envFrom" not in templates["volume"]["container"] and "envFrom" not in templates["plain"]["container"]


def test_a_fan_out_gets_a_location_per_item_that_no_item_text_can_escape(catalog: Catalog, make_job: Any) -> None:
    job = make_job([{"name": "shard", "command": ["x"], "forEach": ["../a", "b"]}], checkpoint={})
    pod = _templates(compile_job(job, catalog))["shard"]
    location = _env(pod["container"])[URI_ENV]
    assert location.endswith("/shard/{{=sprig.trunc(16, sprig.sha1sum(inputs.parameters['item']))}}")
    assert {"name": "item"} in pod["inputs"]["parameters"]


def test_unchecked_steps_are_compiled_as_before(catalog: Catalog, make_job: Any) -> None:
    job = make_job([{"name": "a", "command": ["x"]}], retries=1)
    templates = _templates(compile_job(job, catalog))
    assert "inputs" not in templates["a"]
    assert "env" not in templates["a"]["container"]
    assert "terminationGracePeriodSeconds" not in json.loads(templates["a"]["podSpecPatch"])  # the Spot fallback's
    assert "arguments" not in templates["a-Attempts"]["dag"]["tasks"][0]


def test_a_shared_volume_is_mounted_where_the_catalog_says(catalog: Catalog, make_job: Any) -> None:
    job = make_job([{"name": "train", "command": ["x"], "checkpoint": {"store": "fsx"}}])
    manifest = compile_job(job, with_volume(catalog, mountPath="/fsx"))
    pod = _templates(manifest)["train"]
    assert _env(pod["container"])[DIR_ENV] == "/fsx/{{workflow.namespace}}/{{workflow.name}}/train"
    assert {"name": "wf-checkpoints-fsx", "mountPath": "/fsx"} in pod["container"]["volumeMounts"]
    assert {"name": "wf-checkpoints-fsx", "persistentVolumeClaim": {"claimName": "fsx-checkpoints"}} in \
        manifest["spec"]["volumes"]


def test_the_launcher_and_every_worker_share_the_location(catalog: Catalog, make_job: Any) -> None:
    job = make_job([{"name": "pretrain", "command": ["mpirun", "x"], "compute": "gaudi", "nodes": 2,
                     "checkpoint": {"gracePeriod": "60s"}}], retries=1)
    template = _templates(compile_job(job, catalog))["pretrain"]
    mpijob = yaml.safe_load(template["resource"]["manifest"])
    replicas = mpijob["spec"]["mpiReplicaSpecs"]
    envs = [_env(r["template"]["spec"]["containers"][0]) for r in replicas.values()]
    assert envs[0] == envs[1] and envs[0][URI_ENV].endswith("/pretrain")
    assert all(r["template"]["spec"]["terminationGracePeriodSeconds"] == 60 for r in replicas.values())
    assert {"name": APPLICATION_ATTEMPT_INPUT, "default": "0"} in template["inputs"]["parameters"]


@pytest.mark.parametrize(("checkpoint", "field", "message"), [
    ({"store": "efs"}, "spec.steps[0].checkpoint.store", "unknown checkpoint store 'efs'; the catalog has: "
                                                         "artifacts, fsx"),
    ({"store": "fsx"}, "spec.steps[0].checkpoint.store", "volume 'fsx' is not reachable from compute class 'cpu'"),
    ({"gracePeriod": "2m"}, "spec.steps[0].checkpoint.gracePeriod",
     f"120s does not fit inside Spot's 120s interruption notice: at most {MAX_SPOT_GRACE_SECONDS}s"),
])
def test_bad_checkpoints_are_refused_with_file_line_and_field(catalog: Catalog, write: Any, checkpoint: dict[str, Any],
                                                             field: str, message: str) -> None:
    path = write("job.yaml", f"""
        apiVersion: wf/v1
        kind: TrainingJob
        metadata: {{name: demo}}
        spec:
          image: img
          compute: cpu
          steps:
            - name: a
              command: [x]
              checkpoint: {json.dumps(checkpoint)}
    """)
    with pytest.raises(InputError) as exc:
        compile_job(load_job(path), with_volume(catalog, computeClasses=["gaudi"]))
    (problem,) = exc.value.problems
    assert (problem.file, problem.line, problem.field) == (str(path), 10, field)
    assert message in problem.message


def test_a_grace_period_beyond_the_notice_is_fine_on_demand(catalog: Catalog, make_job: Any) -> None:
    job = make_job([{"name": "a", "command": ["x"], "capacity": "on-demand", "checkpoint": {"gracePeriod": "5m"}}])
    pod = _templates(compile_job(job, catalog))["a"]
    assert json.loads(pod["podSpecPatch"]) == {"terminationGracePeriodSeconds": 300}


@pytest.mark.parametrize("path", ["/abs", "../up", "a/../../b", "s3://elsewhere/x"])
def test_a_location_outside_the_jobs_prefix_is_refused_at_lint(write: Any, path: str) -> None:
    job = write("job.yaml", f"""
        apiVersion: wf/v1
        kind: TrainingJob
        metadata: {{name: demo}}
        spec:
          image: img
          compute: cpu
          checkpoint: {{path: {json.dumps(path)}}}
          steps:
            - name: a
              command: [x]
    """)
    (problem,) = lint_paths([job], CATALOG_FILE).errors
    assert (problem.line, problem.field) == (7, "spec.checkpoint.path")
    assert "relative path under the job's own checkpoint prefix" in problem.message


def test_a_catalog_without_an_artifact_store_cannot_hold_checkpoints(catalog: Catalog, make_job: Any) -> None:
    job = make_job([{"name": "a", "command": ["x"]}], checkpoint={})
    with pytest.raises(InputError, match="spec.checkpoint.store: the catalog names no artifact store"):
        compile_job(job, catalog.model_copy(update={"artifacts": None}))


def test_checkpoints_expire_after_the_catalogs_days(catalog: Catalog) -> None:
    from wf.cluster.install import pinned_versions
    from wf.render import platform

    store = with_volume(catalog).artifacts
    assert store is not None
    rules = lifecycle_configuration(store)["Rules"]
    assert rules == [{"ID": "wf-checkpoints", "Filter": {"Prefix": "checkpoints/"}, "Status": "Enabled",
                      "Expiration": {"Days": 3}, "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1}}]
    # Rendered for the platform beside its manifests, not one of them (applied to the bucket with the AWS CLI).
    files = platform.render(with_volume(catalog), pinned_versions(), "123456789012", "catalog.yaml")
    assert json.loads(files["s3-lifecycle.json"])["Rules"] == rules
    assert "s3-lifecycle.json" not in files["kustomization.yaml"]


def test_checkpointed_steps_are_valid_argo(catalog: Catalog, make_job: Any, argo_schemas: Any) -> None:
    from wf import argo

    job = make_job([{"name": "train", "command": ["x"], "forEach": {"count": 2}, "checkpoint": {"store": "fsx"}},
                    {"name": "pretrain", "command": ["mpirun", "x"], "compute": "gaudi", "nodes": 2}],
                   retries=1, checkpoint={})
    manifest = compile_job(job, with_volume(catalog))
    assert argo.validate(manifest) == []
    assert argo_schemas.json_errors("v4", manifest) == []
    assert argo_schemas.json_errors("v3", manifest) == []
    assert argo_schemas.crd_errors(manifest) == []


def test_a_checkpoint_volume_names_classes_the_catalog_has(catalog: Catalog) -> None:
    data = catalog.model_dump(by_alias=True, exclude_none=True)
    data["artifacts"]["checkpoints"] = {"volumes": {"fsx": {"claim": "fsx", "computeClasses": ["gaudi", "tpu"]}}}
    with pytest.raises(InputError, match=r"artifacts.checkpoints.volumes.fsx.computeClasses\[1\]: unknown compute "
                                         "class 'tpu'"):
        Catalog.model_validate(data)


@pytest.mark.parametrize(("mount", "words"), [("/var/run/argo/ckpt", "inside /var/run/argo"),
                                              ("/wf/../argo", "'..' segment"), ("ckpt", "not an absolute path")])
def test_a_checkpoint_volume_is_mounted_where_any_volume_may_be(catalog: Catalog, mount: str, words: str) -> None:
    """The catalog's volumes are mounted in steps' containers too: one rule set (wf.core.paths) for both."""
    data = catalog.model_dump(by_alias=True, exclude_none=True)
    data["artifacts"]["checkpoints"] = {"volumes": {"fsx": {"claim": "fsx", "mountPath": mount}}}
    with pytest.raises(ValidationError, match=re.escape(words)):
        Catalog.model_validate(data)


# The flagship examples' wrappers, run with bash as their pods run them: the compiled command with the job's
# parameters, its input artifact and the kubelet's $(VAR) expansion filled in, `mpirun` a stand-in that records
# its arguments and saves checkpoints as run_pretraining.py does (on SIGTERM too, then exit 0).
_FAKE_MPIRUN = r'''#!/usr/bin/env python3
import json, os, signal, sys, time
out = next(a.split("=", 1)[1] for a in sys.argv if a.startswith("--output_dir="))
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\n")
def save(names):
    for name in names.split():
        with open(os.path.join(out, name), "w") as f:
            f.write(name)
if os.environ.get("FAKE_ON_TERM"):
    signal.signal(signal.SIGTERM, lambda *_: (time.sleep(0.3), save(os.environ["FAKE_ON_TERM"]), sys.exit(0)))
    open(os.environ["FAKE_LOG"] + ".started", "w").close()
    time.sleep(60)
save(os.environ.get("FAKE_SAVES", ""))
sys.exit(int(os.environ.get("FAKE_EXIT", "0")))
'''


def _example_command(name: str, step: str, catalog: Catalog, parameters: dict[str, str]) -> list[str]:
    manifest = compile_job(load_job(ROOT / "examples" / f"{name}.yaml"), catalog)
    template = _templates(manifest)[step]
    if "resource" in template:  # a multi-node step: the launcher runs the command
        mpijob = yaml.safe_load(template["resource"]["manifest"])
        command = mpijob["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["command"]
    else:
        command = template["container"]["command"]
    values = {f"{{{{workflow.parameters.{p['name']}}}}}": parameters.get(p["name"], p.get("value", ""))
              for p in manifest["spec"]["arguments"]["parameters"]}
    values |= {a["path"]: parameters[a["name"]] for a in (template.get("inputs") or {}).get("artifacts") or []}
    filled = []
    for arg in command:
        for reference, value in values.items():
            arg = arg.replace(reference, value)
        filled.append(arg)
    return filled


def _run_wrapper(tmp_path: Path, command: list[str], env: dict[str, str], on_term: bool = False
                 ) -> tuple[int, list[list[str]]]:
    import os
    import signal
    import subprocess
    import time

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / "mpirun"
    fake.write_text(_FAKE_MPIRUN)
    fake.chmod(0o755)
    log = tmp_path / "mpirun.log"
    log.unlink(missing_ok=True)
    full = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_LOG": str(log), **env}
    # The kubelet expands $(VAR) in a container's command from its environment.
    command = [re.sub(r"\$\((\w+)\)", lambda m: full.get(m[1], m[0]), arg) for arg in command]
    process = subprocess.Popen(command, env=full, start_new_session=True)
    if on_term:  # Argo's executor signals the command's process group
        deadline = time.monotonic() + 30
        while not Path(f"{log}.started").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        os.killpg(process.pid, signal.SIGTERM)
    code = process.wait(timeout=60)
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return code, calls


@pytest.mark.parametrize(("example", "step"), [("bert-large-pretrain", "pretrain-phase1"),
                                               ("bert-large-multinode", "pretrain-phase1")])
def test_a_flagship_training_step_resumes_only_when_wf_resume_says_and_a_checkpoint_is_there(
        example: str, step: str, catalog: Catalog, tmp_path: Path) -> None:
    results = tmp_path / "results"
    command = _example_command(example, step, catalog, {"results": str(results), "phase1_steps": "400"})
    checkpoints = tmp_path / "ckpt"
    checkpoints.mkdir()
    env = {DIR_ENV: str(checkpoints), RESUME_ENV: "false", "FAKE_SAVES": "ckpt_200.pt ckpt_400.pt"}
    code, [call] = _run_wrapper(tmp_path, command, env)
    assert code == 0 and "--resume_from_checkpoint" not in call
    assert f"--output_dir={checkpoints}" in call and call[-1] == "--use_torch_compile"  # the program's own arguments
    if example == "bert-large-pretrain":  # the final checkpoint, handed on as phase 1's artifact
        assert (results / "phase1" / "ckpt_400.pt").read_text() == "ckpt_400.pt"
    code, [call] = _run_wrapper(tmp_path, command, {**env, RESUME_ENV: "true"})  # a retry finds ckpt_200/400
    assert code == 0 and call[-1] == "--resume_from_checkpoint"
    for saved in checkpoints.iterdir():
        saved.unlink()
    code, [call] = _run_wrapper(tmp_path, command, {**env, RESUME_ENV: "true"})  # died before its first save
    assert code == 0 and "--resume_from_checkpoint" not in call
    code, _ = _run_wrapper(tmp_path, command, {**env, "FAKE_EXIT": "3"})
    assert code == 3
    # SIGTERM: the wrapper waits while the program saves, and the program's exit 0 short of the last step is 143.
    for saved in checkpoints.iterdir():
        saved.unlink()
    code, _ = _run_wrapper(tmp_path, command, {**env, "FAKE_ON_TERM": "ckpt_237.pt"}, on_term=True)
    assert code == 143 and (checkpoints / "ckpt_237.pt").exists()


def test_phase_two_starts_from_phase_one_s_checkpoint_and_resumes_from_its_own(catalog: Catalog,
                                                                               tmp_path: Path) -> None:
    phase1 = tmp_path / "phase1.pt"
    phase1.write_text("phase 1")
    command = _example_command("bert-large-pretrain", "pretrain-phase2", catalog, {
        "phase1_steps": "7038", "phase2_steps": "1563", "pretrain-phase1_checkpoint": str(phase1)})
    checkpoints = tmp_path / "ckpt"
    env = {DIR_ENV: str(checkpoints), RESUME_ENV: "false", "FAKE_SAVES": "ckpt_7238.pt ckpt_8601.pt"}
    code, [call] = _run_wrapper(tmp_path, command, env)
    assert code == 0 and "--resume_from_checkpoint" in call and "--phase2" in call
    assert (checkpoints / "ckpt_7038.pt").read_text() == "phase 1"  # where upstream's phase 2 resumes from
    (checkpoints / "ckpt_7038.pt").unlink()
    code, _ = _run_wrapper(tmp_path, command, {**env, RESUME_ENV: "true"})
    assert code == 0 and not (checkpoints / "ckpt_7038.pt").exists()  # its own checkpoints, not phase 1's again
    code, _ = _run_wrapper(tmp_path, command, {**env, RESUME_ENV: "true", "FAKE_SAVES": "ckpt_7238.pt"})
    assert code == 0  # ckpt_8601.pt is still there from the run before
    (checkpoints / "ckpt_8601.pt").unlink()
    code, _ = _run_wrapper(tmp_path, command, {**env, RESUME_ENV: "true", "FAKE_SAVES": "ckpt_7438.pt"})
    assert code == 143  # exit 0 short of phase 2's last step


def test_a_multi_node_step_s_volume_must_reach_its_launcher_s_class(catalog: Catalog, make_job: Any) -> None:
    """The launcher (on cpu) mounts the step's checkpoint volume with the workers (on gaudi)."""
    job = make_job([{"name": "pretrain", "command": ["mpirun", "x"], "compute": "gaudi", "nodes": 2,
                     "checkpoint": {"store": "fsx"}}], retries=1)
    with pytest.raises(InputError, match=r"spec.steps\[0\].checkpoint.store: volume 'fsx' is not reachable from "
                                         r"compute class 'cpu', where the MPI launcher runs and mounts it; it serves "
                                         r"gaudi"):
        compile_job(job, with_volume(catalog, computeClasses=["gaudi"]))
    compile_job(job, with_volume(catalog, computeClasses=["gaudi", "cpu"]))
    compile_job(job, with_volume(catalog))
