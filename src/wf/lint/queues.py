"""`wf lint` for teams: Kueue objects against the catalog both ways, and steps no quota can ever admit.

Kueue reports neither at submit time: a ClusterQueue edited by hand silently changes a team's share, and a
step that asks for more than its team's quota plus everything it may borrow waits in the queue forever.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import yaml

from wf.compile.kinds import kind_of_template
from wf.core.constants import CRON_WORKFLOW
from wf.core.errors import PathKey, Problem
from wf.core.loader import Document
from wf.core.units import parse_quantity
from wf.model.catalog import Catalog
from wf.model.quotas import FlavorQuota, flavor_quotas
from wf.model.teams import RESOURCES, Queues, Team
from wf.render.kueue import objects, resource_name, show_amount

Key = tuple[str, str, str]  # kind, namespace ("" when cluster-scoped), name


def _key(obj: dict[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return str(obj.get("kind")), str(meta.get("namespace") or ""), str(meta.get("name"))


def _describe(key: Key) -> str:
    kind, namespace, name = key
    return f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"


def _show(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=True, width=10_000).strip().removesuffix("...").strip()


def check_kueue_objects(catalog: Catalog, docs: list[Document]) -> list[Problem]:
    """Each linted Kueue object is what the catalog generates, and every generated object is among them."""
    if catalog.queues is None:
        return [doc.problem((), f"{_describe(_key(doc.data))}: the catalog {catalog.source} has no teams "
                                "(no `queues:` section) to generate it from") for doc in docs]
    wanted = {_key(obj): obj for obj in objects(catalog)}
    problems: list[Problem] = []
    seen: set[Key] = set()
    for doc in docs:
        key = _key(doc.data)
        seen.add(key)
        want = wanted.get(key)
        if want is None:
            problems.append(doc.problem(("metadata", "name"), f"{_describe(key)} is not generated from the catalog "
                                                              f"{catalog.source}"))
            continue
        for field in sorted(set(want) | set(doc.data)):
            if field == "metadata":
                continue
            problems += _differences(doc, (field,), doc.data.get(field), want.get(field), key)
    first = docs[0]
    for key in wanted:
        if key not in seen:
            problems.append(Problem(first.file, None, None,
                                    f"{_describe(key)} of the catalog {catalog.source} is missing "
                                    "(run `wf kueue generate`)"))
    return problems


def _differences(doc: Document, at: tuple[PathKey, ...], have: Any, want: Any, key: Key,
                 where: str = "") -> list[Problem]:
    """Mappings compared key by key and lists of named items name by name, so the message names the field
    (`flavors[gaudi-spot].habana.ai/gaudi.borrowingLimit`); anything else as a whole."""
    where = where or ".".join(map(str, at))
    if isinstance(have, dict) and isinstance(want, dict):
        out: list[Problem] = []
        for field in sorted(set(have) | set(want), key=str):
            out += _differences(doc, (*at, field), have.get(field), want.get(field), key, f"{where}.{field}")
        return out
    if _by_name(have) is not None and _by_name(want) is not None and len(have) == len(want):
        have_items, want_items = _by_name(have), _by_name(want)
        assert have_items is not None and want_items is not None
        if list(have_items) == list(want_items):
            out = []
            for index, name in enumerate(want_items):
                out += _differences(doc, (*at, index), have_items[name], want_items[name], key, f"{where}[{name}]")
            return out
    if _same(have, want):
        return []
    if have is None:
        return [doc.problem(at[:-1], f"{_describe(key)}: {where} is missing; the catalog generates {_show(want)}")]
    if want is None:
        return [doc.problem(at, f"{_describe(key)}: {where} is not generated from the catalog")]
    return [doc.problem(at, f"{_describe(key)}: {where} is {_show(have)}; the catalog generates {_show(want)}")]


def _by_name(value: Any) -> dict[str, Any] | None:
    """A list of mappings keyed by their `name` (or, for resource groups, by position), else None."""
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        return None
    if all("name" in v for v in value):
        return {str(v["name"]): v for v in value}
    return {str(i): v for i, v in enumerate(value)}


def _same(have: Any, want: Any) -> bool:
    """Equal, quantities compared by value (a hand-written `1Ti` is the generated `1024Gi`)."""
    if isinstance(have, list) and isinstance(want, list):
        return len(have) == len(want) and all(_same(h, w) for h, w in zip(have, want, strict=True))
    if isinstance(have, dict) and isinstance(want, dict):
        return have.keys() == want.keys() and all(_same(have[k], want[k]) for k in want)
    if have == want:
        return True
    try:
        return (isinstance(have, (str, int)) and isinstance(want, (str, int)) and not isinstance(have, bool)
                and parse_quantity(have) == parse_quantity(want))
    except ValueError:
        return False


def admission_ceiling(catalog: Catalog, queues: Queues, team: Team, compute_class: str, capacity: str,
                      resource: str) -> tuple[Decimal, str]:
    """The most of `resource` on a class x capacity the team's ClusterQueue can ever be admitted, and how:
    its nominal quota plus what it may borrow, which is bounded by its borrowing limit and by what the
    other teams of the cohort can lend (their lending limit, else their whole quota)."""

    def quota_of(t: Team) -> FlavorQuota | None:
        return next((q for q in flavor_quotas(catalog, t)
                     if (q.compute_class, q.capacity) == (compute_class, capacity)), None)

    own = quota_of(team)
    nominal = own.nominal[resource] if own else Decimal(0)
    lendable = Decimal(0)
    for other in queues.teams:
        if other.name == team.name or (theirs := quota_of(other)) is None:
            continue
        limit = theirs.lending[resource]
        lendable += theirs.nominal[resource] if limit is None else min(limit, theirs.nominal[resource])
    limit = own.borrowing[resource] if own else None
    borrow = lendable if limit is None else min(limit, lendable)
    return nominal + borrow, f"quota {show_amount(resource, nominal)} + borrowing up to {show_amount(resource, borrow)}"


def inadmissible(manifest: dict[str, Any], catalog: Catalog) -> list[Problem]:
    """A finding for every queued template whose pods ask for more than their team can ever be admitted: what its
    step kind says Kueue admits at once (a step's pod, or all replicas of a multi-node step's MPIJob)."""
    queues = catalog.queues
    namespace = (manifest.get("metadata") or {}).get("namespace")
    team = queues.team_of_namespace(namespace) if queues and namespace else None
    if queues is None or team is None:
        return []
    spec = manifest.get("spec") or {}
    at: tuple[PathKey, ...] = ("spec",)
    if manifest.get("kind") == CRON_WORKFLOW.kind:
        spec, at = spec.get("workflowSpec") or {}, ("spec", "workflowSpec")
    out = []
    for i, template in enumerate(spec.get("templates") or []):
        if not isinstance(template, dict):
            continue
        for demand in kind_of_template(template).demand(template):
            try:
                cls = catalog.compute_class(demand.compute_class)
            except KeyError:
                continue  # an unknown class is the schedulability check's finding
            for capacity in demand.capacities or (cls.default_capacity,):
                for resource in RESOURCES:
                    try:
                        name = resource_name(cls, resource)
                        asked = demand.requests[name]
                    except KeyError:  # a class without accelerators, or a resource the pod does not ask for
                        continue
                    ceiling, how = admission_ceiling(catalog, queues, team, cls.name, capacity, resource)
                    if asked > ceiling:
                        out.append(Problem.at((*at, "templates", i),
                                   f"template {template.get('name')!r} asks for {show_amount(resource, asked)} "
                                   f"{name} on {cls.name} {capacity}, but team {team.name} can be admitted at most "
                                   f"{show_amount(resource, ceiling)} ({how}): it would wait in the queue forever"))
    return out
