"""The platform bundle: everything a cluster needs besides its nodes, rendered from the catalog, and the objects
the local cluster installs from the same functions.

`wf platform render -f DIR` writes a directory of manifests with a kustomization.yaml, one file per concern,
rather than one multi-document file, because:
* the upstream installs (Argo Workflows, Kueue, the MPI operator) are referenced at their pinned release URL,
  not copied: thousands of lines of CRDs nobody reviews, which kustomize fetches; wf's settings for them are
  patches (`argo-*.yaml`, `kueue-configmap.yaml`), so a reviewer reads exactly what wf changes;
* a review or a diff reads per concern (namespaces and RBAC, ConfigMaps, queues, device plugins, autoscaler);
* `kubectl kustomize DIR` shows the whole result, `kubectl apply --server-side -k DIR` applies it in one step
  (server-side: Argo v4's full CRDs are too big for client-side apply's annotation).

The local cluster runs Argo, Kueue and the MPI operator as processes; it applies the same namespaces, RBAC,
ConfigMaps, queues and roles (`local_objects`), and records what it runs as processes in a ConfigMap
(`local_marker`) that `wf platform check` reads instead of looking for their Deployments.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from wf.compile.artifacts import LIFECYCLE_FILE, KeyedEndpoint, lifecycle_configuration, repository_configmap
from wf.core.constants import (
    CAPACITY_LABEL,
    CATALOG_CONFIGMAP,
    CATALOG_KEY,
    CATALOG_NAMESPACE,
    MPIJOB,
    NODE_RECORDER_METRICS_PORT,
    STEP_CACHE_PREFIX,
    WORKFLOW,
)
from wf.core.errors import InputError
from wf.model.catalog import Catalog
from wf.model.nodegroups import node_groups
from wf.render import autoscaler, device_plugins, kueue, scrape, team_roles
from wf.render.karpenter import LiteralDumper

CONTROLLER_NAMESPACE = "argo"
WORKFLOW_NAMESPACE = "wf"
ARGO_CONFIGMAP = "workflow-controller-configmap"
ARGO_CONTROLLER = "workflow-controller"
ARGO_CONTROLLER_ACCOUNT = "argo"  # the controller's service account in upstream's install.yaml
KUEUE_NAMESPACE = "kueue-system"
KUEUE_CONFIGMAP = "kueue-manager-config"
KUEUE_CONFIG_KEY = "controller_manager_config.yaml"
LOCAL_MARKER = "wf-local-cluster"
# The node facts recorder (wf.controller.node_recorder): its Deployment, service account and cluster role.
NODE_RECORDER = "wf-node-recorder"
# The hand-written manifests (with the reasons for each value) the rendering reads, in apply order.
MANIFEST_FILES = ("namespaces.yaml", "argo-crds.yaml", "workflow-controller-configmap.yaml", "rbac.yaml")
KUSTOMIZATION = "kustomization.yaml"
# Argo's workflow archive and offloaded node status (its `persistence`), in PostgreSQL: the local cluster's own
# server (wf.cluster.postgres) or the platform's RDS instance. The credentials are a Secret in Argo's namespace that
# the controller and Argo Server read by reference (keys username, password): never in the ConfigMap.
ARGO_DATABASE_SECRET = "wf-argo-database"
ARGO_DATABASE_NAME = "argo"
ARGO_ARCHIVE_TABLE = "argo_workflows"
# Long enough for a month's `wf report` and `wf list --archived --since 30d`; Argo deletes older archived runs.
ARGO_ARCHIVE_TTL = "30d"
# From this many nodes (every node group at maxSize) the Argo controller gets the tuning below; smaller
# platforms keep Argo's defaults, which a few hundred nodes do not outgrow.
LARGE_PLATFORM_NODES = 500


@dataclass(frozen=True)
class Versions:
    """The pinned versions of the upstream components (wf.cluster.build builds the same for the local cluster)."""

    argo: str
    kueue: str
    mpi_operator: str


@dataclass(frozen=True)
class ArgoDatabase:
    """The PostgreSQL server Argo keeps its archive and offloaded node status in."""

    host: str
    port: int = 5432
    ssl: bool = True  # RDS takes TLS; the local cluster's server listens on loopback only, without it


def parse_database(value: str, origin: str) -> ArgoDatabase:
    """HOST or HOST:PORT (an RDS endpoint) as Argo's database; InputError naming `origin` for anything else."""
    host, _, port = value.strip().rpartition(":") if ":" in value else (value.strip(), "", "5432")
    if not host or not port.isdigit() or not 0 < int(port) < 65536 or any(c in host for c in "/@ "):
        raise InputError(f"{origin}: {value!r} is not a database address: give HOST or HOST:PORT of Argo's "
                         "PostgreSQL (e.g. argo.abc123.us-east-1.rds.amazonaws.com:5432)")
    return ArgoDatabase(host=host, port=int(port))


def persistence(database: ArgoDatabase) -> dict[str, Any]:
    """Argo's `persistence` (v4.0.7 config.PersistConfig): every finished workflow archived (the archive keeps its
    nodes whole, so `wf get` reads an archived run as a live one), node status offloaded when a workflow's status
    outgrows what etcd takes (a fan-out of 10,000 items), the credentials by Secret reference. Argo creates and
    migrates its tables itself."""
    secret = {"name": ARGO_DATABASE_SECRET}
    return {
        "archive": True,
        "archiveTTL": ARGO_ARCHIVE_TTL,
        "nodeStatusOffLoad": True,
        "postgresql": {
            "host": database.host,
            "port": database.port,
            "database": ARGO_DATABASE_NAME,
            "tableName": ARGO_ARCHIVE_TABLE,
            "userNameSecret": {**secret, "key": "username"},
            "passwordSecret": {**secret, "key": "password"},
            "ssl": database.ssl,
            **({"sslMode": "require"} if database.ssl else {}),
        },
    }


@dataclass(frozen=True)
class Component:
    """An upstream install the bundle references by URL and `wf platform check` finds running."""

    name: str
    url: str
    namespace: str
    deployment: str
    image: str  # repository, without the tag
    tag: str

    @property
    def version(self) -> str:
        return self.tag.removeprefix("v")


def components(catalog: Catalog, versions: Versions) -> list[Component]:
    """Argo and the MPI operator always; Kueue when the catalog has teams."""
    out = [
        Component("argo", f"https://github.com/argoproj/argo-workflows/releases/download/v{versions.argo}/install.yaml",
                  CONTROLLER_NAMESPACE, ARGO_CONTROLLER, "quay.io/argoproj/workflow-controller", f"v{versions.argo}"),
        Component("mpi-operator", "https://raw.githubusercontent.com/kubeflow/mpi-operator/"
                  f"v{versions.mpi_operator}/deploy/v2beta1/mpi-operator.yaml",
                  "mpi-operator", "mpi-operator", "mpioperator/mpi-operator", versions.mpi_operator),
    ]
    if catalog.queues:
        out.append(Component("kueue", "https://github.com/kubernetes-sigs/kueue/releases/download/"
                             f"v{versions.kueue}/manifests.yaml",
                             KUEUE_NAMESPACE, "kueue-controller-manager", "registry.k8s.io/kueue/kueue",
                             f"v{versions.kueue}"))
    return out


def manifests_dir() -> Path:
    """manifests/ of the repository, which the package carries as wf/manifests (a symlink in the source tree,
    copied into wheels), so an installed wf renders the same objects."""
    directory = Path(__file__).resolve().parents[1] / "manifests"
    if not (directory / MANIFEST_FILES[0]).is_file():
        raise InputError(f"wf's manifests are missing from {directory}: reinstall wf")
    return directory


def load_manifest(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((manifests_dir() / name).read_text()) if d]


def _key(obj: dict[str, Any]) -> tuple[str, str, str | None, str]:
    meta = obj["metadata"]
    return obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"]


def _unique(objects: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """First of each object: kustomize refuses two resources with one identity."""
    return list({_key(o): o for o in reversed(list(objects))}.values())[::-1]


def workflow_namespaces(catalog: Catalog) -> list[str]:
    """Where workflows run: wf's own, every team's, every namespace the artifact store names a service account in."""
    teams = [ns for team in catalog.queues.teams for ns in team.namespaces] if catalog.queues else []
    stores = list(catalog.artifacts.service_accounts) if catalog.artifacts else []
    return list(dict.fromkeys([WORKFLOW_NAMESPACE, *teams, *stores]))


def workflow_namespace_objects(catalog: Catalog, namespace: str) -> list[dict[str, Any]]:
    """A namespace where workflows run: the namespace at its Pod Security level (team_roles.namespace_object)
    plus rbac.yaml's service accounts, roles and bindings (written for `wf`), re-targeted at it. Without
    wf-workflow there, Argo could not create the pods (the controller's workflowDefaults name that service
    account)."""
    docs: list[dict[str, Any]] = [team_roles.namespace_object(catalog, namespace)]
    for doc in load_manifest("rbac.yaml"):
        doc["metadata"]["namespace"] = namespace
        for subject in doc.get("subjects") or []:
            if subject.get("kind") == "ServiceAccount":
                subject["namespace"] = namespace
        docs.append(doc)
    return docs


def _namespaces(catalog: Catalog, namespaces: Sequence[str]) -> list[dict[str, Any]]:
    """wf's own namespaces, a workflow namespace (`wf` among them) at its Pod Security level."""
    own = [o for o in load_manifest("namespaces.yaml") if o["metadata"]["name"] not in namespaces]
    return [*own, *(o for ns in namespaces for o in workflow_namespace_objects(catalog, ns))]


def namespaces_rbac(catalog: Catalog, namespaces: Sequence[str]) -> list[dict[str, Any]]:
    """wf's namespaces, each workflow namespace's accounts and roles, and the teams' roles."""
    objects = [*_namespaces(catalog, namespaces), *step_cache_rbac(namespaces)]
    if catalog.queues:
        objects += team_roles.objects(catalog)
    return _unique(objects)


def step_cache_rbac(namespaces: Sequence[str]) -> list[dict[str, Any]]:
    """What Argo's controller needs for the step cache (wf.compile.cache) beyond upstream's roles, which read
    ConfigMaps only: to create each workflow namespace's cache ConfigMap in its own namespace, where Argo v4.0
    keeps them, and update those alone. Kubernetes cannot limit `create` to names, so that is the namespace's.
    A Role per workflow namespace rather than one listing them all: `wf platform check` compares each object
    whole, and a cluster with one namespace more than the catalog names still has every one it expects."""

    def granted(name: str, rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
        meta = {"name": name, "namespace": CONTROLLER_NAMESPACE}
        return [{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta, "rules": rules},
                {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": dict(meta),
                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
                 "subjects": [{"kind": "ServiceAccount", "name": ARGO_CONTROLLER_ACCOUNT,
                               "namespace": CONTROLLER_NAMESPACE}]}]

    out = granted(STEP_CACHE_PREFIX, [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]}])
    for ns in namespaces:
        cache = f"{STEP_CACHE_PREFIX}-{ns}"
        out += granted(cache, [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "update"],
                                "resourceNames": [cache]}])
    return out


def node_recorder_rbac() -> list[dict[str, Any]]:
    """The node facts recorder's account (wf.controller.node_recorder): it watches the pods of every namespace,
    reads the Node each is bound to and writes the workflow's record of its nodes into the workflow's ledger (a
    ConfigMap it creates when missing, naming the workflow, read for its uid, as owner); it watches the ended
    workflows to copy their record onto them; it watches the Nodes for their deletion and marks an MPIJob that lost a
    worker (a merge patch: no read); nothing more. Kubernetes cannot limit `create` to names, nor a ConfigMap's
    rights to the ledgers' suffix, so those are every namespace's."""
    meta = {"name": NODE_RECORDER, "namespace": CATALOG_NAMESPACE}
    rules = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
             {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
             {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "create", "patch"]},
             {"apiGroups": [WORKFLOW.group], "resources": [WORKFLOW.plural],
              "verbs": ["get", "list", "watch", "patch"]},
             {"apiGroups": [MPIJOB.group], "resources": [MPIJOB.plural], "verbs": ["patch"]}]
    return [{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": dict(meta)},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": NODE_RECORDER},
             "rules": rules},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
             "metadata": {"name": NODE_RECORDER},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NODE_RECORDER},
             "subjects": [{"kind": "ServiceAccount", **meta}]}]


def node_recorder_deployment(image: str) -> dict[str, Any]:
    """The recorder on a real cluster: one replica of `wf platform record-nodes` in the catalog's wf image, as its
    account (the token of its service account, no kubeconfig), preferring On-Demand nodes: while it is away, pods
    that are bound and gone again leave nothing to record (those still there are recorded when it lists them)."""
    labels = {"app.kubernetes.io/name": NODE_RECORDER}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": NODE_RECORDER, "namespace": CATALOG_NAMESPACE, "labels": labels},
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},  # one writer at a time (its writes are conflict-safe anyway)
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {
                "serviceAccountName": NODE_RECORDER,
                "securityContext": {"runAsNonRoot": True, "runAsUser": 65534,
                                    "seccompProfile": {"type": "RuntimeDefault"}},
                "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 100, "preference": {"matchExpressions": [
                        {"key": CAPACITY_LABEL, "operator": "In", "values": ["on-demand"]}]}}]}},
                "containers": [{
                    "name": "recorder", "image": image, "command": ["wf", "platform", "record-nodes"],
                    # wf's metrics on the pod's address, for Prometheus.
                    "args": [f"--metrics-address=:{NODE_RECORDER_METRICS_PORT}"],
                    "ports": [{"name": NODE_RECORDER_METRICS.port, "containerPort": NODE_RECORDER_METRICS_PORT}],
                    "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
                    "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                        "capabilities": {"drop": ["ALL"]}},
                }],
            }},
        },
    }


def node_recorder_objects(catalog: Catalog) -> list[dict[str, Any]]:
    """The recorder's account, and its Deployment where the catalog names the wf image."""
    image = catalog.cluster.wf_image
    return [*node_recorder_rbac(), *([node_recorder_deployment(image)] if image else [])]


def platform_nodes(catalog: Catalog) -> int:
    return sum(group.max_size for group in node_groups(catalog))


def is_large(catalog: Catalog) -> bool:
    return platform_nodes(catalog) >= LARGE_PLATFORM_NODES


def argo_configmap(catalog: Catalog, local: bool = False, database: ArgoDatabase | None = None) -> dict[str, Any]:
    """Argo's controller ConfigMap: wf's defaults (manifests/workflow-controller-configmap.yaml), plus, on a
    large real platform, a pod creation rate: 250 workflows fanning out 30 shards each create 7,500 pods in
    seconds; 100/s with a burst of 200 spreads that over about a minute, which keeps the API server and the
    scheduler responsive for everything else (node heartbeats, the autoscaler) meanwhile. The local cluster
    keeps Argo's unlimited rate: its API server serves nothing else, and serves metrics as plain HTTP, on
    loopback, where a real cluster's self-signed TLS would protect nothing. With a database, Argo's persistence
    in it (`persistence`)."""
    configmap = load_manifest("workflow-controller-configmap.yaml")[0]
    if database is not None:
        configmap["data"]["persistence"] = yaml.safe_dump(persistence(database), sort_keys=False)
    if local:
        metrics = {**yaml.safe_load(configmap["data"]["metricsConfig"]), "secure": False}
        configmap["data"]["metricsConfig"] = yaml.safe_dump(metrics, sort_keys=False)
    elif is_large(catalog):
        configmap["data"]["resourceRateLimit"] = "limit: 100\nburst: 200\n"
    return configmap


_READ = ["get", "list", "watch"]


# ---- metrics: what the cluster's Prometheus scrapes (wf.render.scrape; the local cluster's scrapes the same jobs)
ARGO_METRICS = scrape.Source(
    job="argo-workflow-controller", component="argo", namespace=CONTROLLER_NAMESPACE,
    service="workflow-controller-metrics", port="metrics", labels={"app": ARGO_CONTROLLER}, authorized=False)
ARGO_METRICS_PORT = 9090  # metricsConfig's `port`, whose default wf keeps
# Upstream's Service (Kueue's manifests.yaml, config/default/metrics_service.yaml) in front of its :8443.
KUEUE_METRICS = scrape.Source(
    job="kueue", component="kueue", namespace=KUEUE_NAMESPACE, service="kueue-controller-manager-metrics-service",
    port="https", labels={"app.kubernetes.io/name": "kueue", "app.kubernetes.io/component": "metrics-service"},
    authorized=True)
METRICS_READER = "wf-prometheus"  # the ClusterRole (GET /metrics) and the Roles that let Prometheus find endpoints
SCRAPE_CONFIGMAP = "wf-scrape-configs"
SCRAPE_FILE = "wf.yml"  # a file for Prometheus' `scrape_config_files`


NODE_RECORDER_METRICS = scrape.Source(
    job="wf-node-recorder", component=NODE_RECORDER, namespace=CATALOG_NAMESPACE, service=f"{NODE_RECORDER}-metrics",
    port="metrics", labels={"app.kubernetes.io/name": NODE_RECORDER}, authorized=False, https=False)


def metrics_sources(catalog: Catalog) -> list[scrape.Source]:
    """Argo's controller always, Kueue when the catalog has teams (as `components`), wf's recorder (its metrics)
    where the bundle runs it (the catalog names the wf image)."""
    return [ARGO_METRICS, *([KUEUE_METRICS] if catalog.queues else []),
            *([NODE_RECORDER_METRICS] if catalog.cluster.wf_image else [])]


def metrics_reader(subject: dict[str, str]) -> list[dict[str, Any]]:
    """GET on /metrics, nothing else, for one service account: Kueue's and the API server's endpoints ask the API
    server whether the scraper may."""
    meta = {"name": METRICS_READER}
    return [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": meta,
         "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": dict(meta),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": METRICS_READER},
         "subjects": [{"kind": "ServiceAccount", **subject}]},
    ]


def metrics_objects(catalog: Catalog) -> list[dict[str, Any]]:
    """What lets the catalog's Prometheus (`cluster.prometheus`) scrape Argo's controller, Kueue and wf's recorder: a
    Service for the controller's metrics port (upstream's install has none; headless, so each replica is a target, as
    Argo's docs advise) and one for the recorder's, Roles to find the endpoints in their namespaces, GET on /metrics,
    and the scrape configuration (a ConfigMap for Prometheus' `scrape_config_files`) or, where the Prometheus Operator
    runs it, ServiceMonitors."""
    prometheus = catalog.cluster.prometheus
    subject = {"name": prometheus.service_account, "namespace": prometheus.namespace}
    sources = metrics_sources(catalog)
    out: list[dict[str, Any]] = [{
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": ARGO_METRICS.service, "namespace": ARGO_METRICS.namespace,
                     "labels": dict(ARGO_METRICS.labels)},
        "spec": {"clusterIP": "None", "selector": {"app": ARGO_CONTROLLER},
                 "ports": [{"name": ARGO_METRICS.port, "port": ARGO_METRICS_PORT, "targetPort": ARGO_METRICS_PORT,
                            "protocol": "TCP"}]},
    }]
    if NODE_RECORDER_METRICS in sources:
        out.append({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": NODE_RECORDER_METRICS.service, "namespace": NODE_RECORDER_METRICS.namespace,
                         "labels": dict(NODE_RECORDER_METRICS.labels)},
            "spec": {"clusterIP": "None", "selector": dict(NODE_RECORDER_METRICS.labels),
                     "ports": [{"name": NODE_RECORDER_METRICS.port, "port": NODE_RECORDER_METRICS_PORT,
                                "targetPort": NODE_RECORDER_METRICS_PORT, "protocol": "TCP"}]},
        })
    for source in sources:
        meta = {"name": METRICS_READER, "namespace": source.namespace}
        out += [
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta,
             "rules": [{"apiGroups": [""], "resources": ["services", "endpoints", "pods"], "verbs": _READ},
                       {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": _READ}]},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": dict(meta),
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": METRICS_READER},
             "subjects": [{"kind": "ServiceAccount", **subject}]},
        ]
    if any(source.authorized for source in sources):
        out += metrics_reader(subject)
    if prometheus.operator:
        return [*out, *(scrape.service_monitor(source) for source in sources)]
    jobs = {"scrape_configs": [scrape.discovered_job(source) for source in sources]}
    return [*out, {"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": SCRAPE_CONFIGMAP, "namespace": prometheus.namespace},
                   "data": {SCRAPE_FILE: yaml.safe_dump(jobs, sort_keys=False)}}]


ARGO_SERVER = "argo-server"
ARGO_SERVER_CLUSTER_ROLE = "argo-server-cluster-role"  # upstream's name, which the bundle's patch narrows


def argo_server_cluster_rules() -> list[dict[str, Any]]:
    """What Argo Server reads in every namespace with its own account: the objects its informers cache (workflows
    for its listings, templates it validates against, event bindings). In `client` auth mode every request a
    user makes runs with the user's own token; the server's account changes nothing."""
    return [{"apiGroups": ["argoproj.io"], "verbs": _READ,
             "resources": ["workflows", "workflowtemplates", "clusterworkflowtemplates", "cronworkflows",
                           "workfloweventbindings"]}]


def argo_server_namespace_rules() -> list[dict[str, Any]]:
    """What Argo Server reads in Argo's namespace: the controller's ConfigMap and the database's Secret alone."""
    return [{"apiGroups": [""], "resources": ["configmaps"], "verbs": _READ},
            {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"], "resourceNames": [ARGO_DATABASE_SECRET]}]


def argo_server_objects(versions: Versions) -> list[dict[str, Any]]:
    """Patches of upstream's Argo Server (its Deployment, ClusterIP Service and ClusterRole come with Argo's
    install): the pinned image, `client` auth (a developer reads the archive with their own cluster rights, as
    `wf` sends its EKS token), and a ClusterRole narrowed to reading (upstream's may create Secrets, delete pods
    and exec into them)."""
    return [
        {"apiVersion": "apps/v1", "kind": "Deployment",
         "metadata": {"name": ARGO_SERVER, "namespace": CONTROLLER_NAMESPACE},
         "spec": {"template": {"spec": {"containers": [{
             "name": ARGO_SERVER, "image": f"quay.io/argoproj/argocli:v{versions.argo}",
             "args": ["server", "--auth-mode=client"]}]}}}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": ARGO_SERVER_CLUSTER_ROLE}, "rules": argo_server_cluster_rules()},
    ]


def argo_server_rbac() -> list[dict[str, Any]]:
    """Argo Server's reading of its configuration in Argo's namespace (a Role, not upstream's cluster-wide one)."""
    meta = {"name": ARGO_SERVER, "namespace": CONTROLLER_NAMESPACE}
    return [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta,
         "rules": argo_server_namespace_rules()},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta,
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": ARGO_SERVER},
         "subjects": [{"kind": "ServiceAccount", "name": ARGO_SERVER, "namespace": CONTROLLER_NAMESPACE}]},
    ]


def argo_controller_patch(catalog: Catalog, versions: Versions) -> dict[str, Any]:
    """The workflow-controller Deployment as wf runs it: the pinned image and, on a large platform, client
    limits and workers sized for ~3,000 nodes, ~40,000 pods a day and 250+ workflows in flight."""
    container: dict[str, Any] = {"name": ARGO_CONTROLLER,
                                 "image": f"quay.io/argoproj/workflow-controller:v{versions.argo}"}
    if is_large(catalog):
        container["args"] = [
            # Kubernetes client limits; defaults 20/30. Every pod costs the controller several requests (create,
            # label patches on completion, cleanup): 8,000 pods at 20 q/s queue minutes of work (benchmarks/
            # README.md, "Scale"). EKS's API servers take 100 q/s from one client; priority and fairness still
            # protect them.
            "--qps=100", "--burst=150",
            # Default 32: 250 workflows in flight, each reconciled on every pod change; more workers keep a
            # storm of pod deletions from delaying unrelated workflows.
            "--workflow-workers=64",
            # Default 4: completed pods are labelled and garbage-collected by these; at ~40,000 pods a day
            # 4 workers fall behind after a burst of shards finishing together.
            "--pod-cleanup-workers=32",
        ]
        # The informer caches hold every live workflow and pod: ~10,000 pods at peak need a few GiB; upstream
        # sets no requests, so the controller would be evicted or throttled first.
        container["resources"] = {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"memory": "8Gi"}}
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": ARGO_CONTROLLER, "namespace": CONTROLLER_NAMESPACE},
            "spec": {"template": {"spec": {"containers": [container]}}}}


def kueue_configmap(configuration: dict[str, Any]) -> dict[str, Any]:
    """Kueue's configuration where its Deployment reads it (upstream's ConfigMap and key)."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": KUEUE_CONFIGMAP, "namespace": KUEUE_NAMESPACE},
            "data": {KUEUE_CONFIG_KEY: yaml.safe_dump(configuration, sort_keys=False)}}


def kueue_deployment_configuration(catalog: Catalog) -> dict[str, Any]:
    """wf's Kueue configuration with the serving settings of upstream's manifests.yaml, which a replaced
    ConfigMap key would otherwise lose (ports its Service and probes use, leader election of its replicas)."""
    return {
        **kueue.configuration(catalog),
        "health": {"healthProbeBindAddress": ":8081"},
        "metrics": {"bindAddress": ":8443"},
        "webhook": {"port": 9443},
        "leaderElection": {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"},
    }


def catalog_configmap(catalog: Catalog) -> dict[str, Any]:
    """The catalog where `wf submit` reads it (wf.controller.catalog_source)."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": CATALOG_CONFIGMAP, "namespace": CATALOG_NAMESPACE},
            "data": {CATALOG_KEY: catalog.to_yaml()}}


def configmaps(catalog: Catalog, namespaces: Sequence[str], artifact_endpoint: KeyedEndpoint | None = None
               ) -> list[dict[str, Any]]:
    """The catalog, and in every workflow namespace the artifact repository compiled workflows name (at
    `artifact_endpoint` when given: the local cluster's own store)."""
    out = [catalog_configmap(catalog)]
    if catalog.artifacts:
        out += [repository_configmap(catalog.artifacts, ns, artifact_endpoint) for ns in namespaces]
    return out


# What a claim of the local cluster's checkpoint volumes asks for: FSx for Lustre's smallest file system.
LOCAL_CHECKPOINT_VOLUME_SIZE = "1200Gi"


def local_checkpoint_claims(catalog: Catalog, namespaces: Sequence[str]) -> list[dict[str, Any]]:
    """The catalog's checkpoint volumes on the local cluster: their claim in every workflow namespace, each bound to
    a volume of its own, so a step that keeps checkpoints on one is scheduled as on EKS (the scheduler holds a pod
    whose claim is unbound). On EKS the platform provisions them (the FSx or EFS CSI driver), not the bundle.
    The claim names its volume and the volume no claim: a volume's claimRef is one field, so applying it again
    without the uid the binder adds would leave the bound claim Lost. Simulated nodes mount nothing, so the
    hostPath is never made; what steps save there is the twin's checkpoint ledger (wf.controller.checkpoints)."""
    out: list[dict[str, Any]] = []
    for name, volume in (catalog.artifacts.checkpoints.volumes.items() if catalog.artifacts else []):
        for ns in namespaces:
            size = {"storage": LOCAL_CHECKPOINT_VOLUME_SIZE}
            bound = f"{volume.claim}-{ns}"
            out += [
                {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": bound},
                 "spec": {"capacity": size, "accessModes": ["ReadWriteMany"], "storageClassName": "",
                          "persistentVolumeReclaimPolicy": "Retain",
                          "hostPath": {"path": f"/wf/local-checkpoints/{ns}/{name}"}}},
                {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                 "metadata": {"name": volume.claim, "namespace": ns},
                 "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "", "volumeName": bound,
                          "resources": {"requests": size}}},
            ]
    return out


def local_objects(catalog: Catalog, namespaces: Sequence[str], database: ArgoDatabase | None = None,
                  artifact_endpoint: KeyedEndpoint | None = None) -> list[dict[str, Any]]:
    """What the local cluster applies from the rendering, in apply order (namespaces first). Kueue's objects and
    the teams' roles come later, once Kueue's webhooks serve (wf.cluster.kueue)."""
    return _unique([*_namespaces(catalog, namespaces), *step_cache_rbac(namespaces), *node_recorder_rbac(),
                    argo_configmap(catalog, local=True, database=database),
                    *configmaps(catalog, namespaces, artifact_endpoint), *local_checkpoint_claims(catalog, namespaces)])


def local_marker(versions: Versions, kueue_running: bool) -> dict[str, Any]:
    """The local cluster's record of the components it runs as processes, by version: `wf platform check` takes
    them as running there instead of looking for Deployments, and knows the nodes are simulated (no device
    plugins, no autoscaler)."""
    data = {"argo": versions.argo, "mpi-operator": versions.mpi_operator}
    if kueue_running:
        data["kueue"] = versions.kueue
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": LOCAL_MARKER, "namespace": CATALOG_NAMESPACE}, "data": data}


@dataclass(frozen=True)
class Expected:
    """What `wf platform check` compares a live cluster with."""

    objects: list[dict[str, Any]]  # compared field by field (wf's fields; the server may add more)
    components: list[Component]
    daemonsets: list[dict[str, Any]]  # device plugins: present, at the image, ready on every node they target
    autoscaler: list[dict[str, Any]]  # Karpenter's NodePools and EC2NodeClasses, or cluster-autoscaler's objects
    metrics: tuple[scrape.Source, ...] = ()  # what Prometheus must scrape (of the components that run)


def expected(catalog: Catalog, versions: Versions) -> Expected:
    namespaces = workflow_namespaces(catalog)
    objects = [*namespaces_rbac(catalog, namespaces), argo_configmap(catalog), *configmaps(catalog, namespaces),
               *metrics_objects(catalog), *node_recorder_objects(catalog)]
    if catalog.queues:
        objects += [kueue_configmap(kueue.configuration(catalog)), *kueue.objects(catalog)]
    autoscaler.check_choice(catalog)
    scaler = (autoscaler.objects(catalog, None) if catalog.cluster.autoscaler == autoscaler.KARPENTER
              else [autoscaler.deployment(catalog)])
    plugins = [o for o in device_plugins.objects(catalog) if o["kind"] == "DaemonSet"]
    return Expected(objects, components(catalog, versions), plugins, scaler, tuple(metrics_sources(catalog)))


def local_expected(catalog: Catalog, versions: Versions) -> Expected:
    """On the local cluster Argo's ConfigMap is the local one, there are no plugins or autoscaler to find, and its
    Prometheus scrapes the same jobs on loopback (wf.cluster.prometheus), without Services or a configuration in
    the cluster; the node facts recorder is a process there."""
    full = expected(catalog, versions)
    local_argo = argo_configmap(catalog, local=True)
    # The node facts recorder runs there as a process beside the simulated executor, as the same account.
    processes = [o for o in node_recorder_objects(catalog) if o["kind"] == "Deployment"]
    elsewhere = {_key(o) for o in [*metrics_objects(catalog), *processes]}
    objects = [local_argo if _key(o) == _key(local_argo) else o for o in full.objects if _key(o) not in elsewhere]
    return Expected(objects, full.components, [], [], full.metrics)


def bundle(catalog: Catalog, versions: Versions, account: str | None, database: ArgoDatabase | None = None
           ) -> dict[str, list[dict[str, Any]]]:
    """The bundle's files (name -> documents) besides the kustomization; InputError (with the catalog's field)
    for an accelerator no device plugin serves or an autoscaler the node groups contradict. With `database`,
    Argo keeps its archive and offloaded node status there."""
    device_plugins.check_known(catalog)
    autoscaler.check_choice(catalog)
    namespaces = workflow_namespaces(catalog)
    files: dict[str, list[dict[str, Any]]] = {
        "namespaces-rbac.yaml": namespaces_rbac(catalog, namespaces),
        "configmaps.yaml": configmaps(catalog, namespaces),
        "argo-configmap.yaml": [argo_configmap(catalog, database=database)],
        "argo-controller.yaml": [argo_controller_patch(catalog, versions)],
        "argo-server.yaml": [argo_server_objects(versions)[0]],
        "argo-server-role.yaml": [argo_server_objects(versions)[1]],
        "argo-server-rbac.yaml": argo_server_rbac(),
    }
    if catalog.queues:
        files["kueue.yaml"] = kueue.objects(catalog)
        files["kueue-configmap.yaml"] = [kueue_configmap(kueue_deployment_configuration(catalog))]
    if plugins := device_plugins.objects(catalog):
        files["device-plugins.yaml"] = plugins
    files["autoscaler.yaml"] = autoscaler.objects(catalog, account)
    files["metrics.yaml"] = metrics_objects(catalog)
    files["node-recorder.yaml"] = node_recorder_objects(catalog)
    return files


PATCHES = ("argo-configmap.yaml", "argo-controller.yaml", "argo-server.yaml", "argo-server-role.yaml",
           "kueue-configmap.yaml")


def kustomization(catalog: Catalog, versions: Versions, files: Iterable[str]) -> dict[str, Any]:
    names = list(files)
    return {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [*(c.url for c in components(catalog, versions)), *(f for f in names if f not in PATCHES)],
        "patches": [{"path": f} for f in names if f in PATCHES],
    }


_HEADERS = {
    "namespaces-rbac.yaml": "wf's namespaces; in each workflow namespace the workflow and developer accounts "
                            "(manifests/rbac.yaml); each team's Role and RoleBinding; Argo's controller's "
                            "Role for the step cache's ConfigMaps.",
    "configmaps.yaml": "The catalog `wf submit` compiles with, and each workflow namespace's artifact repository.",
    "argo-configmap.yaml": "Patch of Argo's workflow-controller-configmap: wf's defaults "
                           "(manifests/workflow-controller-configmap.yaml) and the platform's pod creation rate.",
    "argo-controller.yaml": "Patch of Argo's workflow-controller Deployment: the pinned image and the tuning for "
                            "the platform's size (the args replace upstream's empty list).",
    "argo-server.yaml": "Patch of Argo Server's Deployment (upstream's, behind its ClusterIP Service "
                        "argo-server:2746): the pinned image and `client` auth: each request runs with the "
                        "caller's own token. It serves the workflow archive (`wf list --archived`, `wf get` "
                        "of a deleted run).",
    "argo-server-role.yaml": "Patch of Argo Server's ClusterRole: read workflows and templates, nothing else "
                             "(upstream's creates Secrets and deletes and execs into pods).",
    "argo-server-rbac.yaml": "Argo Server's reading of the controller's ConfigMap and the database Secret, in Argo's "
                             "namespace only.",
    "kueue.yaml": "The teams' queues: ResourceFlavors per class x capacity, priorities, a ClusterQueue per team, "
                  "LocalQueues.",
    "kueue-configmap.yaml": "Patch of Kueue's configuration: integrations, namespaces, fair sharing, excluded "
                            "resources and client limits wf's work needs, with upstream's serving settings.",
    "device-plugins.yaml": "A device plugin per accelerator the catalog uses, on those classes' nodes only.",
    "autoscaler.yaml": "What grows the node groups (cluster.autoscaler in the catalog).",
    "node-recorder.yaml": "The node facts recorder (`wf platform record-nodes`): it keeps with each workflow the "
                          "instance type, capacity and zone of the nodes its pods were bound to (in the workflow's "
                          "ledger ConfigMap while it runs, then on the ended workflow, for Argo's archive), so `wf "
                          "get` and `wf report` price attempts whose nodes Spot or consolidation removed; and it "
                          "marks a multi-node step's MPIJob that lost a worker (`wf-worker-lost`), so the attempt is "
                          "an interruption; and it counts each ended workflow into wf's metrics (on :9495, "
                          "metrics.yaml). Its account may watch pods and nodes, get, create and patch ConfigMaps, "
                          "watch and patch workflows and patch MPIJobs; the Deployment needs cluster.wfImage in the "
                          "catalog (an image with wf installed).",
    "metrics.yaml": "What the cluster's Prometheus (cluster.prometheus in the catalog) needs to scrape Argo's "
                    "controller, Kueue and wf's node facts recorder (wf's own metrics): a Service for the "
                    "controller's metrics port and one for the recorder's, Roles to find the endpoints, "
                    "GET on /metrics, and the scrape jobs: a ConfigMap to mount and list in Prometheus' "
                    "scrape_config_files, or the Prometheus Operator's ServiceMonitors. `wf platform check "
                    "--prometheus URL` says whether Prometheus scrapes them.",
}


def render(catalog: Catalog, versions: Versions, account: str | None, label: str,
           database: ArgoDatabase | None = None) -> dict[str, str]:
    """The bundle as file texts, kustomization.yaml included."""
    files = bundle(catalog, versions, account, database)
    out = {}
    for name, docs in files.items():
        header = [f"Generated by `wf platform render` from {label}. Do not edit: change the catalog.",
                  *textwrap.wrap(_HEADERS[name], 110)]
        out[name] = "".join(f"# {line}\n" for line in header) + yaml.dump_all(
            docs, Dumper=LiteralDumper, sort_keys=False, default_flow_style=False, width=120)
    urls = "\n".join(f"#   {c.name} {c.tag}: {c.url}" for c in components(catalog, versions))
    out[KUSTOMIZATION] = (
        f"# Generated by `wf platform render` from {label}. Review with `kubectl kustomize .`, apply with\n"
        "# `kubectl apply --server-side -k .`, then check with `wf platform check`.\n"
        f"# Upstream installs, pinned by release (fetched by kustomize):\n{urls}\n"
        + yaml.safe_dump(kustomization(catalog, versions, files), sort_keys=False, default_flow_style=False)
    )
    if catalog.artifacts:  # not a Kubernetes object: applied to the bucket with the AWS CLI (README)
        out[LIFECYCLE_FILE] = json.dumps(lifecycle_configuration(catalog.artifacts), indent=2) + "\n"
    return out
