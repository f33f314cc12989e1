"""Build the pinned local-cluster binaries from Go modules into ~/.cache/wf/<component>/<version>/bin.

No release downloads are possible here, only the Go module proxy. Each component is built in a small wrapper
module of our own (~/.cache/wf/src/<component>/<version>): that is the only way to build Kubernetes and etcd,
whose own go.mod files carry `replace` directives that `go install pkg@version` refuses; using the same shape
for every component keeps one code path. Binaries already present are skipped, so a warm `build` is instant.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import astuple, dataclass
from pathlib import Path
from typing import Any

from wf.core.errors import ClusterError

# The releases the local cluster builds and runs (not the API versions of their kinds: see wf.core.constants).
KUBERNETES_RELEASE = "1.36.3"
ETCD_RELEASE = "3.6.16"
KWOK_RELEASE = "0.8.0"
# v4.0.5 is the only v4.0.x the proxy lists, but v4.0.7 resolves and fixes CVE-2026-54526 (fixed in 4.0.6).
ARGO_RELEASE = "4.0.7"
KARPENTER_RELEASE = "1.15.0"
# Karpenter 1.15.0's go.mod says `go 1.26.9`; the local Go may be older. The module proxy serves Go
# toolchains as the module golang.org/toolchain, so naming the version makes `go` fetch it from there.
KARPENTER_GO = "go1.26.9"
KUEUE_RELEASE = "0.17.0"
MPI_OPERATOR_RELEASE = "0.6.0"
PROMETHEUS_RELEASE = "3.16.0"
# Prometheus 3.x publishes its Go module as v0.3<minor>.<patch> (v0.316.0 is 3.16.0).
PROMETHEUS_MODULE_VERSION = "0.316.0"
# A real node's runtime (wf.cluster.realnode). containerd 2.3.x, not 2.4.x: it is built against the same
# k8s.io/* 0.36 modules as our Kubernetes (one CRI API, shared Go build cache), and Kubernetes 1.36's kubelet
# needs containerd 2.x.
CONTAINERD_RELEASE = "2.3.7"
RUNC_RELEASE = "1.5.3"
CNI_PLUGINS_RELEASE = "1.10.0"

_K8S_VERSION_PKGS = ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version")
_BUILD_DATE = "1970-01-01T00:00:00Z"  # fixed, so rebuilding the same version gives the same bytes


@dataclass(frozen=True)
class SourcePatch:
    """A small, exact edit of one upstream file, applied to a copy of the module before building."""

    file: str  # relative to the module root
    old: str  # must occur exactly once, so an upstream change fails the build instead of passing silently
    new: str
    append: str = ""

    def apply(self, text: str) -> str:
        if text.count(self.old) != 1:
            raise ClusterError(f"source patch for {self.file} no longer applies: {self.old!r} not found exactly once")
        return text.replace(self.old, self.new) + self.append


def _env_or_default(function: str, variable: str, default: str, parameters: str = "") -> str:
    """Go source of a function returning the environment variable's value, else the Go expression `default`
    (upstream's value, or our loopback one): what each patch below calls instead of a hard-coded address or
    path."""
    return f"""
// {function} was added by wf's local-cluster build (see wf/cluster/build.py).
func {function}({parameters}) string {{
	if value := os.Getenv("{variable}"); value != "" {{
		return value
	}}
	return {default}
}}
"""


# Upstream's workflow-controller serves healthz/pprof on ":6060" (every interface, a fixed port). A local
# cluster must listen on loopback only, and two clusters on one machine must not fight over the port.
_ARGO_HEALTH_PATCH = SourcePatch(
    file="cmd/workflow-controller/main.go",
    old='http.ListenAndServe(":6060", nil)',
    new="http.ListenAndServe(wfHealthAddr(), nil)",
    append=_env_or_default("wfHealthAddr", "WF_HEALTH_ADDR", '"127.0.0.1:6060"'),
)

# Its Prometheus metrics server listens on ":<metricsConfig.port>" (every interface; Argo has no host option).
# The local cluster scrapes it on loopback, at a port of its choosing so that two clusters do not collide; the
# ConfigMap's port stays Argo's default, which an EKS cluster's in-cluster scrape uses.
_ARGO_METRICS_PATCH = SourcePatch(
    file="util/telemetry/exporter_prometheus.go",
    old='Addr: fmt.Sprintf(":%v", m.config.port())',
    new="Addr: wfMetricsAddr(m.config.port())",
    append=_env_or_default("wfMetricsAddr", "WF_METRICS_ADDR", 'fmt.Sprintf("127.0.0.1:%d", port)', "port int"),
)

# Argo Server (`argo server`) listens on ":<--port>" (every interface) and has no flag for the address: the local
# cluster's serves the archive on loopback only.
_ARGO_SERVER_PATCH = SourcePatch(
    file="server/apiserver/argoserver.go",
    old='address := fmt.Sprintf(":%d", port)',
    new="address := wfServerAddr(port)",
    append=_env_or_default("wfServerAddr", "WF_SERVER_ADDR", 'fmt.Sprintf("127.0.0.1:%d", port)', "port int"),
)

# The mpi-operator serves its leader-election health check on ":8080" (every interface, a fixed port): the same
# loopback-only, configurable address as the workflow-controller's.
_MPI_HEALTH_PATCH = SourcePatch(
    file="cmd/mpi-operator/app/server.go",
    old='Addr:    fmt.Sprintf(":%d", healthCheckPort),',
    new="Addr:    wfHealthAddr(),",
    append=_env_or_default("wfHealthAddr", "WF_HEALTH_ADDR", '"127.0.0.1:8080"'),
)


# With its own certificate management off (the API server reaches the webhooks on loopback with a CA we
# generate), Kueue reads its metrics server's certificate from a fixed /etc path and exits without it; a
# local cluster must not write to /etc, so the directory comes from the environment.
# Karpenter binds its metrics and health probe servers to ":<port>" (every interface); the ports come from
# METRICS_PORT and HEALTH_PROBE_PORT (wf.cluster.karpenter_kwok), the address is loopback's.
_KARPENTER_LOOPBACK_PATCHES = tuple(
    SourcePatch(file="pkg/operator/operator.go", old=f'fmt.Sprintf(":%d", options.FromContext(ctx).{port})',
                new=f'fmt.Sprintf("127.0.0.1:%d", options.FromContext(ctx).{port})')
    for port in ("MetricsPort", "HealthProbePort")
)

_KUEUE_METRICS_CERT_PATCH = SourcePatch(
    file="cmd/kueue/main.go",
    old='metricsCertPath := "/etc/kueue/metrics/certs"',
    new="metricsCertPath := wfMetricsCertDir()",
    append=_env_or_default("wfMetricsCertDir", "WF_KUEUE_METRICS_CERT_DIR", '"/etc/kueue/metrics/certs"'),
)


@dataclass(frozen=True)
class Component:
    """One buildable unit: a Go module at a version and the commands it provides."""

    name: str
    version: str
    module: str
    packages: tuple[str, ...]
    version_ldflags: tuple[str, ...] = ()
    # k8s.io/kubernetes pins its staging modules at v0.0.0 and replaces them with local directories; a
    # dependent module must map them to the published v0.<minor>.<patch> tags itself.
    replace_staging_with: str | None = None
    patches: tuple[SourcePatch, ...] = ()
    # Linker variable that gets the upstream commit (from the module proxy's Origin record), if any.
    commit_variable: str | None = None

    # The module's tag when it is not v<version> (Prometheus 3.x's Go module is v0.3xx.y).
    module_version: str | None = None
    # Go build tags (e.g. to leave out parts of a program the local cluster never uses).
    tags: tuple[str, ...] = ()

    # Command names, one per package; default: the package's last path element.
    names: tuple[str, ...] = ()
    # A Go toolchain to fetch through the module proxy when the module needs a newer Go than the local one.
    toolchain: str | None = None
    # Built only when asked for by name (by `build` or by a cluster that uses it), not by a plain `build`.
    optional: bool = False
    # Empty files made in the module's copy where a `go:embed` needs files its zip leaves out (built ones, as
    # Argo's UI), as upstream's Makefile makes them for a build without the UI (STATIC_FILES=false).
    placeholders: tuple[str, ...] = ()
    # Symbolic links of upstream's tree, as (path, target): a module zip leaves symlinks out, so a file upstream
    # builds from one (Argo's signal_linux.go -> signal_darwin.go) is missing; made again in the module's copy.
    links: tuple[tuple[str, str], ...] = ()
    # Files or directories of the module kept beside the binaries (e.g. CRDs the cluster installs), by module
    # path; each lands in assets_dir under its last path element.
    assets: tuple[str, ...] = ()
    # Needs cgo (runc's nsenter is C that runs before the Go runtime starts); every other component is static Go.
    cgo: bool = False
    # C libraries a cgo build links, as (pkg-config name, the Debian package with its headers).
    c_libraries: tuple[tuple[str, str], ...] = ()

    @property
    def tag(self) -> str:
        """The module version `go` fetches."""
        return f"v{self.module_version or self.version}"

    @property
    def binaries(self) -> tuple[str, ...]:
        return self.names or tuple(pkg.rsplit("/", 1)[-1] for pkg in self.packages)

    def bin_dir(self, cache: Path) -> Path:
        return cache / self.name / self.version / "bin"

    def src_dir(self, cache: Path) -> Path:
        return cache / "src" / self.name / self.version

    def log_file(self, cache: Path) -> Path:
        return cache / "src" / self.name / f"{self.version}.build.log"

    def assets_dir(self, cache: Path) -> Path:
        return cache / self.name / self.version / "assets"

    def asset(self, cache: Path, path: str) -> Path:
        """Where the asset `path` (as listed in `assets`) is kept."""
        return self.assets_dir(cache) / Path(path).name

    @property
    def patches_fingerprint(self) -> str:
        parts: list[Any] = [[astuple(p) for p in self.patches], list(self.placeholders)]
        if self.links:  # only then: the builds of components without links keep their stamps
            parts.append([list(link) for link in self.links])
        return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]

    @property
    def modified(self) -> bool:
        """Built from a copy of the module that differs from its zip (patches, placeholders, links)."""
        return bool(self.patches or self.placeholders or self.links)

    def lock_file(self, cache: Path) -> Path:
        return cache / "src" / self.name / f"{self.version}.lock"

    def patches_stamp(self, cache: Path) -> Path:
        """Records the patches the cached binaries were built with: a build from other patches is stale."""
        return cache / self.name / self.version / "patches"

    def is_built(self, cache: Path) -> bool:
        stamp = self.patches_stamp(cache)
        return (
            all((self.bin_dir(cache) / b).is_file() for b in self.binaries)
            and all(self.asset(cache, a).exists() for a in self.assets)
            and (not self.modified or (stamp.is_file() and stamp.read_text() == self.patches_fingerprint))
        )


def _k8s_ldflags(version: str) -> tuple[str, ...]:
    major, minor, _ = version.split(".")
    flags: list[str] = []
    for pkg in _K8S_VERSION_PKGS:
        flags += [
            f"-X {pkg}.gitVersion=v{version}",
            f"-X {pkg}.gitMajor={major}",
            f"-X {pkg}.gitMinor={minor}",
            f"-X {pkg}.gitTreeState=clean",
            f"-X {pkg}.buildDate={_BUILD_DATE}",
        ]
    return tuple(flags)


def _argo_ldflags(version: str, patched: bool = True) -> tuple[str, ...]:
    root = "github.com/argoproj/argo-workflows/v4"
    return (
        f"-X {root}.version=v{version}",
        f"-X {root}.gitTag=v{version}",
        # Our build patches three files (_ARGO_HEALTH_PATCH, _ARGO_METRICS_PATCH, _ARGO_SERVER_PATCH), so it is
        # not the clean upstream tree; the version then reads "v4.0.7+<commit>.dirty", saying exactly that.
        f"-X {root}.gitTreeState={'dirty' if patched else 'clean'}",
        f"-X {root}.buildDate={_BUILD_DATE}",
    )


def components() -> list[Component]:
    """The pinned components, slowest-to-fail first so a broken proxy shows up early."""
    k8s_minor = "0." + KUBERNETES_RELEASE.split(".", 1)[1]
    return [
        Component(
            name="kubernetes",
            version=KUBERNETES_RELEASE,
            module="k8s.io/kubernetes",
            packages=tuple(
                f"k8s.io/kubernetes/cmd/{c}"
                for c in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
            ),
            version_ldflags=_k8s_ldflags(KUBERNETES_RELEASE),
            replace_staging_with=k8s_minor,
        ),
        # A real node's kubelet: its own component, so the four binaries above are not rebuilt when a real node
        # is first asked for; the same module version shares their Go build cache.
        Component(
            name="kubelet",
            version=KUBERNETES_RELEASE,
            module="k8s.io/kubernetes",
            packages=("k8s.io/kubernetes/cmd/kubelet",),
            version_ldflags=_k8s_ldflags(KUBERNETES_RELEASE),
            replace_staging_with=k8s_minor,
            optional=True,
        ),
        # A real node's container runtime: the daemon, its runc shim and `ctr` (how wf imports local images).
        Component(
            name="containerd",
            version=CONTAINERD_RELEASE,
            module="github.com/containerd/containerd/v2",
            packages=tuple(f"github.com/containerd/containerd/v2/cmd/{c}"
                           for c in ("containerd", "containerd-shim-runc-v2", "ctr")),
            version_ldflags=(f"-X github.com/containerd/containerd/v2/version.Version=v{CONTAINERD_RELEASE}",),
            commit_variable="github.com/containerd/containerd/v2/version.Revision",
            # As upstream's static release: no cgo, so no btrfs snapshotter (overlayfs is what a real node uses).
            tags=("urfave_cli_no_docs", "no_btrfs", "osusergo", "netgo"),
            optional=True,
        ),
        # The OCI runtime, with seccomp: every pod wf compiles asks for the runtime's default profile, which a runc
        # without it refuses to run. Upstream's default tags, less libpathrs (a Rust library; runc falls back to
        # its Go implementation).
        Component(
            name="runc",
            version=RUNC_RELEASE,
            module="github.com/opencontainers/runc",
            packages=("github.com/opencontainers/runc",),
            names=("runc",),
            commit_variable="main.gitCommit",
            tags=("seccomp", "urfave_cli_no_docs"),
            cgo=True,
            c_libraries=(("libseccomp", "libseccomp-dev"),),
            optional=True,
        ),
        # Pod networking on a real node: a bridge inside the cluster's own network namespace.
        Component(
            name="cni-plugins",
            version=CNI_PLUGINS_RELEASE,
            module="github.com/containernetworking/plugins",
            packages=tuple(f"github.com/containernetworking/plugins/plugins/{p}"
                           for p in ("main/bridge", "main/loopback", "ipam/host-local")),
            version_ldflags=(
                f"-X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=v{CNI_PLUGINS_RELEASE}",
            ),
            optional=True,
        ),
        # etcd's version is a constant in go.etcd.io/etcd/api/v3/version, so it needs no stamping.
        Component(
            name="etcd",
            version=ETCD_RELEASE,
            module="go.etcd.io/etcd/server/v3",
            packages=("go.etcd.io/etcd/server/v3",),
            names=("etcd",),
        ),
        Component(
            name="kwok",
            version=KWOK_RELEASE,
            module="sigs.k8s.io/kwok",
            packages=("sigs.k8s.io/kwok/cmd/kwok", "sigs.k8s.io/kwok/cmd/kwokctl"),
            version_ldflags=(f"-X sigs.k8s.io/kwok/pkg/consts.Version=v{KWOK_RELEASE}",),
        ),
        # The workflow-controller, and the CLI for its `argo server` (the workflow archive's API: wf.cluster.
        # argo_server) without the web UI: its assets are a Node build the module leaves out, the API is what wf reads.
        Component(
            name="argo",
            version=ARGO_RELEASE,
            module="github.com/argoproj/argo-workflows/v4",
            packages=("github.com/argoproj/argo-workflows/v4/cmd/workflow-controller",
                      "github.com/argoproj/argo-workflows/v4/cmd/argo"),
            version_ldflags=_argo_ldflags(ARGO_RELEASE),
            patches=(_ARGO_HEALTH_PATCH, _ARGO_METRICS_PATCH, _ARGO_SERVER_PATCH),
            placeholders=("ui/dist/app/index.html",),
            commit_variable="github.com/argoproj/argo-workflows/v4.gitCommit",
        ),
        # Argo's executor (init, wait and the emissary in every workflow pod) for real nodes' image (wf.cluster.
        # images): its own component, so asking for it does not rebuild the controller; unpatched (it serves nothing),
        # but with the one source file upstream has as a symlink, which the module zip leaves out.
        Component(
            name="argoexec",
            version=ARGO_RELEASE,
            module="github.com/argoproj/argo-workflows/v4",
            packages=("github.com/argoproj/argo-workflows/v4/cmd/argoexec",),
            version_ldflags=_argo_ldflags(ARGO_RELEASE, patched=False),
            commit_variable="github.com/argoproj/argo-workflows/v4.gitCommit",
            links=(("workflow/executor/osspecific/signal_linux.go", "signal_darwin.go"),),
            optional=True,
        ),
        # Karpenter's kwok provider: the real provisioning and disruption controllers with simulated
        # instances, for a local cluster whose nodes come and go (`wf cluster up --nodes autoscaler`).
        Component(
            name="karpenter",
            version=KARPENTER_RELEASE,
            module="sigs.k8s.io/karpenter",
            packages=("sigs.k8s.io/karpenter/kwok",),
            names=("karpenter-kwok",),
            toolchain=KARPENTER_GO,
            patches=_KARPENTER_LOOPBACK_PATCHES,
            optional=True,
            assets=(
                "kwok/charts/crds/karpenter.sh_nodepools.yaml",
                "kwok/charts/crds/karpenter.sh_nodeclaims.yaml",
                "kwok/apis/crds/karpenter.kwok.sh_kwoknodeclasses.yaml",
            ),
        ),
        Component(
            name="kueue",
            version=KUEUE_RELEASE,
            module="sigs.k8s.io/kueue",
            packages=("sigs.k8s.io/kueue/cmd/kueue",),
            version_ldflags=(
                f"-X sigs.k8s.io/kueue/pkg/version.GitVersion=v{KUEUE_RELEASE}",
                f"-X sigs.k8s.io/kueue/pkg/version.BuildDate={_BUILD_DATE}",
            ),
            commit_variable="sigs.k8s.io/kueue/pkg/version.GitCommit",
            patches=(_KUEUE_METRICS_CERT_PATCH,),
            optional=True,
            assets=("config/components/crd/bases",),
        ),
        Component(
            name="mpi-operator",
            version=MPI_OPERATOR_RELEASE,
            module="github.com/kubeflow/mpi-operator",
            packages=("github.com/kubeflow/mpi-operator/cmd/mpi-operator",),
            version_ldflags=(
                f"-X github.com/kubeflow/mpi-operator/pkg/version.Version=v{MPI_OPERATOR_RELEASE}",
                f"-X github.com/kubeflow/mpi-operator/pkg/version.Built={_BUILD_DATE}",
            ),
            patches=(_MPI_HEALTH_PATCH,),
            commit_variable="github.com/kubeflow/mpi-operator/pkg/version.GitSHA",
            assets=("manifests/base/kubeflow.org_mpijobs.yaml",),
        ),
        # Scrapes Argo's controller, Kueue and the API server (wf.cluster.prometheus). Without the web UI's
        # assets (a Node build; the HTTP API is what wf reads) and without service discovery (every target is
        # a static loopback address): `remove_all_sd` leaves out the cloud SDKs, most of its compile time.
        Component(
            name="prometheus",
            version=PROMETHEUS_RELEASE,
            module_version=PROMETHEUS_MODULE_VERSION,
            module="github.com/prometheus/prometheus",
            packages=("github.com/prometheus/prometheus/cmd/prometheus",),
            version_ldflags=(
                f"-X github.com/prometheus/common/version.Version={PROMETHEUS_RELEASE}",
                f"-X github.com/prometheus/common/version.BuildDate={_BUILD_DATE}",
            ),
            commit_variable="github.com/prometheus/common/version.Revision",
            tags=("remove_all_sd",),
        ),
    ]


def cache_dir() -> Path:
    """Where binaries and wrapper modules live; WF_CACHE_DIR overrides (tests, CI caches)."""
    override = os.environ.get("WF_CACHE_DIR")
    if override:
        return Path(override)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "wf"


def binary_path(name: str, cache: Path | None = None) -> Path:
    """The cached path of one built command (e.g. "kube-apiserver"), whether or not it exists yet."""
    cache = cache or cache_dir()
    for comp in components():
        if name in comp.binaries:
            return comp.bin_dir(cache) / name
    raise KeyError(name)


_WAIT_POLL_SECONDS = 1.0  # how often a build waiting behind another's lock tries it again
_WAIT_REPORT_SECONDS = 60.0  # how often such a wait is reported as progress

# Progress is reported through a callback so the CLI can render it with rich and tests can record it.
Progress = Callable[[Component, str, float], None]


@dataclass(frozen=True)
class BuildResult:
    component: Component
    built: bool  # False: it was already in the cache
    seconds: float


def build_all(
    only: Sequence[str] | None = None,
    *,
    cache: Path | None = None,
    progress: Progress | None = None,
) -> list[BuildResult]:
    """Build every missing component (or the named ones, in the order named), one after the other: builds use all
    cores. Optional components are built only when named."""
    cache = cache or cache_dir()
    known = {c.name: c for c in components()}
    selected = [known[n] for n in dict.fromkeys(only) if n in known] if only else [
        c for c in known.values() if not c.optional]
    unknown = set(only or ()) - set(known)
    if unknown:
        names = ", ".join(c.name for c in components())
        raise ClusterError(f"unknown component(s) {', '.join(sorted(unknown))}; known: {names}")
    results = []
    for comp in selected:
        started = time.monotonic()
        if comp.is_built(cache):
            results.append(BuildResult(comp, False, 0.0))
            if progress:
                progress(comp, "cached", 0.0)
            continue
        with _building(comp, cache, progress):
            # Another process may have built it while this one waited for the lock.
            if comp.is_built(cache):
                results.append(BuildResult(comp, False, time.monotonic() - started))
                continue
            # Only now is Go needed: a machine with every binary cached runs without a toolchain.
            go = _go_binary()
            _check_c_libraries(comp)
            _build(go, comp, cache, progress)
        results.append(BuildResult(comp, True, time.monotonic() - started))
    return results


@contextlib.contextmanager
def _building(comp: Component, cache: Path, progress: Progress | None) -> Iterator[None]:
    """Hold the component's build lock: two `wf cluster build`s (or test sessions) on one cache would otherwise
    write the same wrapper module at once. The lock is released by the kernel if the holder dies."""
    lock = comp.lock_file(cache)
    lock.parent.mkdir(parents=True, exist_ok=True)
    with lock.open("w") as handle:
        waiting_since = time.monotonic()
        reported = -_WAIT_REPORT_SECONDS
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                # Polled, not blocked on: a wait behind a cold build lasts minutes, and a CI log should say so.
                waited = time.monotonic() - waiting_since
                if progress and waited - reported >= _WAIT_REPORT_SECONDS:
                    progress(comp, "waiting for another build of it", waited)
                    reported = waited
                time.sleep(_WAIT_POLL_SECONDS)
        yield


def _keep_asset(source: Path, target: Path) -> None:
    if target.is_dir():
        shutil.rmtree(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    if source.is_dir():
        shutil.copytree(source, target)
    else:
        shutil.copyfile(source, target)
    for path in (target, *target.rglob("*")):  # copied from the module cache, which is read-only
        path.chmod(path.stat().st_mode | 0o200)


def _check_c_libraries(comp: Component) -> None:
    for library, package in comp.c_libraries:
        found = shutil.which("pkg-config") and subprocess.run(["pkg-config", "--exists", library]).returncode == 0
        if not found:
            raise ClusterError(f"building {comp.name} needs the C library {library} and pkg-config: "
                               f"apt-get install {package} pkg-config")


def _go_binary() -> str:
    go = shutil.which("go")
    if not go:
        raise ClusterError("the Go toolchain (`go`) is needed to build the local cluster and is not on PATH")
    return go


def _build(go: str, comp: Component, cache: Path, progress: Progress | None) -> None:
    src = comp.src_dir(cache)
    log = comp.log_file(cache)
    src.mkdir(parents=True, exist_ok=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    env = {
        **os.environ,
        "CGO_ENABLED": "1" if comp.cgo else "0",
        "GOFLAGS": "-trimpath -buildvcs=false",
        "GOTOOLCHAIN": comp.toolchain or "local",
    }
    with log.open("w") as out:

        def run(step: str, argv: list[str]) -> str:
            if progress:
                progress(comp, step, time.monotonic() - started)
            out.write(f"$ {' '.join(argv)}\n")
            out.flush()
            proc = subprocess.run(argv, cwd=src, env=env, stdout=subprocess.PIPE, stderr=out, text=True)
            out.write(proc.stdout)
            out.flush()
            if proc.returncode != 0:
                raise ClusterError(
                    f"building {comp.name} {comp.version} failed at `{step}` (exit {proc.returncode}); "
                    f"see {log}"
                )
            return proc.stdout

        if not (src / "go.mod").exists():
            run("init", [go, "mod", "init", f"local.wf/build/{comp.name}"])
        elif comp.modified:
            # An earlier build pointed the module at its patched copy, removed once built: point it back.
            run("forget patched sources", [go, "mod", "edit", f"-dropreplace={comp.module}"])
        download = [go, "mod", "download", "-json", f"{comp.module}@{comp.tag}"]
        info = json.loads(run("read upstream module", download))
        if comp.replace_staging_with:
            replaces = staging_replaces(Path(info["GoMod"]).read_text(), comp.replace_staging_with)
            run("pin staging modules", [go, "mod", "edit", *(f"-replace={m}={m}@v{v}" for m, v in replaces)])
        run("download modules", [go, "get", *(f"{pkg}@{comp.tag}" for pkg in comp.packages)])
        staging_bin = src / "bin"
        staging_bin.mkdir(exist_ok=True)
        version_flags = list(comp.version_ldflags)
        commit = (info.get("Origin") or {}).get("Hash")
        if comp.commit_variable and commit:
            version_flags.append(f"-X {comp.commit_variable}={commit}")
        ldflags = " ".join(("-s", "-w", *version_flags))
        if comp.modified:
            patched = _patched_copy(src, Path(info["Dir"]), comp)
            run("use patched sources", [go, "mod", "edit", f"-replace={comp.module}=./{patched.relative_to(src)}"])
        # One package: name the output explicitly (a module path like .../server/v3 would name it "server").
        output = str(staging_bin / comp.binaries[0]) if len(comp.packages) == 1 else str(staging_bin) + os.sep
        tags = ["-tags", ",".join(comp.tags)] if comp.tags else []
        argv = [go, "build", *tags, "-ldflags", ldflags, "-o", output, *comp.packages]
        run("compile", argv)
        # Move into place only when every binary exists, so an interrupted build is never taken as done.
        for asset in comp.assets:
            _keep_asset(Path(info["Dir"]) / asset, comp.asset(cache, asset))
        final = comp.bin_dir(cache)
        final.mkdir(parents=True, exist_ok=True)
        for name in comp.binaries:
            os.replace(staging_bin / name, final / name)
        if comp.modified:
            comp.patches_stamp(cache).write_text(comp.patches_fingerprint)
            shutil.rmtree(src / "patched")  # 70+ MB, recreated by the next build anyway
        out.write(f"# built {comp.name} {comp.version} in {time.monotonic() - started:.0f}s\n")
    if progress:
        progress(comp, "done", time.monotonic() - started)


def _patched_copy(src: Path, module_dir: Path, comp: Component) -> Path:
    """A writable copy of the module with the patches applied, the placeholders and links made (the module cache is
    read-only, and `go build -overlay` refuses to replace files inside it)."""
    copy = src / "patched" / module_dir.name.split("@")[0]
    if copy.exists():
        shutil.rmtree(copy)
    shutil.copytree(module_dir, copy)
    for path in (copy, *copy.rglob("*")):
        path.chmod(path.stat().st_mode | 0o200)
    for patch in comp.patches:
        target = copy / patch.file
        target.write_text(patch.apply(target.read_text()))
    for placeholder in comp.placeholders:
        (copy / placeholder).parent.mkdir(parents=True, exist_ok=True)
        (copy / placeholder).touch()
    for link, link_target in comp.links:
        if (copy / link).exists():
            raise ClusterError(f"{comp.name}: {link} is in the module now; drop it from the component's links")
        (copy / link).symlink_to(link_target)
    return copy


_STAGING_REQUIRE = re.compile(r"^\s*(?:require\s+)?(k8s\.io/[A-Za-z0-9._-]+)\s+v0\.0\.0\s*$", re.MULTILINE)


def staging_replaces(upstream_go_mod: str, version: str) -> list[tuple[str, str]]:
    """Every staging module that Kubernetes' go.mod requires at v0.0.0, mapped to its published `version`."""
    modules = sorted(set(_STAGING_REQUIRE.findall(upstream_go_mod)))
    if not modules:
        raise ClusterError("no k8s.io/* v0.0.0 requirements found in Kubernetes' go.mod: its layout changed")
    return [(m, version) for m in modules]
