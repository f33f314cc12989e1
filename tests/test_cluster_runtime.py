"""Unit tests of the local cluster's runtime pieces that need no cluster: process checks, the kwokctl
config we generate, the stages' contract with wf.core.constants, the manifests' least-privilege RBAC."""

from __future__ import annotations

import socket
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from wf.cluster import processes
from wf.cluster.runtime import LocalCluster, cluster_namespaces
from wf.cluster.supervise import STAGES_FILE, serving_port
from wf.cluster.tuning import GO_RUNTIME_ENV, GOGC, KWOK_OPTIONS, KWOKCTL_OPTIONS, TUNING
from wf.core.constants import REAL_NODE_LABEL, SIM_DURATION, SIM_EXIT_CODE
from wf.core.errors import InputError
from wf.model.catalog import Catalog
from wf.render.platform import MANIFEST_FILES, load_manifest, manifests_dir, workflow_namespace_objects


def test_free_port_is_on_loopback_and_bindable() -> None:
    port = processes.free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_free_ports_are_distinct_and_below_the_ephemeral_range() -> None:
    """A client connection can take an ephemeral port before a component listens on it (a second cluster's
    controller-manager could not start beside a busy first one); ports handed out twice would collide too."""
    lowest_ephemeral = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = [processes.free_port() for _ in range(300)]
    assert len(set(ports)) == len(ports)
    assert all(10_000 <= p < lowest_ephemeral for p in ports)


def test_is_running_checks_the_binary_and_sees_through_zombies(tmp_path: Path) -> None:
    pid = processes.start(
        [sys.executable, "-c", "import time; time.sleep(30)"],
        env={}, log_file=tmp_path / "log", pid_file=tmp_path / "pid", cwd=tmp_path,
    )
    assert processes.read_pid(tmp_path / "pid") == pid
    assert processes.is_running(pid, Path(sys.executable))
    assert not processes.is_running(pid, Path("/bin/sh"))  # a reused pid running something else is not ours
    processes.stop(pid, Path(sys.executable), grace_seconds=5)
    # Our own child: stop() reaps it, so no zombie is left and the pid is gone.
    assert not processes.is_running(pid)
    assert not Path(f"/proc/{pid}").exists()


def test_stop_escalates_to_sigkill(tmp_path: Path) -> None:
    code = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); "
            "time.sleep(30)")
    pid = processes.start([sys.executable, "-c", code], env={}, log_file=tmp_path / "log", pid_file=tmp_path / "pid",
                          cwd=tmp_path)
    deadline = time.monotonic() + 10
    while "ready" not in (tmp_path / "log").read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    started = time.monotonic()
    processes.stop(pid, grace_seconds=0.5)
    assert not processes.is_running(pid)
    assert time.monotonic() - started < 5


def test_missing_or_garbage_pid_file_reads_as_none(tmp_path: Path) -> None:
    assert processes.read_pid(tmp_path / "none") is None
    (tmp_path / "bad").write_text("x")
    assert processes.read_pid(tmp_path / "bad") is None
    assert not processes.is_running(None)


def test_serving_port_prefers_the_client_port() -> None:
    assert serving_port([{"name": "peer-http", "port": 2}, {"name": "http", "port": 1}]) == 1
    assert serving_port([{"name": "https", "port": 5}]) == 5
    assert serving_port([]) is None


@pytest.mark.parametrize("name", ["", "UPPER", "1abc", "a_b", "a b"])
def test_cluster_names_are_validated(name: str, tmp_path: Path) -> None:
    with pytest.raises(InputError):
        LocalCluster(name, root=tmp_path)


def test_kwokctl_config_binds_loopback_on_distinct_ports_with_our_stages_and_logs(tmp_path: Path) -> None:
    cluster = LocalCluster("unit", root=tmp_path)
    cluster.workdir.mkdir(parents=True)
    docs = cluster.supervisor.kwokctl_config()
    options = docs[0]["options"]
    assert docs[0]["kind"] == "KwokctlConfiguration"
    assert options["bindAddress"] == "127.0.0.1"
    ports = [v for k, v in options.items() if k.endswith("Port")]
    assert len(ports) == 6 and len(set(ports)) == 6
    assert all(Path(options[k]).name for k in options if k.endswith("Binary"))
    stages = [d["metadata"]["name"] for d in docs if d["kind"] == "Stage"]
    assert stages == [d["metadata"]["name"] for d in yaml.safe_load_all(STAGES_FILE.read_text()) if d]
    logs = next(d for d in docs if d["kind"] == "ClusterLogs")
    log_file = Path(logs["spec"]["logs"][0]["logsFile"])
    assert log_file.is_file() and " stdout F " in log_file.read_text()  # CRI log format, which kwok parses


def test_kwokctl_config_carries_the_scale_tuning(tmp_path: Path) -> None:
    cluster = LocalCluster("unit", root=tmp_path)
    cluster.workdir.mkdir(parents=True)
    docs = cluster.supervisor.kwokctl_config()
    patches = {p["name"]: {a["key"]: a["value"] for a in p["extraArgs"]} for p in docs[0]["componentsPatches"]}
    assert patches["kwok-controller"] == {**TUNING["kwok-controller"], "node-ip": "127.0.0.1",
                                          "manage-nodes-with-label-selector": "!wf.dev/real-node",
                                          "manage-all-nodes": "false"}
    for component, flags in TUNING.items():
        assert flags.items() <= patches[component].items()
    envs = {p["name"]: {e["name"]: e["value"] for e in p.get("extraEnvs", [])} for p in docs[0]["componentsPatches"]}
    assert envs["kube-apiserver"] == GO_RUNTIME_ENV["kube-apiserver"] == {"GOGC": GOGC}
    assert KWOKCTL_OPTIONS.items() <= docs[0]["options"].items()
    assert KWOKCTL_OPTIONS["kubeControllerManagerNodeMonitorGracePeriodMilliseconds"] >= \
        KWOKCTL_OPTIONS["nodeLeaseDurationSeconds"] * 1000  # no node goes NotReady between two renewals
    kwok = next(d for d in docs if d["kind"] == "KwokConfiguration")
    assert kwok["options"] == KWOK_OPTIONS and all(v > 4 for k, v in KWOK_OPTIONS.items() if "PlayStage" in k)


def test_stages_cover_nodes_and_pods_and_read_our_annotations() -> None:
    stages = {d["metadata"]["name"]: d for d in yaml.safe_load_all(STAGES_FILE.read_text()) if d}
    kinds = {s["spec"]["resourceRef"]["kind"] for s in stages.values()}
    assert kinds == {"Node", "Pod"}
    # A config with any Stage gets none of kwok's defaults: node and pod basics must be ours.
    assert {"node-initialize", "node-heartbeat-with-lease", "pod-ready", "pod-delete"} <= stages.keys()
    text = STAGES_FILE.read_text()
    assert f'.metadata.annotations["{SIM_DURATION}"]' in text
    assert f'.metadata.annotations["{SIM_EXIT_CODE}"]' in text
    succeed, fail = stages["wf-pod-succeed"]["spec"], stages["wf-pod-exit"]["spec"]
    exit_key = f'.metadata.annotations["{SIM_EXIT_CODE}"]'
    assert {"key": exit_key, "operator": "DoesNotExist"} in succeed["selector"]["matchExpressions"]
    assert {"key": exit_key, "operator": "Exists"} in fail["selector"]["matchExpressions"]


def test_manifests_are_what_install_applies_and_rbac_is_least_privilege() -> None:
    assert sorted(p.name for p in manifests_dir().glob("*.yaml")) == sorted(MANIFEST_FILES)
    docs = [doc for name in MANIFEST_FILES for doc in load_manifest(name)]
    crds = [d for d in docs if d["kind"] == "CustomResourceDefinition"]
    assert len(crds) == 8 and all(d["spec"]["group"] == "argoproj.io" for d in crds)
    roles = {d["metadata"]["name"]: d for d in docs if d["kind"] in ("Role", "ClusterRole")}
    assert set(roles) == {"wf-executor", "wf-mpijob-executor", "wf-developer"}
    assert all(r["kind"] == "Role" for r in roles.values())  # namespaced: nothing cluster-wide
    rules = [rule for r in roles.values() for rule in r["rules"]]
    # The removals allowed, of MPIJobs only: a multi-node step's resource pod deletes the one an earlier attempt of
    # the step left (its release init container), a developer's `wf stop` the stopped workflow's.
    removals = [rule for rule in rules if {"delete", "deletecollection"} & set(rule["verbs"])]
    assert removals == [{"apiGroups": ["kubeflow.org"], "resources": ["mpijobs"],
                         "verbs": ["create", "get", "delete", "list", "watch"]},
                        {"apiGroups": ["kubeflow.org"], "resources": ["mpijobs"],
                         "verbs": ["get", "list", "watch", "deletecollection"]}]
    verbs = {v for rule in rules if rule not in removals for v in rule["verbs"]}
    assert not verbs & {"*", "delete", "deletecollection", "escalate", "bind", "impersonate"}
    resources = {res for r in roles.values() for rule in r["rules"] for res in rule["resources"]}
    assert "secrets" not in resources and "*" not in resources


def test_extra_workflow_namespaces_get_the_same_accounts_and_roles(catalog: Catalog) -> None:
    docs = workflow_namespace_objects(catalog, "ml-training")
    assert docs[0]["kind"] == "Namespace" and docs[0]["metadata"]["name"] == "ml-training"
    assert {d["metadata"]["namespace"] for d in docs[1:]} == {"ml-training"}
    subjects = [s for d in docs if d["kind"] == "RoleBinding" for s in d["subjects"]]
    assert subjects and all(s["namespace"] == "ml-training" for s in subjects)
    names = {(d["kind"], d["metadata"]["name"]) for d in docs[1:]}
    assert ("ServiceAccount", "wf-workflow") in names and ("Role", "wf-developer") in names
    # The original documents are untouched (deep copies).
    assert {d["metadata"].get("namespace") for d in load_manifest("rbac.yaml") if d["kind"] == "Role"} == {"wf"}


def test_bad_namespace_is_an_input_error_before_anything_starts(tmp_path: Path) -> None:
    cluster = LocalCluster("unit", root=tmp_path)
    with pytest.raises(InputError, match="Bad_NS"):
        cluster.up(namespaces=["Bad_NS"])
    assert not cluster.workdir.exists()


def test_up_creates_the_catalogs_namespaces_at_their_pod_security_level_unless_declined(catalog: Catalog) -> None:
    from wf.render.platform import local_objects

    named = ["wf", "ml-training", "perception", "mapping", "ml-serving"]  # teams' and the artifact store's
    assert cluster_namespaces(catalog, (), (), catalog_namespaces=True, queues=False) == named
    assert cluster_namespaces(catalog, ("wf", "extra"), ("more",), catalog_namespaces=True, queues=False) == \
        ["wf", "extra", "more", *named[1:]]
    # Declined: wf, what the cluster had and what `up` names; never taken away.
    assert cluster_namespaces(catalog, ("wf", "mapping"), ("more",), catalog_namespaces=False, queues=False) == \
        ["wf", "mapping", "more"]
    with pytest.raises(InputError, match="ml-training, perception, ml-serving.*--no-team-namespaces"):
        cluster_namespaces(catalog, ("wf", "mapping"), (), catalog_namespaces=False, queues=True)
    with pytest.raises(InputError, match="Bad_NS"):
        cluster_namespaces(catalog, (), ("Bad_NS",), catalog_namespaces=True, queues=False)
    # Every one of them, wf included, is applied with its Pod Security labels.
    namespaces = [o["metadata"] for o in local_objects(catalog, named) if o["kind"] == "Namespace"]
    labelled = {m["name"]: m["labels"]["pod-security.kubernetes.io/enforce"] for m in namespaces if m.get("labels")}
    assert labelled == {"wf": "privileged", "ml-training": "privileged", "perception": "privileged",
                        "mapping": "privileged", "ml-serving": "baseline"}


def test_cluster_up_declines_the_catalogs_namespaces_on_request(monkeypatch: pytest.MonkeyPatch) -> None:
    from wf.cli.app import main

    asked: dict[str, Any] = {}

    def up(self: LocalCluster, **kwargs: Any) -> None:
        asked.update(kwargs)
        raise InputError("stop here")

    monkeypatch.setattr(LocalCluster, "up", up)
    for args, declined in ((["--team-namespace", "x"], False), (["--no-team-namespaces"], True)):
        with pytest.raises(SystemExit) as ended:
            main(["cluster", "up", *args])
        assert ended.value.code == 2
        assert asked["catalog_namespaces"] is not declined
    assert list(asked["namespaces"]) == []


def test_eks_tuning_covers_the_local_controller_knobs() -> None:
    from wf.cluster.install import pinned_versions
    from wf.cluster.tuning import CONTROLLER_ARGS
    from wf.model.catalog import load_catalog
    from wf.render.platform import argo_configmap, argo_controller_patch, is_large

    catalog = load_catalog()
    assert is_large(catalog)  # the repository's catalog is the platform's size
    deployment = argo_controller_patch(catalog, pinned_versions())
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert container["name"] == "workflow-controller"  # the upstream Deployment's container
    eks_flags = {arg.split("=", 1)[0] for arg in container["args"]}
    local_flags = {arg for arg in CONTROLLER_ARGS if arg.startswith("--")}
    assert local_flags <= eks_flags  # the same knobs, sized for each cluster
    configmap = argo_configmap(catalog)
    rate = yaml.safe_load(configmap["data"]["resourceRateLimit"])
    assert rate["limit"] > 0 and rate["burst"] >= rate["limit"]
    assert yaml.safe_load(configmap["data"]["nodeEvents"]) == {"enabled": False}  # on every cluster, EKS too


def test_argo_requeues_quickly_on_test_sized_clusters_and_less_often_at_the_platforms_size() -> None:
    from wf.cluster.tuning import SMALL_CLUSTER_NODES_PER_GROUP, requeue_time

    assert requeue_time(2) == requeue_time(SMALL_CLUSTER_NODES_PER_GROUP) == "1s"  # make run, e2e, rehearsals
    assert requeue_time(246) == "5s"  # the scale benchmark's 3,198 nodes


def test_kwok_leaves_real_nodes_to_their_kubelet_and_the_api_server_reaches_kubelets_as_admin(tmp_path: Path) -> None:
    cluster = LocalCluster("unit", root=tmp_path)
    cluster.workdir.mkdir(parents=True)
    [kwokctl, *_] = cluster.supervisor.kwokctl_config()
    args = {p["name"]: p["extraArgs"] for p in kwokctl["componentsPatches"]}
    # kwokctl passes --manage-all-nodes=true itself; kwok refuses it together with a selector, so it is replaced.
    assert {"key": "manage-all-nodes", "value": "false", "override": True} in args["kwok-controller"]
    assert {"key": "manage-nodes-with-label-selector", "value": f"!{REAL_NODE_LABEL}"} in args["kwok-controller"]
    apiserver = {a["key"]: a["value"] for a in args["kube-apiserver"]}
    pki = cluster.supervisor.kwok_cluster_dir / "pki"
    assert apiserver["kubelet-client-certificate"] == str(pki / "admin.crt")
    assert apiserver["kubelet-client-key"] == str(pki / "admin.key")
    # Never a node's Hostname, which the API server would look up in the machine's DNS.
    assert apiserver["kubelet-preferred-address-types"] == "InternalIP"


def test_real_nodes_must_be_zero_or_more_before_anything_starts(tmp_path: Path) -> None:
    cluster = LocalCluster("unit", root=tmp_path)
    with pytest.raises(InputError, match="--real-nodes"):
        cluster.up(real_nodes=-1)
    assert not cluster.workdir.exists()
