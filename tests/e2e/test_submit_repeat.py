"""Submitting again: the same `wf submit` with --skip-existing creates only what the first did not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from wf.controller.client import Kube
from wf.controller.submit import IDENTITY_LABEL
from wf.core.constants import WORKFLOW

from .conftest import ClusterHandle
from .test_controller_e2e import job_file, step, wf_cli

pytestmark = pytest.mark.cluster


def test_the_same_submit_with_skip_existing_creates_nothing_twice(local_cluster: ClusterHandle, kube: Kube,
                                                                  tmp_path: Path) -> None:
    folder = tmp_path / "jobs"
    folder.mkdir()
    for name in ("repeat-a", "repeat-b"):
        job_file(folder, name, [step("one")])
    first = wf_cli(local_cluster, "submit", str(folder), "-o", "json", "--context", local_cluster.context)
    assert first.returncode == 0, first.stderr
    created = json.loads(first.stdout)
    assert len(created["created"]) == 2 and not created["existing"]
    # Client-side names: the job's name and five characters of its submission.
    assert sorted(e["name"][:-6] for e in created["created"]) == ["repeat-a", "repeat-b"]
    again = wf_cli(local_cluster, "submit", str(folder), "--skip-existing", "-o", "json",
                   "--context", local_cluster.context)
    assert again.returncode == 0, again.stderr
    repeated = json.loads(again.stdout)
    assert not repeated["created"]
    assert sorted(e["name"] for e in repeated["existing"]) == sorted(e["name"] for e in created["created"])
    items = kube.custom.list_namespaced_custom_object(WORKFLOW.group, WORKFLOW.version, local_cluster.namespace,
                                                      WORKFLOW.plural, label_selector=IDENTITY_LABEL)["items"]
    names = {i["metadata"]["name"] for i in items}
    assert {e["name"] for e in created["created"]} <= names
    assert len([n for n in names if n.startswith("repeat-")]) == 2
