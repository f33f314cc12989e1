"""Which team queue a job's steps wait in: its team (or its namespace's team), namespace and priority, as the
labels Kueue reads on every pod (or on a multi-node step's MPIJob)."""

from __future__ import annotations

from dataclasses import dataclass

from wf.core.constants import KUEUE_LOCAL_QUEUE, KUEUE_PRIORITY_LABEL, KUEUE_QUEUE_LABEL
from wf.core.errors import Problem
from wf.model.catalog import Catalog
from wf.model.teams import Team


@dataclass(frozen=True)
class QueueAssignment:
    """Where a job's steps queue: its team, the namespace it runs in and the priority of its workloads."""

    team: Team
    namespace: str
    priority: str

    def pod_labels(self) -> dict[str, str]:
        return {KUEUE_QUEUE_LABEL: KUEUE_LOCAL_QUEUE, KUEUE_PRIORITY_LABEL: self.priority}


def assign_queue(catalog: Catalog, team_name: str | None, namespace: str | None,
                 priority: str | None) -> tuple[QueueAssignment | None, list[Problem]]:
    """The job's queue from its team (or, without one, its namespace's team); None outside every team."""
    queues = catalog.queues
    if queues is None:
        if team_name or priority:
            field = "team" if team_name else "priority"
            return None, [Problem.at(("spec", field),
                                     f"the catalog {catalog.source} has no teams (no `queues:` section)")]
        return None, []
    if team_name:
        try:
            team = queues.team(team_name)
        except KeyError:
            known = ", ".join(t.name for t in queues.teams)
            return None, [Problem.at(("spec", "team"), f"unknown team {team_name!r}; the catalog's teams: {known}")]
        if namespace and namespace not in team.namespaces:
            return None, [Problem.at(("metadata", "namespace"),
                                     f"team {team.name} runs in {', '.join(team.namespaces)}, "
                                     f"not in namespace {namespace}")]
        namespace = namespace or team.namespaces[0]
    else:
        found = queues.team_of_namespace(namespace) if namespace else None
        if found is None:
            if priority:
                return None, [Problem.at(("spec", "priority"),
                                         "a priority needs a team: set spec.team or a team's namespace")]
            return None, []
        team = found
    assert namespace is not None
    chosen = priority or queues.default_priority
    if chosen not in queues.priority_names:
        return None, [Problem.at(("spec", "priority"), f"unknown priority {chosen!r}; the catalog's: "
                                             f"{', '.join(queues.priority_names)}")]
    return QueueAssignment(team, namespace, chosen), []
