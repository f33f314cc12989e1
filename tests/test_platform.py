"""`wf platform render` (the bundle a real cluster needs, from the catalog) and the pure comparison behind
`wf platform check`, with hand-built live objects. Upstream schemas are read in place from the Go module cache
(tests/upstream.py)."""

from __future__ import annotations

import copy
import json
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
from wf.render import autoscaler, device_plugins, kueue, platform, scrape

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


def test_local_cluster_binds_every_checkpoint_claim_the_examples_mount_in_every_workflow_namespace(
        catalog: Catalog) -> None:
    """The claims are the platform's to provision on EKS (not the bundle's); locally each is bound to a volume of
    its own, named by the claim, which names no claim itself (re-applied, a claimRef without the binder's uid
    would leave the claim Lost)."""
    from wf.compile.workflow import compile_job
    from wf.jobspec.job import load_job

    namespaces = platform.workflow_namespaces(catalog)
    local = platform.local_objects(catalog, namespaces)
    claims = {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in local
              if o["kind"] == "PersistentVolumeClaim"}
    volumes = {o["metadata"]["name"]: o for o in local if o["kind"] == "PersistentVolume"}
    assert catalog.artifacts and catalog.artifacts.checkpoints.volumes
    wanted = {v.claim for v in catalog.artifacts.checkpoints.volumes.values()}
    assert set(claims) == {(ns, c) for ns in namespaces for c in wanted}
    for claim in claims.values():
        volume = volumes.pop(claim["spec"]["volumeName"])
        assert "claimRef" not in volume["spec"]
        assert volume["spec"]["storageClassName"] == claim["spec"]["storageClassName"] == ""
        assert volume["spec"]["capacity"] == claim["spec"]["resources"]["requests"]
        assert set(claim["spec"]["accessModes"]) <= set(volume["spec"]["accessModes"])
    assert not volumes
    assert not [o for docs in bundle(catalog).values() for o in docs if "PersistentVolume" in o["kind"]]
    examples = Path(__file__).resolve().parents[1] / "examples"
    mounted = {v["persistentVolumeClaim"]["claimName"] for path in examples.glob("*.yaml")
               for v in compile_job(load_job(path), catalog)["spec"].get("volumes") or []
               if "persistentVolumeClaim" in v}
    assert mounted and mounted <= wanted


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


# ---- metrics: what the cluster's Prometheus scrapes ------------------------------------------------------------

def _with_prometheus(catalog: Catalog, **prometheus: Any) -> Catalog:
    cluster = catalog.cluster.model_copy(update={"prometheus": catalog.cluster.prometheus.model_copy(
        update=prometheus)})
    return catalog.model_copy(update={"cluster": cluster})


def test_the_bundle_scrapes_argo_and_kueue_through_the_kubernetes_api(catalog: Catalog) -> None:
    objects = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o
               for o in bundle(catalog)["metrics.yaml"]}
    # Upstream's install has no Service for the controller's metrics port: the bundle's, headless, on Argo's 9090.
    service = objects[("Service", "argo", "workflow-controller-metrics")]["spec"]
    assert service["clusterIP"] == "None" and service["selector"] == {"app": "workflow-controller"}
    assert service["ports"] == [{"name": "metrics", "port": 9090, "targetPort": 9090, "protocol": "TCP"}]
    config = yaml.safe_load(objects[("ConfigMap", "monitoring", "wf-scrape-configs")]["data"]["wf.yml"])
    jobs = {j["job_name"]: j for j in config["scrape_configs"]}
    assert set(jobs) == {"argo-workflow-controller", "kueue"}
    for job, namespace, service_name, port in (
            ("argo-workflow-controller", "argo", "workflow-controller-metrics", "metrics"),
            ("kueue", "kueue-system", "kueue-controller-manager-metrics-service", "https")):
        assert jobs[job]["kubernetes_sd_configs"] == [{"role": "endpointslice",
                                                       "namespaces": {"names": [namespace]}}]
        [keep] = jobs[job]["relabel_configs"]
        assert keep["action"] == "keep" and keep["regex"] == f"{service_name};{port}"
        # Both sign their own serving certificates (Argo's metricsConfig is `secure` off the local cluster).
        assert jobs[job]["scheme"] == "https" and jobs[job]["tls_config"] == {"insecure_skip_verify": True}
        # Prometheus finds the endpoints in that namespace, as the catalog's account.
        binding = objects[("RoleBinding", namespace, "wf-prometheus")]
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "prometheus", "namespace": "monitoring"}]
        rules = objects[("Role", namespace, "wf-prometheus")]["rules"]
        assert {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
                "verbs": ["get", "list", "watch"]} in rules
    # Kueue asks the API server whether the caller may GET /metrics: a token, and that right alone.
    assert "authorization" not in jobs["argo-workflow-controller"]
    assert jobs["kueue"]["authorization"] == {
        "type": "Bearer", "credentials_file": "/var/run/secrets/kubernetes.io/serviceaccount/token"}
    assert objects[("ClusterRole", None, "wf-prometheus")]["rules"] == [
        {"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    assert objects[("ClusterRoleBinding", None, "wf-prometheus")]["subjects"][0]["name"] == "prometheus"
    assert not [o for o in objects.values() if o["kind"] == "ServiceMonitor"]
    # Without teams, no Kueue: Argo's job alone.
    lone = yaml.safe_load(next(o for o in bundle(catalog.model_copy(update={"queues": None}))["metrics.yaml"]
                               if o["kind"] == "ConfigMap")["data"]["wf.yml"])
    assert [j["job_name"] for j in lone["scrape_configs"]] == ["argo-workflow-controller"]


def test_with_the_prometheus_operator_the_bundle_has_service_monitors_of_the_same_jobs(catalog: Catalog) -> None:
    operated = _with_prometheus(catalog, operator=True, namespace="observability", service_account="prom")
    objects = bundle(operated)["metrics.yaml"]
    assert not [o for o in objects if o["kind"] == "ConfigMap"]
    monitors = {o["metadata"]["namespace"]: o for o in objects if o["kind"] == "ServiceMonitor"}
    assert set(monitors) == {"argo", "kueue-system"}
    argo, kueue = monitors["argo"]["spec"], monitors["kueue-system"]["spec"]
    assert argo["selector"] == {"matchLabels": {"app": "workflow-controller"}}
    assert kueue["selector"] == {"matchLabels": {"app.kubernetes.io/name": "kueue",
                                                 "app.kubernetes.io/component": "metrics-service"}}
    for spec, job in ((argo, "argo-workflow-controller"), (kueue, "kueue")):
        [endpoint] = spec["endpoints"]
        # The job label is wf's (the operator's would be the Service's name): `wf report` asks by it everywhere.
        assert endpoint["relabelings"] == [{"action": "replace", "targetLabel": "job", "replacement": job}]
        assert endpoint["scheme"] == "https" and endpoint["tlsConfig"] == {"insecureSkipVerify": True}
    assert "bearerTokenFile" in kueue["endpoints"][0] and "bearerTokenFile" not in argo["endpoints"][0]
    bindings = [o for o in objects if o["kind"] in ("RoleBinding", "ClusterRoleBinding")]
    assert bindings and all(o["subjects"] == [{"kind": "ServiceAccount", "name": "prom", "namespace": "observability"}]
                            for o in bindings)


def test_the_local_prometheus_scrapes_the_same_jobs_with_the_same_credentials(catalog: Catalog,
                                                                               tmp_path: Path) -> None:
    from wf.cluster import prometheus

    local = prometheus.configuration(tmp_path, prometheus.Targets(9100, 9495, "127.0.0.1:6443", 9200, tmp_path / "ca"))
    local_jobs = {j["job_name"]: j for j in local["scrape_configs"]}
    config = next(o for o in bundle(catalog)["metrics.yaml"] if o["kind"] == "ConfigMap")
    for job in yaml.safe_load(config["data"]["wf.yml"])["scrape_configs"]:
        mine = local_jobs[job["job_name"]]
        assert ("authorization" in mine) == ("authorization" in job)
    # The local scrape account is the platform's reader of /metrics.
    local_rules = {o["kind"]: o for o in prometheus.account_objects()}["ClusterRole"]
    assert local_rules == next(o for o in bundle(catalog)["metrics.yaml"] if o["kind"] == "ClusterRole")


def test_the_catalog_names_its_prometheus_with_checked_names(write: Callable[..., Path], catalog: Catalog) -> None:
    from wf.model.catalog import load_catalog

    path = catalog_file(write, catalog, lambda d: d["cluster"].update(
        prometheus={"operator": True, "namespace": "Monitoring"}))
    with pytest.raises(InputError) as refused:
        load_catalog(path)
    [problem] = refused.value.problems
    assert problem.field == "cluster.prometheus.namespace" and problem.line is not None
    assert "DNS-1123" in problem.message


def _up(expected: platform.Expected, **targets: list[tuple[str, str]]) -> Any:
    """A Prometheus' targets: one up per job but those given (by job, '-' as '_')."""
    from wf.lint.platform import Scrapes

    return Scrapes("http://127.0.0.1:9090", {s.job: targets.get(s.job.replace("-", "_"), [("up", "")])
                                             for s in expected.metrics})


def test_check_says_whether_prometheus_scrapes_argo_and_kueue(catalog: Catalog) -> None:
    expected, live = healthy(catalog, local=False)
    assert compare(catalog, expected, live, _up(expected)) == []
    [missing] = compare(catalog, expected, live, _up(expected, argo_workflow_controller=[]))
    assert missing.subject == "Prometheus (http://127.0.0.1:9090)"
    assert "does not scrape argo's metrics (job argo-workflow-controller" in missing.problem
    assert "monitoring/wf-scrape-configs" in missing.fix and "scrape_config_files" in missing.fix
    refused = "server returned HTTP status 403 Forbidden"
    [failing] = compare(catalog, expected, live, _up(expected, kueue=[("down", refused), ("down", "")]))
    assert "fails to scrape kueue's metrics" in failing.problem and refused in failing.problem
    assert "wf-prometheus" in failing.problem
    assert failing.fix == "http://127.0.0.1:9090/api/v1/targets?state=active gives each target's lastError"
    # One replica up is enough, and a target not scraped yet is no finding.
    assert compare(catalog, expected, live, _up(expected, kueue=[("down", refused), ("up", "")])) == []
    assert compare(catalog, expected, live, _up(expected, kueue=[("unknown", "")])) == []
    operated = _with_prometheus(catalog, operator=True)
    expected, live = healthy(operated, local=False)
    [missing] = compare(operated, expected, live, _up(expected, kueue=[]))
    assert "serviceMonitorSelector" in missing.fix and "kueue-system/wf-kueue" in missing.fix


def test_on_the_local_cluster_prometheus_is_asked_for_what_runs_there(catalog: Catalog) -> None:
    expected, live = healthy(catalog, local=True)
    assert compare(catalog, expected, live, _up(expected)) == []
    without_kueue = Live(live.nodes, live.objects, live.unserved,
                         {k: v for k, v in (live.local or {}).items() if k != "kueue"})
    findings = compare(catalog, expected, without_kueue, _up(expected, kueue=[]))
    assert [f.subject for f in findings] == ["kueue"]  # not running: one finding, not a second about its metrics
    [missing] = compare(catalog, expected, live, _up(expected, argo_workflow_controller=[]))
    assert missing.fix == LOCAL_FIX


def test_prometheus_is_asked_once_for_its_targets(catalog: Catalog) -> None:
    from wf.controller.platform_check import read_scrapes

    asked: list[str] = []
    active = [{"labels": {"job": "kueue", "instance": "a"}, "health": "up", "lastError": ""},
              {"labels": {"job": "kueue", "instance": "b"}, "health": "down", "lastError": "refused"},
              {"labels": {"job": "kube-apiserver"}, "health": "up", "lastError": ""}]

    def fetch(url: str) -> bytes:
        asked.append(url)
        return json.dumps({"status": "success", "data": {"activeTargets": active}}).encode()

    sources = platform.metrics_sources(catalog)
    scrapes = read_scrapes("http://127.0.0.1:9090/", "--prometheus", sources, fetch)
    assert scrapes.url == "http://127.0.0.1:9090"
    assert scrapes.targets == {"argo-workflow-controller": [], "kueue": [("up", ""), ("down", "refused")]}
    assert asked == ["http://127.0.0.1:9090/api/v1/targets?state=active"]
    with pytest.raises(InputError, match="not Prometheus' HTTP API"):
        read_scrapes("http://127.0.0.1:9090", "--prometheus", sources, lambda url: b"<html>Grafana</html>")


def test_check_refuses_a_prometheus_address_before_asking_the_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as ended:
        main(["platform", "check", "--prometheus", "prometheus:9090", "--context", "nowhere"])
    assert ended.value.code == 2
    assert "--prometheus" in capsys.readouterr().err


def test_the_node_facts_recorder_has_least_privilege_and_runs_the_catalogs_wf_image(catalog: Catalog) -> None:
    objects = bundle(catalog)["node-recorder.yaml"]
    assert [o["kind"] for o in objects] == ["ServiceAccount", "ClusterRole", "ClusterRoleBinding"]  # no image named
    (role,) = [o for o in objects if o["kind"] == "ClusterRole"]
    granted = {(group, resource, verb) for rule in role["rules"] for group in rule["apiGroups"]
               for resource in rule["resources"] for verb in rule["verbs"]}
    # Pods and Nodes watched (a Node's deletion loses the workers on it), workflows' records written into their
    # ledgers (made owned by the workflow, read for its uid) and copied onto the ended ones (watched), and an MPIJob
    # that lost a worker marked with a merge patch, which reads nothing. No delete, no list of ConfigMaps.
    assert granted == {("", "pods", "get"), ("", "pods", "list"), ("", "pods", "watch"), ("", "nodes", "get"),
                       ("", "nodes", "list"), ("", "nodes", "watch"), ("", "configmaps", "get"),
                       ("", "configmaps", "create"), ("", "configmaps", "patch"), ("argoproj.io", "workflows", "get"),
                       ("argoproj.io", "workflows", "list"), ("argoproj.io", "workflows", "watch"),
                       ("argoproj.io", "workflows", "patch"), ("kubeflow.org", "mpijobs", "patch")}
    with_image = catalog.model_copy(update={"cluster": catalog.cluster.model_copy(
        update={"wf_image": "ghcr.io/example/wf:0.9"})})
    (deployment,) = [o for o in bundle(with_image)["node-recorder.yaml"] if o["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "wf-node-recorder" and deployment["spec"]["replicas"] == 1
    (container,) = pod["containers"]
    assert container["image"] == "ghcr.io/example/wf:0.9"
    assert container["command"] == ["wf", "platform", "record-nodes"]
    # It serves wf's metrics on its pod's address, where the catalog's Prometheus finds it through a Service.
    assert container["args"] == ["--metrics-address=:9495"]
    assert container["ports"] == [{"name": "metrics", "containerPort": 9495}]
    metrics_objects = bundle(with_image)["metrics.yaml"]
    (service,) = [o for o in metrics_objects
                  if o["kind"] == "Service" and o["metadata"]["name"] == "wf-node-recorder-metrics"]
    assert service["metadata"]["namespace"] == "wf-system" and service["spec"]["ports"][0]["port"] == 9495
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    config = next(o for o in metrics_objects if o["kind"] == "ConfigMap")
    (job,) = [j for j in yaml.safe_load(config["data"]["wf.yml"])["scrape_configs"]
              if j["job_name"] == "wf-node-recorder"]
    assert "scheme" not in job and "tls_config" not in job and "authorization" not in job  # plain HTTP, no token
    assert not any(o["metadata"]["name"] == "wf-node-recorder-metrics" for o in bundle(catalog)["metrics.yaml"])
    (endpoint,) = scrape.service_monitor(platform.NODE_RECORDER_METRICS)["spec"]["endpoints"]
    assert endpoint["scheme"] == "http" and "tlsConfig" not in endpoint  # the Prometheus Operator's word for it
    # `wf platform check` looks for the Deployment on a real cluster, the account on both (the local cluster runs
    # the recorder as a process, as that account).
    kinds = {(o["kind"], o["metadata"]["name"]) for o in platform.expected(with_image, pinned_versions()).objects}
    local = {(o["kind"], o["metadata"]["name"])
             for o in platform.local_expected(with_image, pinned_versions()).objects}
    assert ("Deployment", "wf-node-recorder") in kinds - local
    assert {("ServiceAccount", "wf-node-recorder"), ("ClusterRole", "wf-node-recorder")} <= local
    assert {(o["kind"], o["metadata"]["name"]) for o in platform.node_recorder_rbac()} <= {
        (o["kind"], o["metadata"]["name"]) for o in platform.local_objects(catalog, ["wf"])}


@pytest.mark.parametrize("local", [False, True])
def test_check_finds_a_node_recorder_that_may_not_mark_lost_workers(catalog: Catalog, local: bool) -> None:
    """A cluster whose recorder role predates the lost-worker mark (no watch on nodes, no patch on MPIJobs): `wf
    platform check` says so, on EKS and on the local cluster, whose process acts as that role."""
    expected, live = healthy(catalog, local)
    objects = dict(live.objects)
    (role_key,) = [k for k in objects if k[1] == "ClusterRole" and k[3] == platform.NODE_RECORDER]
    role = copy.deepcopy(objects[role_key])
    assert role is not None
    role["rules"] = [r for r in role["rules"] if r["apiGroups"] != ["kubeflow.org"]]
    role["rules"][1]["verbs"] = ["get"]
    objects[role_key] = role
    findings = compare(catalog, expected, Live(live.nodes, objects, live.unserved, live.local))
    assert [f.subject for f in findings] == [f"ClusterRole {platform.NODE_RECORDER}"] * len(findings) and findings
    problems = " ".join(f.problem for f in findings)
    assert "rules" in problems and "watch" in problems, problems
