"""WorkflowTemplates and CronWorkflows through the Kubernetes API: what `wf template` and `wf cron` do, and the
workflow `wf submit --from workflowtemplate/NAME` starts.

A template is made only from a job spec, compiled and checked as `wf submit` compiles a job (submit.compile_for):
with the cluster's catalog and for the namespace it lives in, so its placement, queue and priority are those of
the same job submitted there. A compiled manifest is not taken as it is (wf.jobspec.job says why). A workflow
started from a template is checked before it is created: the template is wf's, every `-p` is one of its
parameters, the required ones are given, and its pods still pass today's catalog (a class removed since the
template was made is refused here, not left Pending). The workflow refers to the template (`workflowTemplateRef`);
Argo copies the template's spec into its `status.storedWorkflowTemplateSpec`, where every reader of its steps
finds them (controller.steps.templates_by_name). It carries the template's labels (the job's team and name) and
Argo's `workflow-template` label, so `wf list`, `get`, `watch`, cost, `queue` and `report` read it as a job's.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from wf.compile.kinds import kind_of_template
from wf.compile.readback import CompiledPlacement
from wf.controller.client import Kube, api_errors
from wf.controller.ops import patch_suspend
from wf.controller.submit import Submitted, as_submission, compile_for, create, find_existing
from wf.core.constants import (
    ARGO_WORKFLOW_TEMPLATE_LABEL,
    CRON_WORKFLOW,
    JOB_LABEL,
    WORKFLOW,
    WORKFLOW_TEMPLATE,
    ApiKind,
)
from wf.core.errors import ClusterError, InputError, Problem, did_you_mean, listing

if TYPE_CHECKING:
    from wf.model.catalog import Catalog

# What `--from` takes before the slash: the kind's name as kubectl and `argo submit --from` spell it.
_TEMPLATE_REFS = ("workflowtemplate", "workflowtemplates", "wftmpl")
_REPLACE_ATTEMPTS = 5  # a template changed between our read and our write is read again, this many times


def _labels(obj: dict[str, Any]) -> dict[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def _get(kube: Kube, kind: ApiKind, name: str, namespace: str) -> dict[str, Any]:
    """One object; a missing one is bad input naming what does exist (with a "did you mean")."""
    from kubernetes.client.exceptions import ApiException

    with api_errors(kube, f"reading {kind.kind} {name}", namespace):
        try:
            return kube.custom.get_namespaced_custom_object(kind.group, kind.version, namespace, kind.plural, name)
        except ApiException as exc:
            if exc.status != 404:
                raise
    try:
        names = [_name(o) for o in list_objects(kube, kind, namespace)]
    except ClusterError:  # may read, may not list: the names there are not ours to show
        names = None
    there = "" if names is None else f"{did_you_mean(name, names)}; there: {listing(names)}"
    raise InputError(f"no {kind.kind} {name!r} in namespace {namespace} ({kube.context}){there}")


def _name(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def list_objects(kube: Kube, kind: ApiKind, namespace: str | None, *, all_namespaces: bool = False
                 ) -> list[dict[str, Any]]:
    """Every object of `kind` in the namespace (or all), by name."""
    ns = namespace or kube.namespace
    with api_errors(kube, f"listing {kind.plural}", None if all_namespaces else ns):
        if all_namespaces:
            found = kube.custom.list_cluster_custom_object(kind.group, kind.version, kind.plural)
        else:
            found = kube.custom.list_namespaced_custom_object(kind.group, kind.version, ns, kind.plural)
    items: list[dict[str, Any]] = found.get("items") or []
    return sorted(items, key=lambda o: ((o.get("metadata") or {}).get("namespace", ""), _name(o)))


# --- templates ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Applied:
    """A template `wf template create` wrote: what became of it and the object as the server holds it."""

    name: str
    namespace: str
    source: str
    outcome: str  # created | updated | unchanged | validated (a dry run)
    template: dict[str, Any]


def create_templates(kube: Kube, jobs: list[Any], catalog: Catalog, *, namespace: str | None = None,
                     dry_run: bool = False) -> list[Applied]:
    """Compile every job as a WorkflowTemplate for its namespace first (bad input creates nothing), then create
    each, or replace the one of its name that wf made before."""
    compiled = [(str(job.source), *compile_for(job, catalog, kube.namespace, namespace, kind="WorkflowTemplate"))
                for job in jobs]
    seen: dict[tuple[str, str], str] = {}
    for source, manifest, ns in compiled:
        if (earlier := seen.setdefault((ns, _name(manifest)), source)) != source:
            raise InputError(f"{earlier} and {source} both compile to WorkflowTemplate {ns}/{_name(manifest)}",
                             file=source)
    return [apply_template(kube, manifest, source, dry_run=dry_run) for source, manifest, _ in compiled]


def apply_template(kube: Kube, manifest: dict[str, Any], source: str, *, dry_run: bool = False) -> Applied:
    """Create the template, or replace the one of its name if wf made it (its `wf.dev/job` label): a template
    someone wrote by hand is not overwritten. A write that meets a newer version reads it again."""
    from kubernetes.client.exceptions import ApiException

    api, meta = WORKFLOW_TEMPLATE, manifest["metadata"]
    ns, name = meta["namespace"], meta["name"]
    kwargs = {"dry_run": "All"} if dry_run else {}
    done = "validated" if dry_run else None
    with api_errors(kube, f"creating WorkflowTemplate {ns}/{name}", ns):
        for _ in range(_REPLACE_ATTEMPTS):
            try:
                made = kube.custom.create_namespaced_custom_object(api.group, api.version, ns, api.plural, manifest,
                                                                   **kwargs)
                return Applied(name, ns, source, done or "created", made)
            except ApiException as exc:
                if exc.status != 409:
                    raise
            try:
                existing = kube.custom.get_namespaced_custom_object(api.group, api.version, ns, api.plural, name)
            except ApiException as exc:
                if exc.status == 404:  # deleted since: create it again
                    continue
                raise
            if JOB_LABEL not in _labels(existing):
                raise InputError(f"WorkflowTemplate {ns}/{name} exists and wf did not make it (no {JOB_LABEL} "
                                 "label): delete it or name the job otherwise; it was left as it is", file=source)
            if existing.get("spec") == manifest["spec"] and _labels(existing) == meta.get("labels", {}):
                return Applied(name, ns, source, done or "unchanged", existing)
            body = {**manifest, "metadata": {**meta, "resourceVersion": existing["metadata"]["resourceVersion"]}}
            try:
                made = kube.custom.replace_namespaced_custom_object(api.group, api.version, ns, api.plural, name,
                                                                    body, **kwargs)
                return Applied(name, ns, source, done or "updated", made)
            except ApiException as exc:
                if exc.status not in (404, 409):  # 409: changed since we read it; 404: deleted since
                    raise
        raise InputError(f"WorkflowTemplate {ns}/{name} kept changing while wf wrote it "
                         f"({_REPLACE_ATTEMPTS} attempts): run the command again", file=source)


def get_template(kube: Kube, name: str, namespace: str | None = None) -> dict[str, Any]:
    return _get(kube, WORKFLOW_TEMPLATE, name, namespace or kube.namespace)


@dataclass(frozen=True)
class Parameter:
    """A template's parameter as `-p` sets it."""

    name: str
    default: str | None  # None: no default, `-p NAME=VALUE` is required
    choices: tuple[str, ...] = ()  # Argo's `enum`: the only values it takes

    @property
    def required(self) -> bool:
        return self.default is None


def template_parameters(template: dict[str, Any]) -> list[Parameter]:
    """The parameters a workflow from the template takes (pure)."""
    declared = ((template.get("spec") or {}).get("arguments") or {}).get("parameters") or []
    out = []
    for p in declared:
        default = p.get("value", p.get("default"))
        if default is None and p.get("valueFrom"):
            default = ""  # Argo fills it (a ConfigMap key): nothing to ask for
        out.append(Parameter(str(p.get("name", "")), None if default is None else str(default),
                             tuple(str(v) for v in p.get("enum") or ())))
    return out


@dataclass(frozen=True)
class TemplateStep:
    """A step of a template, where its pods run as compiled (read back by its kind, a multi-node step's
    workers'), and whether it belongs to the exit handler."""

    name: str
    placement: CompiledPlacement
    on_exit: bool = False


def template_steps(template: dict[str, Any]) -> list[TemplateStep]:
    """The steps of a wf-compiled template (the entrypoint's and the exit handler's DAG tasks), each placed as
    the pod-level template its wrappers (application retries, a capped fan-out) lead to. Pure."""
    spec = template.get("spec") or {}
    by_name = {t.get("name", ""): t for t in spec.get("templates") or []}

    def pod_level(name: str, seen: frozenset[str] = frozenset()) -> dict[str, Any] | None:
        found = by_name.get(name)
        if found is None or name in seen:
            return None
        if "dag" not in found and "steps" not in found:
            return found
        tasks = [*((found.get("dag") or {}).get("tasks") or []), *(t for group in found.get("steps") or []
                                                                    for t in group)]
        return next((p for t in tasks if (p := pod_level(str(t.get("template", "")), seen | {name})) is not None),
                    None)

    out = []
    for entry, on_exit in ((spec.get("entrypoint"), False), (spec.get("onExit"), True)):
        for task in ((by_name.get(entry or "") or {}).get("dag") or {}).get("tasks") or []:
            pod = pod_level(str(task.get("template", "")))
            placement = kind_of_template(pod).read_back(pod) if pod else CompiledPlacement()
            out.append(TemplateStep(str(task.get("name", "")), placement, on_exit))
    return out


def template_problems(template: dict[str, Any], catalog: Catalog) -> list[Problem]:
    """What `wf lint` would refuse in a stored template today: Argo's field table, and pods that no node group of
    the catalog holds, their team can never admit, or ask for privileges their class does not allow. Pure."""
    from wf import argo
    from wf.lint.documents import catalog_problems
    from wf.model.nodegroups import node_groups

    source = f"workflowtemplate/{_name(template)}"
    # As written: what the API server adds (uid, managedFields, ...) is not the template's.
    manifest: dict[str, Any] = {k: template[k] for k in ("apiVersion", "kind", "spec") if k in template}
    manifest["metadata"] = {k: v for k, v in (template.get("metadata") or {}).items()
                            if k in ("name", "namespace", "labels", "annotations")}
    found = argo.validate(manifest) + catalog_problems(manifest, catalog, node_groups(catalog))
    return [p.in_file(source) for p in found if p.severity == "error"]


def workflow_from(template: dict[str, Any], parameters: dict[str, str]) -> dict[str, Any]:
    """The Workflow that runs a template with `parameters`, refused (every reason at once) if a key is not one of
    its parameters, a required one is missing or a value is not among its choices. Pure."""
    name = _name(template)
    source = f"workflowtemplate/{name}"
    declared = {p.name: p for p in template_parameters(template)}
    problems = []
    for key, value in parameters.items():
        if (p := declared.get(key)) is None:
            problems.append(f"-p {key}: the template has no parameter {key!r}{did_you_mean(key, declared)}; "
                            f"its parameters: {listing(declared)}")
        elif p.choices and value not in p.choices:
            problems.append(f"-p {key}: {value!r} is not one of its choices: {listing(p.choices)}")
    problems += [f"-p {p.name}: required (the template gives it no default): -p {p.name}=VALUE"
                 for p in declared.values() if p.required and p.name not in parameters]
    if problems:
        raise InputError([Problem(source, None, None, message) for message in problems])
    meta = template.get("metadata") or {}
    spec: dict[str, Any] = {"workflowTemplateRef": {"name": name}}
    if parameters:
        spec["arguments"] = {"parameters": [{"name": k, "value": v} for k, v in parameters.items()]}
    return {"apiVersion": WORKFLOW.api_version, "kind": WORKFLOW.kind,
            "metadata": {"generateName": f"{name}-", "namespace": meta.get("namespace", ""),
                         "labels": {**_labels(template), ARGO_WORKFLOW_TEMPLATE_LABEL: name}},
            "spec": spec}


def template_name(ref: str) -> str:
    """The NAME of `--from workflowtemplate/NAME`."""
    kind, slash, name = ref.partition("/")
    if not slash or kind.lower() not in _TEMPLATE_REFS or not name:
        raise InputError(f"--from takes workflowtemplate/NAME (a WorkflowTemplate `wf template create` made), "
                         f"not {ref!r}")
    return name


def submit_from_template(kube: Kube, ref: str, parameters: dict[str, str], catalog: Catalog, *,
                         namespace: str | None = None, dry_run: bool = False,
                         skip_existing: bool = False) -> Submitted:
    """Create a Workflow from a template in the namespace, checked first (see the module's docstring); with
    `skip_existing`, the one an earlier run of the same command created is returned instead."""
    name = template_name(ref)
    ns = namespace or kube.namespace
    template = get_template(kube, name, ns)
    source = f"workflowtemplate/{name}"
    if JOB_LABEL not in _labels(template):
        raise InputError(f"WorkflowTemplate {ns}/{name} was not made by wf (no {JOB_LABEL} label), so its "
                         "placement and queue are not known to be the catalog's: create it from its job spec with "
                         "`wf template create JOB.yaml`, or submit it with argo", file=source)
    if problems := template_problems(template, catalog):
        raise InputError(problems + [Problem(source, None, None, "the catalog changed since the template was made: "
                                                                 "make it again with `wf template create JOB.yaml`")])
    manifest = workflow_from(template, parameters)
    # The identity of what is submitted: this version of the template (its uid and generation) and the arguments.
    meta = template.get("metadata") or {}
    submission = as_submission(manifest, f"{source}@{meta.get('uid', '')}/{meta.get('generation', '')}",
                               str(uuid.uuid4()))
    if skip_existing and not dry_run and (found := find_existing(kube, manifest)) is not None:
        return Submitted(WORKFLOW.kind, _name(found), ns, submission, source, False, found, existing=True)
    created = create(kube, manifest, dry_run=dry_run)
    return Submitted(WORKFLOW.kind, _name(created) or _name(manifest), ns, submission, source, dry_run,
                     created if dry_run else manifest)


# --- cron workflows ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Schedule:
    """A CronWorkflow as `wf cron list` shows it."""

    name: str
    namespace: str
    job: str | None
    schedules: tuple[str, ...]
    suspended: bool
    last_scheduled: str | None  # when it last started a workflow (RFC 3339)
    active: int  # its workflows still running


def schedule_of(cron: dict[str, Any]) -> Schedule:
    """Pure."""
    meta, spec, status = cron.get("metadata") or {}, cron.get("spec") or {}, cron.get("status") or {}
    schedules = spec.get("schedules") or ([spec["schedule"]] if spec.get("schedule") else [])
    return Schedule(str(meta.get("name", "")), str(meta.get("namespace", "")), _labels(cron).get(JOB_LABEL),
                    tuple(str(s) for s in schedules), bool(spec.get("suspend")), status.get("lastScheduledTime"),
                    len(status.get("active") or []))


def set_cron_suspended(kube: Kube, name: str, namespace: str | None, suspended: bool) -> dict[str, Any]:
    """`argo cron suspend|resume`: spec.suspend set, Argo starts no workflow on its schedule (those running run
    on); cleared, it starts them again at the next scheduled time."""
    ns = namespace or kube.namespace
    _get(kube, CRON_WORKFLOW, name, ns)  # a missing one: bad input, with the names there are
    return patch_suspend(kube, CRON_WORKFLOW, name, ns, suspended)
