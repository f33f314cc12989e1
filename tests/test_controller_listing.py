"""Workflows listed a page at a time: whole, or decoded to what `wf list` shows of each (wf.controller.listing)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from controller_fakes import workflow
from wf.controller.client import DEFAULT_TIMEOUT, Kube
from wf.controller.listing import LISTING_PAGE, list_workflows, listing_page
from wf.core.constants import WORKFLOW
from wf.core.errors import ClusterError

RUN = json.loads((Path(__file__).parent / "controller_data" / "bert-large-pretrain-run.json").read_text())
SHOWN = {"metadata": ("name", "namespace", "creationTimestamp", "labels"),
         "status": ("phase", "progress", "startedAt", "finishedAt", "message")}


def _shown(whole: dict[str, Any]) -> dict[str, Any]:
    """What `wf list` reads of a whole workflow, taken from it field by field."""
    return {part: {k: v for k, v in whole[part].items() if k in SHOWN[part]} for part in SHOWN if part in whole}


def _page(items: list[dict[str, Any]] | None, token: str | None = None) -> bytes:
    metadata = {"resourceVersion": "7", **({"continue": token} if token else {})}
    return json.dumps({"apiVersion": WORKFLOW.api_version, "kind": "WorkflowList", "metadata": metadata,
                       "items": items}).encode()


def test_a_listing_page_holds_every_shown_field_of_each_workflow_and_nothing_else() -> None:
    finished = {**copy.deepcopy(RUN), "metadata": {**RUN["metadata"], "creationTimestamp": "2026-03-01T11:59:58Z"}}
    finished["status"].update(progress="5/5", message="child failed", estimatedDuration=60)
    running = workflow("bert-running")
    running["status"] = {"phase": "Running", "startedAt": "2026-03-01T12:00:00Z", "finishedAt": None,
                         "progress": "1/3", "nodes": running["status"]["nodes"]}
    created = workflow("bert-new")  # not yet seen by Argo's controller: no status at all
    del created["status"]
    items = [finished, running, created]

    page = listing_page(_page(items, token="next"))

    assert page["metadata"] == {"resourceVersion": "7", "continue": "next"}
    assert page["items"] == [_shown(w) for w in items]
    assert page["items"][1]["status"]["finishedAt"] is None  # a time not reached yet is null, as Argo writes it
    assert "nodes" not in page["items"][0]["status"] and "spec" not in page["items"][0]
    assert listing_page(_page(None)) == {"metadata": {"resourceVersion": "7"}, "items": None}


class PagedCustom:
    """The custom objects API answering lists a page at a time, as bytes (`_preload_content=False`)."""

    def __init__(self, *pages: bytes | BaseException) -> None:
        self.pages = list(pages)
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def _answer(self, verb: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        self.calls.append((verb, args, kwargs))
        page = self.pages.pop(0)
        if isinstance(page, BaseException):
            raise page
        return type("Response", (), {"data": page})()

    def list_namespaced_custom_object(self, *args: Any, **kwargs: Any) -> Any:
        return self._answer("namespaced", args, kwargs)

    def list_cluster_custom_object(self, *args: Any, **kwargs: Any) -> Any:
        return self._answer("cluster", args, kwargs)


class PagedKube(Kube):
    def __init__(self, custom: PagedCustom) -> None:
        super().__init__(api_client=None, namespace="wf", context="test", server="https://127.0.0.1:6443")
        self._custom = custom

    @property
    def custom(self) -> PagedCustom:
        return self._custom


def _created(name: str, when: str) -> dict[str, Any]:
    made = workflow(name)
    made["metadata"]["creationTimestamp"] = when
    return made


def test_wf_list_reads_every_page_newest_first_with_only_the_shown_fields() -> None:
    old, new, middle = (_created("a", "2026-03-01T10:00:00Z"), _created("b", "2026-03-01T12:00:00Z"),
                        _created("c", "2026-03-01T11:00:00Z"))
    custom = PagedCustom(_page([old, new], token="t1"), _page([middle]))

    listed = list_workflows(PagedKube(custom), label_selector="wf.dev/job=bert", listed_only=True)

    assert [w["metadata"]["name"] for w in listed] == ["b", "c", "a"]
    assert listed == [_shown(w) for w in (new, middle, old)]
    assert [(verb, args) for verb, args, _ in custom.calls] == [
        ("namespaced", (WORKFLOW.group, WORKFLOW.version, "wf", WORKFLOW.plural))] * 2
    assert [kwargs.get("_continue") for _, _, kwargs in custom.calls] == [None, "t1"]
    for _, _, kwargs in custom.calls:
        assert kwargs["limit"] == LISTING_PAGE and kwargs["label_selector"] == "wf.dev/job=bert"
        assert kwargs["_preload_content"] is False  # the bytes, not the client's own decoding
        assert kwargs["_request_timeout"] == DEFAULT_TIMEOUT  # an ordinary request's, not a watch's


def test_a_whole_list_of_every_namespace_keeps_each_workflow_whole() -> None:
    custom = PagedCustom(_page([RUN]))
    (listed,) = list_workflows(PagedKube(custom), all_namespaces=True)
    assert listed == RUN
    ((verb, args, kwargs),) = custom.calls
    assert verb == "cluster" and args == (WORKFLOW.group, WORKFLOW.version, WORKFLOW.plural)
    assert kwargs["limit"] == 500 and "label_selector" not in kwargs


def test_a_list_that_expires_between_its_pages_is_a_cluster_error() -> None:
    """The API server answers 410 to a continue token older than its compaction: the user lists again."""
    custom = PagedCustom(_page([workflow("a")], token="t1"), ApiException(status=410, reason="Expired"))
    with pytest.raises(ClusterError, match=r"listing workflows \(context test, namespace wf\): the list "
                                           r"expired while it was read \(Expired\): list again"):
        list_workflows(PagedKube(custom), listed_only=True)
