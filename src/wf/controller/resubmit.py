"""Running a finished workflow's steps again from its recorded node status, as Argo's own verbs do (v4
workflow/util/util.go): `retry` in place (`wf retry`, wf.controller.ops.retry_plan: FormulateRetryWorkflow) and
`resubmit --memoized` as a new workflow (`wf rerun --from STEP`, `rerun_plan`: FormulateResubmitWorkflow narrowed
to a step and what follows it).

Both keep the nodes of what is reused and drop those of what must run again, with all they contain
(`carried_nodes`): Argo's controller runs every DAG task that has no node, and takes a finished task's outputs as
its node holds them. A rerun's nodes are renamed to the new workflow, whose node ids derive from the names
(wf.argo.nodes.node_id), and its reused pods become Skipped nodes ("original pod: ID", as Argo's resubmit writes
them): the new workflow ran no pod for them, so its steps, logs and cost hold only what it ran.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from wf.argo.nodes import Nodes, node_id, packed_status, workflow_nodes
from wf.controller.steps import FAILED_PHASES, TERMINAL_PHASES, containment, contents, members, templates_by_name
from wf.controller.submit import BATCH_LABEL, IDENTITY_LABEL, set_parameters
from wf.core.constants import (
    ARGO_COMPLETED_LABEL,
    ARGO_PHASE_LABEL,
    ARGO_RESUBMITTED_FROM_LABEL,
    RERUN_FROM_ANNOTATION,
    RETRIED_ANNOTATION,
    SUBMISSION_LABEL,
    WORKFLOW,
)
from wf.core.errors import InputError, did_you_mean, listing

_GROUPS = ("DAG", "Steps")  # nodes that run their template's tasks: reopened, they run those that have no node
_NOT_RUN = ("Skipped", "Omitted")  # a task's node that ran nothing (its `when` was false, its depends unmet)
# Labels and annotations a new workflow does not inherit: the old one's state (its `wf retry`s too: the new one's
# checkpoint locations are empty), and the submission it came from (wf.controller.submit).
_NOT_INHERITED = (ARGO_COMPLETED_LABEL, ARGO_PHASE_LABEL, RETRIED_ANNOTATION, SUBMISSION_LABEL, BATCH_LABEL,
                  IDENTITY_LABEL)


def carried_nodes(workflow: Mapping[str, Any], nodes: Nodes, also_dropped: Iterable[str] = ()
                  ) -> tuple[Nodes, set[str]]:
    """The nodes a retry or rerun keeps (copies) and the ids it drops (pure).

    Dropped with all they contain: every failed, errored or omitted step or attempt (an application retry's
    attempt is a DAG: `-Attempts`), the exit handler (it runs again at the new end) and `also_dropped`. Any other
    DAG that failed or lost a task is reopened (Running, its end cleared) and runs again what it lost. Links to
    dropped nodes are removed from what stays. A node still Running or Pending is refused: the workflow has not
    ended."""
    name = (workflow.get("metadata") or {}).get("name")
    on_exit = f"{name}.onExit"
    parent = containment(nodes)
    inside = members(parent)
    dropped: set[str] = set()

    def drop(dropped_id: str) -> None:
        dropped.add(dropped_id)
        dropped.update(contents(inside, dropped_id))

    for each_id, node in nodes.items():
        phase = node.get("phase")
        if phase in ("Running", "Pending"):
            raise InputError(f"workflow {name} still has {node.get('displayName')} {phase}; wait for it to end")
        failed = phase in (*FAILED_PHASES, "Omitted")
        attempt = nodes.get(parent.get(each_id, ""), {}).get("type") == "Retry"
        if (node.get("name") or "").startswith(on_exit) or (failed and (attempt or node.get("type") not in _GROUPS)):
            drop(each_id)
    for each_id in also_dropped:
        drop(each_id)

    lost_a_task = {parent[d] for d in dropped if d in parent}
    kept: Nodes = {}
    for each_id, original in nodes.items():
        if each_id in dropped:
            continue
        node = copy.deepcopy(original)
        if node.get("type") in _GROUPS and (node.get("phase") in FAILED_PHASES or each_id in lost_a_task):
            node["phase"] = "Running"
            node.pop("message", None)
            node.pop("finishedAt", None)
        for links in ("children", "outboundNodes"):
            if node.get(links):
                node[links] = [c for c in node[links] if c not in dropped]
        kept[each_id] = node
    return kept, dropped


def reopen_spec(spec: dict[str, Any]) -> None:
    """A finished workflow's spec made to run again, as Argo's retry and resubmit do: no shutdown, and no deadline
    of 0 (what terminating it set)."""
    spec.pop("shutdown", None)
    if spec.get("activeDeadlineSeconds") == 0:
        spec.pop("activeDeadlineSeconds")


def rerun_plan(workflow: Mapping[str, Any], step: str, parameters: Mapping[str, str], *, name: str,
               submission: str, now: datetime) -> dict[str, Any]:
    """A new workflow `name` that reuses the finished `workflow`'s steps before `step` and runs `step` and every
    step after it (its DAG dependents, transitively), its parameters replaced by `parameters` (pure).

    A reused step keeps its outputs even where the new parameters would have changed its inputs. Steps that
    failed elsewhere (another branch) run again too, as `wf retry` runs them; steps skipped by their `when`
    stay skipped. `now` (UTC) stamps the reused nodes, as Argo's resubmit does."""
    metadata = workflow.get("metadata") or {}
    old = metadata.get("name", "")
    phase = (workflow.get("status") or {}).get("phase")
    if phase not in TERMINAL_PHASES:
        raise InputError(f"workflow {old} is {phase or 'not started'}; it can be rerun once it has ended "
                         f"(wf wait {old}, or wf stop {old})")
    nodes = workflow_nodes(workflow)
    rerun = _steps_from(workflow, nodes, step)
    seeds = [each_id for each_id, node in nodes.items() if _task_of(old, node.get("name") or "") in rerun]
    kept, _ = carried_nodes(workflow, nodes, seeds)

    def renamed(node_name: str) -> str:
        return name + node_name[len(old):] if node_name.startswith(old) else node_name

    new_ids = {each_id: node_id(name, renamed(node.get("name") or "")) for each_id, node in nodes.items()}
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    carried: Nodes = {}
    for old_id, node in kept.items():
        node["name"] = renamed(node.get("name") or "")
        node["id"] = new_ids[old_id]
        if node.get("boundaryID") in new_ids:
            node["boundaryID"] = new_ids[node["boundaryID"]]
        for links in ("children", "outboundNodes"):
            if node.get(links):
                node[links] = [new_ids[c] for c in node[links] if c in new_ids]
        if node.get("type") == "Pod":  # a succeeded one: carried_nodes dropped the others
            node.update(type="Skipped", phase="Skipped", message=f"original pod: {old_id}")
        node["startedAt"] = stamp
        if "finishedAt" in node:
            node["finishedAt"] = stamp
        carried[node["id"]] = node

    labels = {k: v for k, v in (metadata.get("labels") or {}).items() if k not in _NOT_INHERITED}
    labels |= {SUBMISSION_LABEL: submission, ARGO_RESUBMITTED_FROM_LABEL: old}
    new_metadata: dict[str, Any] = {"name": name, "namespace": metadata.get("namespace"), "labels": labels,
                                    "annotations": {**{k: v for k, v in (metadata.get("annotations") or {}).items()
                                                       if k not in _NOT_INHERITED},
                                                    RERUN_FROM_ANNOTATION: step}}
    if owners := metadata.get("ownerReferences"):
        new_metadata["ownerReferences"] = copy.deepcopy(owners)
    new: dict[str, Any] = {"apiVersion": workflow.get("apiVersion") or WORKFLOW.api_version, "kind": WORKFLOW.kind,
                           "metadata": new_metadata, "spec": copy.deepcopy(workflow.get("spec") or {})}
    reopen_spec(new["spec"])
    # A workflow made from a WorkflowTemplate names only the parameters given at its submit; Argo's stored copy of
    # the spec it ran holds them all, with the values it ran with: each can be replaced.
    ran_with = ((workflow.get("status") or {}).get("storedWorkflowTemplateSpec") or {}).get("arguments") or {}
    given = {p.get("name") for p in (new["spec"].get("arguments") or {}).get("parameters") or []}
    if missing := [p for p in ran_with.get("parameters") or [] if p.get("name") not in given]:
        new["spec"].setdefault("arguments", {}).setdefault("parameters", []).extend(copy.deepcopy(missing))
    set_parameters(new, dict(parameters), f"workflow {old}")
    # A new workflow's status as Argo's resubmit writes it: its phase unknown, so the controller starts it.
    status: dict[str, Any] = {"conditions": [{"type": "Completed", "status": "False"}]}
    if stored := (workflow.get("status") or {}).get("storedTemplates"):
        status["storedTemplates"] = copy.deepcopy(stored)
    new["status"] = status
    new["status"] = packed_status(new, carried)
    return new


def _task_of(workflow_name: str, node_name: str) -> str | None:
    """The entrypoint DAG's task a node belongs to: "W.b", "W.b(0:x)(1)", "W.b.b" all belong to b (task names
    are DNS labels: no dot, no parenthesis)."""
    if not node_name.startswith(workflow_name + "."):
        return None
    rest = node_name[len(workflow_name) + 1:]
    return rest[:min((i for i in (rest.find("."), rest.find("(")) if i >= 0), default=len(rest))]


def _steps_from(workflow: Mapping[str, Any], nodes: Nodes, step: str) -> set[str]:
    """`step` and the entrypoint DAG's tasks that depend on it, transitively; InputError for a step the job does
    not have, has only in its exit handler, or did not run."""
    old = (workflow.get("metadata") or {}).get("name", "")
    spec = {**((workflow.get("status") or {}).get("storedWorkflowTemplateSpec") or {}), **(workflow.get("spec") or {})}
    templates = templates_by_name(workflow)

    def tasks(template: str | None) -> list[dict[str, Any]]:
        tasks_: list[dict[str, Any]] = ((templates.get(template or "") or {}).get("dag") or {}).get("tasks") or []
        return tasks_

    main = tasks(spec.get("entrypoint"))
    names = [task["name"] for task in main]
    if step not in names:
        if step in {task["name"] for task in tasks(spec.get("onExit"))}:
            raise InputError(f"step {step} of {old} belongs to its onExit handler, which runs again at the end of "
                             f"any run; rerun from a step of the job: {listing(names)}")
        raise InputError(f"workflow {old} has no step {step!r}{did_you_mean(step, names)}; its steps: "
                         f"{listing(names)}")
    by_name = {node.get("name"): node for node in nodes.values()}
    ran = [task for task in names if (by_name.get(f"{old}.{task}") or {}).get("phase") not in (None, *_NOT_RUN)]
    if step not in ran:
        node = by_name.get(f"{old}.{step}")
        why = ("never started" if node is None else
               f"did not run ({node.get('phase')}{': ' + node['message'] if node.get('message') else ''})")
        raise InputError(f"step {step} of {old} {why}, so there is no run to start again from; steps that ran: "
                         f"{listing(ran)}")
    dependents: dict[str, list[str]] = {}
    for task in main:
        for need in task.get("dependencies") or []:
            dependents.setdefault(need, []).append(task["name"])
    found, stack = set(), [step]
    while stack:
        if (current := stack.pop()) not in found:
            found.add(current)
            stack.extend(dependents.get(current, []))
    return found
