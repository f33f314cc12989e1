"""wf.argo against upstream's Argo JSON Schema and examples (the release the local cluster runs; int-or-string
overlay, strictified), read in place from the Go module cache.

* every corpus document upstream accepts, we accept; no document (Argo or not) crashes us;
* mutations (an unknown key injected at a random object, a scalar replaced by an object) are rejected by
  us exactly where upstream-strict rejects them;
* our table has the same fields as upstream's definitions and is never stricter.
"""

from __future__ import annotations

import copy
import json
import random
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from upstream import ARGO, INT_OR_STRING, QUANTITY, strictify, with_int_or_string
from wf.argo import validate as validate_manifest
from wf.argo.schema import TABLE_PATH

KINDS = ("Workflow", "WorkflowTemplate", "ClusterWorkflowTemplate", "CronWorkflow")


def validate(manifest: Any) -> list[tuple[tuple[Any, ...], str]]:
    """The findings as (path, message): what these tests compare with upstream's verdicts."""
    return [(p.path, p.message) for p in validate_manifest(manifest)]



@pytest.fixture(scope="module")
def upstream_schema() -> dict[str, Any]:
    return with_int_or_string(json.loads(ARGO.file("api/jsonschema/schema.json").read_text(encoding="utf-8")))


@pytest.fixture(scope="module")
def upstream(upstream_schema: dict[str, Any]) -> dict[str, Any]:
    from jsonschema import Draft202012Validator

    strict = copy.deepcopy(upstream_schema)
    strictify(strict)
    strict.pop("oneOf")
    validators = {}
    for kind in KINDS:
        root = dict(strict, **{"$ref": f"#/definitions/io.argoproj.workflow.v1alpha1.{kind}"})
        validators[kind] = Draft202012Validator(root)
    return validators


def corpus_documents() -> Iterator[tuple[str, int, Any]]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    corpus = ARGO.file("examples")
    for path in sorted(corpus.rglob("*.yaml")):
        with path.open(encoding="utf-8") as stream:
            for index, document in enumerate(yaml.load_all(stream, Loader=loader)):
                yield str(path.relative_to(corpus)), index, document


def is_argo(document: Any) -> bool:
    return isinstance(document, dict) and document.get("kind") in KINDS


def test_corpus_agreement(upstream: dict[str, Any]) -> None:
    counts: Counter[str] = Counter()
    disagreements = []
    for name, index, document in corpus_documents():
        ours = validate(document)  # must not raise, whatever the document is
        if not is_argo(document):
            counts["other"] += 1
            assert ours, f"{name}#{index}: a non-Argo document must be reported"
            continue
        counts["argo"] += 1
        rejected_upstream = next(upstream[document["kind"]].iter_errors(document), None) is not None
        counts["upstream rejects"] += rejected_upstream
        counts["we reject"] += bool(ours)
        if ours and not rejected_upstream:
            disagreements.append((name, index, ours))
    print(f"corpus: {dict(counts)}")
    assert disagreements == []
    # The v4.0.7 corpus is 210 files: 216 Argo documents (upstream accepts them all) and 5 others.
    assert counts == {"argo": 216, "other": 5, "upstream rejects": 0, "we reject": 0}


def _objects(node: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], dict[str, Any]]]:
    if isinstance(node, dict):
        yield path, node
        for key, value in node.items():
            yield from _objects(value, path + (key,))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _objects(value, path + (index,))


def _scalars(node: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if isinstance(node, dict):
        items: Any = node.items()
    elif isinstance(node, list):
        items = enumerate(node)
    else:
        if path and node is not None:
            yield path
        return
    for key, value in items:
        yield from _scalars(value, path + (key,))


def _at(document: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        document = document[step]
    return document


def _valid_corpus(upstream: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (f"{name}#{index}", document)
        for name, index, document in corpus_documents()
        if is_argo(document) and not validate(document) and upstream[document["kind"]].is_valid(document)
    ]


def test_unknown_key_mutations_agree_with_upstream(upstream: dict[str, Any]) -> None:
    rng = random.Random(20240605)
    outcomes: Counter[str] = Counter()
    for name, document in _valid_corpus(upstream):
        objects = [path for path, _ in _objects(document)]
        for path in rng.sample(objects, min(4, len(objects))):
            mutated = copy.deepcopy(document)
            _at(mutated, path)["wfInjectedField"] = "1"  # valid as a string and as a quantity
            ours = validate(mutated)
            rejected_upstream = not upstream[document["kind"]].is_valid(mutated)
            where = f"{name} at {path}"
            if rejected_upstream:
                # In a typed object the key is unknown; in a map of objects ("hooks") the value is not one.
                assert [problem_path for problem_path, _ in ours] == [path + ("wfInjectedField",)], where
                outcomes["unknown field"] += ours[0][1] == "unknown field 'wfInjectedField'"
                outcomes["both reject"] += 1
            elif ours:
                # Only stricter where hera has a field-less placeholder model and upstream an open object.
                assert len(ours) == 1 and "takes no fields" in ours[0][1], (where, ours)
                outcomes["only we reject (placeholder)"] += 1
            else:
                outcomes["both accept (free-form)"] += 1
    print(f"unknown-key mutations: {dict(outcomes)}")  # shown with pytest -s
    assert outcomes["unknown field"] > 500
    assert outcomes["both accept (free-form)"] > 0  # maps (labels, annotations) and withItems are open


def test_wrong_type_mutations_agree_with_upstream(upstream: dict[str, Any]) -> None:
    rng = random.Random(7)
    outcomes: Counter[str] = Counter()
    for name, document in _valid_corpus(upstream):
        scalars = list(_scalars(document))
        for path in rng.sample(scalars, min(4, len(scalars))):
            mutated = copy.deepcopy(document)
            _at(mutated, path[:-1])[path[-1]] = ["not", "a", "scalar"]
            ours = validate(mutated)
            rejected_upstream = not upstream[document["kind"]].is_valid(mutated)
            assert bool(ours) == rejected_upstream, (name, path, ours)
            if ours:
                assert [problem_path for problem_path, _ in ours] == [path], (name, ours)
            outcomes["both reject" if ours else "both accept"] += 1
    print(f"wrong-type mutations: {dict(outcomes)}")
    assert outcomes["both reject"] > 500


def _upstream_type(definitions: dict[str, Any], schema: dict[str, Any]) -> Any:
    """Upstream's schema fragment in the table's type encoding."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[1]
        target = definitions[name]
        if name == INT_OR_STRING:
            return "int-or-string"
        if name == QUANTITY:
            return "quantity"
        if "properties" in target or target.get("type") == "object":
            return "@" + name
        return _upstream_type(definitions, target)
    kind = schema.get("type")
    if kind == "array":
        return ["list", _upstream_type(definitions, schema["items"])]
    if kind == "object":
        if "additionalProperties" in schema:
            return ["map", _upstream_type(definitions, schema["additionalProperties"])]
        return "object"
    return kind or "any"


def test_table_has_upstreams_fields_and_is_never_stricter(upstream_schema: dict[str, Any]) -> None:
    definitions = upstream_schema["definitions"]
    table = json.loads(TABLE_PATH.read_text(encoding="utf-8"))["models"]
    free_form = {"object", "any"}
    for name, model in table.items():
        upstream_model = definitions[name]
        properties = upstream_model.get("properties", {})
        assert set(model["fields"]) == set(properties), name
        # hera relaxes a few requirements (e.g. Container.image, which templateDefaults may supply).
        assert set(model["required"]) <= set(upstream_model.get("required", [])), name
        for key, ours in model["fields"].items():
            theirs = _upstream_type(definitions, properties[key])
            if isinstance(theirs, str) and theirs.startswith("@") and not definitions[theirs[1:]].get("properties"):
                # An object without properties upstream: a placeholder (ours: must be {}) or free-form.
                assert ours == theirs or ours in free_form, (name, key)
            else:
                assert ours == theirs, (name, key, ours, theirs)
