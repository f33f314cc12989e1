"""The field an API server's validation message names, mapped back to a path in the manifest."""

from __future__ import annotations

import pytest

from wf.loader import parse_documents
from wf.server_lint import field_path

MANIFEST = """\
apiVersion: argoproj.io/v1alpha1
kind: WorkflowTemplate
metadata: {name: typo}
spec:
  templates:
    - name: main
      retryStrategy:
        retryPolicy: Sometimes
"""


@pytest.mark.parametrize("message, path", [
    ('WorkflowTemplate.argoproj.io "typo" is invalid: spec.templates[0].retryStrategy.retryPolicy: '
     'Unsupported value: "Sometimes": supported values: "Always", "OnFailure"',
     ("spec", "templates", 0, "retryStrategy", "retryPolicy")),
    ('Workflow.argoproj.io "x" is invalid: spec.podGC.strategy: Unsupported value: "OnPodSucess"',
     ("spec", "podGC", "strategy")),
    ('Workflow.argoproj.io "" is invalid: [spec.podGC.strategy: Unsupported value: "OnPodSucess", <nil>: '
     'Invalid value: "null": some validation rules were not checked because the object was invalid]',
     ("spec", "podGC", "strategy")),
    ('namespaces "team-x" not found', ()),
])
def test_field_path_of_a_server_message(message: str, path: tuple) -> None:
    assert field_path(message) == path


def test_the_path_finds_the_line_of_the_field() -> None:
    doc = parse_documents(MANIFEST, "t.yaml")[0]
    message = 'WorkflowTemplate.argoproj.io "typo" is invalid: spec.templates[0].retryStrategy.retryPolicy: bad'
    assert doc.line_of(field_path(message)) == 8
