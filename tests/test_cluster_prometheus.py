"""The local cluster's Prometheus: its build, its scrape configuration and credentials, Argo's and Kueue's metrics
listeners, and where the cluster's state says it answers (no process starts here)."""

from __future__ import annotations

import base64
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from test_cluster_build import _cached, _fake_go
from wf.cluster import build, prometheus
from wf.cluster.install import pinned_versions
from wf.cluster.runtime import ClusterState
from wf.cluster.supervise import ControllerPorts
from wf.core.errors import ClusterError
from wf.model.catalog import load_catalog
from wf.render.platform import argo_configmap, local_expected


def _component(name: str) -> build.Component:
    return next(c for c in build.components() if c.name == name)


def test_prometheus_is_built_from_its_3x_module_without_ui_assets_or_service_discovery(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    comp = _component("prometheus")
    assert not comp.optional  # every local cluster runs it
    assert comp.tag == f"v{build.PROMETHEUS_MODULE_VERSION}" and build.PROMETHEUS_RELEASE.startswith("3.")
    monkeypatch.setenv("PATH", str(_fake_go(tmp_path)))
    cache = tmp_path / "cache"
    [result] = build.build_all(["prometheus"], cache=cache)
    assert result.built and (comp.bin_dir(cache) / "prometheus").is_file()
    assert comp.bin_dir(cache) == cache / "prometheus" / build.PROMETHEUS_RELEASE / "bin"
    calls = (tmp_path / "go.log").read_text().splitlines()
    assert calls[1] == "mod download -json github.com/prometheus/prometheus@v0.316.0"
    assert calls[2] == "get github.com/prometheus/prometheus/cmd/prometheus@v0.316.0"
    # No `builtinassets` tag: the web UI would need a Node build; the HTTP API is what wf reads.
    assert calls[3].startswith("build -tags remove_all_sd -ldflags -s -w ")
    assert f"-X github.com/prometheus/common/version.Version={build.PROMETHEUS_RELEASE}" in calls[3]
    assert "-X github.com/prometheus/common/version.Revision=0123456789abcdef" in calls[3]


def test_a_plain_build_includes_prometheus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(_fake_go(tmp_path)))
    cache = tmp_path / "cache"
    for comp in build.components():
        if comp.name != "prometheus":
            _cached(comp, cache)
    assert [r.component.name for r in build.build_all(cache=cache) if r.built] == ["prometheus"]


def test_argos_metrics_listener_is_patched_to_an_address_of_ours_on_loopback() -> None:
    [patch] = [p for p in _component("argo").patches if p.file == "util/telemetry/exporter_prometheus.go"]
    upstream = 'srv := &http.Server{Addr: fmt.Sprintf(":%v", m.config.port()), Handler: mux}\n'
    patched = patch.apply(upstream)
    assert patched.startswith("srv := &http.Server{Addr: wfMetricsAddr(m.config.port()), Handler: mux}")
    assert 'os.Getenv("WF_METRICS_ADDR")' in patched
    assert 'return fmt.Sprintf("127.0.0.1:%d", port)' in patched  # not every interface, even without it


def test_the_other_patches_are_unchanged_so_their_builds_stay_cached() -> None:
    # _env_or_default grew a parameter list for Argo's metrics address; the Go it writes for the existing
    # patches must stay byte for byte what their cached builds were stamped with.
    [health] = [p for p in _component("mpi-operator").patches]
    assert "func wfHealthAddr() string {" in health.append
    assert 'return "127.0.0.1:8080"\n' in health.append


def test_argo_serves_metrics_everywhere_plain_http_only_on_the_local_cluster() -> None:
    catalog = load_catalog()
    eks = yaml.safe_load(argo_configmap(catalog)["data"]["metricsConfig"])
    local = yaml.safe_load(argo_configmap(catalog, local=True)["data"]["metricsConfig"])
    # EKS: Argo's default port (9090) and TLS, for an in-cluster scrape.
    assert eks == {"enabled": True, "metricsTTL": "10m"}
    assert local == {**eks, "secure": False}
    # `wf platform check` on the local cluster expects the local ConfigMap.
    expected = local_expected(catalog, pinned_versions())
    [configmap] = [o for o in expected.objects if o["metadata"]["name"] == "workflow-controller-configmap"]
    assert yaml.safe_load(configmap["data"]["metricsConfig"])["secure"] is False


def test_configuration_scrapes_argo_and_the_recorder_plain_and_the_api_server_with_a_token(tmp_path: Path) -> None:
    config = prometheus.configuration(tmp_path, prometheus.Targets(9100, 9495, "127.0.0.1:6443"))
    assert config["global"] == {"scrape_interval": "5s", "scrape_timeout": "4s"}
    assert config["storage"] == {"tsdb": {"retention": {"time": "2d"}}}
    jobs = {j["job_name"]: j for j in config["scrape_configs"]}
    assert set(jobs) == {"argo-workflow-controller", "wf-node-recorder", "kube-apiserver"}  # no Kueue on this cluster
    argo = jobs["argo-workflow-controller"]
    assert argo == {"job_name": "argo-workflow-controller", "static_configs": [{"targets": ["127.0.0.1:9100"]}]}
    assert jobs["wf-node-recorder"] == {"job_name": "wf-node-recorder",
                                        "static_configs": [{"targets": ["127.0.0.1:9495"]}]}
    api = jobs["kube-apiserver"]
    assert api["scheme"] == "https" and api["static_configs"] == [{"targets": ["127.0.0.1:6443"]}]
    assert api["tls_config"] == {"ca_file": str(tmp_path / "apiserver-ca.crt")}  # verified, never skipped
    assert api["authorization"] == {"type": "Bearer", "credentials_file": str(tmp_path / "token")}


def test_configuration_scrapes_kueue_with_its_own_ca_when_it_runs(tmp_path: Path) -> None:
    ca = tmp_path / "kueue" / "ca.crt"
    config = prometheus.configuration(tmp_path, prometheus.Targets(9100, 9495, "127.0.0.1:6443", 9200, ca))
    kueue = next(j for j in config["scrape_configs"] if j["job_name"] == "kueue")
    assert kueue["static_configs"] == [{"targets": ["127.0.0.1:9200"]}]
    assert kueue["scheme"] == "https" and kueue["tls_config"] == {"ca_file": str(ca)}
    assert kueue["authorization"]["credentials_file"] == str(tmp_path / "token")
    # Every target is on loopback.
    targets = [t for job in config["scrape_configs"] for s in job["static_configs"] for t in s["targets"]]
    assert all(t.startswith("127.0.0.1:") for t in targets)


def test_the_scrape_account_may_read_metrics_and_nothing_else() -> None:
    objects = {o["kind"]: o for o in prometheus.account_objects()}
    assert set(objects) == {"ServiceAccount", "ClusterRole", "ClusterRoleBinding"}
    assert objects["ClusterRole"]["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    [subject] = objects["ClusterRoleBinding"]["subjects"]
    assert (subject["name"], subject["namespace"]) == (prometheus.ACCOUNT, prometheus.ACCOUNT_NAMESPACE)


def test_the_api_server_and_its_ca_come_from_the_kubeconfig() -> None:
    kubeconfig = {"clusters": [{"cluster": {"server": "https://127.0.0.1:32766",
                                            "certificate-authority-data": base64.b64encode(b"PEM").decode()}}]}
    assert prometheus.apiserver_of(kubeconfig) == ("127.0.0.1:32766", b"PEM")
    kubeconfig["clusters"][0]["cluster"]["server"] = "http://127.0.0.1:8080"
    with pytest.raises(ClusterError, match="https://HOST:PORT"):
        prometheus.apiserver_of(kubeconfig)


def test_the_state_says_where_prometheus_answers_and_reads_an_older_state() -> None:
    older = ClusterState(name="x", context="wf-x", workdir="/w", kubeconfig="/w/kubeconfig", merged_into=None,
                         controller_health_port=1, nodes_per_group=1, namespaces=["wf"])
    # Written before the controller served metrics: `up` restarts it.
    assert older.prometheus_url is None and older.controller_ports() is None
    state = replace(older, controller_metrics_port=2, prometheus_port=9090)
    assert state.prometheus_url == "http://127.0.0.1:9090"
    assert state.controller_ports() == ControllerPorts(health=1, metrics=2)
