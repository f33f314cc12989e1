"""A team's quotas resolved against the catalog: amounts per compute class x capacity, with the cpu and memory
that accelerator cards bring with their nodes. Read by Kueue's renderer, Kueue lint and `wf queue`."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal

from wf.model.catalog import Catalog
from wf.model.nodegroups import node_group
from wf.model.teams import RESOURCES, Team, amounts


@dataclass(frozen=True)
class FlavorQuota:
    """One team's quota on one compute class x capacity, resolved against the catalog."""

    team: str
    compute_class: str
    capacity: str
    nominal: dict[str, Decimal]  # by catalog resource name (cpu, memory, accelerators)
    borrowing: dict[str, Decimal | None]
    lending: dict[str, Decimal | None]

    def ceiling(self, resource: str) -> Decimal | None:
        """The most the team can ever be admitted: its quota plus what it may borrow (None: no limit)."""
        borrow = self.borrowing.get(resource)
        return None if borrow is None else self.nominal[resource] + borrow


def flavor_quotas(catalog: Catalog, team: Team) -> Iterator[FlavorQuota]:
    for quota in team.quotas:
        cls = catalog.compute_class(quota.compute)
        none: dict[str, Decimal | None] = dict.fromkeys(RESOURCES)
        nominal = amounts(quota)
        if cls.accelerator and quota.accelerators:
            # Cards come with their nodes' cpu and memory: a quota of 64 cards that left cpu at 0 would
            # admit nothing, so unless given, cpu and memory are those of the nodes the cards fill.
            nodes = -(-quota.accelerators // cls.accelerator.count)
            # What every node of the class offers, as placement sizes a step's defaults (wf.model.nodegroups).
            least = node_group(cls, catalog, quota.capacity or cls.default_capacity).least_allocatable()
            if nominal["cpu"] is None:
                nominal["cpu"] = nodes * least["cpu"]
            if nominal["memory"] is None:
                nominal["memory"] = nodes * least["memory"]
        yield FlavorQuota(
            team=team.name,
            compute_class=cls.name,
            capacity=quota.capacity or cls.default_capacity,
            nominal={k: v or Decimal(0) for k, v in nominal.items()},
            borrowing=amounts(quota.borrowing_limit) if quota.borrowing_limit else none,
            lending=amounts(quota.lending_limit) if quota.lending_limit else none,
        )
