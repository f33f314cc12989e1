"""Creating workflows: compiled with the cluster's catalog, safe to retry, rate limited when there are many.

generateName makes a create non-idempotent: a POST whose answer was lost may or may not have created a
workflow. Each submission therefore carries a client-made `wf.dev/submission=<uuid>` label, and before any
re-create after a transient error we look that label up: one submission never yields two workflows.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from wf.controller.client import Kube, api_errors, is_transient
from wf.core.constants import ARGO_KINDS, CRON_WORKFLOW, DOMAIN, SUBMISSION_LABEL
from wf.core.errors import ClusterError, InputError

# Groups the workflows of one `wf submit` so `--watch` follows them all with one label-selected stream.
BATCH_LABEL = f"{DOMAIN}/batch"
JOB_SUFFIXES = (".yaml", ".yml")


@dataclass(frozen=True)
class Submitted:
    """One created (or server-validated, for a dry run) object."""

    kind: str
    name: str
    namespace: str
    submission: str
    source: str
    dry_run: bool
    manifest: dict[str, Any]  # as sent, named as the server named it (a dry run: as the server returned it)

    @property
    def batch(self) -> str | None:
        return (self.manifest.get("metadata") or {}).get("labels", {}).get(BATCH_LABEL)

    def light(self) -> Submitted:
        """The same submission holding only what a watch reads (name, namespace, batch): a watch of 250
        workflows should not keep 250 compiled manifests alive for hours."""
        return replace(self, manifest={"metadata": {"name": self.name, "labels": {BATCH_LABEL: self.batch}}})


class TokenBucket:
    """Client-side rate limit: `rate` requests a second on average, bursts of up to `burst`."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        if rate <= 0 or burst < 1:
            raise InputError(f"rate limit must be positive (got {rate}/s, burst {burst})")
        self.rate, self.burst = rate, burst
        self._clock, self._sleep = clock, sleep
        self._tokens = float(burst)
        self._at = clock()
        self._lock = threading.Lock()

    def acquire(self) -> None:
        with self._lock:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
            self._at = now
            if self._tokens < 1:
                wait = (1 - self._tokens) / self.rate
                self._sleep(wait)
                self._at = self._clock()
                self._tokens = 0.0
            else:
                self._tokens -= 1


def job_files(paths: list[str]) -> list[Path]:
    """The job files named, folders expanded to the *.yaml/*.yml files directly in them (sorted; like
    `kubectl apply -f DIR`, subfolders are not entered, so examples/ci/ and the like stay out)."""
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = sorted(p for p in path.glob("*") if p.suffix in JOB_SUFFIXES and p.is_file())
            if not found:
                raise InputError(f"no job files (*.yaml, *.yml) in folder {path}", file=path)
            files.extend(found)
        elif path.is_file():
            files.append(path)
        else:
            raise InputError("no such file or folder", file=path)
    return files


def parse_parameters(pairs: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise InputError(f"-p expects key=value, got {pair!r}")
        out[key] = value
    return out


def _spec_of(manifest: dict[str, Any]) -> dict[str, Any]:
    return manifest["spec"]["workflowSpec"] if manifest["kind"] == CRON_WORKFLOW.kind else manifest["spec"]


def set_parameters(manifest: dict[str, Any], values: dict[str, str], source: str) -> None:
    """Override declared workflow parameters; an undeclared one is an error naming the declared ones."""
    if not values:
        return
    declared = _spec_of(manifest).setdefault("arguments", {}).setdefault("parameters", [])
    by_name = {p["name"]: p for p in declared}
    unknown = sorted(set(values) - set(by_name))
    if unknown:
        known = ", ".join(sorted(by_name)) or "none"
        raise InputError(f"unknown parameter {', '.join(unknown)} (the job declares: {known})", file=source)
    for key, value in values.items():
        by_name[key]["value"] = value


def prepare(job: Any, catalog: Any, kube_namespace: str, namespace_flag: str | None,
            parameters: dict[str, str], batch: str) -> tuple[dict[str, Any], str, str]:
    """Compile one job (a TrainingJob) for submission: (manifest, namespace, submission id). Pure."""
    from wf.compile.workflow import compile_job

    path = job.source
    submission = str(uuid.uuid4())
    # Compiled for the namespace it will run in, so a job in a team's namespace gets its queue and priority;
    # a job that names only its team goes to the team's namespace, not the context's.
    target = job.metadata.namespace or namespace_flag or (None if job.spec.team else kube_namespace)
    manifest = compile_job(job, catalog, submission=submission, namespace=target)
    job_namespace = manifest["metadata"].get("namespace")
    if namespace_flag and job_namespace and namespace_flag != job_namespace:
        raise InputError(f"the job's namespace {job_namespace!r} does not match --namespace {namespace_flag!r}",
                         file=path)
    namespace = job_namespace or namespace_flag or kube_namespace
    manifest["metadata"]["namespace"] = namespace
    labels = manifest["metadata"].setdefault("labels", {})
    labels[SUBMISSION_LABEL] = submission
    labels[BATCH_LABEL] = batch
    set_parameters(manifest, parameters, str(path))
    return manifest, namespace, submission


def _retry_after(exc: BaseException, default: float) -> float:
    headers = getattr(exc, "headers", None) or {}
    try:
        return max(0.0, float(headers.get("Retry-After", default)))
    except (TypeError, ValueError):
        return default


def create(kube: Kube, manifest: dict[str, Any], *, dry_run: bool = False, attempts: int = 6,
           sleep: Callable[[float], None] = time.sleep) -> dict[str, Any]:
    """Create the object once, whatever the network does: after a transient failure look the submission up
    by its label before trying again, and never re-create while that lookup cannot be made."""
    namespace = manifest["metadata"]["namespace"]
    api = ARGO_KINDS[manifest["kind"]]
    submission = manifest["metadata"].get("labels", {}).get(SUBMISSION_LABEL)
    doing = f"creating a {manifest['kind']} in {namespace}"
    uncertain = False  # a create may have happened without our hearing about it
    delay = 0.5
    last: BaseException | None = None
    for _ in range(attempts):
        with api_errors(kube, doing, namespace):
            try:
                if uncertain and submission and not dry_run:
                    found = kube.custom.list_namespaced_custom_object(
                        api.group, api.version, namespace, api.plural,
                        label_selector=f"{SUBMISSION_LABEL}={submission}")
                    if found.get("items"):
                        return found["items"][0]
                kwargs = {"dry_run": "All"} if dry_run else {}
                return kube.custom.create_namespaced_custom_object(api.group, api.version, namespace, api.plural,
                                                                   manifest, **kwargs)
            except Exception as exc:
                if not is_transient(exc):
                    raise
                last, uncertain = exc, True
        sleep(_retry_after(last, delay))
        delay = min(delay * 2, 8.0)
    raise ClusterError(f"{doing}: the API server at {kube.server} kept failing ({last}); "
                       f"look for a workflow labelled {SUBMISSION_LABEL}={submission} before submitting again")


def load_jobs(sources: list[Any]) -> list[Any]:
    """TrainingJob objects as given; paths (files or folders) loaded."""
    from wf.spec.job import TrainingJob, load_job

    jobs: list[Any] = [s for s in sources if isinstance(s, TrainingJob)]
    paths = [str(s) for s in sources if not isinstance(s, TrainingJob)]
    return jobs + [load_job(p) for p in job_files(paths)] if paths else jobs


def submit_jobs(kube: Kube, jobs: list[Any], catalog: Any, *, namespace: str | None = None,
                parameters: dict[str, str] | None = None, dry_run: bool = False,
                rate: float = 20.0, burst: int = 40) -> list[Submitted]:
    """Compile every job first (bad input changes nothing), then create them under the rate limit."""
    batch = str(uuid.uuid4())
    prepared = [(job.source, *prepare(job, catalog, kube.namespace, namespace, parameters or {}, batch))
                for job in jobs]
    bucket = TokenBucket(rate, burst)
    out: list[Submitted] = []
    for source, manifest, ns, submission in prepared:
        bucket.acquire()
        created = create(kube, manifest, dry_run=dry_run)
        name = created["metadata"].get("name", "")
        if not dry_run:
            # The server's copy (defaults, managedFields) doubles a big submission's memory and tells the caller
            # nothing the manifest does not, once it carries the generated name.
            manifest["metadata"]["name"], created = name, manifest
        out.append(Submitted(manifest["kind"], name, ns, submission, str(source), dry_run, created))
    return out
