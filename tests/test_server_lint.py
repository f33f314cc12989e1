"""The field an API server's validation message names, mapped back to a path in the manifest."""

from __future__ import annotations

import pytest

from wf.controller.server_lint import field_path
from wf.core.loader import parse_documents

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


def test_an_unreachable_api_server_is_exit_3_not_a_finding(tmp_path) -> None:
    import os
    import subprocess
    import sys
    from pathlib import Path

    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: dead\n"
        "clusters: [{name: dead, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: not-a-secret}}]\n"
        "contexts: [{name: dead, context: {cluster: dead, user: u, namespace: wf}}]\n")
    kubeconfig.chmod(0o600)
    examples = Path(__file__).resolve().parents[1] / "examples"
    result = subprocess.run([sys.executable, "-m", "wf", "lint", "--server", str(examples)], capture_output=True,
                            text=True, timeout=60, env={**os.environ, "KUBECONFIG": str(kubeconfig)})
    assert result.returncode == 3, result.stdout + result.stderr
    assert "cannot reach the API server" in result.stderr and "Traceback" not in result.stderr
    assert "not-a-secret" not in result.stdout + result.stderr
