"""Unit tests of the local-cluster build plan (no Go build runs here: a fake `go` records its argv)."""

from __future__ import annotations

import fcntl
import os
import stat
import threading
from pathlib import Path

import pytest

from wf.cluster import build
from wf.core.errors import ClusterError

UPSTREAM_GO_MOD = """module k8s.io/kubernetes

go 1.26.0

require (
\tgithub.com/spf13/cobra v1.10.0
\tk8s.io/api v0.0.0
\tk8s.io/apimachinery v0.0.0
\tk8s.io/utils v0.0.0-20260210185600-b8788abfbbc2
)

require (
\tk8s.io/cri-streaming v0.0.0 // indirect
)

replace (
\tk8s.io/api => ./staging/src/k8s.io/api
)
"""


def test_staging_replaces_come_from_every_v0_0_0_requirement() -> None:
    got = build.staging_replaces(UPSTREAM_GO_MOD, "0.36.3")
    # Pseudo-versioned k8s.io/utils is a real dependency, not a staging module: it must not be replaced.
    assert got == [("k8s.io/api", "0.36.3"), ("k8s.io/apimachinery", "0.36.3")]


def test_staging_replaces_include_indirect_requirements() -> None:
    text = UPSTREAM_GO_MOD.replace("k8s.io/cri-streaming v0.0.0 // indirect", "k8s.io/cri-streaming v0.0.0")
    assert ("k8s.io/cri-streaming", "0.36.3") in build.staging_replaces(text, "0.36.3")


def test_staging_replaces_fail_loudly_when_layout_changes() -> None:
    with pytest.raises(ClusterError, match="layout changed"):
        build.staging_replaces("module k8s.io/kubernetes\n", "0.36.3")


def test_cache_layout_is_component_version_bin() -> None:
    cache = Path("/c")
    assert (build.binary_path("kube-apiserver", cache)
            == cache / "kubernetes" / build.KUBERNETES_RELEASE / "bin" / "kube-apiserver")
    assert build.binary_path("etcd", cache) == cache / "etcd" / build.ETCD_RELEASE / "bin" / "etcd"
    assert build.binary_path("kwokctl", cache) == cache / "kwok" / build.KWOK_RELEASE / "bin" / "kwokctl"
    assert (build.binary_path("workflow-controller", cache)
            == cache / "argo" / build.ARGO_RELEASE / "bin" / "workflow-controller")


def test_versions_are_stamped() -> None:
    comps = {c.name: c for c in build.components()}
    assert (f"-X k8s.io/component-base/version.gitVersion=v{build.KUBERNETES_RELEASE}"
            in comps["kubernetes"].version_ldflags)
    assert f"-X sigs.k8s.io/kwok/pkg/consts.Version=v{build.KWOK_RELEASE}" in comps["kwok"].version_ldflags
    assert f"-X github.com/argoproj/argo-workflows/v4.version=v{build.ARGO_RELEASE}" in comps["argo"].version_ldflags


def test_source_patch_must_match_exactly_once() -> None:
    patch = build.SourcePatch(file="x.go", old="A", new="B", append="\n// tail\n")
    assert patch.apply("xAy") == "xBy\n// tail\n"
    with pytest.raises(ClusterError, match="no longer applies"):
        patch.apply("no match")
    with pytest.raises(ClusterError, match="no longer applies"):
        patch.apply("AA")


def test_unknown_component_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(_fake_go(tmp_path)))
    with pytest.raises(ClusterError, match="unknown component"):
        build.build_all(["nope"], cache=tmp_path / "cache")


def test_existing_binaries_are_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(_fake_go(tmp_path)))
    cache = tmp_path / "cache"
    etcd = next(c for c in build.components() if c.name == "etcd")
    etcd.bin_dir(cache).mkdir(parents=True)
    (etcd.bin_dir(cache) / "etcd").write_text("")
    seen: list[tuple[str, str]] = []
    results = build.build_all(["etcd"], cache=cache, progress=lambda c, step, _: seen.append((c.name, step)))
    assert [r.built for r in results] == [False]
    assert seen == [("etcd", "cached")]
    assert not (tmp_path / "go.log").exists()


def test_named_components_are_taken_in_the_order_named(tmp_path: Path) -> None:
    """The order a caller needs them in (the tests' background build: what the first tests need first)."""
    cache = tmp_path / "cache"
    for comp in build.components():
        if comp.name in ("etcd", "kwok"):
            comp.bin_dir(cache).mkdir(parents=True)
            for binary in comp.binaries:
                (comp.bin_dir(cache) / binary).write_text("")
    results = build.build_all(["kwok", "etcd", "kwok"], cache=cache)
    assert [r.component.name for r in results] == ["kwok", "etcd"]


def test_a_build_waits_for_another_build_of_the_same_component_and_takes_its_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(_fake_go(tmp_path)))
    cache = tmp_path / "cache"
    etcd = next(c for c in build.components() if c.name == "etcd")
    etcd.lock_file(cache).parent.mkdir(parents=True)
    waiting = threading.Event()
    results: list[build.BuildResult] = []

    def progress(_: build.Component, step: str, __: float) -> None:
        if step.startswith("waiting"):
            waiting.set()

    with etcd.lock_file(cache).open("w") as other:  # the other build's lock, held
        fcntl.flock(other, fcntl.LOCK_EX)
        waiter = threading.Thread(target=lambda: results.extend(build.build_all(["etcd"], cache=cache,
                                                                                progress=progress)))
        waiter.start()
        assert waiting.wait(10)
        etcd.bin_dir(cache).mkdir(parents=True)  # what the other build leaves when it is done
        (etcd.bin_dir(cache) / "etcd").write_text("")
    waiter.join(10)
    assert [r.built for r in results] == [False]
    assert not (tmp_path / "go.log").exists()  # Go never ran


def test_build_runs_go_with_argv_lists_and_moves_binaries_into_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(_fake_go(tmp_path)))
    cache = tmp_path / "cache"
    results = build.build_all(["kwok"], cache=cache)
    assert results[0].built
    kwok = results[0].component
    assert sorted(p.name for p in kwok.bin_dir(cache).iterdir()) == ["kwok", "kwokctl"]
    calls = (tmp_path / "go.log").read_text().splitlines()
    assert calls[0] == "mod init local.wf/build/kwok"
    assert calls[1] == f"mod download -json sigs.k8s.io/kwok@v{build.KWOK_RELEASE}"
    assert calls[2] == (f"get sigs.k8s.io/kwok/cmd/kwok@v{build.KWOK_RELEASE} "
                        f"sigs.k8s.io/kwok/cmd/kwokctl@v{build.KWOK_RELEASE}")
    assert calls[3].startswith("build -ldflags -s -w -X sigs.k8s.io/kwok/pkg/consts.Version=")
    assert "built kwok" in kwok.log_file(cache).read_text()


def test_failed_build_names_its_log_and_leaves_no_binary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(_fake_go(tmp_path, fail_on="build")))
    cache = tmp_path / "cache"
    with pytest.raises(ClusterError) as err:
        build.build_all(["kwok"], cache=cache)
    kwok = next(c for c in build.components() if c.name == "kwok")
    assert str(kwok.log_file(cache)) in str(err.value)
    assert "compile" in str(err.value)
    assert "simulated compiler error" in kwok.log_file(cache).read_text()
    assert not kwok.is_built(cache)


def test_karpenter_is_built_only_when_named_with_its_toolchain_and_crds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = tmp_path / "module"
    karpenter = next(c for c in build.components() if c.name == "karpenter")
    for asset in karpenter.assets:
        (module / asset).parent.mkdir(parents=True, exist_ok=True)
        (module / asset).write_text(f"# {asset}")
    operator = module / "pkg/operator/operator.go"
    operator.parent.mkdir(parents=True)
    operator.write_text('BindAddress: fmt.Sprintf(":%d", options.FromContext(ctx).MetricsPort),\n'
                        'HealthProbeBindAddress: fmt.Sprintf(":%d", options.FromContext(ctx).HealthProbePort),\n')
    monkeypatch.setenv("PATH", str(_fake_go(tmp_path, module_dir=module)))
    cache = tmp_path / "cache"
    for comp in build.components():
        if comp.name != "karpenter":
            _cached(comp, cache)
    assert not any(r.built for r in build.build_all(cache=cache))  # optional: a plain build leaves it out
    assert not karpenter.is_built(cache)
    [result] = build.build_all(["karpenter"], cache=cache)
    assert result.built and karpenter.is_built(cache)
    assert (karpenter.bin_dir(cache) / "karpenter-kwok").is_file()
    installed = sorted(p.name for p in karpenter.assets_dir(cache).iterdir())
    assert installed == sorted(Path(a).name for a in karpenter.assets)
    # Karpenter needs a newer Go than the local one: every go command asked the proxy's toolchain for it.
    assert set((tmp_path / "toolchain.log").read_text().split()) == {build.KARPENTER_GO}
    # Built from a copy whose listeners bind loopback only (the module cache itself is read-only).
    assert "replace" in (tmp_path / "go.log").read_text() and 'Sprintf(":%d"' in operator.read_text()
    # Built again from other patches: the patched copy of the first build is gone, so its `replace` goes first.
    karpenter.patches_stamp(cache).write_text("other patches")
    (tmp_path / "go.log").write_text("")
    [again] = build.build_all(["karpenter"], cache=cache)
    commands = (tmp_path / "go.log").read_text().splitlines()
    assert again.built and commands[0] == f"mod edit -dropreplace={karpenter.module}", commands


def _cached(comp: build.Component, cache: Path) -> None:
    """`comp` as a previous build left it in `cache`."""
    comp.bin_dir(cache).mkdir(parents=True)
    for name in comp.binaries:
        (comp.bin_dir(cache) / name).write_text("")
    for asset in comp.assets:
        comp.asset(cache, asset).parent.mkdir(parents=True, exist_ok=True)
        comp.asset(cache, asset).write_text("")
    if comp.patches:
        comp.patches_stamp(cache).write_text(comp.patches_fingerprint)


def test_a_build_from_other_patches_is_built_again(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    karpenter = next(c for c in build.components() if c.name == "karpenter")
    assert karpenter.patches  # its listeners, bound to loopback
    _cached(karpenter, cache)
    assert karpenter.is_built(cache)
    karpenter.patches_stamp(cache).unlink()  # built before the patches: every interface
    assert not karpenter.is_built(cache)
    karpenter.patches_stamp(cache).write_text("other patches")
    assert not karpenter.is_built(cache)


def _fake_go(tmp_path: Path, fail_on: str = "", module_dir: Path = Path("/nonexistent")) -> Path:
    """A `go` that logs its arguments; `build -o DIR/` creates one file per package's last element."""
    bindir = tmp_path / "fakebin"
    bindir.mkdir(exist_ok=True)
    script = bindir / "go"
    script.write_text(
        f"""#!/bin/sh
echo "$*" >> {tmp_path}/go.log
echo "$GOTOOLCHAIN" >> {tmp_path}/toolchain.log
echo "$CGO_ENABLED $*" >> {tmp_path}/cgo.log
if [ "$1" = "{fail_on}" ]; then echo "simulated compiler error" >&2; exit 1; fi
if [ "$1" = "mod" ] && [ "$2" = "init" ]; then echo "module $3" > go.mod; fi
if [ "$1" = "mod" ] && [ "$2" = "download" ]; then
  echo '{{"Dir": "{module_dir}", "GoMod": "{module_dir}/go.mod", "Origin": {{"Hash": "0123456789abcdef"}}}}'
fi
if [ "$1" = "build" ]; then
  out=""; prev=""
  for a in "$@"; do
    if [ "$prev" = "-o" ]; then out="$a"; fi
    prev="$a"
  done
  case "$out" in
    */) for a in "$@"; do
          case "$a" in sigs.k8s.io/*|k8s.io/*|go.etcd.io/*|github.com/*) touch "$out$(basename $a)";; esac
        done;;
    *) touch "$out";;  # one package: -o names the file
  esac
fi
"""
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return Path(f"{bindir}{os.pathsep}/usr/bin:/bin")


def test_cached_binaries_need_no_go_toolchain(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    for comp in build.components():
        _cached(comp, cache)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert not any(r.built for r in build.build_all(cache=cache))
    (build.binary_path("etcd", cache)).unlink()
    with pytest.raises(ClusterError, match="Go toolchain"):
        build.build_all(cache=cache)


def test_real_node_components_are_optional_and_only_runc_uses_cgo(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from wf.cluster.realnode import COMPONENTS as real

    by_name = {c.name: c for c in build.components()}
    assert all(by_name[n].optional for n in real)
    # The kubelet is its own build of the same Kubernetes module: asking for it rebuilds none of the four others.
    assert by_name["kubelet"].module == by_name["kubernetes"].module
    assert by_name["kubelet"].tag == by_name["kubernetes"].tag
    assert not set(by_name["kubelet"].packages) & set(by_name["kubernetes"].packages)
    module = tmp_path / "module"
    module.mkdir()
    (module / "go.mod").write_text(UPSTREAM_GO_MOD)
    argoexec = next(c for c in build.components() if c.name == "argoexec")
    [(link, target)] = argoexec.links
    (module / link).parent.mkdir(parents=True)
    (module / link).with_name(target).write_text("package osspecific\n")
    monkeypatch.setenv("PATH", str(_fake_go(tmp_path, module_dir=module)))
    pkg_config = tmp_path / "fakebin" / "pkg-config"
    pkg_config.write_text('#!/bin/sh\necho "$*" >> ' + str(tmp_path / "pkg-config.log") + '\nexit 1\n')
    pkg_config.chmod(0o755)
    cache = tmp_path / "cache"
    for comp in build.components():
        if comp.name not in real:
            _cached(comp, cache)
    assert not any(r.built for r in build.build_all(cache=cache))
    # runc links libseccomp (wf's pods ask for the runtime's default seccomp profile): without its headers the
    # build stops before compiling and says which Debian package has them.
    with pytest.raises(ClusterError, match="apt-get install libseccomp-dev"):
        build.build_all(["runc"], cache=cache)
    assert (tmp_path / "pkg-config.log").read_text().split() == ["--exists", "libseccomp"]
    pkg_config.write_text("#!/bin/sh\nexit 0\n")
    results = build.build_all(list(real), cache=cache)
    assert [r.component.name for r in results if r.built] == list(real)
    assert all(build.binary_path(b, cache).is_file() for b in ("kubelet", "ctr", "runc", "bridge", "argoexec"))
    builds = [line for line in (tmp_path / "cgo.log").read_text().splitlines() if " build " in line]
    assert [line.split()[0] for line in builds] == ["0", "0", "1", "0", "0"]  # runc's nsenter is C
    assert "github.com/opencontainers/runc" in builds[2] and "seccomp" in builds[2]
    # The module zip leaves out upstream's symlinked signal_linux.go: argoexec is built from a copy that has it.
    assert "-replace=github.com/argoproj/argo-workflows/v4=./patched/" in (tmp_path / "go.log").read_text()
    assert argoexec.patches_stamp(cache).read_text() == argoexec.patches_fingerprint
