"""`wf lint --server`: what the API server itself says of each manifest, by dry run (nothing is persisted).

Workflows with only generateName are dry-run created; named objects are dry-run server-side applied, so one that
already exists is checked as an update instead of failing with AlreadyExists.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from wf.core.constants import ARGO_KINDS, CLUSTER_WORKFLOW_TEMPLATE
from wf.core.errors import Problem
from wf.core.loader import Document

if TYPE_CHECKING:
    from wf.controller.client import Kube

FIELD_MANAGER = "wf-lint"
# `Workflow.argoproj.io "x" is invalid: spec.templates[0].retryStrategy.retryPolicy: Unsupported value: ...`,
# or with several errors `... is invalid: [spec.podGC.strategy: Unsupported value: ..., <nil>: ...]`
_INVALID_FIELD = re.compile(r" is invalid: \[?([A-Za-z_][\w.\[\]-]*): ")
_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def field_path(message: str) -> tuple[str | int, ...]:
    """The path of the first field an API server validation message names, () when it names none."""
    match = _INVALID_FIELD.search(message)
    if not match:
        return ()
    return tuple(int(index) if index else name for name, index in _PART.findall(match.group(1)))


def server_problems(
    manifests: list[tuple[Document, dict[str, Any]]], kube: Kube, *, namespace: str | None = None,
) -> list[Problem]:
    """The API server's refusals of `manifests` (dry runs through `kube`), each located in its document."""
    from kubernetes.client.exceptions import ApiException

    from wf.controller.client import api_errors, server_message

    problems = []
    for doc, manifest in manifests:
        kind = manifest["kind"]
        api = ARGO_KINDS[kind]
        metadata = manifest.get("metadata") or {}
        ns = namespace or metadata.get("namespace") or kube.namespace
        name = metadata.get("name")
        # Refusals of the manifest are findings; anything else (unreachable, forbidden) is the cluster's error.
        with api_errors(kube, f"dry-run of {kind} from {doc.file}", ns):
            try:
                if api == CLUSTER_WORKFLOW_TEMPLATE:
                    kube.custom.patch_cluster_custom_object(
                        api.group, api.version, api.plural, name, manifest, dry_run="All", field_manager=FIELD_MANAGER,
                        force=True, _content_type="application/apply-patch+yaml")
                elif name:
                    kube.custom.patch_namespaced_custom_object(
                        api.group, api.version, ns, api.plural, name, manifest, dry_run="All",
                        field_manager=FIELD_MANAGER, force=True, _content_type="application/apply-patch+yaml")
                else:
                    kube.custom.create_namespaced_custom_object(api.group, api.version, ns, api.plural, manifest,
                                                                dry_run="All")
            except ApiException as exc:
                if exc.status not in (400, 404, 409, 422):
                    raise
                message = server_message(exc)
                # A hand-written manifest is the document itself, so the field the server names has a line there;
                # a compiled one only has the job spec's.
                path = field_path(message) if manifest is doc.data else ()
                problems.append(Problem(doc.file, doc.line_of(path), None,
                                        f"the API server ({kube.context}) rejects this {kind}: {message}"))
    return problems
