"""The example training program the local Python image carries (examples/tiny-train.yaml), run as a step runs it:
a process with wf's checkpoint environment, stopped by SIGTERM and started again with WF_RESUME."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from wf.cluster import images

PROGRAM = images.PROGRAMS / "tiny_train.py"
TRUTH = "[0.5, -1.25, 2.0]"


def _run(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    argv = [sys.executable, str(PROGRAM), "train", "--truth", TRUTH, "--lr", "0.05", "--seed", "3", *args]
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("WF_", "AWS_"))}
    return subprocess.Popen(argv, env={**clean, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _stop_after_a_save(proc: subprocess.Popen[str]) -> list[str]:
    """Lines up to the first periodic save, then SIGTERM; every line printed."""
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line.rstrip())
        if "saved checkpoint (periodic)" in line:
            proc.send_signal(signal.SIGTERM)
            break
    out, _ = proc.communicate(timeout=30)
    return lines + out.splitlines()


SLOW = ("--steps", "400", "--step-seconds", "0.01", "--save-every", "0.5")


def test_sigterm_saves_once_more_exits_143_and_the_resumed_run_ends_where_an_uninterrupted_one_does(
        tmp_path: Path) -> None:
    interrupted, whole = tmp_path / "interrupted", tmp_path / "whole"
    proc = _run({"WF_CHECKPOINT_DIR": str(interrupted), "WF_RESUME": "false"}, *SLOW)
    lines = _stop_after_a_save(proc)
    assert proc.returncode == 143
    assert lines[-1].endswith("saved checkpoint (SIGTERM)"), lines
    stopped_at = int(lines[-1].split()[1].rstrip(":"))
    saved = json.loads((interrupted / "checkpoint.json").read_text())
    assert 0 < stopped_at < 400 and saved["step"] == stopped_at and saved["saved"] == "SIGTERM"
    assert not (interrupted / "checkpoint.json.tmp").exists()

    resumed = _run({"WF_CHECKPOINT_DIR": str(interrupted), "WF_RESUME": "true", "WF_ATTEMPT": "1"}, *SLOW,
                   "--loss-out", str(tmp_path / "loss"))
    out, err = resumed.communicate(timeout=60)
    assert resumed.returncode == 0, err
    assert out.splitlines()[0] == f"attempt 1: resumed at step {stopped_at} (SIGTERM save) from {interrupted}"
    assert "distance to the truth" in out.splitlines()[-1]

    uninterrupted = _run({"WF_CHECKPOINT_DIR": str(whole)}, "--steps", "400", "--step-seconds", "0")
    assert uninterrupted.wait(timeout=60) == 0
    final = json.loads((interrupted / "checkpoint.json").read_text())
    assert final["step"] == 400
    assert final["weights"] == json.loads((whole / "checkpoint.json").read_text())["weights"]
    assert float((tmp_path / "loss").read_text()) == pytest.approx(final["loss"], abs=1e-6)


def test_the_first_attempt_starts_over_even_where_a_checkpoint_is(tmp_path: Path) -> None:
    (tmp_path / "checkpoint.json").write_text(json.dumps({"step": 399, "weights": [9, 9, 9], "loss": 1}))
    proc = _run({"WF_CHECKPOINT_DIR": str(tmp_path), "WF_RESUME": "false"}, "--steps", "200", "--step-seconds", "0")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out.splitlines()[0].startswith("attempt 0: starting from step 0")
    assert json.loads((tmp_path / "checkpoint.json").read_text())["step"] == 200


def test_a_run_that_does_not_converge_fails() -> None:
    proc = _run({}, "--steps", "2", "--step-seconds", "0")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1 and "did not converge" in err
    assert out.startswith("no WF_CHECKPOINT_DIR or WF_CHECKPOINT_URI")


def test_an_s3_location_without_an_endpoint_is_refused_before_any_request() -> None:
    proc = _run({"WF_CHECKPOINT_URI": "s3://bucket/checkpoints/x", "AWS_ACCESS_KEY_ID": "k"}, "--steps", "1")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert err.strip() == ("s3://bucket/checkpoints/x: this program reaches an S3 store only through "
                           "AWS_ENDPOINT_URL (or AWS_ENDPOINT_URL_S3), which is not set")


def test_make_data_writes_the_truth_and_the_trials_a_fan_out_reads(tmp_path: Path) -> None:
    argv = [sys.executable, str(PROGRAM), "make-data", "--features", "3", "--learning-rates", "0.05", "0.1",
            "--truth-out", str(tmp_path / "truth.json"), "--trials-out", str(tmp_path / "trials.json")]
    subprocess.run(argv, check=True, capture_output=True)
    assert len(json.loads((tmp_path / "truth.json").read_text())) == 3
    assert json.loads((tmp_path / "trials.json").read_text()) == [{"lr": "0.05", "seed": "7"},
                                                                   {"lr": "0.1", "seed": "8"}]


def _program() -> ModuleType:
    spec = importlib.util.spec_from_file_location("tiny_train", PROGRAM)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_its_s3_signature_is_botocores() -> None:
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    request = AWSRequest(method="PUT", url="http://127.0.0.1:9000/bucket/a%20b/checkpoint.json", data=b"{}")
    S3SigV4Auth(Credentials("AKID", "SECRET", "TOKEN"), "s3", "eu-west-1").add_auth(request)
    headers = {"x-amz-content-sha256": request.headers["X-Amz-Content-SHA256"],
               "x-amz-date": request.headers["X-Amz-Date"]}
    ours = _program()._sigv4("PUT", "127.0.0.1:9000", "/bucket/a%20b/checkpoint.json", headers, "eu-west-1", "AKID",
                             "SECRET", "TOKEN")
    assert ours == request.headers["Authorization"]
    assert headers["x-amz-security-token"] == "TOKEN"


@pytest.fixture
def s3_endpoint() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


def test_checkpoints_in_s3_survive_a_sigterm_and_resume(s3_endpoint: str) -> None:
    import boto3

    s3 = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1", aws_access_key_id="k",
                      aws_secret_access_key="s")
    s3.create_bucket(Bucket="artifacts")
    env = {"WF_CHECKPOINT_URI": "s3://artifacts/checkpoints/wf/tiny-train-x/train/0123abcd", "WF_RESUME": "false",
           "AWS_ENDPOINT_URL": s3_endpoint, "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"}

    def load() -> dict[str, Any]:
        body = s3.get_object(Bucket="artifacts", Key="checkpoints/wf/tiny-train-x/train/0123abcd/checkpoint.json")
        return json.loads(body["Body"].read())  # type: ignore[no-any-return]

    proc = _run(env, *SLOW)
    lines = _stop_after_a_save(proc)
    assert proc.returncode == 143 and lines[-1].endswith("saved checkpoint (SIGTERM)"), lines
    stopped_at = int(lines[-1].split()[1].rstrip(":"))
    assert load()["step"] == stopped_at
    resumed = _run({**env, "WF_RESUME": "true", "WF_ATTEMPT": "1"}, *SLOW)
    out, err = resumed.communicate(timeout=60)
    assert resumed.returncode == 0, err
    assert out.splitlines()[0].startswith(f"attempt 1: resumed at step {stopped_at} (SIGTERM save) from s3://artifacts/")
    assert load()["step"] == 400
