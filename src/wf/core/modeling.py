"""Shared pydantic plumbing: strict models, and validation errors turned into file:line: field problems in the
developer's words (no pydantic wording; "did you mean" for a misspelt key or choice).

Text fields (argv, env values, parameters, labels, annotations, fan-out items) keep the text as written. YAML 1.1
reads plain `1.10`, `on`, `010` and `~` as 1.1, true, 8 and null: converted back, the program would get other
arguments than the ones in the file, silently. Refusing them with "quote it" would be safe too, but would turn
every `sleep 10` and `--epochs 40` that works today into an error, for values whose meaning is not in doubt: in a
text field, a plain scalar is its text. So a text field that YAML typed is read again from the document's source
(`parse_model`); models built in Python take `str(value)`, which is what the caller wrote there.
"""

from __future__ import annotations

import re
import types
from collections.abc import Sequence
from typing import Annotated, Any, TypeVar, Union, get_args, get_origin

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, ValidationError, ValidationInfo
from pydantic_core import PydanticCustomError

from wf.core.constants import (
    DNS1123_LABEL,
    DNS1123_LABEL_MAX,
    DNS1123_SUBDOMAIN,
    DNS1123_SUBDOMAIN_MAX,
    LABEL_VALUE,
    LABEL_VALUE_MAX,
    QUALIFIED_NAME,
)
from wf.core.errors import InputError, PathKey, Problem, did_you_mean
from wf.core.loader import Document

M = TypeVar("M", bound="StrictModel")


# Set in the validation context when the caller will run the semantic checks itself, to map them to lines.
DEFER_CHECKS = "wf.defer_checks"
# Set when the data was read from a document: a text field that YAML typed asks for its source text.
AS_WRITTEN = "wf.as_written"
_TYPED_TEXT = "wf_typed_text"


def _as_text(value: Any, info: ValidationInfo) -> Any:
    """A text field's value as the developer wrote it (see the module docstring)."""
    if isinstance(value, str) or not (value is None or isinstance(value, (bool, int, float))):
        return value
    if (info.context or {}).get(AS_WRITTEN):
        raise PydanticCustomError(_TYPED_TEXT, "must be text: quote it")  # parse_model takes the source text
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if value is None else str(value)


def _no_nul(value: str) -> str:
    """A NUL ends a C string: runc starts a step's program with exec, which takes its arguments and environment
    as C strings, so a program given one never starts (Go's syscall.Exec refuses it with EINVAL)."""
    if "\0" in value:
        raise ValueError(f"holds a NUL character (at {value.index(chr(0))}), which no program's argument or "
                         "environment can")
    return value


Text = Annotated[str, BeforeValidator(_as_text), AfterValidator(_no_nul)]


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


_WHOLE_NUMBER = "must be a whole number"
# pydantic's error types in the developer's words; `ctx` fills the placeholders.
_MESSAGES = {
    "missing": "required field is missing",
    "string_type": "must be text",
    "int_type": _WHOLE_NUMBER, "int_parsing": _WHOLE_NUMBER, "int_from_float": _WHOLE_NUMBER,
    "float_type": "must be a number", "float_parsing": "must be a number",
    "finite_number": "must be a finite number",
    "bool_type": "must be true or false", "bool_parsing": "must be true or false",
    "list_type": "must be a list", "dict_type": "must be a mapping", "model_type": "must be a mapping",
    "model_attributes_type": "must be a mapping",
    "greater_than_equal": "must be at least {ge}", "greater_than": "must be more than {gt}",
    "less_than_equal": "must be at most {le}", "less_than": "must be less than {lt}",
    "too_long": "must have at most {max_length} items", "string_too_long": "must be at most {max_length} characters",
    "string_too_short": "must not be empty", "string_pattern_mismatch": "must match {pattern}",
}


def _message(error: Any, model: type[BaseModel]) -> str:
    kind, ctx = error["type"], error.get("ctx") or {}
    if kind == "extra_forbidden":
        return "unknown field" + did_you_mean(error["loc"][-1], _keys_at(model, tuple(error["loc"])))
    if kind == "literal_error":
        choices = re.findall(r"'([^']*)'", str(ctx.get("expected", "")))
        return f"must be {ctx.get('expected')} (got {error['input']!r})" + did_you_mean(error["input"], choices)
    if kind == "too_short":
        return "must not be empty" if ctx.get("min_length") == 1 else f"must have at least {ctx['min_length']} items"
    if kind in _MESSAGES:
        return _MESSAGES[kind].format(**ctx)
    return str(error["msg"]).removeprefix("Value error, ").replace("Input should be", "must be")


def _members(annotation: Any) -> list[Any]:
    """The types a field's annotation allows: union members, Annotated unwrapped."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _members(get_args(annotation)[0])
    if origin is Union or origin is types.UnionType:
        return [member for arg in get_args(annotation) for member in _members(arg)]
    return [annotation]


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _keys_at(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The keys (YAML names) of the mapping that holds the unknown key at pydantic's `loc`. The location also
    holds union member labels ("SecretRef", "list[...]"): a step that leads nowhere is one, and is passed over."""
    at: list[Any] = [model]
    for key in loc[:-1]:
        inside: list[Any] = []
        for member in (m for annotation in at for m in _members(annotation)):
            if _is_model(member):
                inside += [f.annotation for name, f in member.model_fields.items() if key in (name, f.alias)]
            elif get_origin(member) is list and isinstance(key, int):
                inside.append(get_args(member)[0])
            elif get_origin(member) is dict:
                inside.append(get_args(member)[1])
        at = inside or at
    return [f.alias or name for annotation in at for member in _members(annotation) if _is_model(member)
            for name, f in member.model_fields.items()]


def _data_path(data: Any, error: Any) -> tuple[tuple[PathKey, ...], bool]:
    """pydantic's error location as a path into the document, and whether it passed union member labels ("str",
    "SecretRef", "function-before[...]"), which are dropped."""
    loc = tuple(error["loc"])
    missing = error["type"] == "missing"  # the last key is the missing field's name: kept, its line is its parent's
    path: list[PathKey] = []
    labelled = False
    node = data
    for key in loc[:-1] if missing else loc:
        in_list = isinstance(node, list) and isinstance(key, int) and 0 <= key < len(node)
        if isinstance(node, dict) and key in node or in_list:
            node = node[key]
            path.append(key)
        elif key != "[key]":  # pydantic's mark of a mapping key's error, at the key's own path
            labelled = True
    return (*path, *loc[-1:]) if missing else tuple(path), labelled


def _replaced(data: Any, texts: dict[tuple[PathKey, ...], str]) -> Any:
    """`data` with the values at these paths replaced, sharing every container it leaves as it was."""
    if () in texts:
        return texts[()]
    inner: dict[PathKey, dict[tuple[PathKey, ...], str]] = {}
    for path, text in texts.items():
        inner.setdefault(path[0], {})[path[1:]] = text
    copy = dict(data) if isinstance(data, dict) else list(data)
    for key, below in inner.items():
        copy[key] = _replaced(data[key], below)  # type: ignore[index]
    return copy


def _validated(model: type[M], doc: Document) -> tuple[Any, M | ValidationError]:
    """The document's data with its text fields as written, and the model of it (or why there is none)."""
    context = {DEFER_CHECKS: True, AS_WRITTEN: True}
    try:
        return doc.data, model.model_validate(doc.data, context=context)
    except ValidationError as exc:
        typed = [_data_path(doc.data, e)[0] for e in exc.errors() if e["type"] == _TYPED_TEXT]
        if not typed:
            return doc.data, exc
    # Only then is the source composed again: a spec whose text fields are all strings pays nothing.
    texts = zip(typed, doc.as_written(typed), strict=True)
    data = _replaced(doc.data, {path: text for path, text in texts if text is not None})
    try:
        return data, model.model_validate(data, context=context)
    except ValidationError as exc:
        return data, exc


def parse_model(model: type[M], doc: Document) -> M:
    """Validate a document into `model`, reporting every error with its file, line and field."""
    data, value = _validated(model, doc)
    if isinstance(value, ValidationError):
        found: dict[tuple[PathKey, ...], str] = {}
        in_unions: set[tuple[PathKey, ...]] = set()
        for error in value.errors():
            # A union reports one error per member at the same place; the first says enough.
            path, labelled = _data_path(data, error)
            found.setdefault(path, _message(error, model))
            if labelled:
                in_unions.add(path)
        # ... unless a member's errors lie deeper inside the value: that member is the form the developer meant
        # (`env: {A: {secrett: s}}` is a misspelt secret, not text).
        inner = {path[:i] for path in found for i in range(len(path))}
        found = {path: message for path, message in found.items() if path not in in_unions or path not in inner}
        # Rules across fields, over the parts that did validate: one load reports every error in the file.
        for problem in getattr(model, "salvaged_problems", lambda data: [])(data):
            found.setdefault(problem.path, problem.message)
        raise InputError([doc.problem(path, message) for path, message in found.items()])
    problems = value.problems()  # type: ignore[attr-defined]
    if problems:
        raise InputError([doc.locate(p) for p in problems])
    return value


def raise_problems(problems: Sequence[Problem], source: str = "<python>") -> None:
    """For models built in Python: the same checks, reported with field paths instead of lines."""
    if problems:
        raise InputError([p.in_file(source) for p in problems])
