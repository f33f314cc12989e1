"""The success and failure conditions of Argo resource templates, judged as Argo v4's executor judges them.

`argoexec resource` (argo-workflows v4.0.7 workflow/executor/resource.go, WaitResource and matchConditions)
parses each condition with Kubernetes' label-selector parser (k8s.io/apimachinery labels.Parse: requirements
separated by commas, keys validated as qualified names, requirements sorted by key) and matches every
requirement against the object's JSON, reading a key as a gjson path and its value as gjson's String(). Then:

- failure requirements are ORed, in key order: the first that matches fails the step with the message
  "failure condition '{<key> <op> [<values>]}' evaluated true" (Go's %s of the requirement value);
- success requirements are ANDed: all matching (or none given) succeeds the step;
- otherwise the object is read again after RESOURCE_STATE_CHECK_INTERVAL.

A qualified name allows only letters, digits, '-', '_', '.' and one '/', so of gjson's path syntax only dotted
keys and array indices can occur: that is all `_lookup` implements.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

# k8s.io/apimachinery/pkg/selection operators, as Go prints them.
EXISTS, DOES_NOT_EXIST = "exists", "!"
EQUALS, DOUBLE_EQUALS, NOT_EQUALS = "=", "==", "!="
IN, NOT_IN, GREATER_THAN, LESS_THAN = "in", "notin", "gt", "lt"
_TOKENS = {")": ")", ",": ",", "!": DOES_NOT_EXIST, "==": DOUBLE_EQUALS, "=": EQUALS, ">": GREATER_THAN,
           "in": IN, "<": LESS_THAN, "!=": NOT_EQUALS, "notin": NOT_IN, "(": "("}
_SPECIAL = set("=!(),><")
_WHITESPACE = set(" \t\r\n")
_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_INTEGER = re.compile(r"[+-]?[0-9]+")


class ConditionError(ValueError):
    """A condition Argo would refuse to parse; the text is Argo's message for the step."""


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str
    values: tuple[str, ...]  # sorted and unique, as labels.Parse leaves them

    def __str__(self) -> str:
        return f"{{{self.key} {self.operator} [{' '.join(self.values)}]}}"

    def matches(self, document: Any) -> bool:
        """labels.Requirement.Matches over gjsonLabels (Has: the path exists; Get: its String())."""
        found, value = _lookup(document, self.key)
        if self.operator in (IN, EQUALS, DOUBLE_EQUALS):
            return found and _text(value) in self.values
        if self.operator in (NOT_IN, NOT_EQUALS):
            return not found or _text(value) not in self.values
        if self.operator == EXISTS:
            return found
        if self.operator == DOES_NOT_EXIST:
            return not found
        if not found or not _INTEGER.fullmatch(text := _text(value)) or not _is_int64(int(text)):
            return False
        wanted = int(self.values[0])
        return int(text) > wanted if self.operator == GREATER_THAN else int(text) < wanted


@dataclass(frozen=True)
class Verdict:
    succeeded: bool
    message: str  # Argo's error text for a failure, "" for success


@dataclass(frozen=True)
class Conditions:
    success: tuple[Requirement, ...]
    failure: tuple[Requirement, ...]
    waits: bool  # False when the template gives neither condition: Argo does not read the object at all

    @classmethod
    def of(cls, resource: dict[str, Any]) -> Conditions:
        """The parsed conditions of a template's `resource`; ConditionError with Argo's message if one does
        not parse."""
        success, failure = resource.get("successCondition") or "", resource.get("failureCondition") or ""
        try:
            success_reqs = parse(success)
        except ValueError as exc:
            raise ConditionError(f"success condition '{success}' failed to parse: {exc}") from None
        try:
            failure_reqs = parse(failure)
        except ValueError as exc:
            raise ConditionError(f"fail condition '{failure}' failed to parse: {exc}") from None
        return cls(success_reqs, failure_reqs, bool(success or failure))

    def judge(self, text: str) -> Verdict | None:
        """The verdict on the object's JSON as the API server returned it; None to read it again later."""
        try:
            document = json.loads(text, parse_int=_Number, parse_float=_Number)
        except ValueError:
            return Verdict(False, "Encountered invalid JSON response when checking resource status. "
                                  f"Will not be retried: {text!r}")
        for requirement in self.failure:
            if requirement.matches(document):
                return Verdict(False, f"failure condition '{requirement}' evaluated true")
        if all(requirement.matches(document) for requirement in self.success):
            return Verdict(True, "")
        return None


def parse(selector: str) -> tuple[Requirement, ...]:
    """labels.Parse: the requirements of `selector`, sorted by key; ValueError naming what is wrong."""
    tokens = _lex(selector)
    position = 0

    def peek() -> tuple[str, str]:
        return tokens[position]

    def take() -> tuple[str, str]:
        nonlocal position
        position += 1
        return tokens[position - 1]

    requirements: list[Requirement] = []
    while True:
        kind, literal = peek()
        if kind == "end":
            break
        if kind not in ("id", IN, NOT_IN, DOES_NOT_EXIST):
            raise ValueError(f"found '{literal}', expected: !, identifier, or 'end of string'")
        operator = ""
        if kind == DOES_NOT_EXIST:
            take()
            operator = DOES_NOT_EXIST
        kind, key = take()
        if kind not in ("id", IN, NOT_IN):
            raise ValueError(f"unable to parse requirement: found '{key}', expected: identifier")
        _check_key(key)
        values: set[str] = set()
        if peek()[0] in ("end", ","):
            operator = operator or EXISTS
        elif operator:
            raise ValueError(f"unable to parse requirement: found '{peek()[1]}', expected: ',' or 'end of string'")
        else:
            operator, literal = take()
            if operator not in (IN, NOT_IN, EQUALS, DOUBLE_EQUALS, NOT_EQUALS, GREATER_THAN, LESS_THAN):
                raise ValueError(f"unable to parse requirement: found '{literal}', expected: "
                                 "in, notin, =, ==, !=, gt, lt")
            if operator in (IN, NOT_IN):
                if take()[0] != "(":
                    raise ValueError("unable to parse requirement: expected: '('")
                values = _value_list(take, peek)
            elif peek()[0] in ("end", ","):
                values = {""}
            else:
                kind, literal = take()
                if kind not in ("id", IN, NOT_IN):
                    raise ValueError(f"unable to parse requirement: found '{literal}', expected: identifier")
                values = {literal}
            _check_values(operator, values)
        requirements.append(Requirement(key, operator, tuple(sorted(values))))
        kind, literal = take()
        if kind == "end":
            break
        if kind != ",":
            raise ValueError(f"found '{literal}', expected: ',' or 'end of string'")
        if peek()[0] not in ("id", DOES_NOT_EXIST, IN, NOT_IN):
            raise ValueError(f"found '{peek()[1]}', expected: identifier after ','")
    return tuple(sorted(requirements, key=lambda r: r.key))


def _lex(selector: str) -> list[tuple[str, str]]:
    """The lexer of labels.Parse: (token kind, literal); identifiers are "id", keywords their operator."""
    tokens: list[tuple[str, str]] = []
    i = 0
    while True:
        while i < len(selector) and selector[i] in _WHITESPACE:
            i += 1
        if i == len(selector):
            tokens.append(("end", ""))
            return tokens
        start = i
        if selector[i] in _SPECIAL:
            # The longest run of special characters that is a token ("!=" before "!").
            best = ""
            while i < len(selector) and selector[i] in _SPECIAL:
                if selector[start:i + 1] in _TOKENS:
                    best = selector[start:i + 1]
                elif best:
                    break
                i += 1
            if not best:
                raise ValueError(f"error expected: keyword found '{selector[start:i]}'")
            i = start + len(best)
            tokens.append((_TOKENS[best], best))
            continue
        while i < len(selector) and selector[i] not in _SPECIAL and selector[i] not in _WHITESPACE:
            i += 1
        word = selector[start:i]
        tokens.append((_TOKENS[word], word) if word in ("in", "notin") else ("id", word))


def _value_list(take: Any, peek: Any) -> set[str]:
    """`( v1, v2 )`: values may be empty ("(,)" is {""}); 'in' and 'notin' are plain words here."""
    values: set[str] = set()
    if peek()[0] == ")":
        take()
        return {""}
    expect_value = True
    while True:
        kind, literal = take()
        if kind in ("id", IN, NOT_IN) and expect_value:
            values.add(literal)
            expect_value = False
        elif kind == ",":
            if expect_value:
                values.add("")
            expect_value = True
        elif kind == ")":
            if expect_value:
                values.add("")
            return values
        else:
            raise ValueError(f"unable to parse requirement: found '{literal}', expected: ',', ')' or identifier")


def _check_key(key: str) -> None:
    """validation.IsQualifiedName: [DNS subdomain '/'] name of at most 63 characters."""
    parts = key.split("/")
    if len(parts) > 2:
        raise ValueError(f"key: Invalid value: {key!r}: a qualified name must consist of alphanumeric "
                         "characters, '-', '_' or '.' with an optional DNS subdomain prefix and '/'")
    name = parts[-1]
    if len(parts) == 2 and (len(parts[0]) > 253 or not _DNS_SUBDOMAIN.fullmatch(parts[0])):
        raise ValueError(f"key: Invalid value: {key!r}: prefix part must be a DNS subdomain")
    if not name or len(name) > 63 or not _NAME.fullmatch(name):
        raise ValueError(f"key: Invalid value: {key!r}: name part must consist of alphanumeric characters, '-', "
                         "'_' or '.', start and end with an alphanumeric character, and be at most 63 characters")


def _check_values(operator: str, values: set[str]) -> None:
    if operator in (GREATER_THAN, LESS_THAN):
        if len(values) != 1:
            raise ValueError("for 'Gt', 'Lt' operators, exactly one value is required")
        (value,) = values
        if not _INTEGER.fullmatch(value) or not _is_int64(int(value)):
            raise ValueError(f"for 'Gt', 'Lt' operators, the value must be an integer: {value!r}")
    if operator in (EQUALS, DOUBLE_EQUALS, NOT_EQUALS) and len(values) != 1:
        raise ValueError("exact-match compatibility requires one single value")
    for value in values:
        if len(value) > 63 or (value and not _NAME.fullmatch(value)):
            raise ValueError(f"values: Invalid value: {value!r}: a label value must be at most 63 characters of "
                             "alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric")


def _is_int64(value: int) -> bool:
    return -(2**63) <= value < 2**63


class _Number:
    """A JSON number with its text kept: gjson's String() of a number is its raw text when that is an integer."""

    __slots__ = ("raw",)

    def __init__(self, raw: str) -> None:
        self.raw = raw


def _lookup(document: Any, path: str) -> tuple[bool, Any]:
    """gjson.Get(document, path): (exists, value) for a dotted path whose parts are keys or array indices."""
    value = document
    for part in path.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return False, None
    return True, value


def _text(value: Any) -> str:
    """gjson Result.String(): null is "", booleans true/false, numbers their integer text or shortest decimal,
    objects and arrays their JSON."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int | float):
        value = _Number(json.dumps(value))
    if isinstance(value, _Number):
        if re.fullmatch(r"-?[0-9]+", value.raw):
            return value.raw
        return format(Decimal(repr(float(value.raw))).normalize(), "f")
    return json.dumps(value, separators=(",", ":"), default=lambda n: json.loads(n.raw))
