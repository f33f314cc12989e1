"""The step cache: a step with `cache:` compiles to Argo's memoization (a template's `memoize`), so a later run
whose step has the same key creates no pod and hands its later steps the outputs the earlier run saved.

Which template. The pod-level one, the template the step's kind renders (the pod, or a multi-node step's
resource template). Argo v4.0 (v4.0.5 to v4.0.7) looks the key up before it creates that template's node
(workflow/controller/operator.go, executeTemplate): a hit is a node of the template's type (Retry: wf's pod
templates retry interruptions) that has Succeeded with the saved outputs and has no children, so no pod and no
retry; a miss runs as ever, and the attempt whose pod succeeds saves its outputs (podReconciliation). The
application-retry and fan-out wrappers (wf.compile.workflow) stay above it and read the node's outputs as they
read a run's, so outputs flow on through them unchanged, and each fan-out item is an entry of its own (its item
is one of its inputs). Memoizing the outermost wrapper instead would make a capped fan-out's items one entry.

The key. Argo's ConfigMap cache takes only keys matching ^[a-zA-Z0-9][-a-zA-Z0-9]*$
(workflow/controller/cache/cache.go), so the key is a SHA-256 in hex: of a digest made here of what is fixed
when the job compiles (below), and, when the step reads values at run time, of those values as Argo resolves
them, through an expression tag (`{{=sprig.sha256sum(toJson([...]))}}`, evaluated in the template's input pass;
inputs are read with brackets, `inputs.parameters['item']`, so a name is never taken for one of the
variables Argo treats apart, such as `item`). Never in it: the run's name, uid or time, the attempt, the pod.

Artifacts. Argo gives a template an input artifact's path, not what identifies the object, so a key cannot
tell one run's artifact from another's. A cached step may read an artifact only from a cached step whose own
key is fixed at compile time but for job parameters: then that step's key material stands in for the artifact
(the same key: the same saved artifact; another: the producer ran again). Anything else is refused.

Where. Argo v4.0 keeps every memoization ConfigMap in its controller's namespace (cache.go's factory takes
the controller's), so each workflow namespace gets its own there, `wf-step-cache-NAMESPACE`: one team's
entries never answer another's lookups and each has its own 1 MiB. Entries older than the catalog's
`cache.maxAge` are ignored and replaced by the next run's.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from wf.core.constants import STEP_CACHE_PREFIX
from wf.core.errors import PathKey, Problem
from wf.jobspec import references
from wf.jobspec.job import TrainingJob
from wf.jobspec.references import Reference
from wf.jobspec.steps import SecretRef, Step, StepCache
from wf.model.catalog import Catalog

# Bumped when what goes into the digest changes, so entries saved under the old rule are never taken.
_FORMAT = "wf-step-cache/1"
# `wf submit --no-cache`: every entry is too old, so each cached step runs and saves its result afresh.
REFRESH_MAX_AGE = "0s"
# Argo resolves `{{workflow.namespace}}` in the whole template, memoize included (workflow/common/util.go).
CONFIGMAP = STEP_CACHE_PREFIX + "-{{workflow.namespace}}"


def cache_of(job: TrainingJob, step: Step) -> StepCache | None:
    """The step's cache: its own, else the job's for the job's steps (an exit handler runs for the run's outcome,
    so it is cached only when it says so); `cache: false` turns it off."""
    # Asked of the (few) exit handlers, not the steps: once per step, a scan of the steps would be quadratic.
    chosen = step.cache if step.cache is not None else (
        None if any(s is step for s in job.spec.on_exit) else job.spec.cache)
    if chosen is None or chosen is False:
        return None
    return StepCache() if chosen is True else chosen


def problems(job: TrainingJob, path: tuple[PathKey, ...], step: Step, refs: list[Reference],
             producers: dict[str, Step]) -> list[Problem]:
    """What keeps a cached step's key from telling its results apart: an artifact it reads that Argo cannot
    identify (see the module's docstring). Its `key` is checked with the job's references
    (wf.jobspec.references)."""
    if cache_of(job, step) is None:
        return []
    out: list[Problem] = []
    at = (*path, "cache") if step.cache is not None else ("spec", "cache")
    for ref in refs:
        if (ref.kind == "output" and ref.name in producers[ref.step].declared.artifacts
                and (why := _unkeyable(job, producers[ref.step], producers, set()))):
            out.append(Problem.at(at, f"{ref.text} is an artifact, which Argo's cache key cannot identify "
                                      f"by itself: {why}"))
    return out


def _unkeyable(job: TrainingJob, producer: Step, producers: dict[str, Step], seen: set[str]) -> str | None:
    """Why `producer`'s key cannot stand in for its artifacts in a reader's key, or None when it can."""
    if cache_of(job, producer) is None:
        return f"cache step {producer.name!r} too, so its key stands for its artifacts, or read a parameter"
    seen.add(producer.name)
    for ref in references.step_inputs(producer):
        if ref.kind == "item" or ref.name not in producers[ref.step].declared.artifacts:
            return (f"step {producer.name!r} reads {ref.text}, a value known only when it runs; a cached step may "
                    "read artifacts only of cached steps that read nothing from other steps but their artifacts")
        if ref.step not in seen and (why := _unkeyable(job, producers[ref.step], producers, seen)):
            return why
    return None


def memoize(job: TrainingJob, step: Step, refs: list[Reference], producers: dict[str, Step], catalog: Catalog
            ) -> dict[str, Any] | None:
    """The `memoize` of the step's pod-level template, or None when the step is not cached."""
    if cache_of(job, step) is None:
        return None
    static: list[Any] = [_FORMAT]
    parameters: list[str] = []
    _material(job, step, catalog, producers, static, parameters, set())
    runtime = [f"workflow.parameters['{name}']" for name in dict.fromkeys(parameters)]
    runtime += [f"inputs.parameters['{ref.input_name}']" for ref in refs
                if not (ref.kind == "output" and ref.name in producers[ref.step].declared.artifacts)]
    digest = hashlib.sha256(json.dumps(static, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    key = digest if not runtime else \
        "{{=sprig.sha256sum(toJson(['" + digest + "', " + ", ".join(runtime) + "]))}}"
    return {"key": key, "maxAge": f"{catalog.cache.max_age_seconds}s", "cache": {"configMap": {"name": CONFIGMAP}}}


def _material(job: TrainingJob, step: Step, catalog: Catalog, producers: dict[str, Step], static: list[Any],
              parameters: list[str], seen: set[str]) -> None:
    """What determines the step's result: fixed parts into `static`, the job parameters it reads into
    `parameters`; then the same of each cached step whose artifacts it reads (they stand for the artifacts)."""
    seen.add(step.name)
    cache = cache_of(job, step)
    env = {**job.spec.env, **step.env}
    # Resources are left out: more cpu or memory changes how fast a program runs, not what it computes. The
    # class and the devices stay in: another accelerator, or another count of devices or nodes, can change the
    # numbers a program computes (reduction order, a per-device batch size).
    static.append({
        "image": step.image or job.spec.image,
        "command": list(step.command),
        "env": {k: {"secret": v.secret, "key": v.key} if isinstance(v, SecretRef) else v for k, v in env.items()},
        "workingDir": step.working_dir,
        "class": step.compute or job.spec.compute or catalog.default_class,
        "accelerators": step.accelerators,
        "nodes": step.nodes,
        "processesPerNode": step.processes_per_node,
        "volumes": [[v.name, v.mount_path, v.claim, v.read_only] for v in job.spec.volumes],
        "outputs": step.declared.model_dump(),
        "key": cache.key if cache else None,
        "version": cache.version if cache else None,
    })
    texts = [*step.command, *(v for v in env.values() if isinstance(v, str)), step.working_dir or "",
             step.image or "", (cache.key if cache else None) or ""]
    parameters += [ref.name for text in texts for _, ref in references.references_in(text)
                   if ref is not None and ref.kind == "parameter"]
    for ref in references.step_inputs(step):
        producer = producers.get(ref.step)
        if producer is not None and ref.name in producer.declared.artifacts and producer.name not in seen:
            _material(job, producer, catalog, producers, static, parameters, seen)


def refreshed(manifest: dict[str, Any]) -> dict[str, Any]:
    """`manifest` whose cached steps run again and save their results afresh (`wf submit --no-cache`): Argo
    takes an entry older than `maxAge` as a miss, then saves the new result under the same key, so the next
    run without --no-cache finds this run's result. Without `memoize` a run would neither read nor replace."""
    spec = manifest.get("spec") or {}
    for template in (spec.get("workflowSpec") or spec).get("templates") or []:
        if "memoize" in template:
            template["memoize"]["maxAge"] = REFRESH_MAX_AGE
    return manifest
