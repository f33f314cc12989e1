"""Each team's permissions in its namespaces: the namespace with its Pod Security admission level, a Role and a
RoleBinding per namespace, nothing cluster-wide.

A workflow namespace enforces Pod Security `baseline` and warns and audits at `restricted` (compiled pods meet it
but for running as root, wf.compile.hardening). Where a class the namespace's pods may use needs more than
`baseline` allows (Gaudi: SYS_NICE and hostIPC, wf.model.accelerators), admission cannot tell that class's pods
from the others, so the namespace enforces `privileged` and warns and audits at `baseline`: only the namespaces of
teams with a quota on such a class (with teams; without, every workflow namespace).

Members submit, watch, stop (patch, and delete the multi-node steps' MPIJobs), retry (update, and delete the
failed steps' pods) and delete their workflows; keep their shared jobs as WorkflowTemplates (`wf template
create` replaces one it made before: update) and their scheduled ones as CronWorkflows (`wf cron suspend|resume`
patch them); they read pods, logs, events and their queue's Kueue workloads,
which `wf get` explains waiting with. The binding names the group wf-team:<team> (map identity-provider groups
or EKS access entries to it) plus the groups the catalog lists.
"""

from __future__ import annotations

from typing import Any

import yaml

from wf.core.constants import CRON_WORKFLOW, LOCAL_QUEUE, MPIJOB, WORKFLOW, WORKFLOW_TEMPLATE, WORKLOAD
from wf.model.catalog import Catalog, ComputeClass
from wf.model.teams import Team
from wf.render.kueue import queues_of

RBAC_API = "rbac.authorization.k8s.io/v1"
ROLE_NAME = "wf-team"
RULES: list[dict[str, Any]] = [
    {"apiGroups": [WORKFLOW.group], "resources": [WORKFLOW.plural],
     "verbs": ["create", "get", "list", "watch", "patch", "update", "delete"]},
    {"apiGroups": [WORKFLOW_TEMPLATE.group], "resources": [WORKFLOW_TEMPLATE.plural],
     "verbs": ["create", "get", "list", "watch", "update", "delete"]},
    {"apiGroups": [CRON_WORKFLOW.group], "resources": [CRON_WORKFLOW.plural],
     "verbs": ["create", "get", "list", "watch", "patch", "delete"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "delete"]},
    {"apiGroups": [""], "resources": ["pods/log", "events"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [WORKLOAD.group], "resources": [WORKLOAD.plural, LOCAL_QUEUE.plural],
     "verbs": ["get", "list", "watch"]},
    # Multi-node steps: `wf stop` deletes the workflow's MPIJobs (Argo stops only its own pods).
    {"apiGroups": [MPIJOB.group], "resources": [MPIJOB.plural],
     "verbs": ["get", "list", "watch", "delete", "deletecollection"]},
]


POD_SECURITY_LABEL = "pod-security.kubernetes.io"


def classes_in(catalog: Catalog, namespace: str) -> list[ComputeClass]:
    """The classes whose pods may run in `namespace`: its team's quotas' (a team runs a class needing more than
    baseline only with a quota on it), else every class."""
    teams = [t for t in catalog.queues.teams if namespace in t.namespaces] if catalog.queues else []
    if not teams:
        return list(catalog.compute_classes)
    names = {q.compute for team in teams for q in team.quotas}
    return [c for c in catalog.compute_classes if c.name in names]


def pod_security_labels(catalog: Catalog, namespace: str) -> dict[str, str]:
    relaxed = any(cls.relaxations.beyond_baseline for cls in classes_in(catalog, namespace))
    enforce, report = ("privileged", "baseline") if relaxed else ("baseline", "restricted")
    return {f"{POD_SECURITY_LABEL}/enforce": enforce, f"{POD_SECURITY_LABEL}/warn": report,
            f"{POD_SECURITY_LABEL}/audit": report}


def namespace_object(catalog: Catalog, namespace: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": namespace, "labels": pod_security_labels(catalog, namespace)}}


def team_group(team: Team) -> str:
    return f"wf-team:{team.name}"


def team_objects(catalog: Catalog, team: Team) -> list[dict[str, Any]]:
    subjects = [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": g}
                for g in dict.fromkeys([team_group(team), *team.groups])]
    out: list[dict[str, Any]] = []
    for namespace in team.namespaces:
        out.append(namespace_object(catalog, namespace))
        meta = {"name": ROLE_NAME, "namespace": namespace, "labels": {"wf.dev/team": team.name}}
        out.append({"apiVersion": RBAC_API, "kind": "Role", "metadata": meta, "rules": RULES})
        out.append({"apiVersion": RBAC_API, "kind": "RoleBinding", "metadata": dict(meta),
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": ROLE_NAME},
                    "subjects": subjects})
    return out


def objects(catalog: Catalog) -> list[dict[str, Any]]:
    return [obj for team in queues_of(catalog).teams for obj in team_objects(catalog, team)]


def render(catalog: Catalog) -> str:
    header = f"# Generated by `wf kueue roles` from {catalog.source}; edit the catalog, not this file.\n"
    return header + yaml.safe_dump_all(objects(catalog), sort_keys=False, default_flow_style=False, width=120)
