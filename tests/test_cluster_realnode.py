"""Unit tests of a real node's plan that need no root and start nothing: the OCI archives wf imports into
containerd, containerd's, the kubelet's and CNI's configuration, and the node group a real node joins."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import tomllib
from pathlib import Path

import pytest

from wf.cluster import images, realnode
from wf.cluster.nodes import node_manifest
from wf.core.errors import ClusterError
from wf.model.catalog import Catalog, load_catalog
from wf.model.nodegroups import node_groups


def _members(archive: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


def _blob(members: dict[str, bytes], digest: str) -> bytes:
    data = members[f"blobs/sha256/{digest.removeprefix('sha256:')}"]
    assert "sha256:" + hashlib.sha256(data).hexdigest() == digest  # every blob is named by its content
    return data


def test_oci_archive_is_a_content_addressed_image_layout_containerd_names_by_annotation() -> None:
    files = [images.File("/bin/tool", b"\x7fELF...", 0o755), images.File("/bin/sh", link="tool")]
    archive = images.oci_archive("wf.local/tool:2", files, entrypoint=["/bin/tool"])
    assert archive == images.oci_archive("wf.local/tool:2", files, entrypoint=["/bin/tool"])  # reproducible
    members = _members(archive)
    assert json.loads(members["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    [entry] = json.loads(members["index.json"])["manifests"]
    assert entry["annotations"]["io.containerd.image.name"] == "wf.local/tool:2"
    assert entry["platform"] == {"architecture": "amd64", "os": "linux"}
    manifest = json.loads(_blob(members, entry["digest"]))
    config = json.loads(_blob(members, manifest["config"]["digest"]))
    [layer_ref] = manifest["layers"]
    rootfs = _blob(members, layer_ref["digest"])
    assert config["rootfs"]["diff_ids"] == [layer_ref["digest"]]  # uncompressed: the layer is its own diff
    assert config["config"]["Entrypoint"] == ["/bin/tool"] and config["config"]["Cmd"] is None
    with tarfile.open(fileobj=io.BytesIO(rootfs)) as tar:
        entries = {m.name: m for m in tar.getmembers()}
    assert entries["bin"].isdir() and entries["bin/tool"].mode == 0o755
    assert entries["bin/sh"].issym() and entries["bin/sh"].linkname == "tool"
    assert {m.mtime for m in entries.values()} == {0}


def test_containerd_keeps_its_state_sockets_and_pod_namespaces_to_the_node(tmp_path: Path) -> None:
    node = realnode.RealNode(tmp_path / "cluster", 0)
    config = tomllib.loads(node.containerd_config())
    assert config["version"] == 3
    assert Path(config["root"]).is_relative_to(node.dir) and Path(config["state"]).is_relative_to(node.run_dir)
    assert config["grpc"]["address"] == str(node.containerd_socket)
    assert len(str(node.containerd_socket) + ".ttrpc") < 108  # a unix socket's path limit
    plugins = config["plugins"]
    assert plugins["io.containerd.cri.v1.images"]["pinned_images"]["sandbox"] == images.PAUSE
    runtime = plugins["io.containerd.cri.v1.runtime"]
    assert runtime["netns_mounts_under_state_dir"] is True
    runc = runtime["containerd"]["runtimes"]["runc"]["options"]
    assert runc["BinaryName"].endswith("/runc") and Path(runc["Root"]).is_relative_to(node.run_dir)
    assert isinstance(runtime["restrict_oom_score_adj"], bool)
    assert Path(runtime["cni"]["conf_dir"]).is_relative_to(node.dir)
    assert plugins["io.containerd.grpc.v1.cri"]["stream_server_address"] == "127.0.0.1"


def test_a_node_without_registries_sends_every_pull_to_loopback_and_can_be_given_them_back(tmp_path: Path) -> None:
    """containerd reads its registry hosts from the node's own directory (never the machine's /etc/containerd);
    without registries, the `_default` host file, which every registry without its own falls back to, names a
    server on 127.0.0.1 instead of the registry's."""
    node = realnode.RealNode(tmp_path / "cluster", 0)
    registry = tomllib.loads(node.containerd_config())["plugins"]["io.containerd.cri.v1.images"]["registry"]
    assert Path(registry["config_path"]) == node.registry_hosts and node.registry_hosts.is_relative_to(node.dir)
    default = node.registry_hosts / "_default" / "hosts.toml"
    node.allow_registries(False)
    server = tomllib.loads(default.read_text())["server"]
    assert server == realnode.NO_REGISTRY and server.startswith("http://127.0.0.1:")
    node.allow_registries(True)
    assert not default.exists()
    node.allow_registries(True)  # idempotent, as each `up` calls it


def test_two_clusters_real_nodes_have_distinct_namespaces_cgroups_and_run_dirs(tmp_path: Path) -> None:
    a, b, c = (realnode.RealNode(tmp_path / "a", 0), realnode.RealNode(tmp_path / "b", 0),
               realnode.RealNode(tmp_path / "a", 1))
    assert len({a.id, b.id, c.id}) == 3 and len({a.netns, b.netns, c.netns}) == 3
    assert a.netns.startswith("wf-") and len(a.netns) <= 15  # an interface-name-sized handle


def test_kubelet_listens_on_loopback_and_accepts_cgroup_v1(tmp_path: Path) -> None:
    node = realnode.RealNode(tmp_path, 0)
    taints = [{"key": "k", "value": "v", "effect": "NoSchedule"}]
    config = node.kubelet_config(realnode.Ports(kubelet=12000, healthz=12001), taints, tmp_path / "ca.crt")
    assert config["failCgroupV1"] is False
    assert config["address"] == config["healthzBindAddress"] == "127.0.0.1" and config["readOnlyPort"] == 0
    assert config["authentication"]["anonymous"]["enabled"] is False and config["authorization"]["mode"] == "Webhook"
    assert config["cgroupRoot"] == f"/{node.cgroup}" and config["registerWithTaints"] == taints
    assert config["containerRuntimeEndpoint"] == f"unix://{node.containerd_socket}"


def test_pod_network_is_a_bridge_inside_the_nodes_own_namespace(tmp_path: Path) -> None:
    node = realnode.RealNode(tmp_path, 0)
    node._write_cni()
    [bridge] = node.cni_config()["plugins"]
    assert bridge["type"] == "bridge" and bridge["ipMasq"] is False  # nothing is routed off the namespace
    wrapper = (node.dir / "cni" / "bin" / "bridge").read_text()
    assert f"--net=/run/netns/{node.netns} " in wrapper
    assert (node.dir / "cni" / "bin" / "loopback").is_symlink()
    assert json.loads((node.dir / "cni" / "net.d" / "10-wf.conflist").read_text()) == node.cni_config()


def test_a_real_node_joins_a_cpu_group_with_a_simulated_nodes_labels_and_taints(catalog: Catalog) -> None:
    group = realnode.real_node_group(catalog)
    assert group.accelerator is None and group.arch == realnode.machine_arch()
    name = realnode.node_name(group, 0)
    real, simulated = node_manifest(group, 0, name), node_manifest(group, 0)
    assert real["metadata"]["name"] == real["metadata"]["labels"]["kubernetes.io/hostname"] == name
    assert {k: v for k, v in real["metadata"]["labels"].items() if k != "kubernetes.io/hostname"} == \
        {k: v for k, v in simulated["metadata"]["labels"].items() if k != "kubernetes.io/hostname"}
    assert real["spec"]["taints"] == simulated["spec"]["taints"]


def test_a_catalog_with_only_accelerated_groups_has_no_place_for_a_real_node(
        monkeypatch: pytest.MonkeyPatch) -> None:
    catalog = load_catalog(None)
    monkeypatch.setattr(realnode, "node_groups", lambda _: [g for g in node_groups(catalog) if g.accelerator])
    with pytest.raises(ClusterError, match="without accelerators"):
        realnode.real_node_group(catalog)


def test_up_without_root_says_so_in_one_line_exits_3_and_starts_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from wf.cli.app import main

    monkeypatch.setenv("WF_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setattr(realnode.os, "geteuid", lambda: 1000)
    with pytest.raises(SystemExit) as ended:
        main(["cluster", "up", "--name", "unit", "--real-nodes", "1"])
    assert ended.value.code == 3
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "real nodes need root" in lines[0] and "Traceback" not in lines[0]
    assert not (tmp_path / "data").exists()


def test_a_missing_cgroup_controller_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for controller in realnode._V1_CONTROLLERS:
        if controller != "pids":
            (tmp_path / controller).mkdir()
            (tmp_path / controller / "cgroup.procs").write_text("")
    monkeypatch.setattr(realnode, "_CGROUP_ROOT", tmp_path)
    monkeypatch.setattr(realnode.os, "geteuid", lambda: 0)
    if "overlay" not in Path("/proc/filesystems").read_text().split():
        pytest.skip("this machine lacks overlay, which is checked first")
    expected = f"real nodes need the cgroup controllers pids (not mounted under {tmp_path})"
    assert realnode.missing_requirement() == expected


def test_argoexec_image_is_laid_out_as_upstreams_under_the_name_the_controller_uses(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from wf.cluster import build
    from wf.cluster.supervise import EXECUTOR_IMAGE

    monkeypatch.setenv("WF_CACHE_DIR", str(tmp_path))
    binary = build.binary_path("argoexec")
    binary.parent.mkdir(parents=True)
    binary.write_bytes(b"\x7fELF argoexec")
    assert EXECUTOR_IMAGE == images.ARGOEXEC == f"quay.io/argoproj/argoexec:v{build.ARGO_RELEASE}"
    members = _members(images.archive(images.ARGOEXEC, tmp_path).read_bytes())
    [entry] = json.loads(members["index.json"])["manifests"]
    assert entry["annotations"]["io.containerd.image.name"] == EXECUTOR_IMAGE
    manifest = json.loads(_blob(members, entry["digest"]))
    assert json.loads(_blob(members, manifest["config"]["digest"]))["config"]["Entrypoint"] == ["argoexec"]
    with tarfile.open(fileobj=io.BytesIO(_blob(members, manifest["layers"][0]["digest"]))) as tar:
        entries = {m.name: m for m in tar.getmembers()}
    assert entries["bin/argoexec"].size == len(b"\x7fELF argoexec") and entries["bin/argoexec"].mode == 0o755
    assert entries["tmp"].isdir() and entries["tmp"].mode == 0o1777
