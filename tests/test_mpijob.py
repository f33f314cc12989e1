"""Multi-node steps (`nodes: N`): the compiled resource template and MPIJob, lint's checks with file, line and
field, and the step kind's Kueue demand, read-back and cleanup. That the conditions work against the real operator
and Argo's own wait: tests/e2e/test_mpijob.py."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

import wf.compile.kinds.mpijob
from upstream import MPI_OPERATOR
from wf.compile.interruptions import SPOT_FALLBACK_ANNOTATION
from wf.compile.kinds import kind_of, kind_of_template
from wf.compile.kinds.base import Cleanup
from wf.compile.kinds.mpijob import (
    FAILURE_CONDITION,
    JOB_NAME_LABEL,
    JOB_ROLE_LABEL,
    MPIJOB_STEP,
    RELEASE_CONTAINER,
    RELEASE_TIMEOUT,
    SUCCESS_CONDITION,
    WORKER_LOST_MESSAGE,
)
from wf.compile.kinds.pod import POD
from wf.compile.readback import CompiledPlacement
from wf.compile.workflow import compile_job
from wf.core.constants import (
    ARGO_MAIN_CONTAINER,
    CAPACITY_LABEL,
    CLASS_LABEL,
    MPIJOB,
    MPIJOB_LABEL,
    STEP_LABEL,
    WORKFLOW_NAME_LABEL,
    ZONE_LABEL,
)
from wf.core.constants import KUEUE_LOCAL_QUEUE as LOCAL_QUEUE
from wf.core.constants import KUEUE_PRIORITY_LABEL as PRIORITY_LABEL
from wf.core.constants import KUEUE_QUEUE_LABEL as QUEUE_LABEL
from wf.core.errors import InputError
from wf.jobspec.job import TrainingJob
from wf.model.catalog import Catalog

ROOT = Path(__file__).resolve().parents[1]
CRD = "manifests/base/kubeflow.org_mpijobs.yaml"  # in the operator's module


def _job(steps: list[dict[str, Any]], **spec: Any) -> TrainingJob:
    return TrainingJob.model_validate({
        "apiVersion": "wf/v1", "kind": "TrainingJob", "metadata": {"name": "bert", "labels": {"team": "nlp"}},
        "spec": {"image": "habana:1.21", "compute": "gaudi", "steps": steps, **spec},
    })


def _step(**fields: Any) -> dict[str, Any]:
    return {"name": "train", "command": ["mpirun", "-n", "16", "python3", "train.py"], "nodes": 2, **fields}


def _template(job: TrainingJob, catalog: Catalog) -> dict[str, Any]:
    manifest = compile_job(job, catalog)
    return next(t for t in manifest["spec"]["templates"] if t["name"] == job.spec.steps[0].name)


def test_a_multi_node_step_is_a_resource_template_creating_an_owned_mpijob(catalog: Catalog) -> None:
    template = _template(_job([_step(timeout="2h")], retries=1), catalog)
    resource = template["resource"]
    assert resource["action"] == "create" and resource["setOwnerReference"] is True and "flags" not in resource
    assert resource["successCondition"] == SUCCESS_CONDITION
    assert resource["failureCondition"] == FAILURE_CONDITION
    assert template["timeout"] == "7200s"
    # Interruptions are retried on their own budget, around the whole step (a new MPIJob each time).
    assert template["retryStrategy"]["limit"] == 5
    mpijob = yaml.safe_load(resource["manifest"])
    assert mpijob["apiVersion"] == MPIJOB.api_version and mpijob["kind"] == MPIJOB.kind
    # One name for every attempt of the step's run (so one object at a time), its own per workflow.
    name = "bert-train-{{=sprig.trunc(10, sprig.sha1sum(workflow.name + '/train'))}}"
    assert mpijob["metadata"] == {**mpijob["metadata"], "name": name} and "generateName" not in mpijob["metadata"]
    assert template["metadata"]["labels"][MPIJOB_LABEL] == name  # Argo's resource pod, which the launcher joins
    # Before argoexec creates it, the pod's init container deletes the one an earlier attempt left, with its pods
    # (foreground), and waits until it is gone, as Argo's executor (the token Argo mounts for its own containers).
    (release,) = template["initContainers"]
    assert release["name"] == RELEASE_CONTAINER
    assert release["image"] == f"registry.k8s.io/kubectl:v{catalog.cluster.version}.0"  # the cluster's minor
    assert "command" not in release  # the image's entrypoint is kubectl (it has no shell)
    assert release["args"] == ["delete", "mpijobs.v2beta1.kubeflow.org", name, "--namespace={{workflow.namespace}}",
                               "--ignore-not-found", "--cascade=foreground", "--wait", f"--timeout={RELEASE_TIMEOUT}"]
    assert release["volumeMounts"] == [{"name": "wf-release-token", "readOnly": True,
                                        "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]
    # The Secret Argo mounts as `exec-sa-token` in its own containers, which a template may not mount itself.
    assert template["volumes"] == [{"name": "wf-release-token", "secret": {
        "secretName": "wf-mpijob-executor.service-account-token"}}]
    assert template["executor"] == {"serviceAccountName": "wf-mpijob-executor"}  # whose token that is
    assert release["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    assert release["terminationMessagePolicy"] == "FallbackToLogsOnError"  # kubectl's error in Argo's message
    assert mpijob["metadata"]["labels"][WORKFLOW_NAME_LABEL] == "{{workflow.name}}"
    assert "&" not in resource["manifest"] and "*id" not in resource["manifest"]  # no YAML anchors
    spec = mpijob["spec"]
    assert spec["slotsPerWorker"] == 8  # default: the class's accelerators per node
    assert spec["runPolicy"] == {"backoffLimit": 0, "cleanPodPolicy": "Running"}
    assert spec["launcherCreationPolicy"] == "WaitForWorkersReady"


def test_workers_hold_whole_nodes_one_per_node_in_one_zone(catalog: Catalog) -> None:
    mpijob = yaml.safe_load(_template(_job([_step()]), catalog)["resource"]["manifest"])
    worker = mpijob["spec"]["mpiReplicaSpecs"]["Worker"]
    assert worker["replicas"] == 2 and worker["restartPolicy"] == "Never"
    pod = worker["template"]["spec"]
    main = pod["containers"][0]
    assert main["name"] == ARGO_MAIN_CONTAINER and "command" not in main  # the operator's sshd, which mpirun reaches
    limits = main["resources"]["limits"]
    assert limits["habana.ai/gaudi"] == "8" and limits["vpc.amazonaws.com/efa"] == "4"
    assert limits["hugepages-2Mi"] == "42000Mi" and limits["memory"] == "640Gi"  # the placement of 8 cards
    assert main["securityContext"] == {"allowPrivilegeEscalation": False,
                                       "capabilities": {"drop": ["ALL"], "add": ["SYS_NICE"]}}
    assert pod["hostIPC"] is True and pod["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
    assert pod["nodeSelector"][CLASS_LABEL] == "gaudi"
    assert pod["tolerations"] == [{"key": "habana.ai/gaudi", "operator": "Equal", "value": "true",
                                   "effect": "NoSchedule"}]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": ZONE_LABEL, "operator": "In", "values": ["us-east-1a"]}]}]
    (anti,) = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti["topologyKey"] == "kubernetes.io/hostname"
    assert anti["labelSelector"] == {"matchLabels": {JOB_ROLE_LABEL: "worker"}}
    assert anti["matchLabelKeys"] == [JOB_NAME_LABEL]


def test_the_launcher_runs_the_command_on_the_cpu_class(catalog: Catalog) -> None:
    template = _template(_job([_step(processesPerNode=4, env={"A": "1"})]), catalog)
    mpijob = yaml.safe_load(template["resource"]["manifest"])
    assert mpijob["spec"]["slotsPerWorker"] == 4
    launcher = mpijob["spec"]["mpiReplicaSpecs"]["Launcher"]
    assert launcher["replicas"] == 1
    pod = launcher["template"]["spec"]
    main = pod["containers"][0]
    assert main["command"] == ["mpirun", "-n", "16", "python3", "train.py"]
    assert main["image"] == "habana:1.21" and main["env"] == [{"name": "A", "value": "1"}]
    assert main["resources"]["requests"] == {"cpu": "1", "memory": "2Gi"}
    assert main["securityContext"]["capabilities"] == {"drop": ["ALL"]}  # hardened, nothing added back
    assert "hostIPC" not in pod and "tolerations" not in pod
    assert pod["nodeSelector"][CLASS_LABEL] == "cpu"
    labels = launcher["template"]["metadata"]["labels"]
    assert labels[STEP_LABEL] == "train" and labels["team"] == "nlp" and labels[CLASS_LABEL] == "cpu"
    # Its loss ends the gang's attempt: On-Demand, which the cpu class offers, like Argo's resource pod...
    assert pod["nodeSelector"][CAPACITY_LABEL] == labels[CAPACITY_LABEL] == "on-demand"
    assert template["nodeSelector"] == {k: v for k, v in pod["nodeSelector"].items()}
    # ... on whose node it asks to run (where there is room), so that the node's loss is the loss of Argo's pod.
    (term,) = pod["affinity"]["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"] == {"topologyKey": "kubernetes.io/hostname", "labelSelector": {
        "matchLabels": {MPIJOB_LABEL: mpijob["metadata"]["name"]}}}
    assert "podAntiAffinity" not in pod["affinity"] and "nodeAffinity" not in pod["affinity"]


def test_each_fan_out_item_runs_an_mpijob_of_its_own_named_within_a_dns_label(catalog: Catalog) -> None:
    step = "pretrain-with-a-rather-long-step-name"
    template = _template(_job([_step(name=step, forEach=["en", "de"])]), catalog)
    name = yaml.safe_load(template["resource"]["manifest"])["metadata"]["name"]
    # The item reaches the template though the command never reads it: the name hashes it.
    assert {"name": "item"} in template["inputs"]["parameters"]
    prefix = "bert-pretrain-with-a-rather-long-step-n"
    assert name == (f"{prefix}-{{{{=sprig.trunc(10, sprig.sha1sum(workflow.name + '/{step}' + '/' + "
                    "inputs.parameters['item']))}}")
    # The operator's longest name, a worker's pod and hostname "<name>-worker-NN", stays a DNS label.
    assert len(f"{prefix}-{'0' * 10}-worker-99") <= 63


def test_the_mpijob_is_valid_under_the_operators_crd(catalog: Catalog) -> None:
    from jsonschema import Draft4Validator

    crd = yaml.safe_load(MPI_OPERATOR.file(CRD).read_text())
    schema = next(v for v in crd["spec"]["versions"] if v["name"] == "v2beta1")["schema"]["openAPIV3Schema"]
    job = _job([_step()], volumes=[{"name": "shm", "mountPath": "/dev/shm", "emptyDir": {"medium": "Memory"}}])
    mpijob = yaml.safe_load(_template(job, catalog)["resource"]["manifest"])
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in Draft4Validator(schema).iter_errors(mpijob)]
    assert errors == []
    assert mpijob["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["volumes"] == [
        {"name": "shm", "emptyDir": {"medium": "Memory"}}]


def test_argos_failure_message_tells_a_lost_worker_from_a_failed_launcher() -> None:
    # Argo reports "failure condition '{<key> gt [0]}' evaluated true" naming the requirement that matched (the
    # e2e test reads the real message); the worker's keys carry the interruption signs, the launcher's none.
    from wf.cluster.resource_conditions import parse
    from wf.compile.interruptions import is_interruption

    keys = [r.key for r in parse(FAILURE_CONDITION)]  # as Argo checks them: sorted by key
    assert keys == ["metadata.annotations.wf-worker-lost", "status.replicaStatuses.Launcher.failed",
                    "status.replicaStatuses.Worker.failed"]
    assert [k for k in keys if WORKER_LOST_MESSAGE in k] == ["metadata.annotations.wf-worker-lost"]
    assert [k for k in keys if is_interruption(f"failure condition '{{{k} gt [0]}}' evaluated true")] == [
        "metadata.annotations.wf-worker-lost", "status.replicaStatuses.Worker.failed"]
    assert all(re.fullmatch(r"[A-Za-z0-9.-]+", k) for k in keys)  # label-selector keys: no array paths


def test_the_launcher_plays_a_checkpointing_program_and_the_workers_do_not(catalog: Catalog) -> None:
    # On the local cluster the simulated executor plays the checkpoints of mpirun's program in the launcher; the
    # workers are the SSH servers it reaches, and Argo's resource pod only waits on the MPIJob.
    from wf.core.constants import SIM_CHECKPOINTS, SIM_DURATION

    template = _template(_job([_step(annotations={SIM_DURATION: "40s", SIM_CHECKPOINTS: "8"})],
                              checkpoint={}), catalog)
    replicas = yaml.safe_load(template["resource"]["manifest"])["spec"]["mpiReplicaSpecs"]
    launcher = replicas["Launcher"]["template"]["metadata"]["annotations"]
    assert (launcher[SIM_DURATION], launcher[SIM_CHECKPOINTS]) == ("40s", "8")
    assert SIM_CHECKPOINTS not in replicas["Worker"]["template"]["metadata"]["annotations"]
    assert not set(template["metadata"].get("annotations") or {}) & {SIM_DURATION, SIM_CHECKPOINTS}


@pytest.mark.parametrize(("step", "field", "message"), [
    (_step(compute="cpu"), "nodes", "compute class 'cpu' has no accelerators"),
    (_step(nodes=17), "nodes", "its node groups hold at most 16 nodes (maxSize)"),
    (_step(accelerators=4), "accelerators", "leave accelerators out or give 8"),
    ({"name": "train", "command": ["x"], "processesPerNode": 2}, "processesPerNode", "needs nodes"),
])
def test_impossible_multi_node_steps_are_errors_at_their_field(catalog: Catalog, step: dict[str, Any], field: str,
                                                               message: str) -> None:
    with pytest.raises(InputError) as caught:
        compile_job(_job([step]), catalog)
    problems = [(p.field, p.message) for p in caught.value.problems]
    assert any(f == f"spec.steps[0].{field}" and message in m for f, m in problems), problems


def test_wf_lint_names_file_line_and_field(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({
        "apiVersion": "wf/v1", "kind": "TrainingJob", "metadata": {"name": "bert"},
        "spec": {"image": "img", "compute": "cpu", "steps": [_step()]},
    }, sort_keys=False))
    result = subprocess.run([sys.executable, "-m", "wf", "lint", str(path), "--catalog",
                             str(ROOT / "eksctl" / "catalog.yaml")], capture_output=True, text=True, check=False)
    assert result.returncode == 1, result.stdout + result.stderr  # findings (DESIGN.md exit codes)
    out = result.stdout + result.stderr
    assert re.search(r"job\.yaml:\d+.*spec\.steps\[0\]\.nodes.*has no accelerators", out), out
    assert "Traceback" not in out


def test_a_queued_mpijob_is_one_kueue_workload(catalog: Catalog) -> None:
    # perception's namespace: Kueue's MPIJob integration admits launcher and workers together, from the labels on
    # the MPIJob; labels on its pods would make each a plain-pod workload of its own (a partial gang holds quota).
    job = TrainingJob.model_validate({"apiVersion": "wf/v1", "kind": "TrainingJob",
                                      "metadata": {"name": "bert", "namespace": "perception"},
                                      "spec": {"image": "habana:1.21", "compute": "gaudi", "steps": [_step()]}})
    template = _template(job, catalog)
    mpijob = yaml.safe_load(template["resource"]["manifest"])
    assert mpijob["metadata"]["labels"][QUEUE_LABEL] == LOCAL_QUEUE
    assert mpijob["metadata"]["labels"][PRIORITY_LABEL] == "normal"
    for replica in mpijob["spec"]["mpiReplicaSpecs"].values():
        labels = replica["template"]["metadata"]["labels"]
        assert QUEUE_LABEL not in labels and PRIORITY_LABEL not in labels, labels
    assert "suspend" not in mpijob["spec"]["runPolicy"]  # Kueue's webhook suspends it until admission
    # Argo's resource pod is a workload of its own in the team's queue (its namespace's default queue would
    # take it anyway): it asks for no accelerators, so it never waits behind the gang.
    assert template["metadata"]["labels"][QUEUE_LABEL] == LOCAL_QUEUE
    unqueued = yaml.safe_load(_template(_job([_step()]), catalog)["resource"]["manifest"])
    assert QUEUE_LABEL not in unqueued["metadata"]["labels"]


def test_a_multi_node_step_is_placed_once(catalog: Catalog, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    original = wf.compile.kinds.mpijob.place_step

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return original(*args, **kwargs)

    monkeypatch.setattr(wf.compile.kinds.mpijob, "place_step", counting)
    _template(_job([_step()]), catalog)
    assert len(calls) == 1


def test_each_step_and_template_has_one_kind(catalog: Catalog) -> None:
    job = _job([_step(), {"name": "eval", "command": ["x"], "compute": "cpu"}])
    assert [kind_of(s) for s in job.spec.steps] == [MPIJOB_STEP, POD]
    templates = {t["name"]: t for t in compile_job(job, catalog)["spec"]["templates"]}
    assert kind_of_template(templates["train"]) is MPIJOB_STEP and kind_of_template(templates["eval"]) is POD
    assert kind_of_template(templates["Main"]) is POD  # a DAG: no placement, no demand
    assert POD.read_back(templates["Main"]) == CompiledPlacement() and POD.demand(templates["Main"]) == []


def test_wf_get_reads_a_multi_node_step_back_from_its_workers(catalog: Catalog) -> None:
    template = _template(_job([_step()]), catalog)
    assert template["nodeSelector"][CLASS_LABEL] == "cpu"  # Argo's own pod, beside the launcher
    # A Spot fallback on the step's pod template is Argo's resource pod's: it never reaches the workers.
    template["metadata"].setdefault("annotations", {})[SPOT_FALLBACK_ANNOTATION] = "2"
    placed = MPIJOB_STEP.read_back(template)
    assert placed == CompiledPlacement("gaudi", "spot", role="worker", others=(("launcher", "on-demand"),))
    # `wf get` shows each attempt's capacity per role: the launcher stays On-Demand.
    assert placed.attempt_roles(0) == (("launcher", "on-demand"), ("worker", "spot"))
    assert POD.read_back(template).attempt_roles(0) == ()


def test_kueue_admits_a_queued_mpijob_as_one_demand_per_class(catalog: Catalog) -> None:
    job = TrainingJob.model_validate({"apiVersion": "wf/v1", "kind": "TrainingJob",
                                      "metadata": {"name": "bert", "namespace": "perception"},
                                      "spec": {"image": "habana:1.21", "compute": "gaudi", "steps": [_step()]}})
    demands = {d.compute_class: d for d in MPIJOB_STEP.demand(_template(job, catalog))}
    assert demands["gaudi"].capacities == ("spot",) and demands["gaudi"].requests["habana.ai/gaudi"] == 16
    assert demands["cpu"].capacities == ("on-demand",) and demands["cpu"].requests["cpu"] == 1
    assert MPIJOB_STEP.demand(_template(_job([_step()]), catalog)) == []  # not queued


def test_stopping_a_workflow_deletes_its_mpijobs_and_nothing_of_its_pods() -> None:
    assert MPIJOB_STEP.cleanup("bert-x7k2p") == [Cleanup(MPIJOB, f"{WORKFLOW_NAME_LABEL}=bert-x7k2p")]
    assert POD.cleanup("bert-x7k2p") == []


def test_workers_fall_back_to_on_demand_like_a_pod_step(catalog: Catalog) -> None:
    from wf.compile.interruptions import SPOT_FALLBACK_ANNOTATION, capacity_expression

    data = catalog.model_dump(by_alias=True, exclude_none=True)
    gaudi = next(c for c in data["computeClasses"] if c["name"] == "gaudi")
    gaudi.update(capacity=["spot", "on-demand"], spotFallbackAfter=2)
    template = _template(_job([_step()]), Catalog.model_validate(data))
    mpijob = yaml.safe_load(template["resource"]["manifest"])
    worker = mpijob["spec"]["mpiReplicaSpecs"]["Worker"]["template"]
    # No podSpecPatch reaches the operator's pods: the selector is the expression over the resource's retries.
    expression = capacity_expression("spot", "on-demand", 2)
    assert worker["spec"]["nodeSelector"][CAPACITY_LABEL] == worker["metadata"]["labels"][CAPACITY_LABEL] == expression
    assert worker["metadata"]["annotations"][SPOT_FALLBACK_ANNOTATION] == "2"
    placed = MPIJOB_STEP.read_back(template)
    assert (placed.capacity, placed.fallback_after, placed.capacities) == ("spot", 2, ("spot", "on-demand"))
    assert [placed.attempt_capacity(i) for i in range(3)] == ["spot", "spot", "on-demand"]
    assert [placed.attempt_roles(i) for i in (1, 2)] == [(("launcher", "on-demand"), ("worker", "spot")),
                                                         (("launcher", "on-demand"), ("worker", "on-demand"))]
    launcher = mpijob["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]
    assert launcher["spec"]["nodeSelector"][CAPACITY_LABEL] == "on-demand"


# What expr-lang (Argo's expression language) reads as an operator though it is spelled as a word.
_EXPR_WORDS = {"in", "not", "and", "or", "matches", "contains", "startsWith", "endsWith", "nil", "true", "false"}
_EXPR_TOKEN = re.compile(r"\s*(?:(?P<string>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|`[^`]*`)"
                         r"|(?P<name>[A-Za-z_$][A-Za-z0-9_$]*)|(?P<number>[0-9]+(?:\.[0-9]+)?)"
                         r"|(?P<open>[(\[{])|(?P<close>[)\]}])|(?P<operator>[-+*/%<>=!?:.,|&^#~]+))")
# A workflow's annotation or label is named by its key, whose prefix ends in '/' (wf's retry expressions).
_ARGO_VARIABLE = re.compile(r"[A-Za-z][A-Za-z0-9_.-]*|workflow\.(annotations|labels)\.[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")


def _argo_tags(template: dict[str, Any]) -> list[str]:
    """Every tag of `template` as Argo's substitution reads it (v4.0.7 util/template): in the template marshalled
    as JSON by Go (which escapes <, > and &), from each `{{` to the next `}}`, an expression's body
    JSON-unmarshalled."""
    text = json.dumps(template, ensure_ascii=False)
    for char in "<>&":
        text = text.replace(char, f"\\u{ord(char):04x}")
    tags, start = [], 0
    while (begin := text.find("{{", start)) >= 0:
        end = text.index("}}", begin + 2)
        body = text[begin + 2:end]
        tags.append("=" + json.loads(f'"{body[1:]}"') if body.startswith("=") else body)
        start = end + 2
    return tags


def _expression_problem(expression: str, parameters: set[str]) -> str | None:
    """What expr-lang's parser would refuse in `expression`: an unclosed string or bracket, two operands in a row
    (a doubled quote makes `''application''`: Identifier after String), or an input that the template lacks."""
    depth, previous, at = 0, "operator", 0
    while at < len(expression):
        match = _EXPR_TOKEN.match(expression, at)
        if match is None or match.end() == at:
            return f"no token at {expression[at:]!r}"
        kind = match.lastgroup or ""
        if kind == "name" and match.group(kind) in _EXPR_WORDS:
            kind = "operator"
        operand = kind in ("string", "name", "number")
        if operand and previous in ("string", "name", "number", "close"):
            return f"unexpected {kind} {match.group(kind)!r}"
        depth += {"open": 1, "close": -1}.get(kind, 0)
        if depth < 0:
            return "unbalanced brackets"
        previous, at = kind, match.end()
    used = set(re.findall(r"inputs\.parameters\[\s*'([^']*)'\s*\]", expression))
    return "unbalanced brackets" if depth else (f"unknown inputs {sorted(used - parameters)}"
                                                if used - parameters else None)


# What a pod-level template (a container or a resource) can read: its own inputs, the workflow's globals, its
# retry and pod (Argo's scopes; `item` and `tasks.*` are a DAG task's, resolved in its arguments only).
_POD_SCOPE = re.compile(r"(inputs\.(parameters|artifacts)\.|workflow\.)[A-Za-z0-9_./-]+|retries|pod\.name")


def _tag_problem(tag: str, template: dict[str, Any]) -> str | None:
    parameters = {p["name"] for p in (template.get("inputs") or {}).get("parameters") or []}
    if tag.startswith("="):
        return _expression_problem(tag[1:], parameters)
    if not _ARGO_VARIABLE.fullmatch(tag.strip()):
        return "not a variable name"
    if ("container" in template or "resource" in template) and not _POD_SCOPE.fullmatch(tag.strip()) \
            and tag not in _argo_tags(template.get("metrics") or {}):  # metrics have variables of their own
        return "not in a pod template's scope"
    name = tag.strip().removeprefix("inputs.parameters.")
    return f"unknown input {name!r}" if tag.strip().startswith("inputs.parameters.") and name not in parameters \
        else None


def test_the_expression_checker_refuses_what_argo_refused() -> None:
    refused = "asInt(retries) + asInt(inputs.parameters[''application-attempt''])"
    assert _expression_problem(refused, {"application-attempt"}) == "unexpected name 'application'"
    assert _expression_problem("asInt(retries) >= 2 ? 'on-demand' : 'spot", set()) is not None
    assert _expression_problem("sprig.trunc(10, sprig.sha1sum(workflow.name + '/x')", set()) == "unbalanced brackets"
    assert _expression_problem("asInt(inputs.parameters['item'])", set()) == "unknown inputs ['item']"
    assert _expression_problem("asInt(retries) >= 2 && x in ['a', \"b\"] ? 'on-demand' : 'spot'", set()) is None


def _fallback_catalog(catalog: Catalog) -> Catalog:
    data = catalog.model_dump(by_alias=True, exclude_none=True)
    gaudi = next(c for c in data["computeClasses"] if c["name"] == "gaudi")
    gaudi.update(capacity=["spot", "on-demand"], spotFallbackAfter=2)
    return Catalog.model_validate(data)


@pytest.mark.parametrize("nodes", [None, 2], ids=["pod", "multi-node"])
@pytest.mark.parametrize("checkpoint", [False, True], ids=["", "checkpoint"])
@pytest.mark.parametrize("fallback", [False, True], ids=["", "fallback"])
@pytest.mark.parametrize("fan_out", [None, "items", "parallelism"])
@pytest.mark.parametrize("retries", [0, 2])
def test_argo_reads_every_tag_as_written(catalog: Catalog, nodes: int | None, checkpoint: bool, fallback: bool,
                                         fan_out: str | None, retries: int) -> None:
    """Each `{{...}}` in each template, read as Argo's substitution reads it (a resource template's manifest is text
    then, wf.argo.manifest), is the tag wf wrote, and expr would parse each expression."""
    step: dict[str, Any] = {"name": "train", "command": ["python3", "train.py", "{{='{{'}}", "--lr={{item}} "],
                            "env": {"NOTE": "it's {{workflow.name}}: #1"}}
    if nodes:
        step["nodes"] = nodes
    if fan_out:
        step["forEach"] = ["0.1", "it's: {x}"]
        if fan_out == "parallelism":
            step["parallelism"] = 1
    else:
        step["command"] = step["command"][:3]
    spec: dict[str, Any] = {"capacity": "spot", "retries": retries}
    if checkpoint:
        spec["checkpoint"] = {}
    manifest = compile_job(_job([step], **spec), _fallback_catalog(catalog) if fallback else catalog)
    checked = 0
    for template in manifest["spec"]["templates"]:
        resource = template.get("resource") or {}
        written = copy.deepcopy(template)
        if "manifest" in resource:  # the tags in the strings of the object wf dumped
            written["resource"]["manifest"] = yaml.safe_load(resource["manifest"])
        read = _argo_tags(template)
        assert read == _argo_tags(written), template["name"]
        for tag in read:
            assert _tag_problem(tag, template) is None, (template["name"], tag, _tag_problem(tag, template))
        checked += len(read)
    assert checked > 0
