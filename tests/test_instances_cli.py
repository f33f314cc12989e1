"""`wf instances list|refresh` as whole processes."""

from __future__ import annotations

import os
import subprocess
import sys


def wf(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wf", *args], capture_output=True, text=True, env=env, timeout=120)


def test_list_shows_a_family_with_its_source() -> None:
    result = wf("instances", "list", "dl1")
    assert result.returncode == 0, result.stderr
    assert "dl1.24xlarge" in result.stdout and "r5.4xlarge" not in result.stdout
    assert "8 gaudi" in result.stdout and "source:" in result.stdout


def test_refresh_without_aws_credentials_exits_3_without_a_traceback(tmp_path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env |= {"AWS_CONFIG_FILE": str(tmp_path / "none"), "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
            "AWS_EC2_METADATA_DISABLED": "true"}
    result = wf("instances", "refresh", "dl1.24xlarge", "--file", str(tmp_path / "table.csv"), env=env)
    assert result.returncode == 3, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr and "credentials" in result.stderr.lower()
    assert not (tmp_path / "table.csv").exists()
