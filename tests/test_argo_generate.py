"""The committed field table is exactly what the generator derives from the installed hera."""

from __future__ import annotations

import json

from wf.argo import generate
from wf.argo.schema import TABLE_PATH


def test_committed_table_matches_installed_hera() -> None:
    expected = generate.render(generate.generate())
    assert TABLE_PATH.read_text(encoding="utf-8") == expected, (
        "src/wf/argo/fields.json is stale: run `python -m wf.argo.generate` and commit the result"
    )


def test_table_covers_the_four_kinds_and_is_plain_json() -> None:
    table = json.loads(TABLE_PATH.read_text(encoding="utf-8"))
    assert set(table["kinds"]) == {"Workflow", "WorkflowTemplate", "ClusterWorkflowTemplate", "CronWorkflow"}
    assert "Argo Workflows v4.0.5" in table["source"]
    template = table["models"]["io.argoproj.workflow.v1alpha1.Template"]["fields"]
    # Spot checks of what hera's models say (aliases, kinds of types, the free-form places).
    assert template["podSpecPatch"] == "string"
    assert template["plugin"] == "object"
    assert template["retryStrategy"] == "@io.argoproj.workflow.v1alpha1.RetryStrategy"
    step = table["models"]["io.argoproj.workflow.v1alpha1.WorkflowStep"]["fields"]
    assert step["withItems"] == ["list", "any"]
    resources = table["models"]["io.k8s.api.core.v1.ResourceRequirements"]["fields"]
    assert resources["limits"] == ["map", "quantity"]
    assert table["models"]["io.argoproj.workflow.v1alpha1.RetryStrategy"]["fields"]["limit"] == "int-or-string"
    assert table["models"]["io.argoproj.workflow.v1alpha1.NoneStrategy"] == {"fields": {}, "required": []}


def test_importing_wf_argo_loads_neither_hera_nor_pydantic() -> None:
    import subprocess
    import sys

    code = (
        "import sys, wf.argo; wf.argo.validate({'kind': 'Workflow'}); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('hera', 'pydantic')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
