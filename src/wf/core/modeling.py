"""Shared pydantic plumbing: strict models, and validation errors turned into file:line: field problems."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError

from wf.core.constants import (
    DNS1123_LABEL,
    DNS1123_LABEL_MAX,
    DNS1123_SUBDOMAIN,
    DNS1123_SUBDOMAIN_MAX,
    LABEL_VALUE,
    LABEL_VALUE_MAX,
    QUALIFIED_NAME,
)
from wf.core.errors import InputError, PathKey, Problem
from wf.core.loader import Document

M = TypeVar("M", bound="StrictModel")


# Set in the validation context when the caller will run the semantic checks itself, to map them to lines.
DEFER_CHECKS = "wf.defer_checks"


def _as_text(value: Any) -> Any:
    """YAML reads `sleep 10` args, env values and annotations like `inject: false` as numbers and booleans;
    Kubernetes wants strings, so scalars are taken as the text the developer wrote."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return value


Text = Annotated[str, BeforeValidator(_as_text)]


class StrictModel(BaseModel):
    """Unknown keys are errors; YAML names (camelCase) and Python names both work."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=False)


def dns_label_problem(value: str, what: str = "name") -> str | None:
    if len(value) > DNS1123_LABEL_MAX or not DNS1123_LABEL.match(value):
        return f"{what} {value!r} must be a DNS-1123 label (lowercase letters, digits and '-', at most 63)"
    return None


def label_key_problem(key: str) -> str | None:
    """Kubernetes label/annotation key syntax: optional DNS subdomain prefix, '/', qualified name."""
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > DNS1123_SUBDOMAIN_MAX or not DNS1123_SUBDOMAIN.match(prefix)):
        return f"label key {key!r}: prefix {prefix!r} must be a DNS subdomain"
    if not name or len(name) > DNS1123_LABEL_MAX or not QUALIFIED_NAME.match(name):
        return f"label key {key!r}: name part must be 1-63 alphanumerics, '-', '_' or '.'"
    return None


def label_value_problem(key: str, value: str) -> str | None:
    if len(value) > LABEL_VALUE_MAX or not LABEL_VALUE.match(value):
        return f"label {key!r}: value {value!r} must be at most 63 alphanumerics, '-', '_' or '.'"
    return None


def labels_problems(labels: dict[str, str], path: tuple[PathKey, ...]) -> list[Problem]:
    out = []
    for key, value in labels.items():
        problem = label_key_problem(key) or label_value_problem(key, value)
        if problem:
            out.append(Problem.at((*path, key), problem))
    return out


def _message(error: Any) -> str:
    kind = error["type"]
    if kind == "extra_forbidden":
        return "unknown field"
    if kind == "missing":
        return "required field is missing"
    if kind == "literal_error":
        return f"{error['msg'].replace('Input should be', 'must be')} (got {error['input']!r})"
    return str(error["msg"]).removeprefix("Value error, ")


def _data_path(data: Any, loc: tuple[Any, ...]) -> tuple[PathKey, ...]:
    """pydantic's error location as a path into the document: union member labels ("str", "SecretRef") dropped."""
    path: list[PathKey] = []
    node = data
    for key in loc:
        in_list = isinstance(node, list) and isinstance(key, int) and 0 <= key < len(node)
        if isinstance(node, dict) and key in node or in_list:
            node = node[key]
        elif isinstance(node, dict) and isinstance(key, str) and key[:1].islower():
            path.append(key)  # a missing field's name: keep it, the line is its parent's
            break
        else:
            continue
        path.append(key)
    return tuple(path)


def parse_model(model: type[M], doc: Document) -> M:
    """Validate a document into `model`, reporting every error with its file, line and field."""
    try:
        value = model.model_validate(doc.data, context={DEFER_CHECKS: True})
    except ValidationError as exc:
        found: dict[tuple[PathKey, ...], str] = {}
        for error in exc.errors():
            # A union reports one error per member at the same place; the first says enough.
            found.setdefault(_data_path(doc.data, tuple(error["loc"])), _message(error))
        # Rules across fields, over the parts that did validate: one load reports every error in the file.
        for problem in getattr(model, "salvaged_problems", lambda data: [])(doc.data):
            found.setdefault(problem.path, problem.message)
        raise InputError([doc.problem(path, message) for path, message in found.items()]) from None
    problems = value.problems()  # type: ignore[attr-defined]
    if problems:
        raise InputError([doc.locate(p) for p in problems])
    return value


def raise_problems(problems: Sequence[Problem], source: str = "<python>") -> None:
    """For models built in Python: the same checks, reported with field paths instead of lines."""
    if problems:
        raise InputError([p.in_file(source) for p in problems])
