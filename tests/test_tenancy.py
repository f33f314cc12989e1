"""Tenancy: what a step's program can do with the Kubernetes API (nothing, unless the catalog gives its job an
account), how its pods are hardened, what each namespace's Pod Security admission enforces, and lint refusing
pods that ask for more than their class allows."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from wf.argo.defaults import as_run
from wf.compile.workflow import compile_job
from wf.core.constants import EXECUTOR_ACCOUNT, MPIJOB_EXECUTOR_ACCOUNT, STEP_ACCOUNT
from wf.core.errors import InputError
from wf.jobspec.job import TrainingJob, load_job
from wf.lint.documents import lint_paths
from wf.model.catalog import Catalog, PodSecurity
from wf.render import team_roles
from wf.render.platform import load_manifest

ROOT = Path(__file__).resolve().parents[1]
PSA = "pod-security.kubernetes.io"


def _pod_templates(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """The container templates, as Argo runs them (the workflow's templateDefaults merged in)."""
    return [t for t in as_run(manifest).values() if "container" in t]


def test_the_step_container_gets_no_token_and_argo_the_executors(catalog: Catalog, make_job: Any) -> None:
    spec = compile_job(make_job(), catalog)["spec"]
    assert spec["automountServiceAccountToken"] is False
    assert spec["executor"] == {"serviceAccountName": EXECUTOR_ACCOUNT}
    assert "serviceAccountName" not in spec  # the controller's default: wf-workflow, bound to nothing


def test_a_named_account_needs_the_catalogs_leave_and_then_gets_its_token(catalog: Catalog, job_data: Any) -> None:
    data = job_data(serviceAccount="trainer")
    data["metadata"]["namespace"] = "ml-training"
    with pytest.raises(InputError, match="stepServiceAccounts does not allow 'trainer' in namespace ml-training"):
        compile_job(TrainingJob.model_validate(data), catalog)
    elsewhere = catalog.model_copy(update={"step_service_accounts": {"mapping": ["trainer"]}})
    with pytest.raises(InputError, match="serviceAccount"):
        compile_job(TrainingJob.model_validate(data), elsewhere)
    allowing = catalog.model_copy(update={"step_service_accounts": {"ml-training": ["trainer"]}})
    spec = compile_job(TrainingJob.model_validate(data), allowing)["spec"]
    assert spec["serviceAccountName"] == "trainer" and "automountServiceAccountToken" not in spec
    assert spec["executor"] == {"serviceAccountName": EXECUTOR_ACCOUNT}


def test_compiled_pods_are_hardened_and_gaudi_gets_back_what_it_needs(catalog: Catalog) -> None:
    for example in sorted((ROOT / "examples").glob("*.yaml")):
        manifest = compile_job(load_job(example), catalog)
        assert manifest["spec"]["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
        for template in _pod_templates(manifest):
            context = template["container"]["securityContext"]
            assert context["allowPrivilegeEscalation"] is False and context["capabilities"]["drop"] == ["ALL"]
            gaudi = "habana.ai/gaudi" in template["container"]["resources"]["limits"]
            assert context["capabilities"].get("add") == (["SYS_NICE"] if gaudi else None), template["name"]
            assert json.loads(template.get("podSpecPatch", "{}")).get("hostIPC", False) == gaudi


def test_a_class_can_set_its_own_relaxations(catalog: Catalog, make_job: Any) -> None:
    classes = [c.model_copy(update={"pod_security": PodSecurity(capabilities=["IPC_LOCK"])}) if c.name == "gaudi"
               else c for c in catalog.compute_classes]
    relaxed = catalog.model_copy(update={"compute_classes": classes})
    job = make_job([{"name": "train", "command": ["python"], "compute": "gaudi", "accelerators": 8},
                    {"name": "prep", "command": ["python"], "compute": "gaudi"}])
    templates = {t["name"]: t for t in _pod_templates(compile_job(job, relaxed))}
    for name in ("train", "prep"):  # explicit: every pod of the class, devices or not
        assert templates[name]["container"]["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
        assert "podSpecPatch" not in templates[name] or "hostIPC" not in templates[name]["podSpecPatch"]
    default = {t["name"]: t for t in _pod_templates(compile_job(job, catalog))}
    assert "add" not in default["prep"]["container"]["securityContext"]["capabilities"]  # no devices held


def test_the_multi_node_step_alone_may_create_mpijobs(catalog: Catalog) -> None:
    manifest = compile_job(load_job(ROOT / "examples/bert-large-multinode.yaml"), catalog)
    resources = [t for t in manifest["spec"]["templates"] if "resource" in t]
    assert resources and all(t["executor"] == {"serviceAccountName": MPIJOB_EXECUTOR_ACCOUNT} for t in resources)
    mpijob = yaml.safe_load(resources[0]["resource"]["manifest"])
    for role, replica in mpijob["spec"]["mpiReplicaSpecs"].items():
        spec = replica["template"]["spec"]
        assert spec["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}, role
        assert spec["containers"][0]["securityContext"]["capabilities"]["drop"] == ["ALL"], role
        # The workflow's account, as Argo's pods (not the namespace's `default`), and no API token.
        assert spec["serviceAccountName"] == "{{workflow.serviceAccountName}}", role
        assert spec["automountServiceAccountToken"] is False, role


def test_a_multi_node_step_of_a_job_naming_its_account_runs_its_replicas_with_that_account_s_token(
        catalog: Catalog) -> None:
    data = yaml.safe_load((ROOT / "examples/bert-large-multinode.yaml").read_text())
    data["spec"]["serviceAccount"] = "trainer"
    allowing = catalog.model_copy(update={"step_service_accounts": {data["metadata"]["namespace"]: ["trainer"]}})
    manifest = compile_job(TrainingJob.model_validate(data), allowing)
    assert manifest["spec"]["serviceAccountName"] == "trainer"
    (resource,) = [t for t in manifest["spec"]["templates"] if "resource" in t]
    for replica in yaml.safe_load(resource["resource"]["manifest"])["spec"]["mpiReplicaSpecs"].values():
        spec = replica["template"]["spec"]
        assert spec["serviceAccountName"] == "{{workflow.serviceAccountName}}"  # Argo resolves it to "trainer"
        assert "automountServiceAccountToken" not in spec


def test_workflow_accounts_hold_only_what_argos_executor_needs() -> None:
    docs = load_manifest("rbac.yaml")
    roles = {d["metadata"]["name"]: d["rules"] for d in docs if d["kind"] == "Role"}
    bound = {(b["roleRef"]["name"], s["name"]) for b in docs if b["kind"] == "RoleBinding" for s in b["subjects"]}
    accounts = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ServiceAccount"}
    # The step's own account: no binding, and no token even for a hand-written workflow.
    assert not [role for role, account in bound if account == STEP_ACCOUNT]
    assert accounts[STEP_ACCOUNT]["automountServiceAccountToken"] is False
    task_results = {"apiGroups": ["argoproj.io"], "resources": ["workflowtaskresults"], "verbs": ["create", "patch"]}
    assert roles[EXECUTOR_ACCOUNT] == [task_results]
    # Argo's executor creates and reads the MPIJob; the release init container deletes an earlier attempt's and
    # waits until it is gone (kubectl delete --wait gets, lists and watches).
    assert roles[MPIJOB_EXECUTOR_ACCOUNT] == [task_results, {
        "apiGroups": ["kubeflow.org"], "resources": ["mpijobs"], "verbs": ["create", "get", "delete", "list", "watch"]}]
    assert {(EXECUTOR_ACCOUNT, EXECUTOR_ACCOUNT), (MPIJOB_EXECUTOR_ACCOUNT, MPIJOB_EXECUTOR_ACCOUNT)} <= bound
    # Argo mounts an executor's token from the Secret <account>.service-account-token.
    secrets = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Secret"}
    for account in (EXECUTOR_ACCOUNT, MPIJOB_EXECUTOR_ACCOUNT):
        secret = secrets[f"{account}.service-account-token"]
        assert secret["type"] == "kubernetes.io/service-account-token"
        assert secret["metadata"]["annotations"] == {"kubernetes.io/service-account.name": account}
    defaults = yaml.safe_load(load_manifest("workflow-controller-configmap.yaml")[0]["data"]["workflowDefaults"])
    assert defaults["spec"] == {"serviceAccountName": STEP_ACCOUNT, "automountServiceAccountToken": False,
                                "executor": {"serviceAccountName": EXECUTOR_ACCOUNT}}


def test_namespaces_enforce_baseline_unless_their_classes_need_more(catalog: Catalog) -> None:
    def levels(namespace: str) -> tuple[str, str, str]:
        labels = team_roles.namespace_object(catalog, namespace)["metadata"]["labels"]
        return labels[f"{PSA}/enforce"], labels[f"{PSA}/warn"], labels[f"{PSA}/audit"]

    # Gaudi pods add SYS_NICE and share the host's IPC namespace: only teams with a Gaudi quota run them.
    assert levels("ml-serving") == ("baseline", "restricted", "restricted")
    assert levels("mapping") == levels("ml-training") == ("privileged", "baseline", "baseline")
    assert levels("wf") == ("privileged", "baseline", "baseline")  # no team: any class
    without_gaudi = catalog.model_copy(update={
        "compute_classes": [c for c in catalog.compute_classes if c.name != "gaudi"], "queues": None})
    assert team_roles.pod_security_labels(without_gaudi, "wf")[f"{PSA}/enforce"] == "baseline"
    rendered = [o for o in team_roles.objects(catalog) if o["kind"] == "Namespace"]
    assert {o["metadata"]["name"] for o in rendered} == {"ml-training", "perception", "mapping", "ml-serving"}


def _workflow(template: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "metadata": {"generateName": "x-"},
            "spec": {"entrypoint": "main", "templates": [{"name": "main", **template}], **spec}}


CPU = {"nodeSelector": {"wf.dev/compute-class": "cpu"}}
GAUDI = {"nodeSelector": {"wf.dev/compute-class": "gaudi"}}


@pytest.mark.parametrize(("workflow", "field", "words"), [
    (_workflow({**CPU, "container": {"image": "x", "securityContext": {"privileged": True}}}),
     "spec.templates[0].container.securityContext.privileged", "a privileged container"),
    # What the workflow's templateDefaults give a template, Argo asks for in its pod.
    (_workflow({**CPU, "container": {"image": "x"}},
               templateDefaults={"container": {"image": "x", "securityContext": {"privileged": True}}}),
     "spec.templates[0].container.securityContext.privileged", "a privileged container"),
    (_workflow({**CPU, "container": {"image": "x"}, "volumes": [{"name": "h", "hostPath": {"path": "/var/run"}}]}),
     "spec.templates[0].volumes[0].hostPath", "host path '/var/run'"),
    (_workflow({**CPU, "container": {"image": "x"}}, hostNetwork=True), "spec.hostNetwork", "hostNetwork: true"),
    (_workflow({**CPU, "container": {"image": "x"}, "podSpecPatch": json.dumps({"hostPID": True})}),
     "spec.templates[0].podSpecPatch", "podSpecPatch sets hostPID: true"),
    (_workflow({**CPU, "container": {"image": "x", "securityContext": {"capabilities": {"add": ["SYS_NICE"]}}}}),
     "spec.templates[0].container.securityContext.capabilities.add[0]", "capability SYS_NICE"),
    (_workflow({**GAUDI, "container": {"image": "x", "securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}}),
     "spec.templates[0].container.securityContext.capabilities.add[0]", "capability SYS_ADMIN"),
    (_workflow({"container": {"image": "x"}, "podSpecPatch": json.dumps({"hostIPC": True})}),
     "spec.templates[0].podSpecPatch", "names no compute class"),
    (_workflow({**CPU, "resource": {"action": "create", "manifest": yaml.safe_dump(
        {"apiVersion": "batch/v1", "kind": "Job", "spec": {"template": {"spec": {
            "hostPID": True, "containers": [{"name": "c", "image": "x"}]}}}})}}),
     "spec.templates[0].resource.manifest", "spec.template: hostPID: true"),
])
def test_lint_refuses_what_the_class_does_not_allow(write: Callable[..., Path], workflow: dict[str, Any], field: str,
                                                     words: str) -> None:
    result = lint_paths([write("wf.yaml", yaml.safe_dump(workflow))], ROOT / "eksctl/catalog.yaml")
    found = [p for p in result.errors if "Pod Security baseline" in p.message]
    assert len(found) == 1 and found[0].field == field and words in found[0].message, result.problems


def test_lint_takes_what_the_class_allows(write: Callable[..., Path]) -> None:
    gaudi = _workflow({**GAUDI, "container": {"image": "x", "securityContext": {"capabilities": {"add": ["SYS_NICE"]}}},
                       "podSpecPatch": json.dumps({"hostIPC": True})})
    result = lint_paths([write("wf.yaml", yaml.safe_dump(gaudi))], ROOT / "eksctl/catalog.yaml")
    assert not [p for p in result.problems if "Pod Security" in p.message], result.problems


def test_a_job_spec_cannot_ask_for_host_access(catalog: Catalog, job_data: Any) -> None:
    for extra in ({"podSpecPatch": "{}"}, {"hostNetwork": True}):
        data = job_data(**extra)
        with pytest.raises(Exception, match="[Ee]xtra inputs are not permitted|not permitted|unknown"):
            TrainingJob.model_validate(data)
    data = job_data(volumes=[{"name": "h", "mountPath": "/h", "hostPath": {"path": "/"}}])
    with pytest.raises(Exception, match="hostPath"):
        TrainingJob.model_validate(data)
