"""`wf platform render` (the bundle a real cluster needs, from the catalog) and the pure comparison behind
`wf platform check`, with hand-built live objects. Upstream schemas are read in place from the Go module cache
(tests/upstream.py)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from upstream import ARGO, KARPENTER_AWS, KUEUE, KUEUE_CRDS, strictify
from wf.cli.app import main
from wf.cluster.install import pinned_versions
from wf.cluster.nodes import node_manifests
from wf.core.constants import CAPACITY_LABEL, CLASS_LABEL, KARPENTER_NODEPOOL_LABEL
from wf.core.errors import InputError
from wf.lint.platform import APPLY_BUNDLE, LOCAL_FIX, Finding, Live, compare, key
from wf.model.catalog import Catalog
from wf.render import autoscaler, device_plugins, kueue, platform

ACCOUNT = "123456789012"
KARPENTER_CRDS = "pkg/apis/crds"
CONTROLLER_KEYS = "docs/workflow-controller-configmap.yaml"  # in Argo's module


def catalog_file(write: Callable[..., Path], catalog: Catalog, change: Callable[[dict[str, Any]], None]) -> Path:
    data = yaml.safe_load(catalog.to_yaml())
    change(data)
    return write("catalog.yaml", yaml.safe_dump(data, sort_keys=False))


def bundle(catalog: Catalog) -> dict[str, list[dict[str, Any]]]:
    return platform.bundle(catalog, pinned_versions(), ACCOUNT)


def crd_validator(path: Path, version: str) -> Any:
    from jsonschema import Draft4Validator

    crd = yaml.safe_load(path.read_text())
    schema = next(v for v in crd["spec"]["versions"] if v["name"] == version)["schema"]["openAPIV3Schema"]
    return Draft4Validator(strictify(schema))


def test_kueue_objects_of_the_bundle_are_valid_kueue(catalog: Catalog) -> None:
    validators = {kind: crd_validator(KUEUE.file(f"{KUEUE_CRDS}/{api.group}_{api.plural}.yaml"), api.version)
                  for kind, api in kueue.KINDS.items()}
    objects = bundle(catalog)["kueue.yaml"]
    assert objects and all(not list(validators[o["kind"]].iter_errors(o)) for o in objects)


def test_karpenter_catalog_gets_valid_nodepools_and_no_cluster_autoscaler(catalog: Catalog) -> None:
    karpenter = catalog.model_copy(update={"cluster": catalog.cluster.model_copy(update={"autoscaler": "karpenter"})})
    objects = platform.bundle(karpenter, pinned_versions(), None)["autoscaler.yaml"]
    crds = KARPENTER_AWS.file(KARPENTER_CRDS)
    validators = {"NodePool": crd_validator(crds / "karpenter.sh_nodepools.yaml", "v1"),
                  "EC2NodeClass": crd_validator(crds / "karpenter.k8s.aws_ec2nodeclasses.yaml", "v1")}
    assert {o["kind"] for o in objects} == {"NodePool", "EC2NodeClass"}
    errors = [e.message for o in objects for e in validators[o["kind"]].iter_errors(o)]
    assert not errors


def test_argo_configuration_uses_only_keys_argo_documents(catalog: Catalog) -> None:
    documented = set(yaml.safe_load(ARGO.file(CONTROLLER_KEYS).read_text())["data"])
    configmap = bundle(catalog)["argo-configmap.yaml"][0]
    assert set(configmap["data"]) <= documented
    assert yaml.safe_load(configmap["data"]["resourceRateLimit"]) == {"limit": 100, "burst": 200}


def test_local_cluster_installs_the_same_objects_but_argo_s_rate_limit_and_metrics_tls(catalog: Catalog) -> None:
    files = bundle(catalog)
    namespaces = platform.workflow_namespaces(catalog)
    local = {key(o): o for o in platform.local_objects(catalog, namespaces)}
    for obj in [*files["configmaps.yaml"], *(o for o in files["namespaces-rbac.yaml"] if o["kind"] != "Role"
                                             or o["metadata"]["name"] != "wf-team")]:
        if obj["kind"] != "RoleBinding" or obj["metadata"]["name"] != "wf-team":
            assert local[key(obj)] == obj
    local_argo = local[key(files["argo-configmap.yaml"][0])]
    assert set(files["argo-configmap.yaml"][0]["data"]) - set(local_argo["data"]) == {"resourceRateLimit"}
    manifest = platform.load_manifest("workflow-controller-configmap.yaml")[0]
    # Metrics on loopback need no TLS (wf.cluster.prometheus scrapes them); everything else is the manifest's.
    assert yaml.safe_load(local_argo["data"].pop("metricsConfig")) == {
        **yaml.safe_load(manifest["data"].pop("metricsConfig")), "secure": False}
    assert local_argo == manifest


def test_kustomization_lists_every_file_once_pinned_upstream_and_no_object_twice(catalog: Catalog) -> None:
    files = bundle(catalog)
    kustomization = platform.kustomization(catalog, pinned_versions(), files)
    listed = [*kustomization["resources"], *(p["path"] for p in kustomization["patches"])]
    assert sorted(f for f in listed if not f.startswith("https://")) == sorted(files)
    assert all(f"v{pinned_versions().argo}" in u or pinned_versions().mpi_operator in u or
               f"v{pinned_versions().kueue}" in u for u in listed if u.startswith("https://"))
    ids = [key(o) for name, docs in files.items() if name not in platform.PATCHES for o in docs]
    assert len(ids) == len(set(ids))


def test_device_plugins_run_on_their_classes_nodes_with_their_tolerations(catalog: Catalog) -> None:
    plugins = {o["metadata"]["name"]: o for o in bundle(catalog)["device-plugins.yaml"] if o["kind"] == "DaemonSet"}
    assert set(plugins) == {"habanalabs-device-plugin-daemonset", "aws-efa-k8s-device-plugin-daemonset",
                            "nvidia-device-plugin-daemonset"}
    gaudi = plugins["habanalabs-device-plugin-daemonset"]["spec"]["template"]["spec"]
    terms = gaudi["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert [{e["key"]: e["values"] for e in t["matchExpressions"]}[CLASS_LABEL] for t in terms] == [["gaudi"]]
    assert gaudi["tolerations"] == [{"key": "habana.ai/gaudi", "operator": "Equal", "value": "true",
                                     "effect": "NoSchedule"}]
    assert all(":" in c["image"] and not c["image"].endswith(":latest")
               for p in plugins.values() for c in p["spec"]["template"]["spec"]["containers"])


def test_cluster_autoscaler_discovers_the_groups_and_has_its_iam_role(catalog: Catalog) -> None:
    objects = {o["kind"]: o for o in bundle(catalog)["autoscaler.yaml"]}
    command = objects["Deployment"]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert ("--node-group-auto-discovery=asg:tag=k8s.io/cluster-autoscaler/enabled,"
            f"k8s.io/cluster-autoscaler/{catalog.cluster.name}") in command
    assert "--balance-similar-node-groups" in command and "--expander=least-waste" in command
    assert objects["ServiceAccount"]["metadata"]["annotations"][autoscaler.ROLE_ARN_ANNOTATION] == \
        f"arn:aws:iam::{ACCOUNT}:role/{catalog.cluster.name}-cluster-autoscaler"
    assert objects["Deployment"]["spec"]["template"]["spec"]["containers"][0]["image"].endswith(
        f":v{catalog.cluster.version}.0")


def test_render_writes_the_bundle(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["platform", "render", "-f", str(tmp_path / "out"), "--aws-account-id", ACCOUNT])
    assert exit_info.value.code == 0
    written = {p.name for p in (tmp_path / "out").iterdir()}
    assert platform.KUSTOMIZATION in written and "device-plugins.yaml" in written
    assert yaml.safe_load((tmp_path / "out" / platform.KUSTOMIZATION).read_text())["kind"] == "Kustomization"


def test_an_accelerator_without_a_known_device_plugin_is_refused_with_its_field(catalog: Catalog) -> None:
    # The catalog's own checks accept only devices its instance data lists; a refreshed table may list more.
    gpu = catalog.compute_classes[3]
    tpu = gpu.model_copy(update={"accelerator": gpu.accelerator.model_copy(update={"resource": "example.com/tpu"})})
    odd = catalog.model_copy(update={"compute_classes": [*catalog.compute_classes[:3], tpu]})
    with pytest.raises(InputError) as error:
        bundle(odd)
    [problem] = error.value.problems
    assert problem.path == ("computeClasses", 3, "accelerator", "resource")
    assert "no known device plugin advertises example.com/tpu" in problem.message


def test_an_autoscaler_contradicting_the_node_groups_is_refused_with_file_line_and_field(
    catalog: Catalog, write: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    def change(data: dict[str, Any]) -> None:
        data["cluster"]["autoscaler"] = "karpenter"
        data["computeClasses"][0]["minSize"] = 2

    path = catalog_file(write, catalog, change)
    with pytest.raises(SystemExit) as exit_info:
        main(["platform", "render", "--catalog", str(path), "-f", str(path.parent / "out"),
              "--aws-account-id", ACCOUNT])
    assert exit_info.value.code == 2
    line = capsys.readouterr().err.strip()
    minsize_line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if "minSize: 2" in text)
    assert line.startswith(f"{path}:{minsize_line}: computeClasses[0].minSize: minSize 2: Karpenter")


# ---- the comparison -------------------------------------------------------------------------------------------

def as_served(obj: dict[str, Any]) -> dict[str, Any]:
    """An object as the API server returns it: with its own metadata and defaulted fields."""
    served = copy.deepcopy(obj)
    served["metadata"] |= {"uid": "u", "resourceVersion": "1", "managedFields": []}
    if obj["kind"] == "ClusterQueue":
        served["spec"]["flavorFungibility"] = {"whenCanBorrow": "MayStopSearch"}
        served["status"] = {"pendingWorkloads": 0}
    return served


def healthy(catalog: Catalog, local: bool) -> tuple[platform.Expected, Live]:
    versions = pinned_versions()
    expected = platform.local_expected(catalog, versions) if local else platform.expected(catalog, versions)
    objects: dict[Any, dict[str, Any] | None] = {key(o): as_served(o) for o in expected.objects}
    for obj in expected.daemonsets:
        objects[key(obj)] = {**as_served(obj), "status": {"desiredNumberScheduled": 2, "numberReady": 2}}
    for obj in expected.autoscaler:
        objects[key(obj)] = {**as_served(obj), "status": {"readyReplicas": 1}}
    for component in expected.components:
        objects[("apps/v1", "Deployment", component.namespace, component.deployment)] = {
            "metadata": {"name": component.deployment},
            "spec": {"template": {"spec": {"containers": [{"image": f"{component.image}:{component.tag}"}]}}},
            "status": {"readyReplicas": 1}}
    marker = platform.local_marker(versions, kueue_running=True)["data"] if local else None
    nodes = node_manifests(catalog, 1)
    if not local:  # every group within its minSize..maxSize
        nodes = [n for n in nodes if catalog.compute_class(n["metadata"]["labels"][CLASS_LABEL]).min_size <= 1]
    return expected, Live(nodes, objects, frozenset(), marker)


@pytest.mark.parametrize("local", [False, True])
def test_a_cluster_as_rendered_has_no_findings(catalog: Catalog, local: bool) -> None:
    expected, live = healthy(catalog, local)
    assert compare(catalog, expected, live) == []


def test_each_kind_of_gap_is_reported_with_its_fix(catalog: Catalog) -> None:
    expected, live = healthy(catalog, local=False)
    nodes = copy.deepcopy(live.nodes)
    gaudi = next(n for n in nodes if n["metadata"]["labels"][CLASS_LABEL] == "gaudi")
    gaudi["spec"]["taints"] = [{"key": "habana.ai/gaudi", "value": "false", "effect": "NoSchedule"}]
    gpu = next(n for n in nodes if n["metadata"]["labels"][CLASS_LABEL] == "gpu")
    del gpu["status"]["allocatable"]["nvidia.com/gpu"]
    objects = dict(live.objects)
    queue = next(o for o in expected.objects if o["kind"] == "ClusterQueue")
    objects[key(queue)] = None
    configmap = copy.deepcopy(objects[("v1", "ConfigMap", "wf-system", "wf-catalog")])
    assert configmap is not None
    configmap["data"]["catalog.yaml"] = configmap["data"]["catalog.yaml"].replace("maxSize: 16", "maxSize: 17")
    objects[key(configmap)] = configmap
    argo = expected.components[0]
    objects[("apps/v1", "Deployment", argo.namespace, argo.deployment)] = {
        "spec": {"template": {"spec": {"containers": [{"image": "quay.io/argoproj/workflow-controller:v3.7.1"}]}}},
        "status": {"readyReplicas": 1}}
    findings = compare(catalog, expected, Live(nodes, objects, live.unserved, None))
    by_subject = {f.subject: f for f in findings}
    group = gaudi["metadata"]["labels"]["eks.amazonaws.com/nodegroup"]
    taint = by_subject[f"node {gaudi['metadata']['name']} (node group {group})"]
    assert "taint habana.ai/gaudi=true:NoSchedule replaced by habana.ai/gaudi=false:NoSchedule" in taint.problem
    assert taint.fix == f"kubectl taint nodes {gaudi['metadata']['name']} habana.ai/gaudi=true:NoSchedule --overwrite"
    device = [f for f in findings if f.subject.startswith(f"node {gpu['metadata']['name']}")]
    assert len(device) == 1 and "advertises 0 nvidia.com/gpu" in device[0].problem
    assert by_subject[f"ClusterQueue {queue['metadata']['name']}"] == Finding(
        f"ClusterQueue {queue['metadata']['name']}", "missing", APPLY_BUNDLE)
    assert "data.catalog.yaml.computeClasses[1].maxSize: 17 instead of 16" in \
        by_subject["ConfigMap wf-system/wf-catalog"].problem
    assert "runs v3.7.1, wf pins v" in by_subject[f"argo ({argo.namespace}/{argo.deployment})"].problem
    assert len(findings) == 5


def test_on_the_local_cluster_process_components_count_and_fixes_are_wf_cluster_up(catalog: Catalog) -> None:
    expected, live = healthy(catalog, local=True)
    marker = {k: v for k, v in (live.local or {}).items() if k != "kueue"}
    objects = dict(live.objects)
    objects[next(key(o) for o in expected.objects if o["kind"] == "LocalQueue")] = None
    findings = compare(catalog, expected, Live(live.nodes, objects, frozenset(), marker))
    assert [(f.subject, f.fix) for f in findings] == [
        ("kueue", f"{LOCAL_FIX} --queues"),
        (next(f"LocalQueue {o['metadata']['namespace']}/default" for o in expected.objects
              if o["kind"] == "LocalQueue"), LOCAL_FIX),
    ]


def test_kinds_the_server_does_not_serve_are_named(catalog: Catalog) -> None:
    expected, live = healthy(catalog, local=False)
    flavors = ("kueue.x-k8s.io/v1beta2", "ResourceFlavor")
    findings = compare(catalog, expected, Live(live.nodes, live.objects, frozenset({flavors}), None))
    assert findings and all("does not serve kueue.x-k8s.io/v1beta2 ResourceFlavor" in f.problem for f in findings)


def test_nodes_outside_the_catalog_and_counts_outside_min_max_are_reported(catalog: Catalog) -> None:
    expected, live = healthy(catalog, local=False)
    stray = copy.deepcopy(live.nodes[0])
    stray["metadata"]["name"] = "stray"
    stray["metadata"]["labels"] |= {CLASS_LABEL: "tpu", CAPACITY_LABEL: "spot"}
    findings = compare(catalog, expected, Live([*live.nodes, stray], live.objects, frozenset(), None))
    assert [f.subject for f in findings] == ["node stray"]
    empty = compare(catalog, expected, Live([], live.objects, frozenset(), None))
    assert {f.subject for f in empty} == {f"node group {g}" for g in
                                          {n["metadata"]["labels"]["eks.amazonaws.com/nodegroup"] for n in live.nodes}
                                          if catalog.compute_class(g.split("-")[0]).min_size > 0}


def test_device_plugins_must_be_ready_where_they_run(catalog: Catalog) -> None:
    expected, live = healthy(catalog, local=False)
    plugin = expected.daemonsets[0]
    objects = dict(live.objects)
    objects[key(plugin)] = {**as_served(plugin), "status": {"desiredNumberScheduled": 2, "numberReady": 1}}
    findings = compare(catalog, expected, Live(live.nodes, objects, frozenset(), None))
    assert [f.problem for f in findings] == ["1 of 2 pods ready"]
    assert device_plugins.NAMESPACE in findings[0].fix


@pytest.mark.parametrize(("options", "exposure"), [
    ({"httpPutResponseHopLimit": 2}, "httpPutResponseHopLimit 2: IMDSv2 tokens reach pods"),
    ({"httpTokens": "optional"}, "httpTokens optional: IMDSv1 answers every pod"),
])
def test_a_karpenter_node_that_lets_pods_reach_the_metadata_service_is_reported(
        catalog: Catalog, options: dict[str, Any], exposure: str) -> None:
    karpenter_catalog = catalog.model_copy(update={"cluster": catalog.cluster.model_copy(
        update={"autoscaler": "karpenter"})})
    expected, live = healthy(karpenter_catalog, local=False)
    pools = {o["metadata"]["name"]: o for o in expected.autoscaler if o["kind"] == "NodePool"}
    nodes = copy.deepcopy(live.nodes)
    for node in nodes:  # as Karpenter labels the nodes it launches
        labels = node["metadata"]["labels"]
        labels[KARPENTER_NODEPOOL_LABEL] = f"{labels[CLASS_LABEL]}-{labels[CAPACITY_LABEL]}"
    assert compare(karpenter_catalog, expected, Live(nodes, live.objects, frozenset(), None)) == []
    objects = dict(live.objects)
    node_class = copy.deepcopy(objects[("karpenter.k8s.aws/v1", "EC2NodeClass", None, "wf-default")])
    assert node_class is not None
    node_class["spec"]["metadataOptions"] |= options
    objects[key(node_class)] = node_class
    findings = compare(karpenter_catalog, expected, Live(nodes, objects, frozenset(), None))
    exposed = {f.subject: f for f in findings if f.subject.startswith("node ")}
    on_default = {n["metadata"]["name"] for n in nodes
                  if pools[n["metadata"]["labels"][KARPENTER_NODEPOOL_LABEL]]["spec"]["template"]["spec"]
                  ["nodeClassRef"]["name"] == "wf-default"}
    assert on_default and set(exposed) == {f"node {name} (EC2NodeClass wf-default)" for name in on_default}
    assert all(exposure in f.problem and "node's IAM role" in f.problem and f.fix.startswith(APPLY_BUNDLE)
               for f in exposed.values())
    # The node class itself differs from the rendering too.
    assert [f.subject for f in findings if not f.subject.startswith("node ")] == ["EC2NodeClass wf-default"]
