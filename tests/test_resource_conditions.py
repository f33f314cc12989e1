"""Argo's resource-template conditions, judged as argoexec judges them (wf.cluster.resource_conditions).

The expectations are Argo v4.0.7's and apimachinery v0.33's (the versions Argo v4.0.7 builds with), read from
workflow/executor/resource.go (matchConditions, gjsonLabels), k8s.io/apimachinery/pkg/labels/selector.go
(Parse, Requirement.Matches) and tidwall/gjson (Result.String), with Argo's documented examples
(docs/resource-template.md / examples/k8s-jobs.yaml: `status.succeeded > 0`, `status.failed > 3`).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from wf.cluster.resource_conditions import ConditionError, Conditions, Requirement, Verdict, parse
from wf.compile.interruptions import is_interruption
from wf.compile.kinds.mpijob import FAILURE_CONDITION, SUCCESS_CONDITION


def judge(success: str, failure: str, document: Any) -> Verdict | None:
    raw = document if isinstance(document, str) else json.dumps(document)
    return Conditions.of({"successCondition": success, "failureCondition": failure}).judge(raw)


def test_argos_job_example() -> None:
    assert judge("status.succeeded > 0", "status.failed > 3", {"status": {"active": 1}}) is None
    assert judge("status.succeeded > 0", "status.failed > 3", {"status": {"succeeded": 1}}) == Verdict(True, "")
    assert judge("status.succeeded > 0", "status.failed > 3", {"status": {"failed": 4}}) == Verdict(
        False, "failure condition '{status.failed gt [3]}' evaluated true")


def test_requirements_are_sorted_by_key_and_printed_as_go_prints_the_value() -> None:
    assert [str(r) for r in parse("b in (y, x), a!=1, !c, d, e == 2, f < 7")] == [
        "{a != [1]}", "{b in [x y]}", "{c ! []}", "{d exists []}", "{e == [2]}", "{f lt [7]}"]


def test_failure_requirements_are_ored_in_key_order_and_success_ones_anded() -> None:
    both_failed = {"status": {"replicaStatuses": {"Launcher": {"failed": 1}, "Worker": {"failed": 1}}}}
    verdict = judge(SUCCESS_CONDITION, FAILURE_CONDITION, both_failed)
    assert verdict == Verdict(False,
                              "failure condition '{status.replicaStatuses.Launcher.failed gt [0]}' evaluated true")
    worker = judge(SUCCESS_CONDITION, FAILURE_CONDITION, {"status": {"replicaStatuses": {"Worker": {"failed": 1}}}})
    assert worker == Verdict(False, "failure condition '{status.replicaStatuses.Worker.failed gt [0]}' evaluated true")
    # A worker lost while mpirun ran, marked before mpirun failed: the mark's key sorts first, whatever else shows.
    marked = {**both_failed, "metadata": {"annotations": {"wf-worker-lost": "w-1: its node n-3 was deleted"}}}
    lost = judge(SUCCESS_CONDITION, FAILURE_CONDITION, marked)
    assert lost == Verdict(False, "failure condition '{metadata.annotations.wf-worker-lost exists []}' evaluated true")
    assert is_interruption(lost.message) and not is_interruption(verdict.message)
    assert judge("a = 1, b = 2", "", {"a": 1, "b": 3}) is None
    assert judge("a = 1, b = 2", "", {"a": 1, "b": 2}) == Verdict(True, "")
    # No success condition: anything not failed has succeeded on the first read.
    assert judge("", "a = x", {"a": "y"}) == Verdict(True, "")


@pytest.mark.parametrize(("selector", "document", "matches"), [
    # Has is gjson's Exists: a JSON null exists; Get is String(): null is "", numbers their text.
    ("a", {"a": None}, True),
    ("!a", {"a": None}, False),
    ("a=", {"a": None}, True),
    ("a notin (x)", {}, True),
    ("a != x", {}, True),
    ("a in (x)", {}, False),
    ("a = true", {"a": True}, True),
    ("a = 2", {"a": 2.0}, True),  # gjson prints 2.0 as 2
    ("a = 1.5", {"a": 1.5}, True),
    ("a > 1", {"a": 1.5}, False),  # not an integer: ParseInt fails, no match
    ("a > 1", {"a": "2"}, True),  # a string of digits compares as a number
    ("a < 0", {"a": -1}, True),
    ("a > 0", {}, False),
    # Dotted paths: object keys, and array elements by index.
    ("status.conditions.1.type = Succeeded",
     {"status": {"conditions": [{"type": "Created"}, {"type": "Succeeded"}]}}, True),
    ("status.conditions.2", {"status": {"conditions": [{}, {}]}}, False),
    ("status.conditions.type = Succeeded", {"status": {"conditions": [{"type": "Succeeded"}]}}, False),
    ("status.x = 1", {"status": "1"}, False),
    # An object or array is its JSON text, which no label value equals.
    ("a = b", {"a": {"b": 1}}, False),
    ("a", {"a": []}, True),
])
def test_matching_follows_gjson_and_apimachinery(selector: str, document: dict[str, Any], matches: bool) -> None:
    assert (judge(selector, "", document) is not None) is matches


def test_numbers_keep_their_text() -> None:
    # 10000000000000000001 is not a float64; gjson compares its raw text, ParseInt reads it exactly.
    assert judge("a = 10000000000000000001", "", '{"a": 10000000000000000001}') == Verdict(True, "")
    assert judge("a = 100", "", '{"a": 1e2}') == Verdict(True, "")


@pytest.mark.parametrize(("selector", "why"), [
    # No JSONPath or gjson queries: a key is a qualified name.
    ("status.conditions[0].type == Succeeded", "key: Invalid value: 'status.conditions[0].type'"),
    ("status.conditions.#(type==Succeeded)", "key: Invalid value: 'status.conditions.#'"),
    ("a =! b", "found '!', expected: identifier"),
    ("a > x", "must be an integer"),
    ("a > -1", "label value"),  # ParseInt accepts it, label-value validation does not
    ("a in ()x", "expected: ',' or 'end of string'"),
    ("a = b c", "expected: ',' or 'end of string'"),
    ("a,", "identifier after ','"),
    ("-a", "name part"),
    ("a" * 64, "at most 63"),
])
def test_what_argo_refuses_to_parse(selector: str, why: str) -> None:
    with pytest.raises(ConditionError, match="success condition '.*' failed to parse") as caught:
        Conditions.of({"successCondition": selector})
    assert why in str(caught.value), caught.value


def test_value_sets() -> None:
    assert parse("a in (x,,y)") == (Requirement("a", "in", ("", "x", "y")),)
    assert parse("a in ()") == (Requirement("a", "in", ("",)),)
    assert parse("in in (in, notin)") == (Requirement("in", "in", ("in", "notin")),)


def test_neither_condition_means_no_wait() -> None:
    assert not Conditions.of({}).waits
    assert Conditions.of({"failureCondition": "a"}).waits


def test_wfs_mpijob_conditions_parse_to_counters_of_the_operator() -> None:
    assert [str(r) for r in parse(SUCCESS_CONDITION)] == ["{status.replicaStatuses.Launcher.succeeded gt [0]}"]
    running = {"status": {"replicaStatuses": {"Launcher": {"active": 1}, "Worker": {"active": 2}},
                          "conditions": [{"type": "Running", "status": "True"}]}}
    assert judge(SUCCESS_CONDITION, FAILURE_CONDITION, running) is None
    done = {"status": {"replicaStatuses": {"Launcher": {"succeeded": 1}, "Worker": {}}}}
    assert judge(SUCCESS_CONDITION, FAILURE_CONDITION, done) == Verdict(True, "")
