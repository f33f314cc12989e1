"""Creating workflows: compiled with the cluster's catalog, safe to retry, rate limited when there are many.

Each workflow is named on the client, once per submission (the job's name and the start of the submission's
id), not by generateName: a POST whose answer was lost is sent again as it was, and the 409 it may then get is
read back: the object of that name carrying our `wf.dev/submission` label is the one an earlier attempt
created. One submission never yields two workflows.

A submit cut short (Ctrl-C, an API server that stays away, a refusal) raises SubmitInterrupted saying which
workflows were created, which may have been (a POST was on the wire) and which were never sent. Every workflow
also carries its job's identity (the compiled job and its file, hashed), so running the same command again
with `skip_existing` finds what the first run created and creates only the rest.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wf.controller.client import Kube, api_errors, cluster_error, is_transient
from wf.core.constants import ARGO_KINDS, CRON_WORKFLOW, DOMAIN, REAL_NODE_LABEL, SUBMISSION_LABEL
from wf.core.errors import ClusterError, InputError, WfError
from wf.core.loader import unreadable_character

if TYPE_CHECKING:
    from wf.compile.workflow import Kind

# Groups the workflows of one `wf submit` so `--watch` follows them all with one label-selected stream.
BATCH_LABEL = f"{DOMAIN}/batch"
# The compiled job and the file it came from, hashed: the same command run again finds its workflows by it.
IDENTITY_LABEL = f"{DOMAIN}/job-identity"
_NAME_SUFFIX = 5  # characters of the submission id after the job's name, as many as generateName adds
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
    manifest: dict[str, Any]  # as sent (a dry run: as the server returned it; an existing one: as it is)
    existing: bool = False  # created by an earlier run of the same submit (skip_existing), not by this one

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
        if bad := unreadable_character(pair):
            raise InputError(f"-p {key!r}: {bad} is not allowed in a parameter, as in a job file's text")
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


def job_identity(manifest: dict[str, Any], source: str) -> str:
    """The compiled job (parameters included) and its file, without what differs per submission."""
    meta = manifest["metadata"]
    per_submission = (SUBMISSION_LABEL, BATCH_LABEL, IDENTITY_LABEL)
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if k not in per_submission}
    kept = {k: v for k, v in meta.items() if k not in ("name", "generateName", "labels")}
    shape = {**manifest, "metadata": {**kept, "labels": labels}}
    return hashlib.sha256(json.dumps([source, shape], sort_keys=True).encode()).hexdigest()[:32]


def compile_for(job: Any, catalog: Any, kube_namespace: str, namespace_flag: str | None,
                kind: Kind | None = None) -> tuple[dict[str, Any], str]:
    """Compile one job (a TrainingJob) for the namespace it will live in and check it as `wf lint` would:
    (manifest, namespace). Pure. `wf submit` and `wf template create` both compile through here."""
    from wf.compile.workflow import compile_job
    from wf.lint.documents import check_compiled
    from wf.model.nodegroups import node_groups

    path = job.source
    # Compiled for the namespace it will run in, so a job in a team's namespace gets its queue and priority;
    # a job that names only its team goes to the team's namespace, not the context's.
    target = job.metadata.namespace or namespace_flag or (None if job.spec.team else kube_namespace)
    manifest = compile_job(job, catalog, namespace=target, kind=kind)
    if job.document is not None:  # from a file: refused as `wf compile` and `wf lint` refuse it
        found = check_compiled(manifest, job.document, catalog, node_groups(catalog))
        if errors := [p for p in found if p.severity == "error"]:
            raise InputError(errors)
    job_namespace = manifest["metadata"].get("namespace")
    if namespace_flag and job_namespace and namespace_flag != job_namespace:
        raise InputError(f"the job's namespace {job_namespace!r} does not match --namespace {namespace_flag!r}",
                         file=path)
    namespace = job_namespace or namespace_flag or kube_namespace
    manifest["metadata"]["namespace"] = namespace
    return manifest, namespace


def prepare(job: Any, catalog: Any, kube_namespace: str, namespace_flag: str | None,
            parameters: dict[str, str], batch: str, *, no_cache: bool = False,
            real_node_images: frozenset[str] = frozenset()) -> tuple[dict[str, Any], str, str]:
    """Compile one job (a TrainingJob) for submission: (manifest, namespace, submission id). Pure.
    `no_cache`: its cached steps run again and save their results afresh. `real_node_images`: the images only the
    cluster's real nodes hold (real_node_images), whose steps go there."""
    from wf.compile.cache import refreshed
    from wf.compile.placement import on_real_nodes

    path = job.source
    manifest, namespace = compile_for(job, catalog, kube_namespace, namespace_flag)
    on_real_nodes(manifest, real_node_images)
    if no_cache:
        refreshed(manifest)
    set_parameters(manifest, parameters, str(path))
    submission = as_submission(manifest, str(Path(path).resolve()) if isinstance(path, (str, Path)) else str(path),
                               batch)
    return manifest, namespace, submission


def check_parameters(jobs: list[Any], parameters: dict[str, str]) -> None:
    """Refuse -p values that make a path or an image of a job (TrainingJob objects) what its file may not hold,
    with the line of the field that reads each, before any cluster is reached: a value given on the command line
    passes the rules a value in the file does."""
    from wf.jobspec.job import parameter_problems

    problems = []
    for job in jobs:
        given = {k: v for k, v in parameters.items() if k in job.spec.parameters}
        doc = job.document
        problems += [doc.locate(p) if doc else p.in_file(str(job.source)) for p in parameter_problems(job.spec, given)]
    if problems:
        raise InputError(problems)


def client_names(prefix: str, submission: str) -> list[str]:
    """The names a submission may take, in order: the prefix and successive stretches of the submission id. Five
    hex characters are a million names: by the birthday bound, a few percent of 250-workflow submits meet a name
    another submission holds (CI met one), so such a name passes to the next, as the API server retries a
    generateName."""
    digits = submission.replace("-", "")
    return [prefix + digits[at:at + _NAME_SUFFIX] for at in range(0, len(digits) - _NAME_SUFFIX + 1, _NAME_SUFFIX)]


def client_name(prefix: str, submission: str) -> str:
    """A workflow's name chosen on the client, as generateName would: the prefix and the submission id's start."""
    return client_names(prefix, submission)[0]


def _next_name(name: str, submission: str | None) -> str | None:
    """The name after `name` among the submission's own names; None for a name the user chose or the last one."""
    names = client_names(name[:-_NAME_SUFFIX], submission or "")
    return names[names.index(name) + 1] if name in names[:-1] else None


def as_submission(manifest: dict[str, Any], source: str, batch: str) -> str:
    """Label a manifest as one submission of `batch` with its job's identity (from `source`), and name it on the
    client (its generateName and the submission id's start): the submission id. Pure."""
    submission = str(uuid.uuid4())
    identity = job_identity(manifest, source)
    labels = manifest["metadata"].setdefault("labels", {})
    labels[SUBMISSION_LABEL] = submission
    labels[BATCH_LABEL] = batch
    labels[IDENTITY_LABEL] = identity
    if prefix := manifest["metadata"].pop("generateName", None):
        manifest["metadata"] = {"name": client_name(prefix, submission), **manifest["metadata"]}
    return submission


def _retry_after(exc: BaseException, default: float) -> float:
    headers = getattr(exc, "headers", None) or {}
    try:
        return max(0.0, float(headers.get("Retry-After", default)))
    except (TypeError, ValueError):
        return default


class UncertainCreate(ClusterError):
    """A create whose outcome is unknown: a request may have created the object without our hearing of it."""


def _status(exc: BaseException) -> int | None:
    from kubernetes.client.exceptions import ApiException

    return exc.status if isinstance(exc, ApiException) else None


def create(kube: Kube, manifest: dict[str, Any], *, dry_run: bool = False, attempts: int = 6,
           sleep: Callable[[float], None] | None = None) -> dict[str, Any]:
    """Create the object once, whatever the network does: after a transient failure the same POST is sent
    again, and a 409 is read back (the object of that name with our submission label is ours)."""
    meta = manifest["metadata"]
    namespace = meta["namespace"]
    api = ARGO_KINDS[manifest["kind"]]
    submission = (meta.get("labels") or {}).get(SUBMISSION_LABEL)
    delay = 0.5
    last: BaseException | None = None  # the last transient failure: a request that may have been served
    sent = False  # whether any attempt reached the server (a refused connection never did)
    failures = 0
    while failures < attempts:
        name = meta["name"]
        doing = f"creating {manifest['kind']} {namespace}/{name}"
        with api_errors(kube, doing, namespace):
            try:
                try:
                    kwargs = {"dry_run": "All"} if dry_run else {}
                    return kube.custom.create_namespaced_custom_object(api.group, api.version, namespace,
                                                                       api.plural, manifest, **kwargs)
                except Exception as exc:
                    if _status(exc) != 409 or dry_run:
                        raise
                    existing = kube.custom.get_namespaced_custom_object(api.group, api.version, namespace,
                                                                        api.plural, name)
                    if (existing.get("metadata") or {}).get("labels", {}).get(SUBMISSION_LABEL) == submission:
                        return existing  # an earlier attempt created it: its answer was lost
                    if (renamed := _next_name(name, submission)) is None:
                        raise  # another submission's object of the user's name: "already exists"
                    # The names are the submission's own, in order, so a lost answer under the next one is still
                    # read back as ours.
                    meta["name"] = renamed
                    continue
            except Exception as exc:
                if is_transient(exc):
                    last = exc
                    sent = sent or not _never_sent(exc)
                elif sent:
                    raise UncertainCreate(f"{doing}: {exc} after an attempt whose outcome is unknown") from exc
                else:
                    raise
        failures += 1
        (sleep or time.sleep)(_retry_after(last, delay))
        delay = min(delay * 2, 8.0)
    reason = getattr(last, "reason", None) or last
    assert last is not None  # the loop ends only after transient failures
    if not sent:  # every attempt was refused at connect: nothing can exist
        raise cluster_error(last, kube, doing, namespace) from last
    raise UncertainCreate(f"{doing}: the API server at {kube.server} kept failing ({reason}); the workflow may "
                          "exist: run the same submit with --skip-existing to finish it")


def _never_sent(exc: BaseException) -> bool:
    """A request that never left this machine: its connection was refused or could not be made."""
    from urllib3.exceptions import MaxRetryError, NewConnectionError

    reason = exc.reason if isinstance(exc, MaxRetryError) else exc
    return isinstance(reason, (NewConnectionError, ConnectionRefusedError))


def find_existing(kube: Kube, manifest: dict[str, Any]) -> dict[str, Any] | None:
    """The object an earlier run of the same submit created for this job, if any."""
    meta = manifest["metadata"]
    api = ARGO_KINDS[manifest["kind"]]
    identity = meta["labels"][IDENTITY_LABEL]
    with api_errors(kube, f"looking for an earlier {manifest['kind']} of {meta['name']}", meta["namespace"]):
        found = kube.custom.list_namespaced_custom_object(api.group, api.version, meta["namespace"], api.plural,
                                                          label_selector=f"{IDENTITY_LABEL}={identity}", limit=1)
    items = found.get("items") or []
    return items[0] if items else None


@dataclass(frozen=True)
class Unsent:
    """A job whose workflow is not known to exist, under the name it was (or would have been) created with."""

    kind: str
    name: str
    namespace: str
    source: str


class SubmitInterrupted(WfError):
    """A submit cut short: what it created, what it may have created, what it never sent, and why it stopped."""

    def __init__(self, created: list[Submitted], uncertain: list[Unsent], refused: list[Unsent],
                 not_sent: list[Unsent], cause: BaseException) -> None:
        self.created, self.uncertain, self.refused, self.not_sent = created, uncertain, refused, not_sent
        self.cause = cause
        self.exit_code = 130 if isinstance(cause, KeyboardInterrupt) else getattr(cause, "exit_code", 1)
        reason = "interrupted" if isinstance(cause, KeyboardInterrupt) else str(cause)
        super().__init__(f"submit stopped ({reason}): {len(created)} created, {len(uncertain)} uncertain, "
                         f"{len(refused) + len(not_sent)} not created; `wf submit --skip-existing` with the same "
                         "files and flags creates only what is missing")


def accounting(done: list[Submitted], stopped: SubmitInterrupted | None = None) -> dict[str, Any]:
    """What a submit did, for programs (`wf submit -o json`): every job under what became of its workflow."""
    def entry(item: Submitted | Unsent) -> dict[str, str]:
        return {"kind": item.kind, "namespace": item.namespace, "name": item.name, "source": item.source}

    out: dict[str, Any] = {"created": [entry(s) for s in done if not s.existing],
                           "existing": [entry(s) for s in done if s.existing],
                           "uncertain": [], "refused": [], "notSent": []}
    if stopped is not None:
        out |= {"uncertain": [entry(u) for u in stopped.uncertain], "refused": [entry(u) for u in stopped.refused],
                "notSent": [entry(u) for u in stopped.not_sent], "error": str(stopped)}
    return out


def load_jobs(sources: list[Any]) -> list[Any]:
    """TrainingJob objects as given; paths (files or folders) loaded."""
    from wf.jobspec.job import TrainingJob, load_job
    from wf.lint.documents import refuse_oversized

    jobs: list[Any] = [s for s in sources if isinstance(s, TrainingJob)]
    paths = [str(s) for s in sources if not isinstance(s, TrainingJob)]
    files = job_files(paths) if paths else []
    for path in files:
        refuse_oversized(path)  # before any is parsed, as `wf compile` refuses it
    return jobs + [load_job(p) for p in files]


def real_node_images(kube: Kube) -> frozenset[str]:
    """The names of the images on the cluster's real nodes (the local cluster's, wf.cluster.realnode), which no
    registry serves; none where there are no such nodes (EKS) or this user may not list nodes."""
    from kubernetes.client.exceptions import ApiException

    with api_errors(kube, f"listing the nodes labelled {REAL_NODE_LABEL}"):
        try:
            nodes = kube.core.list_node(label_selector=REAL_NODE_LABEL).items
        except ApiException as exc:
            if exc.status == 403:  # a team's developer on EKS, where no node is real
                return frozenset()
            raise
    return frozenset(name for node in nodes if node.status for image in node.status.images or []
                     for name in image.names or [])


def submit_jobs(kube: Kube, jobs: list[Any], catalog: Any, *, namespace: str | None = None,
                parameters: dict[str, str] | None = None, dry_run: bool = False, skip_existing: bool = False,
                no_cache: bool = False, rate: float = 20.0, burst: int = 40) -> list[Submitted]:
    """Compile every job first (bad input changes nothing), then create them under the rate limit; with
    `skip_existing`, a job an earlier run of the same submit created is reported, not created again.
    SubmitInterrupted when it stops part way (Ctrl-C included)."""
    batch = str(uuid.uuid4())
    images = real_node_images(kube)
    prepared = [(str(job.source), *prepare(job, catalog, kube.namespace, namespace, parameters or {}, batch,
                                           no_cache=no_cache, real_node_images=images))
                for job in jobs]
    bucket = TokenBucket(rate, burst)
    out: list[Submitted] = []
    sending = False
    try:
        for source, manifest, ns, submission in prepared:
            bucket.acquire()
            if skip_existing and not dry_run and (found := find_existing(kube, manifest)) is not None:
                out.append(Submitted(manifest["kind"], found["metadata"]["name"], ns, submission, source, False,
                                     found, existing=True))
                continue
            sending = True
            created = create(kube, manifest, dry_run=dry_run)
            sending = False
            # The server's copy (defaults, managedFields) doubles a big submission's memory and tells the caller
            # nothing the manifest does not.
            out.append(Submitted(manifest["kind"], created["metadata"].get("name", ""), ns, submission, source,
                                 dry_run, created if dry_run else manifest))
    except (WfError, KeyboardInterrupt) as exc:
        def unsent(entry: tuple[str, dict[str, Any], str, str]) -> Unsent:
            return Unsent(entry[1]["kind"], entry[1]["metadata"]["name"], entry[2], entry[0])

        rest = [unsent(e) for e in prepared[len(out):]]
        in_flight, rest = (rest[:1], rest[1:]) if sending else ([], rest)
        maybe = isinstance(exc, (KeyboardInterrupt, UncertainCreate))
        raise SubmitInterrupted(out, in_flight if maybe else [], [] if maybe else in_flight, rest, exc) from exc
    return out
