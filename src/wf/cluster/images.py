"""Container images for a real node without a registry: assembled here as OCI image archives and imported into
the node's containerd (`ctr images import`), tagged so that pods name them as usual.

An image is one uncompressed layer made from files we name (a static binary we build, the files of a Debian
package), a config and a manifest: the OCI image layout in a tar, with the name containerd gives the image in
the index's `io.containerd.image.name` annotation. The tar is built in a fixed order with fixed times, so the
same files give the same digests.

Images (cached under ~/.cache/wf/images/<name>/<tag>/image.tar):
  wf.local/pause      the pod sandbox: a static Go program that waits for SIGTERM (pause.go, built here)
  wf.local/busybox    Debian's busybox-static, with a link per applet: sh, echo, sleep, ... for test pods
  quay.io/argoproj/argoexec:v<Argo>   Argo's executor from our build (component `argoexec`), under the name the
                      controller gives its init and wait containers, laid out as upstream's image (/bin/argoexec,
                      entrypoint `argoexec`, a /tmp for its files)
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from wf.cluster import build
from wf.core.errors import ClusterError

REGISTRY = "wf.local"  # a name no registry answers to: these images exist only where they were imported
PAUSE = f"{REGISTRY}/pause:1"
BUSYBOX_PACKAGE = "busybox-static"
BUSYBOX = f"{REGISTRY}/busybox:1"
# The name Argo's controller gives its executor containers (wf.cluster.supervise): found locally, never pulled.
ARGOEXEC = f"quay.io/argoproj/argoexec:v{build.ARGO_RELEASE}"
_PAUSE_SOURCE = Path(__file__).with_name("pause.go")
_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
_OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
_OCI_LAYER = "application/vnd.oci.image.layer.v1.tar"


@dataclass(frozen=True)
class File:
    """One entry of a layer: a regular file's bytes, a symbolic link's target, or a directory."""

    path: str  # inside the image, absolute
    data: bytes = b""
    mode: int = 0o755
    link: str | None = None
    directory: bool = False


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _tar(entries: Iterable[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in entries:
            info.mtime = 0
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return out.getvalue()


def layer(files: Sequence[File]) -> bytes:
    """An uncompressed layer holding `files` and every directory above them (mode 0755, owned by root)."""
    dirs = sorted({str(parent) for f in files for parent in Path(f.path.lstrip("/")).parents if str(parent) != "."})
    entries: list[tuple[tarfile.TarInfo, bytes | None]] = []
    for d in dirs:
        info = tarfile.TarInfo(d + "/")
        info.type, info.mode = tarfile.DIRTYPE, 0o755
        entries.append((info, None))
    for f in sorted(files, key=lambda f: f.path):
        info = tarfile.TarInfo(f.path.lstrip("/"))
        if f.link is not None:
            info.type, info.linkname, info.mode = tarfile.SYMTYPE, f.link, 0o777
            entries.append((info, None))
        elif f.directory:
            info.type, info.mode = tarfile.DIRTYPE, f.mode
            entries.append((info, None))
        else:
            info.size, info.mode = len(f.data), f.mode
            entries.append((info, f.data))
    return _tar(entries)


def oci_archive(name: str, files: Sequence[File], *, entrypoint: Sequence[str] = (), cmd: Sequence[str] = (),
                arch: str = "amd64") -> bytes:
    """The OCI image layout (oci-layout, index.json, blobs/sha256/...) as a tar that `ctr images import` reads,
    naming the image `name` (registry/repository:tag)."""
    rootfs = layer(files)
    config = json.dumps({
        "architecture": arch,
        "os": "linux",
        "config": {"Env": [f"PATH={_PATH}"], "Entrypoint": list(entrypoint) or None, "Cmd": list(cmd) or None},
        "rootfs": {"type": "layers", "diff_ids": [_digest(rootfs)]},
    }, sort_keys=True).encode()
    manifest = json.dumps({
        "schemaVersion": 2,
        "mediaType": _OCI_MANIFEST,
        "config": {"mediaType": _OCI_CONFIG, "digest": _digest(config), "size": len(config)},
        "layers": [{"mediaType": _OCI_LAYER, "digest": _digest(rootfs), "size": len(rootfs)}],
    }, sort_keys=True).encode()
    tag = name.rsplit(":", 1)[1]
    index = json.dumps({
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": _OCI_MANIFEST, "digest": _digest(manifest), "size": len(manifest),
            "platform": {"architecture": arch, "os": "linux"},
            "annotations": {"io.containerd.image.name": name, "org.opencontainers.image.ref.name": tag},
        }],
    }, sort_keys=True).encode()
    blobs = {_digest(b).removeprefix("sha256:"): b for b in (rootfs, config, manifest)}
    entries: list[tuple[tarfile.TarInfo, bytes | None]] = []
    for path, data in [("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'), ("index.json", index),
                       *((f"blobs/sha256/{h}", b) for h, b in sorted(blobs.items()))]:
        info = tarfile.TarInfo(path)
        info.size, info.mode = len(data), 0o644
        entries.append((info, data))
    return _tar(entries)


def _go_static(source: Path, output: Path) -> None:
    go = shutil.which("go")
    if not go:
        raise ClusterError("the Go toolchain (`go`) is needed to build the pause image and is not on PATH")
    env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-trimpath", "GOTOOLCHAIN": "local", "GO111MODULE": "off"}
    proc = subprocess.run([go, "build", "-ldflags", "-s -w", "-o", str(output), str(source)],
                          env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise ClusterError(f"building {source.name} failed: {proc.stderr.strip()[-500:]}")


def _debian_package_files(package: str, work: Path) -> Path:
    """The files of a Debian package (apt's own download, unpacked with dpkg-deb): nothing is installed on the
    machine."""
    argv = ["apt-get", "download", package]
    proc = subprocess.run(argv, cwd=work, capture_output=True, text=True)
    debs = list(work.glob(f"{package}_*.deb"))
    if proc.returncode != 0 or not debs:
        raise ClusterError(f"`apt-get download {package}` failed: {proc.stderr.strip()[-300:]}")
    root = work / "root"
    subprocess.run(["dpkg-deb", "-x", str(debs[0]), str(root)], check=True)
    return root


def _pause_archive(work: Path) -> bytes:
    binary = work / "pause"
    _go_static(_PAUSE_SOURCE, binary)
    return oci_archive(PAUSE, [File("/pause", binary.read_bytes())], entrypoint=["/pause"])


def _busybox_archive(work: Path) -> bytes:
    root = _debian_package_files(BUSYBOX_PACKAGE, work)
    busybox = root / "bin" / "busybox"
    applets = subprocess.run([str(busybox), "--list"], capture_output=True, text=True, check=True).stdout.split()
    files = [File("/bin/busybox", busybox.read_bytes()),
             *(File(f"/bin/{a}", link="busybox") for a in applets if a != "busybox")]
    return oci_archive(BUSYBOX, files, cmd=["sh"])


def _argoexec_archive(_: Path) -> bytes:
    binary = build.binary_path("argoexec")
    files = [File("/bin/argoexec", binary.read_bytes()), File("/tmp", mode=0o1777, directory=True)]
    return oci_archive(ARGOEXEC, files, entrypoint=["argoexec"])


_BUILDERS = {PAUSE: _pause_archive, BUSYBOX: _busybox_archive, ARGOEXEC: _argoexec_archive}
IMAGES = tuple(_BUILDERS)  # what every real node imports


def archive(name: str, cache: Path) -> Path:
    """The cached OCI archive of one of IMAGES, built first if missing."""
    repository, tag = name.removeprefix(f"{REGISTRY}/").rsplit(":", 1)
    target = cache / "images" / repository.replace("/", "_") / tag / "image.tar"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as work:
        data = _BUILDERS[name](Path(work))
        staged = Path(work) / "image.tar"
        staged.write_bytes(data)
        os.replace(staged, target)  # only a complete archive is ever taken as built
    return target
