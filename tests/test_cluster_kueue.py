"""The local cluster's Kueue: its build component, configuration, webhook registrations and certificates."""

from __future__ import annotations

import base64
import ipaddress
from collections.abc import Callable
from pathlib import Path

from test_kueue import team_catalog
from wf.cluster import build
from wf.cluster.kueue import (
    MUTATING,
    VALIDATING,
    KueueState,
    local_configuration,
    webhook_configurations,
    write_certificates,
)


def test_kueue_is_built_from_its_module_with_its_crds_kept() -> None:
    comp = next(c for c in build.components() if c.name == "kueue")
    assert comp.module == "sigs.k8s.io/kueue" and comp.packages == ("sigs.k8s.io/kueue/cmd/kueue",)
    assert comp.assets == ("config/components/crd/bases",)
    assert f"-X sigs.k8s.io/kueue/pkg/version.GitVersion=v{build.KUEUE_RELEASE}" in comp.version_ldflags


def test_kueue_is_not_built_until_its_crds_are_there(tmp_path: Path) -> None:
    comp = next(c for c in build.components() if c.name == "kueue")
    comp.bin_dir(tmp_path).mkdir(parents=True)
    (comp.bin_dir(tmp_path) / "kueue").write_text("")
    assert not comp.is_built(tmp_path)
    comp.asset(tmp_path, comp.assets[0]).mkdir(parents=True)
    comp.patches_stamp(tmp_path).write_text(comp.patches_fingerprint)  # built with today's source patch
    assert comp.is_built(tmp_path)


def test_local_configuration_serves_on_loopback_without_cert_management(write: Callable[..., Path],
                                                                         tmp_path: Path) -> None:
    config = local_configuration(team_catalog(write), KueueState(health_port=1, webhook_port=2, metrics_port=3),
                                 tmp_path)
    assert config["webhook"] == {"host": "127.0.0.1", "port": 2, "certDir": str(tmp_path)}
    assert config["health"] == {"healthProbeBindAddress": "127.0.0.1:1"}
    assert config["metrics"] == {"bindAddress": "127.0.0.1:3"}  # HTTPS, certificate from WF_KUEUE_METRICS_CERT_DIR
    assert config["internalCertManagement"] == {"enable": False}
    assert config["integrations"] == {"frameworks": ["pod", "kubeflow.org/mpijob"]}
    assert config["managedJobsNamespaceSelector"]["matchExpressions"][0]["values"] == ["mapping", "mapping-dev",
                                                                                       "perception"]
    assert config["featureGates"] == {"VisibilityOnDemand": False}


def test_webhooks_call_loopback_and_gate_only_team_namespaces(write: Callable[..., Path]) -> None:
    mutating, validating = webhook_configurations(team_catalog(write), 9443, b"PEM")
    assert (mutating["metadata"]["name"], validating["metadata"]["name"]) == (MUTATING, VALIDATING)
    hooks = {h["name"]: h for h in [*mutating["webhooks"], *validating["webhooks"]]}
    assert set(hooks) == {"mpod.kb.io", "vpod.kb.io", "mmpijob.kb.io", "vmpijob.kb.io", "mworkload.kb.io",
                          "vworkload.kb.io"}
    # A multi-node step's MPIJob is created suspended by Kueue's webhook, in the teams' namespaces only.
    assert hooks["mmpijob.kb.io"]["clientConfig"]["url"].endswith("/mutate-kubeflow-org-v2beta1-mpijob")
    assert hooks["mmpijob.kb.io"]["rules"][0]["resources"] == ["mpijobs"]
    assert hooks["vmpijob.kb.io"]["namespaceSelector"] == hooks["mpod.kb.io"]["namespaceSelector"]
    assert hooks["mpod.kb.io"]["clientConfig"] == {"url": "https://127.0.0.1:9443/mutate--v1-pod",
                                                   "caBundle": base64.b64encode(b"PEM").decode()}
    assert hooks["mpod.kb.io"]["namespaceSelector"]["matchExpressions"][0]["values"] == ["mapping", "mapping-dev",
                                                                                        "perception"]
    assert "namespaceSelector" not in hooks["vworkload.kb.io"]
    assert hooks["vworkload.kb.io"]["rules"][0]["resources"] == ["workloads", "workloads/status"]


def test_serving_certificate_is_for_loopback_and_signed_by_the_ca(tmp_path: Path) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec

    write_certificates(tmp_path)
    ca = x509.load_pem_x509_certificate((tmp_path / "ca.crt").read_bytes())
    leaf = x509.load_pem_x509_certificate((tmp_path / "tls.crt").read_bytes())
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    leaf.verify_directly_issued_by(ca)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert (tmp_path / "tls.key").stat().st_mode & 0o077 == 0
    assert isinstance(ca.public_key(), ec.EllipticCurvePublicKey)
