"""Workflows listed a page at a time through the Kubernetes API, whole or as what `wf list` shows of each.

Kept apart from the other operations on workflows (`ops`), which read their steps: `wf list` starts without
importing the step views and, through them, the compiler and the catalog's models.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator
from typing import Any, TypedDict

from wf.controller.client import DEFAULT_TIMEOUT, Kube, api_errors
from wf.controller.stream import Gone, KubeTransport
from wf.core.constants import WORKFLOW
from wf.core.errors import ClusterError

LISTING_PAGE = 100  # workflows a listing reads at once: their JSON held, only the listed fields decoded


class ListedMetadata(TypedDict, total=False):
    """What `wf list` shows of a workflow's metadata; the API server validates these for every object."""

    name: str
    namespace: str
    creationTimestamp: str
    labels: dict[str, str]


class ListedStatus(TypedDict, total=False):
    """What `wf list` shows of a workflow's status, as the controller wrote it (Argo's minimal CRD has no schema,
    so the values are taken as they come; a time not yet reached is null)."""

    phase: Any
    progress: Any
    startedAt: Any
    finishedAt: Any
    message: Any


class ListedWorkflow(TypedDict, total=False):
    metadata: ListedMetadata
    status: ListedStatus | None


class ListedPage(TypedDict, total=False):
    metadata: dict[str, Any]
    items: list[ListedWorkflow] | None


def list_workflows(kube: Kube, namespace: str | None = None, *, all_namespaces: bool = False,
                   label_selector: str = "", listed_only: bool = False) -> list[dict[str, Any]]:
    """Workflows, newest first; with `listed_only`, each as what `wf list` shows of it (`listing_page`: a day's
    thousand workflows of 32 steps are 120 MB of JSON, their nodes five times that as Python objects)."""
    if listed_only:
        items = list(iter_workflows(kube, namespace, all_namespaces=all_namespaces, label_selector=label_selector,
                                    page=LISTING_PAGE, decode=listing_page))
    else:
        items = list(iter_workflows(kube, namespace, all_namespaces=all_namespaces, label_selector=label_selector))
    items.sort(key=lambda w: w["metadata"].get("creationTimestamp", ""), reverse=True)
    return items


@functools.cache
def _listing_decoder() -> Any:
    import msgspec

    return msgspec.json.Decoder(ListedPage)


def listing_page(data: bytes) -> dict[str, Any]:
    """A page of a workflow list, its JSON, decoded to what `wf list` shows of each workflow (ListedWorkflow)
    (pure). msgspec skips every other field as it scans, building no object for it: a page of 100 of the day's
    workflows (12 MB, their nodes and templates) decodes in a twentieth of `json.loads`'s time."""
    page: dict[str, Any] = _listing_decoder().decode(data)
    return page


def iter_workflows(kube: Kube, namespace: str | None = None, *, all_namespaces: bool = False,
                   label_selector: str = "", page: int = 500,
                   decode: Callable[[bytes], dict[str, Any]] = json.loads) -> Iterator[dict[str, Any]]:
    """Workflows a page at a time, in the API server's order: a caller that keeps a digest of each (`wf report`)
    holds one page of whole objects, not all of them; `decode` reads a page (`listing_page`: the listed fields)."""
    ns = namespace or kube.namespace
    if all_namespaces:
        list_call = functools.partial(kube.custom.list_cluster_custom_object, WORKFLOW.group, WORKFLOW.version,
                                      WORKFLOW.plural)
    else:
        list_call = functools.partial(kube.custom.list_namespaced_custom_object, WORKFLOW.group, WORKFLOW.version,
                                      ns, WORKFLOW.plural)
    where = None if all_namespaces else ns
    with api_errors(kube, "listing workflows", where):
        try:
            # An ordinary request's read timeout, not a watch's silence bound: a dead server is an error here.
            pages = KubeTransport(list_call, label_selector, silence=DEFAULT_TIMEOUT[1], page=page, decode=decode)
            for items, _ in pages.pages():
                items.reverse()
                while items:
                    yield items.pop()  # handed over: what the caller keeps of it is all that stays
        except Gone as exc:  # the list's continue token expired between two pages
            raise ClusterError(f"listing workflows ({kube.where(where)}): the list expired while it was read "
                               f"({exc}): list again") from None
