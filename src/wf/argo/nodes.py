"""Where a Workflow keeps its node status: Argo's three forms of it (v4.0.7 workflow/packer, workflow/hydrator).

* `status.nodes`, the map node id -> node, while the whole object as Go's json.Marshal writes it is at most
  Argo's maximum workflow size (`ARGO_MAX_WORKFLOW_BYTES`, the controller's `MAX_WORKFLOW_SIZE`);
* past it, `status.compressedNodes`: the map's JSON gzipped and base64-encoded (util/file
  CompressEncodeString: standard alphabet, padded), with `nodes` dropped;
* still too large compressed, `status.offloadNodeStatusVersion`: the map is in Argo's database, the object
  holds neither. Only a controller configured with one (`persistence.nodeStatusOffLoad`) does that; without
  one the workflow ends in Error ("workflow is longer than maximum allowed size").

Every reader of a workflow's steps goes through `workflow_nodes`; a writer of status through `packed_status`,
which packs as the controller does, so a status is never held twice or left too large to store.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import json
import zlib
from collections.abc import Mapping
from typing import Any

from wf.argo.size import ARGO_MAX_WORKFLOW_BYTES, json_size
from wf.core.errors import InputError

Nodes = dict[str, dict[str, Any]]


class NodesOffloaded(InputError):
    """The workflow's node status is in Argo's database: the object alone does not tell its steps (Argo Server's
    GET of the workflow puts them back, wf.controller.archive)."""


def workflow_nodes(workflow: Mapping[str, Any]) -> Nodes:
    """The workflow's nodes map: `status.nodes` itself, or a new map decompressed from `status.compressedNodes`.
    Raises NodesOffloaded when they are in Argo's database, InputError when the compressed form is not Argo's."""
    status = workflow.get("status") or {}
    name = (workflow.get("metadata") or {}).get("name", "")
    if status.get("nodes"):
        nodes: Nodes = status["nodes"]
        return nodes
    if packed := status.get("compressedNodes"):
        try:
            unpacked = json.loads(gzip.decompress(base64.b64decode(packed, validate=True)))
        except (binascii.Error, OSError, EOFError, zlib.error, ValueError) as exc:
            unpacked = exc
        if not isinstance(unpacked, dict):
            found = unpacked if isinstance(unpacked, Exception) else f"a JSON {type(unpacked).__name__}"
            raise InputError(f"workflow {name}: status.compressedNodes is not a map of nodes in Argo's encoding "
                             f"(base64 of gzipped JSON): {found}")
        return unpacked
    if version := status.get("offloadNodeStatusVersion"):
        raise NodesOffloaded(
            f"steps of {name} offloaded to Argo's database (status.offloadNodeStatusVersion {version}): the "
            "Kubernetes API's object lacks them; wf reads them through Argo Server (--argo-server, WF_ARGO_SERVER, "
            "or the local cluster's)")
    return {}


def fnv32a(text: str) -> int:
    """Go's hash/fnv New32a of the text's UTF-8 bytes: Argo derives node ids and pod names from node names by it."""
    digest = 0x811C9DC5
    for byte in text.encode():
        digest = ((digest ^ byte) * 0x01000193) & 0xFFFFFFFF
    return digest


def node_id(workflow_name: str, node_name: str) -> str:
    """The id Argo gives the node of that name (Workflow.NodeID: the root node's is the workflow's name)."""
    return workflow_name if node_name == workflow_name else f"{workflow_name}-{fnv32a(node_name)}"


def offloaded(workflow: Mapping[str, Any]) -> bool:
    """Its nodes are in Argo's database only: Argo Server's GET of the workflow hydrates them."""
    status = workflow.get("status") or {}
    return bool(status.get("offloadNodeStatusVersion")) and not status.get("nodes") and \
        not status.get("compressedNodes")


def compress_nodes(nodes: Mapping[str, Any]) -> str:
    """`status.compressedNodes` for a nodes map, as the controller writes it (json.Marshal: compact, keys sorted;
    Go's gzip writers leave the header's time 0, so the same nodes always give the same text)."""
    text = json.dumps(nodes, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    return base64.b64encode(gzip.compress(text.encode("utf-8"), mtime=0)).decode("ascii")


def packed_status(workflow: Mapping[str, Any], nodes: Mapping[str, Any]) -> dict[str, Any]:
    """The workflow's status holding `nodes` the way the controller's Dehydrate would store it: the map as is while
    the workflow fits Argo's maximum size, compressed past it (Argo's own retry writes it back that way too)."""
    status = {k: v for k, v in (workflow.get("status") or {}).items()
              if k not in ("nodes", "compressedNodes", "offloadNodeStatusVersion")}
    status["nodes"] = dict(nodes)
    if json_size({**workflow, "status": status}) > ARGO_MAX_WORKFLOW_BYTES:
        status["compressedNodes"] = compress_nodes(status.pop("nodes"))
    return status
