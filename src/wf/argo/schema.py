"""Strict validation of Argo manifests against the field table derived from hera's models.

Unknown fields, wrong JSON types and missing required fields are problems, reported as
`Problem.at(path, message)` with the path as a tuple of keys and list indices, so a caller holding the YAML
node marks can turn each into `file:line` (`Document.locate`). Nothing here imports hera or pydantic: the table
(`fields.json`, written by `wf.argo.generate`) is plain JSON, loaded once.
"""

from __future__ import annotations

import datetime
import json
from functools import cache
from pathlib import Path as FilePath
from typing import Any

from wf.core.constants import (
    ARGO_KINDS,
    CLUSTER_WORKFLOW_TEMPLATE,
    CRON_WORKFLOW,
    DNS1123_SUBDOMAIN,
    DNS1123_SUBDOMAIN_MAX,
    QUANTITY,
    WORKFLOW,
    WORKFLOW_TEMPLATE,
)
from wf.core.errors import FieldPath, Problem

# The kinds `wf lint` validates, and the hera model (swagger definition) of each.
KIND_MODELS = {k.kind: f"io.argoproj.workflow.{k.version}.{k.kind}" for k in ARGO_KINDS.values()}
KINDS: tuple[str, ...] = tuple(ARGO_KINDS)
# Every Argo kind's: they are one group and version.
_API_VERSION = WORKFLOW.api_version

# Written by `python -m wf.argo.generate` from hera's models.
TABLE_PATH = FilePath(__file__).with_name("fields.json")

Path = FieldPath

# Argo's own caps (workflow/validate): names of templates are used as label values (63), and a
# CronWorkflow's runs append "-<unix time>" to its name (52 + 11 = 63).
_ARGO_NAME_LIMITS = {WORKFLOW_TEMPLATE.kind: 63, CLUSTER_WORKFLOW_TEMPLATE.kind: 63, CRON_WORKFLOW.kind: 52}


class _Model:
    """One object type of the table: its fields by JSON name, and the required ones."""

    __slots__ = ("name", "fields", "required")

    def __init__(self, name: str) -> None:
        self.name = name
        self.fields: dict[str, Any] = {}
        self.required: tuple[str, ...] = ()

    @property
    def short_name(self) -> str:
        return self.name.rsplit(".", 1)[1]


@cache
def _kind_models() -> dict[str, _Model]:
    table = json.loads(TABLE_PATH.read_text(encoding="utf-8"))
    models = {name: _Model(name) for name in table["models"]}

    def link(spec: Any) -> Any:
        # Turn the JSON encoding into what the walker dispatches on: _Model, ("list"|"map", item) or a str.
        if isinstance(spec, list):
            return (spec[0], link(spec[1]))
        if spec.startswith("@"):
            return models[spec[1:]]
        return spec

    for name, entry in table["models"].items():
        model = models[name]
        model.fields = {key: link(spec) for key, spec in entry["fields"].items()}
        model.required = tuple(entry["required"])
    return {kind: models[name] for kind, name in table["kinds"].items()}


def validate(manifest: Any) -> list[Problem]:
    """All problems of one Argo manifest (empty when valid), in document order."""
    if not isinstance(manifest, dict):
        return [Problem.at((), f"expected an Argo manifest (a mapping), got {_describe(manifest)}")]
    problems: list[Problem] = []
    api_version = manifest.get("apiVersion")
    if api_version is None:
        problems.append(Problem.at((), f"missing required field 'apiVersion' (expected '{_API_VERSION}')"))
    elif isinstance(api_version, str) and api_version != _API_VERSION:
        problems.append(Problem.at(("apiVersion",), f"apiVersion must be '{_API_VERSION}', got {_show(api_version)}"))
    kind = manifest.get("kind")
    model = _kind_models().get(kind) if isinstance(kind, str) else None
    if model is None:
        known = ", ".join(KINDS)
        if kind is None:
            problems.append(Problem.at((), f"missing required field 'kind' (one of {known})"))
        elif not isinstance(kind, str):
            problems.append(Problem.at(("kind",), f"kind must be one of {known}, got {_describe(kind)}"))
        else:
            message = f"unknown kind {_show(kind)}{_suggest(kind, KINDS)}; wf lints {known}"
            problems.append(Problem.at(("kind",), message))
        return problems
    try:
        _check_object(manifest, model, (), problems)
    except RecursionError:
        problems.append(Problem.at((), "manifest is nested too deeply to validate"))
    _check_object_name(manifest.get("metadata"), kind, problems)
    return problems


def _check(value: Any, spec: Any, path: Path, problems: list[Problem]) -> None:
    if spec.__class__ is _Model:
        if value.__class__ is dict:
            _check_object(value, spec, path, problems)
        else:
            problems.append(Problem.at(path, f"expected an object ({spec.short_name}), got {_describe(value)}"))
    elif spec.__class__ is tuple:
        container, item_spec = spec
        if container == "list":
            if value.__class__ is not list:
                problems.append(Problem.at(path, f"expected a list, got {_describe(value)}"))
                return
            for index, item in enumerate(value):
                if item_spec != "string" or item.__class__ is not str:
                    _check(item, item_spec, path + (index,), problems)
        else:
            if value.__class__ is not dict:
                problems.append(Problem.at(path, f"expected a mapping, got {_describe(value)}"))
                return
            for key, item in value.items():
                if key.__class__ is not str:
                    problems.append(Problem.at(path + (key,), f"keys must be strings, got {_describe(key)}"))
                elif item_spec != "string" or item.__class__ is not str:
                    _check(item, item_spec, path + (key,), problems)
    else:
        message = _scalar_problem(value, spec)
        if message:
            problems.append(Problem.at(path, message))


def _check_object(value: dict[Any, Any], model: _Model, path: Path, problems: list[Problem]) -> None:
    fields = model.fields
    for key, item in value.items():
        spec = fields.get(key) if key.__class__ is str else None
        if spec is None:
            problems.append(Problem.at(path + (key,), _unknown_field(key, model)))
        elif item is None:  # null is how YAML spells an omitted optional field (`key:`)
            continue
        elif spec == "string" and item.__class__ is str:
            continue  # the commonest case, checked inline: this runs on every `wf compile`
        else:
            _check(item, spec, path + (key,), problems)
    for key in model.required:
        if value.get(key) is None:
            problems.append(Problem.at(path, f"missing required field '{key}' of {model.short_name}"))


def _scalar_problem(value: Any, spec: str) -> str | None:
    kind = value.__class__
    if spec == "string":
        # PyYAML reads unquoted 2024-01-01 as a date; kubectl's YAML-to-JSON keeps it as this text.
        ok = kind is str or isinstance(value, datetime.date)
    elif spec == "integer":
        ok = kind is int or (kind is float and value.is_integer())
    elif spec == "boolean":
        ok = kind is bool
    elif spec == "int-or-string":
        ok = kind is str or kind is int or (kind is float and value.is_integer())
    elif spec == "number":
        ok = kind is int or kind is float
    elif spec == "quantity":
        if kind is str:
            # Argo substitutes {{...}} expressions before the pod exists; only literal text can be checked.
            if "{{" in value or QUANTITY.match(value):
                return None
            return f"invalid quantity {_show(value)} (Kubernetes quantities look like 500m, 2, 1.5, 32Gi, 1e3)"
        ok = kind is int or kind is float
    elif spec == "object":
        ok = kind is dict
    elif spec == "any":
        return None
    else:
        raise AssertionError(f"unknown type {spec!r} in {TABLE_PATH.name}")
    if ok:
        return None
    return f"expected {_EXPECTED[spec]}, got {_describe(value)}"


_EXPECTED = {
    "string": "a string",
    "integer": "an integer",
    "boolean": "a boolean (true or false)",
    "int-or-string": "an integer or a string",
    "number": "a number",
    "quantity": "a quantity (a number or a string such as 32Gi)",
    "object": "an object",
}


def _check_object_name(metadata: Any, kind: Any, problems: list[Problem]) -> None:
    if not isinstance(metadata, dict):
        return  # already reported by the table walk
    # A manifest with neither name nor generateName is not reported: the API server refuses it, but two
    # of Argo's own examples (fun-with-gifs, k8s-jobs: generateName indented under labels) pass
    # upstream's schema, and lint must accept whatever that schema accepts.
    name, generate_name = metadata.get("name"), metadata.get("generateName")
    limit = _ARGO_NAME_LIMITS.get(kind, DNS1123_SUBDOMAIN_MAX)
    if isinstance(name, str):
        if len(name) > limit:
            problems.append(
                Problem.at(("metadata", "name"),
                           f"{kind} names must not be longer than {limit} characters (has {len(name)})")
            )
        elif not DNS1123_SUBDOMAIN.match(name):
            problems.append(Problem.at(("metadata", "name"), _bad_name(name)))
    if isinstance(generate_name, str) and generate_name:
        # Kubernetes checks the prefix as a name once a trailing '-' is masked.
        masked = generate_name[:-1] + "a" if generate_name.endswith("-") else generate_name
        if not DNS1123_SUBDOMAIN.match(masked):
            problems.append(Problem.at(("metadata", "generateName"), _bad_name(generate_name)))


def _bad_name(name: str) -> str:
    return (
        f"invalid name {_show(name)}: Kubernetes names are lower-case letters, digits, '-' and '.', "
        "starting and ending with a letter or digit"
    )


def _unknown_field(key: Any, model: _Model) -> str:
    if key.__class__ is not str:
        return f"field names must be strings, got {_describe(key)} in {model.short_name}"
    if not model.fields:
        return f"unknown field '{key}': {model.short_name} takes no fields (write {{}})"
    return f"unknown field '{key}'{_suggest(key, model.fields)}"


def _suggest(word: str, choices: Any) -> str:
    import difflib  # only on the error path

    by_case = {choice.lower(): choice for choice in choices}
    plain = word.replace("_", "").replace("-", "").lower()
    match = by_case.get(word.lower()) or by_case.get(plain)
    if match is None:
        close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.75)
        match = close[0] if close else None
    return f" (did you mean '{match}'?)" if match else ""


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"a boolean ({'true' if value else 'false'})"
    if isinstance(value, int):
        return f"an integer ({value})"
    if isinstance(value, float):
        return f"a number ({value})"
    if isinstance(value, str):
        return f"a string ({_show(value)})"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def _show(text: Any) -> str:
    text = str(text)
    return repr(text if len(text) <= 40 else text[:37] + "...")
