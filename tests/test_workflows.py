"""The platform's shared WorkflowTemplates in workflows/ are what their job specs compile to today."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from wf.compile.workflow import compile_job
from wf.jobspec.job import load_job
from wf.model.catalog import load_catalog

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted((ROOT / "workflows" / "src").glob("*.yaml"))


@pytest.mark.parametrize("source", SOURCES, ids=[s.stem for s in SOURCES])
def test_shared_template_is_current(source: Path) -> None:
    committed = yaml.safe_load((ROOT / "workflows" / source.name).read_text())
    compiled = compile_job(load_job(source), load_catalog(ROOT / "eksctl" / "catalog.yaml"), kind="WorkflowTemplate")
    assert committed == compiled, f"regenerate: wf compile {source.relative_to(ROOT)} --kind WorkflowTemplate"


def test_there_are_shared_templates() -> None:
    assert SOURCES
