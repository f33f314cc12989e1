"""Container images for a real node without a registry: assembled here as OCI image archives and imported into
the node's containerd (`ctr images import`), tagged so that pods name them as usual.

An image is one uncompressed layer made from files we name (a static binary we build, the files of Debian
packages), a config and a manifest: the OCI image layout in a tar, with the name containerd gives the image in
the index's `io.containerd.image.name` annotation. The tar is built in a fixed order with fixed times, so the
same files give the same digests.

Images (cached under ~/.cache/wf/images/<name>/<tag>/image.tar):
  wf.local/pause      the pod sandbox: a static Go program that waits for SIGTERM (pause.go, built here)
  wf.local/busybox    Debian's busybox-static, with a link per applet: sh, echo, sleep, ... for test pods
  quay.io/argoproj/argoexec:v<Argo>   Argo's executor from our build (component `argoexec`), under the name the
                      controller gives its init and wait containers, laid out as upstream's image (/bin/argoexec,
                      entrypoint `argoexec`, a /tmp for its files)
  wf.local/python:3.11  Debian's python3 (3.11 in bookworm) with the packages it needs to run, as user 65534 and
                      with nothing written at run time, and the example programs (programs/) in /opt/wf-examples.
                      Not named python:3.11: that is another build (python.org's, in /usr/local, with pip), and a
                      node that can pull must not take this one for it.

Each archive is rebuilt when what it is made of changes (its key: apt's package lists, the files' hashes, a built
binary's size and time). A user's own archives (`wf cluster image import`) are only checked and kept: keep_archive.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from wf.cluster import build
from wf.core.errors import ClusterError, InputError
from wf.jobspec.images import normalized

REGISTRY = "wf.local"  # a name no registry answers to: these images exist only where they were imported
PAUSE = f"{REGISTRY}/pause:1"
BUSYBOX_PACKAGE = "busybox-static"
BUSYBOX = f"{REGISTRY}/busybox:1"
# The name Argo's controller gives its executor containers (wf.cluster.supervise): found locally, never pulled.
ARGOEXEC = f"quay.io/argoproj/argoexec:v{build.ARGO_RELEASE}"
PYTHON = f"{REGISTRY}/python:3.11"
# What the Python image is made of: python3 and what it depends on, less the packages only maintainer scripts use
# (no package is configured in an image) and a second choice where the first of an alternative is taken.
PYTHON_PACKAGES = ("python3",)
_SCRIPT_ONLY_PACKAGES = frozenset({"dpkg", "install-info"})
# Documentation is left out of every Debian package but its copyright file (which its licence asks to keep).
_DOC_DIRS = ("usr/share/doc/", "usr/share/man/", "usr/share/info/", "usr/share/lintian/", "usr/share/locale/")
_APT_LISTS = Path("/var/lib/apt/lists")
PROGRAMS = Path(__file__).with_name("programs")  # carried by the Python image in EXAMPLES_DIR
EXAMPLES_DIR = "/opt/wf-examples"
NOBODY = 65534  # Debian's nobody and nogroup: the Python image's user, as the restricted Pod Security profile wants
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
    """An uncompressed layer holding `files` and every directory above them (mode 0755 unless `files` has it,
    owned by root), each directory before what it holds."""
    entries: dict[str, tuple[tarfile.TarInfo, bytes | None]] = {}
    for f in files:
        for parent in Path(f.path.lstrip("/")).parents:
            if str(parent) != "." and str(parent) not in entries:
                info = tarfile.TarInfo(str(parent) + "/")
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                entries[str(parent)] = (info, None)
    for f in files:
        name = f.path.strip("/")
        info = tarfile.TarInfo(name + "/" if f.directory else name)
        if f.link is not None:
            info.type, info.linkname, info.mode = tarfile.SYMTYPE, f.link, 0o777
            entries[name] = (info, None)
        elif f.directory:
            info.type, info.mode = tarfile.DIRTYPE, f.mode
            entries[name] = (info, None)
        else:
            info.size, info.mode = len(f.data), f.mode
            entries[name] = (info, f.data)
    return _tar(entries[name] for name in sorted(entries, key=lambda name: Path(name).parts))


def oci_archive(name: str, files: Sequence[File], *, entrypoint: Sequence[str] = (), cmd: Sequence[str] = (),
                arch: str = "amd64", user: str | None = None, env: Mapping[str, str] | None = None) -> bytes:
    """The OCI image layout (oci-layout, index.json, blobs/sha256/...) as a tar that `ctr images import` reads,
    naming the image `name` (registry/repository:tag); `user` is the uid:gid its processes run as (root if
    None), `env` their environment beside PATH."""
    rootfs = layer(files)
    settings: dict[str, object] = {"Env": [f"PATH={_PATH}", *(f"{k}={v}" for k, v in (env or {}).items())],
                                   "Entrypoint": list(entrypoint) or None, "Cmd": list(cmd) or None}
    if user is not None:
        settings["User"] = user
    config = json.dumps({
        "architecture": arch,
        "os": "linux",
        "config": settings,
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


def _download(packages: Sequence[str], work: Path) -> list[Path]:
    """The packages' .deb files as apt's own download fetches them (the candidate versions): nothing is installed
    on the machine."""
    proc = subprocess.run(["apt-get", "download", *packages], cwd=work, capture_output=True, text=True)
    debs = sorted(work.glob("*.deb"))
    if proc.returncode != 0 or len(debs) != len(packages):
        raise ClusterError(f"`apt-get download {' '.join(packages)}` failed: {proc.stderr.strip()[-300:]}")
    return debs


def _debian_package_files(package: str, work: Path) -> Path:
    """The files of a Debian package, unpacked with dpkg-deb."""
    [deb] = _download([package], work)
    root = work / "root"
    subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
    return root


def dependency_closure(depends: str, roots: Iterable[str], leave_out: frozenset[str] = frozenset()) -> list[str]:
    """The packages `roots` need, read from `apt-cache depends --recurse` output: Depends and PreDepends, the
    first of each alternative (a `|` line leads one), a virtual package's first provider; a group holding a
    package of `leave_out` is dropped whole, and so is that package."""
    needs: dict[str, list[list[str]]] = {}
    package: str | None = None
    group: list[str] = []
    for line in depends.splitlines():
        if not line.startswith(" "):
            package = line.strip()
            needs.setdefault(package, [])
            continue
        field, _, target = line.strip().partition(": ")
        if package is None or field.lstrip("|") not in ("Depends", "PreDepends"):
            if not line.startswith("    "):  # a provider line belongs to the group before it
                group = []
            continue
        group.append(target.strip("<>"))
        if not field.startswith("|"):
            needs[package].append(group)
            group = []
    providers = _providers(depends)
    out: list[str] = []
    todo = list(roots)
    while todo:
        name = todo.pop(0)
        name = providers.get(name, name)
        if name in out or name in leave_out:
            continue
        out.append(name)
        for alternatives in needs.get(name, []):
            if not leave_out.intersection(alternatives):
                todo.append(alternatives[0])
    return sorted(out)


def _providers(depends: str) -> dict[str, str]:
    """A virtual package's first provider (the indented line after `Depends: <virtual>`)."""
    out: dict[str, str] = {}
    lines = depends.splitlines()
    for line, after in zip(lines, lines[1:], strict=False):
        target = line.strip().partition(": ")[2]
        if target.startswith("<") and after.startswith("    "):
            out.setdefault(target.strip("<>"), after.strip())
    return out


def _python_packages() -> tuple[tuple[str, str], ...]:
    """(package, candidate version) of everything the Python image holds."""
    argv = ["apt-cache", "depends", "--recurse", "--no-recommends", "--no-suggests", "--no-conflicts",
            "--no-breaks", "--no-replaces", "--no-enhances", *PYTHON_PACKAGES]
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        raise ClusterError(f"`apt-cache depends {' '.join(PYTHON_PACKAGES)}` failed: {proc.stderr.strip()[-300:]}")
    packages = dependency_closure(proc.stdout, PYTHON_PACKAGES, _SCRIPT_ONLY_PACKAGES)
    shown = subprocess.run(["apt-cache", "show", "--no-all-versions", *packages], capture_output=True, text=True)
    versions = dict(re.findall(r"^Package: (\S+)\n(?:.+\n)*?Version: (\S+)$", shown.stdout, re.MULTILINE))
    if shown.returncode != 0 or set(versions) != set(packages):
        raise ClusterError(f"`apt-cache show` does not know {sorted(set(packages) - set(versions))}: "
                           f"{shown.stderr.strip()[-300:]}")
    return tuple((p, versions[p]) for p in packages)


def deb_files(fsys_tar: Iterable[tuple[tarfile.TarInfo, bytes | None]]) -> list[File]:
    """A package's files as layer entries: its modes, links and directories; a hard link a copy of its target;
    documentation left out (_DOC_DIRS) but for copyright files."""
    out: list[File] = []
    data: dict[str, bytes] = {}
    for info, content in fsys_tar:
        path = "/" + info.name.removeprefix("./").rstrip("/")
        if info.isfile() and content is not None:
            data[path] = content
        name = path.lstrip("/")
        if not name or (name.startswith(_DOC_DIRS) and not (info.isfile() and name.endswith("/copyright"))):
            continue
        if info.isdir():
            out.append(File(path, mode=info.mode & 0o7777, directory=True))
        elif info.issym():
            out.append(File(path, link=info.linkname))
        elif info.islnk():
            out.append(File(path, data["/" + info.linkname.removeprefix("./")], info.mode & 0o7777))
        elif path in data:
            out.append(File(path, data[path], info.mode & 0o7777))
    return out


def _fsys_tar(deb: Path) -> Iterable[tuple[tarfile.TarInfo, bytes | None]]:
    proc = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], capture_output=True, check=True)
    with tarfile.open(fileobj=io.BytesIO(proc.stdout)) as tar:
        for info in tar:
            member = tar.extractfile(info) if info.isfile() else None
            yield info, member.read() if member else None


def _python_files(work: Path) -> list[File]:
    files: dict[str, File] = {}
    for deb in _download([f"{p}={v}" for p, v in _python_packages()], work):
        for f in deb_files(_fsys_tar(deb)):
            if f.directory and f.path in files:
                continue  # a directory many packages share
            files[f.path] = f
    accounts = {"/etc/passwd": f"root:x:0:0:root:/root:/bin/sh\nnobody:x:{NOBODY}:{NOBODY}:nobody:/nonexistent:"
                               "/usr/sbin/nologin\n",
                "/etc/group": f"root:x:0:\nnogroup:x:{NOBODY}:\n"}
    for path, text in accounts.items():
        files[path] = File(path, text.encode(), 0o644)
    files["/tmp"] = File("/tmp", mode=0o1777, directory=True)
    for program in sorted(PROGRAMS.glob("*.py")):
        path = f"{EXAMPLES_DIR}/{program.name}"
        files[path] = File(path, program.read_bytes(), 0o644)
    return list(files.values())


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


def _python_archive(work: Path) -> bytes:
    # Unbuffered, so a step's log shows each line when printed; no bytecode written (the image's directories
    # are root's and may be mounted read-only).
    env = {"PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1", "LANG": "C.UTF-8"}
    return oci_archive(PYTHON, _python_files(work), cmd=["python3"], user=f"{NOBODY}:{NOBODY}", env=env)


def _file_key(*paths: Path) -> str:
    return " ".join(hashlib.sha256(p.read_bytes()).hexdigest() for p in paths)


def _binary_key(path: Path) -> str:
    """A built binary's size and time: hashing a 100 MB binary at every start is what this saves."""
    stat = path.stat()
    return f"{stat.st_size} {stat.st_mtime_ns}"


def _apt_key(*packages: str) -> str:
    """Which versions of `packages` apt would fetch: its package lists' names, sizes and times (resolving a
    closure and its versions takes seconds; these change only when `apt-get update` finds something new)."""
    stats = [(p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(_APT_LISTS.glob("*_Packages*"))]
    return hashlib.sha256(json.dumps([packages, stats]).encode()).hexdigest()


@dataclass(frozen=True)
class _Recipe:
    key: Callable[[], str]  # what the image is made of, cheap to read: a new key rebuilds it
    build: Callable[[Path], bytes]


_RECIPES = {
    PAUSE: _Recipe(lambda: _file_key(_PAUSE_SOURCE), _pause_archive),
    BUSYBOX: _Recipe(lambda: _apt_key(BUSYBOX_PACKAGE), _busybox_archive),
    ARGOEXEC: _Recipe(lambda: _binary_key(build.binary_path("argoexec")), _argoexec_archive),
    PYTHON: _Recipe(lambda: f"{_apt_key(*PYTHON_PACKAGES, *sorted(_SCRIPT_ONLY_PACKAGES))} "
                    f"{_file_key(*sorted(PROGRAMS.glob('*.py')))}", _python_archive),
}
IMAGES = tuple(_RECIPES)  # what every real node imports


def keep_archive(source: Path, directory: Path) -> tuple[Path, list[str]]:
    """A user's image archive copied into `directory` under its own file name (a later one of that name replaces
    it), and the names of its images as pods name them, once it is seen to be one: a tar holding an OCI layout's
    index.json or `docker save`'s manifest.json, naming its images."""
    try:
        with tarfile.open(source) as tar:
            members = {m.name.removeprefix("./"): m for m in tar.getmembers()}
            found = [n for n in ("index.json", "manifest.json") if n in members]
            document = json.load(tar.extractfile(members[found[0]])) if found else None  # type: ignore[arg-type]
    except (OSError, ValueError, tarfile.TarError) as exc:
        raise InputError(f"{source}: not an image archive: {exc}") from None
    if document is None:
        raise InputError(f"{source}: not an image archive: no index.json (OCI) or manifest.json (docker save)")
    if found[0] == "index.json":  # containerd keeps an OCI name as written: it must be whole already
        annotations = [m.get("annotations") or {} for m in document.get("manifests") or []]
        named = [n for a in annotations
                 if (n := a.get("io.containerd.image.name") or a.get("org.opencontainers.image.ref.name"))
                 and any(c in n for c in "/:@")]  # a bare tag: containerd names it import-DATE:TAG
        if partial := [n for n in named if normalized(n) != n]:
            raise InputError(f"{source}: containerd keeps an OCI archive's image names as written, and pods would "
                             f"look for {normalized(partial[0])}, not {partial[0]}: name it so when saving")
    else:  # docker save's: containerd completes them as the kubelet does
        named = [normalized(tag) for image in document for tag in image.get("RepoTags") or []]
    if not named:
        raise InputError(f"{source}: no image in it has a name pods could give (docker save IMAGE:TAG, or buildah "
                         "push IMAGE oci-archive:FILE:IMAGE)")
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / source.name
    staged = directory / f".{source.name}.tmp"
    shutil.copyfile(source, staged)
    os.replace(staged, target)
    return target, named


def archive(name: str, cache: Path) -> Path:
    """The cached OCI archive of one of IMAGES, built first if missing or made of other things than now."""
    repository, tag = name.removeprefix(f"{REGISTRY}/").rsplit(":", 1)
    target = cache / "images" / repository.replace("/", "_") / tag / "image.tar"
    key_file = target.with_name("key")
    recipe = _RECIPES[name]
    key = recipe.key()
    if target.is_file() and key_file.is_file() and key_file.read_text() == key:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as work:
        data = recipe.build(Path(work))
        staged = Path(work) / "image.tar"
        staged.write_bytes(data)
        os.replace(staged, target)  # only a complete archive is ever taken as built
        key_file.write_text(key)
    return target
