"""Real nodes beside the simulated ones: a kubelet, containerd and runc of our own build, run as processes on
the machine `wf cluster up --real-nodes N` runs on (Linux, root), so pods on them really run.

A real node joins a node group of the catalog (the first without accelerators on the machine's architecture: a
cpu class by default) with the labels and taints a simulated node of that group has (wf.cluster.nodes), plus
REAL_NODE_LABEL, which kwok is told to leave alone (wf.cluster.supervise), and REAL_NODE_TAINT, which keeps off
it every pod but those whose image it alone holds (wf.compile.placement.on_real_nodes): a pod of a simulated
example never makes it pull from a registry. Its capacity is the machine's.

What it touches outside the cluster's work directory, all removed by `stop`:
  /run/wf/<id>/                 containerd's state and sockets (a socket path must stay under 108 bytes)
  /run/netns/wf-<id>            a network namespace of ours: the pods' bridge and addresses live only there
                                (the CNI bridge plugin runs inside it, the pod end of each veth in the pod's own
                                namespace), so no address is ever added to the machine's network
  /sys/fs/cgroup/*/wf-<id>/     the node's cgroups: containerd and its shims in runtime/, pods under kubepods/
  /var/log/containers/*         the kubelet's links to its pods' logs (a path the kubelet does not let us move)
containerd's shims keep their sockets in /run/containerd/s (fixed in containerd); each removes its own on exit.

Everything listens on 127.0.0.1 (the kubelet's API and healthz), on a unix socket, or inside the node's network
namespace: the relay (wf.cluster.relay) that serves the cluster's Services pods need (the API server for Argo's
executor, the artifact store) at their cluster IPs, held on the namespace's loopback device, and forwards to their
listeners on the host's 127.0.0.1. The API server reaches the kubelet with the cluster's admin certificate (for
logs and exec); the kubelet authenticates as system:node:<name> with a certificate signed by the cluster's CA,
which the Node authorizer limits to its node.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from wf.cluster import build, images, processes
from wf.cluster.nodes import node_manifest
from wf.cluster.relay import Forward
from wf.cluster.supervise import SERVICE_CIDR
from wf.core.constants import REAL_NODE_LABEL, REAL_NODE_TAINT
from wf.core.errors import ClusterError
from wf.model.catalog import Catalog
from wf.model.nodegroups import NodeGroup, node_groups

Say = Callable[[str], None]

KUBELET = "kubelet"
CONTAINERD = "containerd"
RELAY = "relay"
COMPONENTS = ("kubelet", "containerd", "runc", "cni-plugins", "argoexec")  # the optional builds a real node needs
K8S_NAMESPACE = "k8s.io"  # containerd's namespace for the CRI's images and containers
_CGROUP_ROOT = Path("/sys/fs/cgroup")
_NETNS_DIR = Path("/run/netns")
_RUN_ROOT = Path("/run/wf")
_CONTAINER_LOGS = Path("/var/log/containers")
# Fixed paths the kubelet and containerd use whatever they are told (the device plugin socket, libcni's result
# cache, the shims' sockets, ctr's fifos): `stop` removes what is left of them once nothing uses it, deepest first.
_FIXED_SOCKETS = (Path("/var/lib/kubelet/device-plugins/kubelet.sock"),)
_FIXED_DIRS = (Path("/var/lib/kubelet/device-plugins"), Path("/var/lib/kubelet"), Path("/var/lib/cni/results"),
               Path("/var/lib/cni"), Path("/run/containerd/s"), Path("/run/containerd/fifo"), Path("/run/containerd"),
               _CONTAINER_LOGS, _RUN_ROOT)
# What the kubelet needs of cgroup v1 (each a mounted hierarchy) or v2 (each in the root's cgroup.controllers).
_V1_CONTROLLERS = ("cpu", "cpuacct", "cpuset", "memory", "pids", "devices", "freezer")
_V2_CONTROLLERS = ("cpu", "cpuset", "memory", "pids")
_POD_SUBNET = "10.88.0.0/24"  # inside the node's own network namespace only
# Where a node that may reach no registry sends its pulls: TCP port 1 on loopback, which nothing here serves, so a
# pull is refused at once; were anything listening there, the request would still not leave the machine.
NO_REGISTRY = "http://127.0.0.1:1"
_BRIDGE = "wf0"
_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}
_TOOLS = ("ip", "nsenter", "mount", "umount", "openssl")
_CAP_SYS_RESOURCE = 24  # linux/capability.h


def missing_requirement() -> str | None:
    """What this machine lacks to run a real node, in one line; None when it has everything."""
    if platform.system() != "Linux":
        return f"real nodes need Linux (this is {platform.system()})"
    if os.geteuid() != 0:
        return "real nodes need root (the kubelet and containerd manage mounts, cgroups and namespaces)"
    if "overlay" not in Path("/proc/filesystems").read_text().split():
        return "real nodes need overlay filesystem support (no `overlay` in /proc/filesystems)"
    if _cgroup_v2():
        have = set((_CGROUP_ROOT / "cgroup.controllers").read_text().split())
        lacking = [c for c in _V2_CONTROLLERS if c not in have]
    else:
        lacking = [c for c in _V1_CONTROLLERS if not (_CGROUP_ROOT / c / "cgroup.procs").is_file()]
    if lacking:
        return f"real nodes need the cgroup controllers {', '.join(lacking)} (not mounted under {_CGROUP_ROOT})"
    absent = [t for t in _TOOLS if shutil.which(t) is None]
    if absent:
        return f"real nodes need the commands {', '.join(absent)} (not on PATH)"
    if any(importlib.util.find_spec(m) is None for m in ("moto", "flask_cors")):
        return "real nodes need moto's S3 server for their artifact store: pip install 'wf[real-nodes]'"
    return None


def _cgroup_v2() -> bool:
    return (_CGROUP_ROOT / "cgroup.controllers").is_file()


def machine_arch() -> str:
    return _ARCH.get(platform.machine(), platform.machine())


def real_node_group(catalog: Catalog) -> NodeGroup:
    """The group real nodes join: the first one without accelerators on this machine's architecture."""
    arch = machine_arch()
    for group in node_groups(catalog):
        if group.accelerator is None and group.arch == arch:
            return group
    raise ClusterError(f"real nodes need a node group without accelerators on {arch}; the catalog {catalog.source} "
                       "has none")


def node_name(group: NodeGroup, index: int) -> str:
    return f"{group.name}-real-{index}"


@dataclass(frozen=True)
class Ports:
    kubelet: int
    healthz: int


class RealNode:
    """One real node of one local cluster: its files, processes, namespace and cgroups."""

    def __init__(self, workdir: Path, index: int) -> None:
        self.index = index
        self.dir = workdir / "real-nodes" / str(index)
        # Short and unique per cluster directory and node: names the run dir, network namespace and cgroups.
        self.id = hashlib.sha256(str(self.dir.resolve()).encode()).hexdigest()[:10]
        self.run_dir = _RUN_ROOT / self.id
        self.netns = f"wf-{self.id}"
        self.cgroup = f"wf-{self.id}"
        self.containerd_socket = self.run_dir / "containerd.sock"
        # The kubelet's root as it sees it: its files are in the node's directory, bound here, because it listens on
        # sockets at fixed places below its root (pod-resources/kubelet.sock), which a deep work directory (a test's
        # temp dir, a long home) would push past a socket path's 108 bytes: the kubelet then exits at start.
        self.kubelet_root = self.run_dir / "kubelet"
        self.logs = self.dir / "logs"
        self.pids = self.dir / "pids"
        self.pod_logs = self.dir / "pod-logs"

    # ---- files ---------------------------------------------------------------------------------------------
    def pid_file(self, component: str) -> Path:
        return self.pids / f"{component}.pid"

    def log_file(self, component: str) -> Path:
        return self.logs / f"{component}.log"

    def containerd_config(self) -> str:
        """containerd 2.x's configuration (version 3): its own root, state and sockets; the CRI with runc of our
        build, our pause image and CNI directories; pod network namespaces kept under its state directory."""
        bins = self.dir / "cni" / "bin"
        runc = build.binary_path("runc")
        q = json.dumps  # a JSON string is a valid TOML basic string
        return f"""version = 3
root = {q(str(self.dir / "containerd"))}
state = {q(str(self.run_dir / "state"))}

[grpc]
  address = {q(str(self.containerd_socket))}

[ttrpc]
  address = {q(str(self.containerd_socket) + ".ttrpc")}

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = {q(images.PAUSE)}
  [plugins."io.containerd.cri.v1.images".registry]
    config_path = {q(str(self.registry_hosts))}

[plugins."io.containerd.cri.v1.runtime"]
  netns_mounts_under_state_dir = true
  restrict_oom_score_adj = {str(not _may_lower_oom_scores()).lower()}
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = {q(str(runc))}
        Root = {q(str(self.run_dir / "runc"))}
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = [{q(str(bins))}]
    conf_dir = {q(str(self.dir / "cni" / "net.d"))}

[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
"""

    @property
    def registry_hosts(self) -> Path:
        """containerd's registry host configuration (hosts.toml files by registry; `_default` for any other)."""
        return self.dir / "certs.d"

    def allow_registries(self, allowed: bool) -> None:
        """Let the node pull from registries as any node does, or from none: every registry's pulls then go to
        NO_REGISTRY, a closed port on the machine's loopback, and fail at once (ErrImagePull naming it), so no
        request leaves the machine (containerd tries a hosts.toml `server` instead of the registry's own)."""
        default = self.registry_hosts / "_default" / "hosts.toml"
        if allowed:
            default.unlink(missing_ok=True)
            return
        default.parent.mkdir(parents=True, exist_ok=True)
        default.write_text(f'server = "{NO_REGISTRY}"\n')

    def cni_config(self) -> dict[str, Any]:
        return {
            "cniVersion": "1.0.0",
            "name": "wf",
            "plugins": [{
                "type": "bridge", "bridge": _BRIDGE, "isGateway": True, "ipMasq": False,
                # One route, to the Services' range through the bridge (where the relay serves them): anything
                # else is unreachable from the pod's own namespace.
                "ipam": {"type": "host-local", "ranges": [[{"subnet": _POD_SUBNET}]],
                         "routes": [{"dst": SERVICE_CIDR}], "dataDir": str(self.dir / "cni" / "ipam")},
            }],
        }

    def _write_cni(self) -> None:
        """The CNI configuration and plugin directory: the bridge plugin runs inside our network namespace (a
        wrapper entering it), so the bridge and the host end of every veth are made there, never on the
        machine; loopback and host-local act in the pod's namespace and on files only."""
        bins = self.dir / "cni" / "bin"
        bins.mkdir(parents=True, exist_ok=True)
        (self.dir / "cni" / "net.d").mkdir(parents=True, exist_ok=True)
        (self.dir / "cni" / "net.d" / "10-wf.conflist").write_text(json.dumps(self.cni_config(), indent=2))
        plugins = build.binary_path("bridge").parent
        for name in ("loopback", "host-local"):
            link = bins / name
            link.unlink(missing_ok=True)
            link.symlink_to(plugins / name)
        nsenter = shutil.which("nsenter") or "nsenter"
        wrapper = bins / "bridge"
        wrapper.write_text(f'#!/bin/sh\nexec {nsenter} --net={_NETNS_DIR / self.netns} {plugins / "bridge"} "$@"\n')
        wrapper.chmod(0o755)

    def kubelet_config(self, ports: Ports, group_taints: list[dict[str, str]], ca: Path) -> dict[str, Any]:
        return {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            # Kubernetes 1.35+ refuses cgroup v1 unless told otherwise; these machines have v1.
            "failCgroupV1": False,
            "address": processes.LOOPBACK,
            "port": ports.kubelet,
            "readOnlyPort": 0,
            "healthzBindAddress": processes.LOOPBACK,
            "healthzPort": ports.healthz,
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": f"/{self.cgroup}",
            "containerRuntimeEndpoint": f"unix://{self.containerd_socket}",
            "podLogsDir": str(self.pod_logs),
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                               "x509": {"clientCAFile": str(ca)}},
            "authorization": {"mode": "Webhook"},
            "failSwapOn": False,
            "registerWithTaints": group_taints,
            # A shared development disk is often fuller than the defaults allow (10% free); only a nearly full one
            # should evict.
            "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%",
                             "nodefs.inodesFree": "1%"},
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "serializeImagePulls": False,
            "maxPods": 30,
            "resolvConf": "/etc/resolv.conf",
        }

    def _kubelet_credentials(self, kwok_pki: Path, name: str, server_config: dict[str, Any]) -> Path:
        """A client certificate for system:node:<name> (group system:nodes) signed by the cluster's CA, and a
        kubeconfig using it (mode 0600)."""
        pki = self.dir / "kubelet" / "pki"
        pki.mkdir(parents=True, exist_ok=True, mode=0o700)
        key, csr, cert = pki / "node.key", pki / "node.csr", pki / "node.crt"
        _run(["openssl", "req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr),
              "-subj", f"/O=system:nodes/CN=system:node:{name}"], "making the kubelet's key")
        _run(["openssl", "x509", "-req", "-in", str(csr), "-CA", str(kwok_pki / "ca.crt"), "-CAkey",
              str(kwok_pki / "ca.key"), "-CAcreateserial", "-CAserial", str(pki / "ca.srl"), "-days", "365",
              "-out", str(cert)], "signing the kubelet's certificate")
        key.chmod(0o600)
        csr.unlink()
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": name,
            "clusters": [{"name": "local", "cluster": server_config}],
            "users": [{"name": name, "user": {"client-certificate": str(cert), "client-key": str(key)}}],
            "contexts": [{"name": name, "context": {"cluster": "local", "user": name}}],
        }
        path = self.dir / "kubelet" / "kubeconfig"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        path.chmod(0o600)
        return path

    # ---- namespace and cgroups ----------------------------------------------------------------------------
    def _make_netns(self, forwards: Sequence[Forward]) -> None:
        """The namespace, its loopback up and holding the addresses the relay listens on."""
        if not (_NETNS_DIR / self.netns).exists():
            _run(["ip", "netns", "add", self.netns], "making the node's network namespace")
        _run(["ip", "-n", self.netns, "link", "set", "lo", "up"], "bringing up its loopback")
        for address in sorted({f.address for f in forwards}):
            _run(["ip", "-n", self.netns, "address", "replace", f"{address}/32", "dev", "lo"],
                 f"giving its loopback the address {address}")

    def _start_relay(self, forwards: Sequence[Forward], timeout: float) -> None:
        ready = self.dir / "relay.ready"
        ready.unlink(missing_ok=True)
        env = {k: v for k, v in os.environ.items() if k in ("PATH", "PYTHONPATH", "HOME")}
        argv = [sys.executable, "-m", "wf.cluster.relay", "--netns", str(_NETNS_DIR / self.netns),
                "--ready", str(ready), *(a for f in forwards for a in ("--forward", f.argument()))]
        pid = processes.start(argv, env=env, log_file=self.log_file(RELAY), pid_file=self.pid_file(RELAY),
                              cwd=self.dir)
        self._wait(ready.is_file, RELAY, pid, timeout)

    def _hierarchies(self) -> list[Path]:
        """Where the node's cgroup directory goes: the v2 root, or every mounted v1 hierarchy and, on a hybrid
        machine, the v2 one beside them (runc makes its cgroups there too)."""
        if _cgroup_v2():
            return [_CGROUP_ROOT]
        return [h for h in sorted(_CGROUP_ROOT.iterdir()) if (h / "cgroup.procs").is_file()]

    def _make_cgroups(self) -> None:
        for hierarchy in self._hierarchies():
            for path in (hierarchy / self.cgroup, hierarchy / self.cgroup / "runtime"):
                path.mkdir(exist_ok=True)
                if hierarchy.name == "cpuset":  # a v1 cpuset takes no process until it has cpus and mems
                    for knob in ("cpuset.cpus", "cpuset.mems"):
                        (path / knob).write_text((hierarchy / knob).read_text())
            if hierarchy == _CGROUP_ROOT:
                controls = " ".join(f"+{c}" for c in _V2_CONTROLLERS)
                (hierarchy / self.cgroup / "cgroup.subtree_control").write_text(controls)

    def _enter_runtime_cgroup(self, pid: int) -> None:
        for hierarchy in self._hierarchies():
            (hierarchy / self.cgroup / "runtime" / "cgroup.procs").write_text(str(pid))

    def _cgroup_dirs(self) -> Iterator[Path]:
        """Every cgroup of the node, deepest first (a cgroup is removed only when it has no children)."""
        for hierarchy in self._hierarchies():
            top = hierarchy / self.cgroup
            if top.is_dir():
                yield from sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
                yield top

    def cgroup_pids(self) -> set[int]:
        pids: set[int] = set()
        for path in self._cgroup_dirs():
            try:
                pids.update(int(p) for p in (path / "cgroup.procs").read_text().split())
            except OSError:
                continue
        return pids

    # ---- start -------------------------------------------------------------------------------------------
    def start(self, *, cluster_kubeconfig: Path, kwok_pki: Path, group: NodeGroup, forwards: Sequence[Forward],
              say: Say, timeout: float = 60.0) -> Ports:
        """Start the node; `forwards` are the cluster's Services its pods reach through the relay."""
        name = node_name(group, self.index)
        for path in (self.dir, self.logs, self.pids, self.pod_logs, self.run_dir):
            path.mkdir(parents=True, exist_ok=True)
        self._make_netns(forwards)
        self._start_relay(forwards, timeout)
        self._make_cgroups()
        self._write_cni()
        say(f"starting containerd for real node {name}")
        (self.dir / "containerd.toml").write_text(self.containerd_config())
        paths = [str(build.binary_path("containerd").parent), str(build.binary_path("runc").parent),
                 os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")]
        env = {**os.environ, "PATH": os.pathsep.join(paths)}
        pid = processes.start([str(build.binary_path(CONTAINERD)), "--config", str(self.dir / "containerd.toml")],
                              env=env, log_file=self.log_file(CONTAINERD), pid_file=self.pid_file(CONTAINERD),
                              cwd=self.dir)
        self._enter_runtime_cgroup(pid)
        self._wait(lambda: self._ctr(["version"], check=False).returncode == 0, CONTAINERD, pid, timeout)
        for image in images.IMAGES:
            say(f"importing {image} into real node {name}")
            self.import_image(images.archive(image, build.cache_dir()))
        admin = yaml.safe_load(cluster_kubeconfig.read_text())
        server = {k: v for k, v in admin["clusters"][0]["cluster"].items() if k != "certificate-authority-data"}
        server["certificate-authority"] = str(kwok_pki / "ca.crt")
        kubeconfig = self._kubelet_credentials(kwok_pki, name, server)
        ports = Ports(kubelet=processes.free_port(), healthz=processes.free_port())
        manifest = node_manifest(group, self.index, name)
        labels = {**manifest["metadata"]["labels"], REAL_NODE_LABEL: "true"}
        config = self.kubelet_config(ports, [*manifest["spec"]["taints"], REAL_NODE_TAINT], kwok_pki / "ca.crt")
        (self.dir / "kubelet" / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        for path in (self.dir / "kubelet" / "root", self.kubelet_root):
            path.mkdir(parents=True, exist_ok=True)
        if not _mounts_under([str(self.kubelet_root)]):
            _run(["mount", "--bind", str(self.dir / "kubelet" / "root"), str(self.kubelet_root)],
                 "binding the kubelet's root")
        say(f"starting the kubelet of real node {name}")
        argv = [
            str(build.binary_path(KUBELET)),
            f"--config={self.dir / 'kubelet' / 'config.yaml'}",
            f"--kubeconfig={kubeconfig}",
            f"--root-dir={self.kubelet_root}",
            f"--cert-dir={self.dir / 'kubelet' / 'pki'}",
            f"--hostname-override={name}",
            f"--node-ip={processes.LOOPBACK}",
            "--node-labels=" + ",".join(f"{k}={v}" for k, v in sorted(labels.items())),
        ]
        kubelet = processes.start(argv, env=env, log_file=self.log_file(KUBELET), pid_file=self.pid_file(KUBELET),
                                  cwd=self.dir)
        self._wait(lambda: _http_ok(f"http://{processes.LOOPBACK}:{ports.healthz}/healthz"), KUBELET, kubelet,
                   timeout)
        self._wait(lambda: _set_loopback_address(cluster_kubeconfig, name), KUBELET, kubelet, timeout)
        (self.dir / "ports.json").write_text(json.dumps({"kubelet": ports.kubelet, "healthz": ports.healthz,
                                                         "name": name}))
        return ports

    def import_image(self, archive: Path) -> None:
        """Import an image archive (OCI or `docker save`) into the node's containerd."""
        self._ctr(["images", "import", str(archive)])

    def _ctr(self, args: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
        argv = [str(build.binary_path("ctr")), "--address", str(self.containerd_socket), "--namespace",
                K8S_NAMESPACE, *args]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        if check and proc.returncode != 0:
            raise ClusterError(f"`ctr {' '.join(args)}` failed: {proc.stderr.strip()[-300:]}")
        return proc

    def _wait(self, ready: Callable[[], bool], component: str, pid: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not processes.is_running(pid):
                raise ClusterError(f"{component} of real node {self.index} exited at start; see "
                                   f"{self.log_file(component)}, which ends:\n{self._log_tail(component)}")
            if ready():
                return
            time.sleep(0.2)
        raise ClusterError(f"{component} of real node {self.index} not ready after {timeout:.0f}s; see "
                           f"{self.log_file(component)}")

    def _log_tail(self, component: str, lines: int = 8) -> str:
        """The last lines of a component's log: a failed `up` removes nothing, but a test's cleanup does."""
        try:
            tail = self.log_file(component).read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            return "  (no log)"
        return "\n".join(f"  {line[:300]}" for line in tail)

    # ---- status and stop ---------------------------------------------------------------------------------
    def node_name(self) -> str | None:
        try:
            return str(json.loads((self.dir / "ports.json").read_text())["name"])
        except (OSError, ValueError, KeyError):
            return None

    def processes(self) -> list[tuple[str, int | None, int | None, Path, bool]]:
        """(component, pid, port, log, running) for containerd, the kubelet and the relay (whose ports are inside
        the node's namespace, not the host's)."""
        try:
            ports = json.loads((self.dir / "ports.json").read_text())
        except (OSError, ValueError):
            ports = {}
        out = []
        for component, port in ((CONTAINERD, None), (KUBELET, ports.get("kubelet")), (RELAY, None)):
            pid = processes.read_pid(self.pid_file(component))
            out.append((component, pid, port, self.log_file(component),
                        processes.is_running(pid, _binary(component))))
        return out

    def stop(self, say: Say) -> None:
        """Stop the kubelet, containerd, every shim and container and the relay; unmount, remove the namespace
        and cgroups."""
        for component in (KUBELET, CONTAINERD, RELAY):
            pid = processes.read_pid(self.pid_file(component))
            if pid and processes.is_running(pid, _binary(component)):
                say(f"stopping {component} of real node {self.index} (pid {pid})")
                processes.stop(pid, _binary(component), grace_seconds=5)
        self._kill_cgroup_processes(say)
        self._unmount_all()
        if (_NETNS_DIR / self.netns).exists():
            _run(["ip", "netns", "delete", self.netns], "removing the node's network namespace")
        for path in self._cgroup_dirs():
            try:
                path.rmdir()
            except OSError as exc:
                raise ClusterError(f"cannot remove cgroup {path}: {exc}") from None
        self._remove_container_log_links()
        shutil.rmtree(self.run_dir, ignore_errors=True)
        _remove_unused_fixed_paths()

    def _kill_cgroup_processes(self, say: Say) -> None:
        """Whatever still runs in the node's cgroups (shims, containers) is ours: SIGKILL until none is left."""
        deadline = time.monotonic() + 15
        while (pids := self.cgroup_pids()) and time.monotonic() < deadline:
            say(f"killing {len(pids)} leftover process(es) of real node {self.index}")
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.3)
        if pids := self.cgroup_pids():
            raise ClusterError(f"real node {self.index}: processes {sorted(pids)} survive SIGKILL")

    def _unmount_all(self) -> None:
        """Every mount below the node's directories (container rootfs, pod volumes, network namespace files),
        deepest first."""
        roots = [str(self.dir.resolve()), str(self.run_dir)]
        for target in sorted(_mounts_under(roots), key=lambda m: -m.count("/")):
            subprocess.run(["umount", "--lazy", target], capture_output=True)
        if left := _mounts_under(roots):
            raise ClusterError(f"real node {self.index}: cannot unmount {', '.join(left[:3])}")

    def _remove_container_log_links(self) -> None:
        if not _CONTAINER_LOGS.is_dir():
            return
        ours = str(self.pod_logs.resolve())
        for link in _CONTAINER_LOGS.iterdir():
            if link.is_symlink() and os.readlink(link).startswith(ours):
                link.unlink()


def _binary(component: str) -> Path:
    return Path(sys.executable) if component == RELAY else build.binary_path(component)


def _set_loopback_address(kubeconfig: Path, name: str) -> bool:
    """Give the registered Node the address 127.0.0.1, where its kubelet listens and the API server must reach
    it; False while the kubelet has not registered it yet. The kubelet refuses a loopback --node-ip ("nodeIP can't
    be loopback address", logged at every status update) and then leaves the node's addresses as they are, so
    this one stays; without --node-ip it would publish the machine's own address instead."""
    from kubernetes import client as kclient
    from kubernetes.client.exceptions import ApiException

    from wf.controller.client import Target, connect

    api_client = connect(Target(kubeconfig=str(kubeconfig))).api_client
    # No Hostname address: the API server would try it first and ask the machine's DNS for the node's name.
    addresses = [{"type": "InternalIP", "address": processes.LOOPBACK}]
    try:
        kclient.CoreV1Api(api_client).patch_node_status(name, {"status": {"addresses": addresses}})
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    finally:
        api_client.close()
    return True


def _remove_unused_fixed_paths() -> None:
    """The fixed paths (_FIXED_SOCKETS, _FIXED_DIRS) that nothing uses any more: a socket nobody listens on, an
    empty directory. Another kubelet's or containerd's are in use, so they stay."""
    import socket

    for path in _FIXED_SOCKETS:
        if path.is_socket():
            with socket.socket(socket.AF_UNIX) as probe:
                try:
                    probe.connect(str(path))
                except OSError:
                    path.unlink(missing_ok=True)
    for directory in _FIXED_DIRS:
        with contextlib.suppress(OSError):  # absent, or not empty: in use
            directory.rmdir()


def _may_lower_oom_scores() -> bool:
    """Whether we hold CAP_SYS_RESOURCE, which lowering a process's oom_score_adj takes (the pod sandbox's is
    -998). Some sandboxed machines deny it even to root; containerd then keeps every container's score at or above
    its own (`restrict_oom_score_adj`), or runc fails to start any pod ("failed to update /proc/self/oom_score_adj:
    Permission denied")."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> _CAP_SYS_RESOURCE & 1)
    return False


def _mounts_under(roots: list[str]) -> list[str]:
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        target = line.split()[4].replace("\\040", " ")
        if any(target == r or target.startswith(r + "/") for r in roots):
            out.append(target)
    return out


def _http_ok(url: str) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def _run(argv: list[str], what: str) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        raise ClusterError(f"{what} failed (`{' '.join(argv[:3])} ...`, exit {proc.returncode}): "
                           f"{proc.stderr.strip()[-300:]}")
