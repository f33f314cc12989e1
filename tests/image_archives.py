"""Image archives as tools other than wf write them, for the tests of `wf cluster image import`."""

from __future__ import annotations

import io
import json
import tarfile

from wf.cluster import images


def docker_save(tags: list[str], files: list[images.File]) -> bytes:
    """What `docker save` writes: manifest.json naming the config and layer files, RepoTags as the user wrote them."""
    rootfs = images.layer(files)
    config = json.dumps({"architecture": "amd64", "os": "linux", "config": {},
                         "rootfs": {"type": "layers", "diff_ids": [images._digest(rootfs)]}}).encode()
    manifest = json.dumps([{"Config": "config.json", "RepoTags": tags, "Layers": ["layer/layer.tar"]}]).encode()
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, data in (("manifest.json", manifest), ("config.json", config), ("layer/layer.tar", rootfs)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()
