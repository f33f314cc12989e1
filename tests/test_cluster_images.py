"""The local Python image's recipe: which Debian packages it holds, which of their files, laid out how, and when
the cached archive is built again."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from image_archives import docker_save
from wf.cluster import images

# `apt-cache depends --recurse --no-recommends ... python3` as apt prints it (bookworm, shortened).
DEPENDS = """\
python3
  PreDepends: python3-minimal
  Depends: python3.11
python3-minimal
  PreDepends: python3.11-minimal
  Depends: dpkg
python3.11
  Depends: python3.11-minimal
 |Depends: media-types
  Depends: mime-support
  Depends: <libfoo-abi>
    libfoo1
    libfoo2
python3.11-minimal
  PreDepends: libc6
  Depends: libreadline8
dpkg
  Depends: tar
media-types
mime-support
  Depends: mailcap
mailcap
  Depends: perl
libc6
  Depends: libgcc-s1
libgcc-s1
libreadline8
  Depends: readline-common
readline-common
 |Depends: dpkg
  Depends: install-info
libfoo1
<libfoo-abi>
"""


def test_the_closure_takes_each_alternatives_first_and_leaves_maintainer_script_tools_out() -> None:
    closure = images.dependency_closure(DEPENDS, ["python3"], frozenset({"dpkg", "install-info"}))
    assert closure == ["libc6", "libfoo1", "libgcc-s1", "libreadline8", "media-types", "python3", "python3-minimal",
                       "python3.11", "python3.11-minimal", "readline-common"]


def _deb_tar(entries: list[tarfile.TarInfo], data: dict[str, bytes]) -> list[tuple[tarfile.TarInfo, bytes | None]]:
    return [(info, data.get(info.name)) for info in entries]


def _info(name: str, kind: bytes = tarfile.REGTYPE, mode: int = 0o644, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.linkname = kind, mode, link
    return info


def test_a_packages_files_keep_modes_and_links_and_lose_documentation_but_the_copyright() -> None:
    entries = [_info("./", tarfile.DIRTYPE, 0o755), _info("./usr/bin/", tarfile.DIRTYPE, 0o755),
               _info("./usr/bin/python3.11", mode=0o755), _info("./usr/bin/pydoc", tarfile.LNKTYPE, 0o755,
                                                                "./usr/bin/python3.11"),
               _info("./usr/bin/python3", tarfile.SYMTYPE, 0o777, "python3.11"),
               _info("./usr/share/doc/python3.11/", tarfile.DIRTYPE, 0o755),
               _info("./usr/share/doc/python3.11/copyright"), _info("./usr/share/doc/python3.11/changelog.gz"),
               _info("./usr/share/man/man1/python3.11.1.gz"),
               _info("./usr/lib/python3/dist-packages/", tarfile.DIRTYPE, 0o755)]
    data = {"./usr/bin/python3.11": b"\x7fELF", "./usr/share/doc/python3.11/copyright": b"PSF",
            "./usr/share/doc/python3.11/changelog.gz": b"x", "./usr/share/man/man1/python3.11.1.gz": b"x"}
    files = {f.path: f for f in images.deb_files(_deb_tar(entries, data))}
    assert set(files) == {"/usr/bin", "/usr/bin/python3.11", "/usr/bin/pydoc", "/usr/bin/python3",
                          "/usr/share/doc/python3.11/copyright", "/usr/lib/python3/dist-packages"}
    assert files["/usr/bin/pydoc"].data == b"\x7fELF" and files["/usr/bin/pydoc"].mode == 0o755  # a copy
    assert files["/usr/bin/python3"].link == "python3.11"
    assert files["/usr/lib/python3/dist-packages"].directory  # an empty directory a package ships stays


def _layer_entries(files: list[images.File]) -> list[tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(images.layer(files))) as tar:
        return tar.getmembers()


def test_a_layer_holds_each_directory_once_before_what_it_holds_with_its_own_mode() -> None:
    files = [images.File("/usr/lib/x/y.so", b"so", 0o644), images.File("/tmp", mode=0o1777, directory=True),
             images.File("/usr/lib", mode=0o700, directory=True), images.File("/usr/lib-extra", b"e", 0o644)]
    entries = _layer_entries(files)
    names = [m.name for m in entries]
    assert names == ["tmp", "usr", "usr/lib", "usr/lib/x", "usr/lib/x/y.so", "usr/lib-extra"]
    modes = {m.name: m.mode for m in entries}
    assert modes["usr/lib"] == 0o700 and modes["usr"] == 0o755 and modes["tmp"] == 0o1777


def test_the_python_image_runs_as_nobody_unbuffered_writing_no_bytecode(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    files = [images.File("/usr/bin/python3", b"\x7fELF", 0o755)]
    monkeypatch.setattr(images, "_python_files", lambda work: files)
    archive = images._python_archive(tmp_path)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]
    [entry] = json.loads(members["index.json"])["manifests"]
    assert entry["annotations"]["io.containerd.image.name"] == images.PYTHON == "wf.local/python:3.11"
    manifest = json.loads(members[f"blobs/sha256/{entry['digest'].removeprefix('sha256:')}"])
    config = json.loads(members[f"blobs/sha256/{manifest['config']['digest'].removeprefix('sha256:')}"])["config"]
    assert config["User"] == "65534:65534" and config["Cmd"] == ["python3"]
    assert {"PYTHONUNBUFFERED=1", "PYTHONDONTWRITEBYTECODE=1"} <= set(config["Env"])


def test_the_cached_archive_is_built_again_when_what_it_is_made_of_changes(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[str] = []
    key = ["one"]

    def build(_: Path) -> bytes:
        built.append(key[0])
        return key[0].encode()

    monkeypatch.setitem(images._RECIPES, images.PYTHON, images._Recipe(lambda: key[0], build))
    first = images.archive(images.PYTHON, tmp_path)
    assert images.archive(images.PYTHON, tmp_path) == first and built == ["one"]  # cached
    key[0] = "two"
    assert images.archive(images.PYTHON, tmp_path).read_bytes() == b"two" and built == ["one", "two"]
    assert first == tmp_path / "images" / "python" / "3.11" / "image.tar"


def test_an_images_key_follows_apt_and_the_python_images_its_programs(monkeypatch: pytest.MonkeyPatch,
                                                                       tmp_path: Path) -> None:
    monkeypatch.setattr(images, "_APT_LISTS", tmp_path)
    before = {name: images._RECIPES[name].key() for name in (images.PYTHON, images.BUSYBOX)}
    (tmp_path / "deb.debian.org_debian_dists_bookworm_main_binary-amd64_Packages").write_text("Package: x\n")
    for name, key in before.items():  # apt's lists changed: the packages' versions may have
        assert images._RECIPES[name].key() != key, name
    programs = tmp_path / "programs"
    programs.mkdir()
    (programs / "train.py").write_text("print(1)\n")
    monkeypatch.setattr(images, "PROGRAMS", programs)
    key = images._RECIPES[images.PYTHON].key()
    (programs / "train.py").write_text("print(2)\n")
    assert images._RECIPES[images.PYTHON].key() != key


@pytest.mark.parametrize(("name", "as_pods_name_it"), [
    ("train:1", "docker.io/library/train:1"),
    ("team/train", "docker.io/team/train:latest"),
    ("ghcr.io/team/train:1", "ghcr.io/team/train:1"),
    ("localhost/train:1", "localhost/train:1"),
    ("localhost:5000/train", "localhost:5000/train:latest"),
    (f"ghcr.io/team/train@sha256:{'ab' * 32}", f"ghcr.io/team/train@sha256:{'ab' * 32}"),
])
def test_names_are_completed_as_the_kubelet_completes_them(name: str, as_pods_name_it: str) -> None:
    assert images.normalized(name) == as_pods_name_it


def test_a_users_archive_is_kept_under_its_name_with_the_names_pods_give_its_images(tmp_path: Path) -> None:
    from wf.core.errors import InputError

    source = tmp_path / "train.tar"
    source.write_bytes(images.oci_archive("ghcr.io/team/train:1", [images.File("/x", b"x")]))
    kept, names = images.keep_archive(source, tmp_path / "kept")
    assert kept == tmp_path / "kept" / "train.tar" and kept.read_bytes() == source.read_bytes()
    assert names == ["ghcr.io/team/train:1"]
    source.write_bytes(docker_save(["train:2", "team/train:2"], [images.File("/x", b"y")]))
    kept, names = images.keep_archive(source, tmp_path / "kept")
    assert kept.read_bytes() == source.read_bytes()  # replaced
    assert names == ["docker.io/library/train:2", "docker.io/team/train:2"]
    assert [p.name for p in (tmp_path / "kept").iterdir()] == ["train.tar"]

    bare = tmp_path / "bare.tar"
    bare.write_bytes(images.oci_archive("train:1", [images.File("/x", b"x")]))
    with pytest.raises(InputError, match="pods would look for docker.io/library/train:1, not train:1"):
        images.keep_archive(bare, tmp_path / "kept")
    untagged = tmp_path / "untagged.tar"
    untagged.write_bytes(docker_save([], [images.File("/x", b"x")]))
    with pytest.raises(InputError, match="untagged.tar: no image in it has a name"):
        images.keep_archive(untagged, tmp_path / "kept")
    text = tmp_path / "notes.tar"
    text.write_text("not a tar")
    with pytest.raises(InputError, match="notes.tar: not an image archive"):
        images.keep_archive(text, tmp_path / "kept")
    plain = tmp_path / "plain.tar"
    with tarfile.open(plain, "w") as tar:
        tar.addfile(tarfile.TarInfo("README"), io.BytesIO(b""))
    with pytest.raises(InputError, match="plain.tar: not an image archive: no index.json"):
        images.keep_archive(plain, tmp_path / "kept")
    assert [p.name for p in (tmp_path / "kept").iterdir()] == ["train.tar"]  # nothing refused was kept


def test_importing_into_a_cluster_without_real_nodes_says_how_to_start_one(tmp_path: Path) -> None:
    import subprocess
    import sys

    archive = tmp_path / "a.tar"
    archive.write_bytes(images.oci_archive("ghcr.io/team/a:1", [images.File("/x", b"x")]))
    env = {"PATH": "/usr/bin:/bin", "WF_DATA_HOME": str(tmp_path), "HOME": str(tmp_path),
           "PYTHONPATH": str(Path(images.__file__).parents[2])}
    proc = subprocess.run([sys.executable, "-m", "wf", "cluster", "image", "import", "--name", "none", str(archive)],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 3
    assert proc.stderr.strip() == ("error: cluster none has no real nodes, whose pods alone run images "
                                   "(wf cluster up --name none --real-nodes 1)")
