"""The step cache: `cache:` compiles to Argo memoization on the step's pod-level template, keyed on what
determines its result and never on the run; keys that depend on the run are refused with their line; `wf get`
tells a cached step apart and charges nothing for it."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

import pytest

from controller_fakes import pod_node, workflow
from wf.compile.cache import CONFIGMAP, REFRESH_MAX_AGE, refreshed
from wf.compile.workflow import compile_job
from wf.controller.cost import job_cost
from wf.controller.steps import workflow_view
from wf.controller.summary import CACHED, phase_of, summarize
from wf.core.constants import STEP_CACHE_PREFIX
from wf.core.errors import InputError
from wf.jobspec.job import TrainingJob, load_job
from wf.model.catalog import Catalog
from wf.render.platform import step_cache_rbac

# What differs per run: none of it may reach a key.
RUN_VARIABLES = ("workflow.name", "workflow.uid", "workflow.creationTimestamp", "workflow.duration", "retries",
                 "pod.name", "lastRetry", "node.name", "now(")
# Argo's ConfigMap cache key rule (workflow/controller/cache/cache.go).
ARGO_KEY = re.compile(r"^[a-zA-Z0-9][-a-zA-Z0-9]*$")


def _templates(manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in manifest["spec"]["templates"]}


def _pipeline(make_job: Any, **spec: Any) -> TrainingJob:
    steps = [
        {"name": "prepare", "command": ["prep", "--snapshot", "{{workflow.parameters.snapshot}}"],
         "cache": {"key": "{{workflow.parameters.snapshot}}", "version": "v2"},
         "outputs": {"parameters": {"rows": "/tmp/rows"}}},
        {"name": "train", "needs": ["prepare"], "command": ["train", "--rows", "{{steps.prepare.outputs.rows}}"],
         "forEach": ["a", "b"], "env": {"SHARD": "{{item}}"}, "cache": True, "checkpoint": {}},
        {"name": "report", "needs": ["train"], "command": ["report"]},
    ]
    return make_job(steps, parameters={"snapshot": "2026-01"}, retries=1, **spec)


def test_a_cached_step_memoizes_its_pod_template_on_its_inputs_never_on_the_run(catalog: Catalog,
                                                                                make_job: Any) -> None:
    templates = _templates(compile_job(_pipeline(make_job), catalog))
    prepare, train = templates["prepare"]["memoize"], templates["train"]["memoize"]
    assert "memoize" not in templates["report"]  # not cached
    assert not any("memoize" in t for name, t in templates.items() if name not in ("prepare", "train"))
    assert prepare["cache"] == {"configMap": {"name": f"{STEP_CACHE_PREFIX}-{{{{workflow.namespace}}}}"}}
    assert prepare["maxAge"] == "604800s"  # the catalog's default, 7d, in a Go duration
    digest = r"'[0-9a-f]{64}'"
    expression = r"\{\{=sprig\.sha256sum\(toJson\(\[" + digest
    assert re.fullmatch(expression + r", workflow\.parameters\['snapshot'\]\]\)\)\}\}", prepare["key"])
    # The output it reads and its item, by the inputs its pod template declares; not the attempt it runs in.
    assert re.fullmatch(expression + r", inputs\.parameters\['prepare_rows'\], inputs\.parameters\['item'\]\]\)\)\}\}",
                        train["key"])
    declared = {p["name"] for p in templates["train"]["inputs"]["parameters"]}
    assert {"prepare_rows", "item"} <= declared
    for memo in (prepare, train):
        assert not any(variable in memo["key"] for variable in RUN_VARIABLES)
        assert "application" not in memo["key"]


def test_the_cached_manifest_is_valid_for_argo(catalog: Catalog, make_job: Any, argo_schemas: Any) -> None:
    manifest = compile_job(_pipeline(make_job), catalog)
    assert argo_schemas.json_errors("v4", manifest) == []
    assert argo_schemas.crd_errors(manifest) == []


def test_a_step_reading_nothing_at_run_time_has_a_literal_key_argo_accepts(catalog: Catalog, make_job: Any) -> None:
    job = make_job([{"name": "prep", "command": ["prep"], "cache": True}])
    key = _templates(compile_job(job, catalog))["prep"]["memoize"]["key"]
    assert ARGO_KEY.match(key) and len(key) == 64


def test_identical_compiles_are_byte_identical_and_keys_follow_what_changes_results(catalog: Catalog,
                                                                                   make_job: Any) -> None:
    def key(**changes: Any) -> str:
        step = {"name": "prep", "command": ["prep", "--fast"], "cache": True, **changes}
        return str(_templates(compile_job(make_job([step]), catalog))["prep"]["memoize"]["key"])

    first = json.dumps(compile_job(_pipeline(make_job), catalog), sort_keys=False)
    assert first == json.dumps(compile_job(_pipeline(make_job), catalog), sort_keys=False)
    base = key()
    assert key(resources={"cpu": 2}) == base  # speed, not results
    assert key(timeout="2h", retries=3) == base
    for different in (key(command=["prep", "--slow"]), key(image="busybox:1.37"), key(env={"SEED": "1"}),
                      key(cache={"version": "v2"}), key(cache={"key": "2026"}), key(workingDir="/data"),
                      key(outputs={"parameters": {"rows": "/tmp/rows"}})):
        assert different != base


def test_job_level_cache_covers_its_steps_a_step_turns_it_off_and_exit_handlers_opt_in(catalog: Catalog,
                                                                                       make_job: Any) -> None:
    job = make_job([{"name": "a", "command": ["a"]}, {"name": "b", "command": ["b"], "cache": False}],
                   cache={"version": "v1"},
                   onExit=[{"name": "notify", "command": ["notify"]},
                           {"name": "tidy", "command": ["t"], "cache": True}])
    templates = _templates(compile_job(job, catalog))
    assert "memoize" in templates["a"] and "memoize" not in templates["b"]
    assert "memoize" not in templates["notify"] and "memoize" in templates["tidy"]


def test_outputs_of_a_hit_flow_through_the_retry_wrapper(catalog: Catalog, make_job: Any) -> None:
    templates = _templates(compile_job(_pipeline(make_job), catalog))
    # The application-retry wrapper reads the memoized node's outputs as it reads a run's.
    assert templates["prepare-Attempts"]["outputs"]["parameters"] == [
        {"name": "rows", "valueFrom": {"parameter": "{{tasks.prepare.outputs.parameters.rows}}"}}]
    assert "memoize" not in templates["prepare-Attempts"]


def test_no_cache_reruns_and_saves_afresh(catalog: Catalog, make_job: Any) -> None:
    manifest = refreshed(compile_job(_pipeline(make_job), catalog))
    memos = [t["memoize"] for t in manifest["spec"]["templates"] if "memoize" in t]
    assert len(memos) == 2 and all(m["maxAge"] == REFRESH_MAX_AGE for m in memos)
    cron = refreshed(compile_job(_pipeline(make_job, schedule="@daily"), catalog))
    assert all(t["memoize"]["maxAge"] == REFRESH_MAX_AGE
               for t in cron["spec"]["workflowSpec"]["templates"] if "memoize" in t)


def test_the_catalog_sets_the_age_limit(catalog: Catalog, make_job: Any) -> None:
    data = catalog.model_dump(by_alias=True, exclude_none=True)
    data["cache"] = {"maxAge": "12h"}
    short = Catalog.model_validate(data)
    job = make_job([{"name": "prep", "command": ["prep"], "cache": True}])
    assert _templates(compile_job(job, short))["prep"]["memoize"]["maxAge"] == "43200s"
    data["cache"] = {"maxAge": "forever"}
    with pytest.raises(ValueError, match="is not a duration"):
        Catalog.model_validate(data)


@pytest.mark.parametrize("key", ["{{workflow.name}}", "run-{{workflow.uid}}", "{{workflow.creationTimestamp.Y}}",
                                 "{{retries}}", "{{pod.name}}", "{{workflow.duration}}", "{{=now()}}",
                                 "{{=sprig.date('2006', workflow.creationTimestamp)}}"])
def test_a_key_that_depends_on_the_run_is_refused_with_its_line(key: str, catalog: Catalog, write: Any) -> None:
    path = write("job.yaml", f"""
        apiVersion: wf/v1
        kind: TrainingJob
        metadata: {{name: demo}}
        spec:
          image: busybox:1.36
          compute: cpu
          steps:
            - name: prep
              command: [prep]
              cache: {{key: "{key}"}}
        """)
    with pytest.raises(InputError) as refused:
        compile_job(load_job(path), catalog)
    message = str(refused.value)
    assert f"{path}:10: spec.steps[0].cache.key:" in message and "depends on the run" in message


def test_a_key_reads_only_known_job_parameters(make_job: Any) -> None:
    with pytest.raises(InputError, match="may read job parameters only"):
        make_job([{"name": "p", "command": ["p"], "forEach": [1], "cache": {"key": "{{item}}"}}])
    with pytest.raises(InputError, match=r"spec.cache.key: \{\{workflow.parameters.snapshto\}\}: unknown parameter"):
        make_job([{"name": "p", "command": ["p"]}], cache={"key": "{{workflow.parameters.snapshto}}"},
                 parameters={"snapshot": "1"})


def _artifacts(producer_cache: Any, producer_command: list[str]) -> list[dict[str, Any]]:
    producer: dict[str, Any] = {"name": "make", "command": producer_command,
                                "outputs": {"artifacts": {"data": "/tmp/data"}}}
    if producer_cache is not None:
        producer["cache"] = producer_cache
    return [producer, {"name": "use", "needs": ["make"], "command": ["use", "{{steps.make.outputs.data}}"],
                       "cache": True}]


def test_an_artifact_is_keyed_by_its_cached_producers_key(catalog: Catalog, make_job: Any) -> None:
    job = make_job(_artifacts(True, ["make", "{{workflow.parameters.day}}"]), parameters={"day": "1"})
    use = _templates(compile_job(job, catalog))["use"]["memoize"]["key"]
    assert "workflow.parameters['day']" in use  # the producer's run-time material stands for its artifact
    other = make_job(_artifacts(True, ["make", "--other", "{{workflow.parameters.day}}"]), parameters={"day": "1"})
    assert _templates(compile_job(other, catalog))["use"]["memoize"]["key"] != use


@pytest.mark.parametrize(("producer_cache", "why"), [(None, "cache step 'make' too"), (False, "cache step 'make' too")])
def test_an_artifact_of_an_uncached_step_is_refused(producer_cache: Any, why: str, catalog: Catalog,
                                                    make_job: Any) -> None:
    with pytest.raises(InputError, match=why):
        compile_job(make_job(_artifacts(producer_cache, ["make"])), catalog)


def test_an_artifact_of_a_producer_keyed_on_run_time_values_is_refused(catalog: Catalog, make_job: Any) -> None:
    steps = [{"name": "seed", "command": ["seed"], "outputs": {"parameters": {"n": "/tmp/n"}}},
             *_artifacts(True, ["make", "{{steps.seed.outputs.n}}"])]
    steps[1]["needs"] = ["seed"]
    with pytest.raises(InputError, match=r"step 'make' reads \{\{steps.seed.outputs.n\}\}, a value known only when"):
        compile_job(make_job(steps), catalog)


def _cached_run() -> dict[str, Any]:
    """prep's result came from the cache (its memoized Retry node, no children); train ran."""
    wf = "bert-x7k2p"
    nodes = {
        wf: {"id": wf, "name": wf, "displayName": wf, "type": "DAG", "phase": "Succeeded", "children": ["prepR"]},
        "prepR": {"id": "prepR", "name": f"{wf}.prep", "displayName": "prep", "type": "Retry", "phase": "Succeeded",
                  "templateName": "prep", "boundaryID": wf, "startedAt": "2026-03-01T12:00:00Z",
                  "finishedAt": "2026-03-01T12:00:00Z", "outputs": {"parameters": [{"name": "rows", "value": "7"}]},
                  "memoizationStatus": {"hit": True, "key": "abc", "cacheName": "wf-step-cache-wf"}},
        "train": pod_node(wf, "train", "train", "Succeeded", host="gaudi-1", started="2026-03-01T12:01:00Z",
                          finished="2026-03-01T13:01:00Z"),
    }
    nodes["train"]["memoizationStatus"] = {"hit": False, "key": "def", "cacheName": "wf-step-cache-wf"}
    return workflow(wf, "Succeeded", nodes)


def test_get_marks_a_cached_step_and_charges_nothing_for_it() -> None:
    from wf.controller.cost import NodeFacts

    run = _cached_run()
    view = workflow_view(run)
    prep, train = view.steps
    assert prep.cached and not prep.attempts and phase_of(prep) == CACHED
    assert (prep.compute_class, prep.capacity) == ("cpu", "on-demand")  # read from the memoized template
    assert not train.cached and phase_of(train) == "Succeeded"  # a miss ran as usual
    now = datetime(2026, 3, 1, 14, tzinfo=UTC)
    cost = job_cost(view, run, {"gaudi-1": NodeFacts("dl1.24xlarge", "spot")}, now)
    by_step = {s.step: s for s in cost.steps}
    assert by_step["prep"].node_hours == 0 and by_step["train"].node_hours > 0
    assert summarize([view], 0, now).steps == {CACHED: 1, "Succeeded": 1}


def test_a_hit_without_a_retry_node_has_no_attempt() -> None:
    run = _cached_run()
    node = run["status"]["nodes"]["prepR"]
    node["type"] = "Pod"
    prep = workflow_view(run).steps[0]
    assert prep.cached and prep.attempts == ()


def test_the_controller_may_create_and_update_only_the_namespaces_cache_configmaps() -> None:
    objects = step_cache_rbac(["wf", "ml-training"])
    roles = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Role"}
    bindings = [o for o in objects if o["kind"] == "RoleBinding"]
    names = [f"{STEP_CACHE_PREFIX}-wf", f"{STEP_CACHE_PREFIX}-ml-training"]
    assert {r["metadata"]["namespace"] for r in roles.values()} == {"argo"}
    assert roles[STEP_CACHE_PREFIX]["rules"] == [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]}]
    for name in names:  # one Role per namespace: a cluster with more namespaces still matches each one
        assert roles[name]["rules"] == [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "update"],
                                         "resourceNames": [name]}]
    assert sorted(b["roleRef"]["name"] for b in bindings) == sorted(roles)
    assert all(b["subjects"] == [{"kind": "ServiceAccount", "name": "argo", "namespace": "argo"}] for b in bindings)
    # The compiled name resolves to one of these in the workflow's namespace.
    assert CONFIGMAP.replace("{{workflow.namespace}}", "wf") == names[0]


def test_logs_of_a_cached_step_say_it_ran_no_pod() -> None:
    from wf.controller.ops import step_log_lines

    run = _cached_run()
    with pytest.raises(InputError, match="ran no pod: its result came from the step cache"):
        list(step_log_lines(None, run["metadata"]["name"], "wf", "prep", archived=run))  # type: ignore[arg-type]
