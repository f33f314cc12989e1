"""Manifest size limits that a workflow meets only at submission or while it runs.

* Argo: the controller's `packer` measures `len(json.Marshal(workflow))` (the whole object, status
  included) and calls a workflow too large when that is greater than 1 MiB (1,048,576 bytes; the
  controller's `MAX_WORKFLOW_SIZE` environment variable can change it). Past the limit it first
  compresses `status.nodes`; a spec alone over the limit leaves no room for any status.
* etcd: a write larger than `--max-request-bytes` (default 1.5 MiB = 1,572,864 bytes, etcd
  `embed.DefaultMaxRequestBytes`) is refused, so the API server cannot store the object at all.
"""

from __future__ import annotations

from typing import Any

from wf.core.errors import Problem

ARGO_MAX_WORKFLOW_BYTES = 1024 * 1024
ARGO_MAX_WORKFLOW_SIZE_ENV = "MAX_WORKFLOW_SIZE"  # the controller's override of ARGO_MAX_WORKFLOW_BYTES (packer.go)
ETCD_MAX_REQUEST_BYTES = 1536 * 1024
# A compiled workflow holds every value of its job spec and more (each step becomes templates, retry expressions,
# pod patches: the examples compile to 3-4 times their size), so a spec file four times Argo's limit cannot fit
# even if half of it were comments. Refused from the file's size, before it is parsed: a 50 MB spec would
# otherwise take seconds and hundreds of MB to parse before the manifest's size could refuse it.
MAX_JOB_SPEC_BYTES = 4 * ARGO_MAX_WORKFLOW_BYTES

# Go's encoding/json escapes these for HTML safety, each taking six bytes (\u003c) instead of one.
_GO_ESCAPED = tuple(c.encode() for c in ("<", ">", "&", "\u2028", "\u2029"))


def json_size(manifest: Any) -> int:
    """Bytes of `manifest` as Go's json.Marshal writes it (compact, UTF-8, HTML-escaped). msgspec writes the
    same compact UTF-8 as Python's encoder, in a tenth of its time on a big DAG (4 MB: 10 ms against 110 ms);
    Go's HTML escapes are counted on top."""
    import msgspec

    data = msgspec.json.encode(manifest)
    return len(data) + sum(data.count(escaped) * (6 - len(escaped)) for escaped in _GO_ESCAPED)


def size_problems(manifest_json_bytes: int) -> list[Problem]:
    """Problems for a manifest whose compact JSON form is `manifest_json_bytes` long (empty when it fits)."""
    measured = f"manifest is {_bytes(manifest_json_bytes)} as JSON"
    problems = []
    if manifest_json_bytes > ETCD_MAX_REQUEST_BYTES:
        problems.append(Problem.at((),
            f"{measured}, over etcd's request limit of {_bytes(ETCD_MAX_REQUEST_BYTES)}: "
            "the API server cannot store it"
        ))
    if manifest_json_bytes > ARGO_MAX_WORKFLOW_BYTES:
        problems.append(Problem.at((),
            f"{measured}, over Argo's maximum workflow size of {_bytes(ARGO_MAX_WORKFLOW_BYTES)} (status "
            "included): split it into WorkflowTemplates referenced by templateRef"
        ))
    return problems


# What a step adds to a finished workflow's status, compressed as Argo stores it past its maximum size: a Retry node
# and its attempt's Pod node, inputs and archived log included (modelled by benchmarks/size.py: 141 bytes).
STATUS_BYTES_PER_STEP = 150
# A job this close to the steps its workflow holds is warned before it grows past them.
NEAR_STEP_LIMIT = 0.8
_POD_LEVEL = ("container", "script", "containerSet", "resource")  # a template whose node is one run of a step


def step_limit_problems(manifest: dict[str, Any], manifest_json_bytes: int) -> list[Problem]:
    """A warning for a workflow near or past the steps Argo's maximum size holds, its status included: a workflow
    whose spec fits can still outgrow it as its steps finish (Argo then fails it, unless its database holds the
    status)."""
    spec = manifest.get("spec") or {}
    spec = spec.get("workflowSpec") or spec  # a CronWorkflow's
    steps = sum(1 for t in spec.get("templates") or [] if isinstance(t, dict) and any(k in t for k in _POD_LEVEL))
    if not steps:
        return []
    per_step = manifest_json_bytes / steps  # the shared parts spread over the steps: an upper bound
    holds = int(ARGO_MAX_WORKFLOW_BYTES // (per_step + STATUS_BYTES_PER_STEP))
    if steps < NEAR_STEP_LIMIT * holds:
        return []
    advice = ("split the job before it grows past that" if steps <= holds else
              "as its steps finish it outgrows that and Argo fails it, unless Argo's database holds its node status "
              "(persistence.nodeStatusOffLoad): split the job")
    return [Problem.at((), (
        f"{steps:,} steps: Argo's maximum workflow size of {_bytes(ARGO_MAX_WORKFLOW_BYTES)}, status included, "
        f"holds about {holds:,} steps of a workflow like this one ({per_step:,.0f} bytes a step as compiled, about "
        f"{STATUS_BYTES_PER_STEP} more in its status once it ran); {advice}"), severity="warning")]


# Items one fan-out may hold before its status, compressed, outgrows Argo's maximum workflow size (measured on
# the local cluster with every pod's log archived: ~131 bytes an item compressed, the steps offloaded to the
# database between 7,531 and 7,970 items; without a database that is where the workflow ends in Error).
FANOUT_ITEMS_WITHOUT_OFFLOAD = 7_000


def fanout_problems(manifest: dict[str, Any]) -> list[Problem]:
    """Warnings for each literal fan-out (withItems, withSequence) too large to run without Argo's database."""
    spec = manifest.get("spec") or {}
    spec = spec.get("workflowSpec") or spec  # a CronWorkflow's
    out = []
    for template in spec.get("templates") or []:
        for task in (template.get("dag") or {}).get("tasks") or []:
            items = task.get("withItems")
            count = len(items) if isinstance(items, list) else int((task.get("withSequence") or {}).get("count") or 0)
            if count > FANOUT_ITEMS_WITHOUT_OFFLOAD:
                out.append(Problem.at((), (
                    f"step {task.get('name')!r} fans out to {count:,} items: past about "
                    f"{FANOUT_ITEMS_WITHOUT_OFFLOAD:,} a workflow's status outgrows Argo's maximum size even "
                    "compressed, and without Argo's database (persistence.nodeStatusOffLoad) the workflow ends in "
                    "Error; split the items over several jobs"), severity="warning"))
    return out


def job_spec_problems(spec_bytes: int) -> list[Problem]:
    """Problems for a job spec file `spec_bytes` long, known before it is parsed (empty when it may fit)."""
    if spec_bytes <= MAX_JOB_SPEC_BYTES:
        return []
    return [Problem.at((),
        f"job spec is {_bytes(spec_bytes)}, over {_bytes(MAX_JOB_SPEC_BYTES)}: its workflow cannot fit in Argo's "
        f"maximum workflow size of {_bytes(ARGO_MAX_WORKFLOW_BYTES)}; split the job, or keep long lists and texts "
        "in files the steps read (a forEach over a step's output)"
    )]


def _bytes(size: int) -> str:
    return f"{size:,} bytes ({size / (1024 * 1024):.2f} MiB)"
