"""Teams in the catalog: who runs where, how much of each compute class they are guaranteed, and priorities.

A team's quota is written in the developer's terms (compute class, capacity, cpu, memory, accelerators);
wf.render.kueue turns it into Kueue's ClusterQueues. The catalog checks quotas against its
classes (wf.model.catalog), and wf.model.quotas resolves them into amounts per class x capacity.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Literal

from pydantic import Field, field_validator

from wf.core.errors import PathKey, Problem
from wf.core.modeling import StrictModel, dns_label_problem
from wf.core.units import parse_quantity

Quantity = int | float | str
# The quota's resources in the catalog's words; "accelerators" is the class's device resource.
RESOURCES = ("cpu", "memory", "accelerators")


def _quantity(value: Quantity | None) -> Quantity | None:
    if value is not None and parse_quantity(value) < 0:
        raise ValueError("must not be negative")
    return value


class Limits(StrictModel):
    """How much beyond (borrowing) or out of (lending) the nominal quota; unset: no limit."""

    cpu: Quantity | None = None
    memory: Quantity | None = None
    accelerators: int | None = Field(default=None, ge=0)

    _check = field_validator("cpu", "memory")(_quantity)


class Quota(StrictModel):
    compute: str = Field(description="Compute class")
    capacity: Literal["spot", "on-demand"] | None = Field(default=None, description="Default: the class's default")
    cpu: Quantity | None = Field(default=None, description="Default: 0, or on an accelerator class what the "
                                                             "nodes holding the accelerators offer")
    memory: Quantity | None = Field(default=None, description="Default: as cpu")
    accelerators: int = Field(default=0, ge=0, description="Devices of the class's accelerator")
    borrowing_limit: Limits | None = Field(default=None, alias="borrowingLimit")
    lending_limit: Limits | None = Field(default=None, alias="lendingLimit")

    _check = field_validator("cpu", "memory")(_quantity)


class Team(StrictModel):
    name: str
    namespaces: list[str] = Field(min_length=1, description="Where the team's workflows run")
    groups: list[str] = Field(default_factory=list,
                              description="Identity-provider groups bound to the team's role, besides wf-team:<name>")
    weight: int = Field(default=1, ge=0, description="Fair-sharing weight against the other teams")
    quotas: list[Quota] = Field(default_factory=list)


class Priority(StrictModel):
    name: str
    value: int
    description: str = ""


def _default_priorities() -> list[Priority]:
    return [Priority(name="high", value=1000), Priority(name="normal", value=100), Priority(name="low", value=10)]


class Queues(StrictModel):
    """The catalog's `queues:` section."""

    cohort: str = Field(default="wf", description="The cohort every team's ClusterQueue joins (they borrow within it)")
    priorities: list[Priority] = Field(default_factory=_default_priorities, min_length=1)
    default_priority: str = Field(default="normal", alias="defaultPriority")
    teams: list[Team] = Field(min_length=1)

    def team(self, name: str) -> Team:
        for team in self.teams:
            if team.name == name:
                return team
        raise KeyError(name)

    def team_of_namespace(self, namespace: str) -> Team | None:
        return next((t for t in self.teams if namespace in t.namespaces), None)

    @property
    def priority_names(self) -> list[str]:
        return [p.name for p in self.priorities]

    def problems(self) -> list[Problem]:
        """Names, priorities and namespaces; quotas name compute classes, so the catalog checks those."""
        at: tuple[PathKey, ...] = ("queues",)
        out: list[Problem] = []
        if problem := dns_label_problem(self.cohort, "cohort name"):
            out.append(Problem.at((*at, "cohort"), problem))
        seen: set[str] = set()
        for p, priority in enumerate(self.priorities):
            if problem := dns_label_problem(priority.name, "priority name"):
                out.append(Problem.at((*at, "priorities", p, "name"), problem))
            if priority.name in seen:
                out.append(Problem.at((*at, "priorities", p, "name"), f"duplicate priority {priority.name!r}"))
            seen.add(priority.name)
        if self.default_priority not in seen:
            out.append(Problem.at((*at, "defaultPriority"),
                        f"unknown priority {self.default_priority!r}; priorities: {', '.join(self.priority_names)}"))
        teams: set[str] = set()
        owner: dict[str, str] = {}
        for t, team in enumerate(self.teams):
            tat = (*at, "teams", t)
            if problem := dns_label_problem(team.name, "team name"):
                out.append(Problem.at((*tat, "name"), problem))
            if team.name in teams:
                out.append(Problem.at((*tat, "name"), f"duplicate team {team.name!r}"))
            teams.add(team.name)
            for n, namespace in enumerate(team.namespaces):
                if problem := dns_label_problem(namespace, "namespace"):
                    out.append(Problem.at((*tat, "namespaces", n), problem))
                elif namespace in owner and owner[namespace] != team.name:
                    out.append(Problem.at((*tat, "namespaces", n),
                                f"namespace {namespace} already belongs to team {owner[namespace]}; "
                                "a namespace has one queue"))
                owner.setdefault(namespace, team.name)
        return out


def amounts(source: Quota | Limits) -> dict[str, Decimal | None]:
    """cpu, memory and accelerators as numbers of base units (cores, bytes, devices); None where unset."""
    out: dict[str, Decimal | None] = {}
    for resource in RESOURCES:
        value = getattr(source, resource)
        out[resource] = None if value is None else parse_quantity(value)
    return out
