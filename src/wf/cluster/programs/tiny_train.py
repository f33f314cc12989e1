"""A small training program that keeps wf's checkpoint contract, shipped in the local Python image as
/opt/wf-examples/tiny_train.py (examples/tiny-train.yaml runs it). Standard library only; it makes its own data.

  make-data   draws the true weights of a linear model and the trials to train (learning rate, seed), and writes
              them as JSON files: the job's outputs, which the next step fans out over and reads.
  train       fits the weights by minibatch SGD on data drawn from the truth and its seed. It saves a checkpoint
              to WF_CHECKPOINT_DIR (a directory) or WF_CHECKPOINT_URI (s3://: only the store AWS_ENDPOINT_URL
              names, never AWS by default, with the environment's AWS_* keys) every --save-every seconds and once
              more on SIGTERM, then exits 143; with WF_RESUME=true it continues from the last save. A step's
              minibatch depends only on the seed and the step's number, so a resumed run ends with the weights an
              uninterrupted one would.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import hmac
import json
import math
import os
import random
import signal
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

CHECKPOINT = "checkpoint.json"
SAMPLES = 256
BATCH = 16
NOISE = 0.01
SIGTERM_EXIT = 143  # 128 + SIGTERM: the shell's word for a program stopped by it


def make_data(args: argparse.Namespace) -> int:
    rng = random.Random(args.seed)
    truth = [round(rng.uniform(-2, 2), 3) for _ in range(args.features)]
    trials = [{"lr": str(lr), "seed": str(args.seed + i)} for i, lr in enumerate(args.learning_rates)]
    for path, value in ((args.truth_out, truth), (args.trials_out, trials)):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(value))
    print(f"truth {json.dumps(truth)}; {len(trials)} trials: {json.dumps(trials)}", flush=True)
    return 0


class Store:
    """One checkpoint object: a file in a directory, or an S3 object (path-style requests, Signature V4)."""

    def __init__(self, location: str) -> None:
        self.location = location.rstrip("/")
        self.endpoint = (os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or "").rstrip("/")
        if location.startswith("s3://"):
            if not self.endpoint:  # it may run where no traffic may leave: it goes only where it is pointed
                raise SystemExit(f"{location}: this program reaches an S3 store only through AWS_ENDPOINT_URL (or "
                                 "AWS_ENDPOINT_URL_S3), which is not set")
            bucket, _, prefix = location.removeprefix("s3://").partition("/")
            self.bucket, self.key = bucket, "/".join(p for p in (prefix.strip("/"), CHECKPOINT) if p)

    def load(self) -> dict[str, Any] | None:
        if not self.location.startswith("s3://"):
            path = Path(self.location) / CHECKPOINT
            return json.loads(path.read_text()) if path.is_file() else None
        try:
            return json.loads(self._s3("GET"))
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise

    def save(self, state: dict[str, Any]) -> None:
        data = json.dumps(state).encode()
        if self.location.startswith("s3://"):
            self._s3("PUT", data)  # an S3 PUT replaces the object whole: never half written
            return
        directory = Path(self.location)
        directory.mkdir(parents=True, exist_ok=True)
        staged = directory / (CHECKPOINT + ".tmp")
        staged.write_bytes(data)
        os.replace(staged, directory / CHECKPOINT)  # a reader sees the old save or the new one, whole

    def _s3(self, method: str, body: bytes = b"") -> bytes:
        region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
        path = "/" + urllib.parse.quote(f"{self.bucket}/{self.key}", safe="/-_.~")
        headers = {"x-amz-content-sha256": hashlib.sha256(body).hexdigest(),
                   "x-amz-date": datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")}
        key_id, secret = os.environ.get("AWS_ACCESS_KEY_ID"), os.environ.get("AWS_SECRET_ACCESS_KEY")
        if key_id and secret:
            headers["Authorization"] = _sigv4(method, urllib.parse.urlsplit(self.endpoint).netloc, path, headers,
                                              region, key_id, secret, os.environ.get("AWS_SESSION_TOKEN"))
        if method == "PUT":  # urllib's default would declare a form, which some servers then parse away
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(self.endpoint + path, data=body if method == "PUT" else None, method=method,
                                         headers=headers)
        with urllib.request.urlopen(request, timeout=30) as response:
            return bytes(response.read())


def _sigv4(method: str, host: str, path: str, headers: dict[str, str], region: str, key_id: str, secret: str,
           token: str | None) -> str:
    """AWS Signature Version 4 of one request without a query (adds host and the token to `headers`)."""
    headers["host"] = host
    if token:
        headers["x-amz-security-token"] = token
    stamp = headers["x-amz-date"]
    names = sorted(h.lower() for h in headers)
    lowered = {k.lower(): v.strip() for k, v in headers.items()}
    canonical = "\n".join([method, path, "", *(f"{n}:{lowered[n]}" for n in names), "", ";".join(names),
                           lowered["x-amz-content-sha256"]])
    scope = f"{stamp[:8]}/{region}/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = f"AWS4{secret}".encode()
    for part in (stamp[:8], region, "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    del headers["host"]  # urllib sends its own
    return f"AWS4-HMAC-SHA256 Credential={key_id}/{scope}, SignedHeaders={';'.join(names)}, Signature={signature}"


def _dataset(truth: list[float], seed: int) -> list[tuple[list[float], float]]:
    rng = random.Random(seed)
    rows = []
    for _ in range(SAMPLES):
        x = [rng.gauss(0, 1) for _ in truth]
        rows.append((x, sum(w * v for w, v in zip(truth, x, strict=True)) + rng.gauss(0, NOISE)))
    return rows


def _loss(weights: list[float], rows: list[tuple[list[float], float]]) -> float:
    return sum((sum(w * v for w, v in zip(weights, x, strict=True)) - y) ** 2 for x, y in rows) / len(rows)


def train(args: argparse.Namespace) -> int:
    truth = [float(w) for w in json.loads(args.truth)]
    rows = _dataset(truth, args.seed)
    location = os.environ.get("WF_CHECKPOINT_DIR") or os.environ.get("WF_CHECKPOINT_URI")
    store = Store(location) if location else None
    attempt = os.environ.get("WF_ATTEMPT", "0")
    weights, done = [0.0] * len(truth), 0
    if store is None:
        print("no WF_CHECKPOINT_DIR or WF_CHECKPOINT_URI: training without checkpoints", flush=True)
    elif os.environ.get("WF_RESUME") == "true" and (state := store.load()) is not None:
        weights, done = state["weights"], state["step"]
        print(f"attempt {attempt}: resumed at step {done} ({state['saved']} save) from {store.location}", flush=True)
    else:
        print(f"attempt {attempt}: starting from step 0; checkpoints go to {store.location}", flush=True)

    terminating: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, _frame: terminating.append(signum))

    def save(reason: str) -> None:
        if store is not None:
            store.save({"step": done, "weights": weights, "loss": _loss(weights, rows), "saved": reason})
            print(f"step {done}: saved checkpoint ({reason})", flush=True)

    last_save = time.monotonic()
    while done < args.steps and not terminating:
        batch = random.Random(args.seed * 1_000_003 + done).sample(rows, BATCH)
        gradient = [0.0] * len(weights)
        for x, y in batch:
            error = sum(w * v for w, v in zip(weights, x, strict=True)) - y
            for i, v in enumerate(x):
                gradient[i] += 2 * error * v / BATCH
        weights = [w - args.lr * g for w, g in zip(weights, gradient, strict=True)]
        done += 1
        time.sleep(args.step_seconds)  # the stand-in for real work, so a run lasts long enough to interrupt
        if done % args.log_every == 0:
            print(f"step {done}: loss {_loss(weights, rows):.6f}", flush=True)
        if time.monotonic() - last_save >= args.save_every and done < args.steps:
            save("periodic")
            last_save = time.monotonic()
    if terminating:
        save("SIGTERM")
        return SIGTERM_EXIT  # not done: the retry resumes from this save
    save("final")
    loss = _loss(weights, rows)
    distance = math.dist(weights, truth)
    print(f"done: {done} steps, loss {loss:.6f}, distance to the truth {distance:.4f}", flush=True)
    if args.loss_out:
        Path(args.loss_out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.loss_out).write_text(f"{loss:.6f}")
    if distance > args.tolerance:
        print(f"did not converge: distance {distance:.4f} > {args.tolerance}", file=sys.stderr, flush=True)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tiny_train", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    data = commands.add_parser("make-data", help="the true weights and the trials to train")
    data.add_argument("--features", type=int, default=4)
    data.add_argument("--seed", type=int, default=7)
    data.add_argument("--learning-rates", type=float, nargs="+", default=[0.05, 0.1])
    data.add_argument("--truth-out", required=True)
    data.add_argument("--trials-out", required=True)
    fit = commands.add_parser("train", help="fit the weights, checkpointing as wf's contract says")
    fit.add_argument("--truth", required=True, help="the true weights, a JSON list (make-data's output)")
    fit.add_argument("--lr", type=float, required=True)
    fit.add_argument("--seed", type=int, required=True)
    fit.add_argument("--steps", type=int, default=300)
    fit.add_argument("--step-seconds", type=float, default=0.05)
    fit.add_argument("--save-every", type=float, default=3.0, help="seconds between checkpoints")
    fit.add_argument("--log-every", type=int, default=50)
    fit.add_argument("--tolerance", type=float, default=0.05)
    fit.add_argument("--loss-out", help="a file for the final loss (a step output)")
    args = parser.parse_args(argv)
    return make_data(args) if args.command == "make-data" else train(args)


if __name__ == "__main__":
    sys.exit(main())
