"""The marked YAML loader: lines and fields on every error, strict duplicate keys, UTF-8 only, one mapping per
job/catalog file, bounded alias expansion, and the same data as yaml.safe_load for everything it accepts."""

from __future__ import annotations

import contextlib
import math
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from wf.core.errors import InputError, format_path
from wf.core.loader import ALIAS_EXPANSION_ALLOWANCE, Document, load_documents, load_mapping, parse_documents


def one(text: str, strict: bool = True) -> Document:
    docs = parse_documents(text, "t.yaml", strict=strict)
    assert len(docs) == 1
    return docs[0]


def problem_of(exc: pytest.ExceptionInfo[InputError]) -> tuple[str, int | None, str]:
    assert len(exc.value.problems) == 1, exc.value.problems
    p = exc.value.problems[0]
    return p.file, p.line, p.message


NESTED = """\
apiVersion: wf/v1
spec:
  steps:
    - name: a
      resources:
        cpu: 8
    - name: b
      resources: {cpu: banana}
"""


def test_line_of_follows_mapping_keys_and_list_indexes() -> None:
    doc = one(NESTED)
    assert doc.line_of(()) == 1
    assert doc.line_of(("apiVersion",)) == 1
    assert doc.line_of(("spec", "steps", 0, "name")) == 4
    assert doc.line_of(("spec", "steps", 0, "resources", "cpu")) == 6
    assert doc.line_of(("spec", "steps", 1, "resources", "cpu")) == 8


def test_documents_of_a_stream_find_their_own_lines_from_one_composition() -> None:
    """Line lookups compose the text again, once per stream: skipped empty documents keep their place."""
    first, second = parse_documents("a: 1\n---\n---\nb:\n  c: 2\n", "two.yaml")
    assert "nodes" not in vars(first.stream)  # nothing composed until a line is asked for
    assert first.line_of(("a",)) == 1
    assert second.line_of(("b", "c")) == 5
    assert first.stream is second.stream and len(first.stream.nodes) == 3


def test_line_of_a_missing_field_is_its_deepest_existing_parent() -> None:
    doc = one(NESTED)
    # A missing required field is reported where its mapping starts.
    assert doc.line_of(("spec", "steps", 1, "command")) == 7
    assert doc.line_of(("spec", "steps", 9, "name")) == 4  # the list starts at its first "- "
    assert doc.line_of(("spec", "steps", "not-an-index")) == 4


def test_problem_names_file_line_and_field() -> None:
    problem = one(NESTED).problem(("spec", "steps", 1, "resources", "cpu"), "not a quantity")
    assert (problem.file, problem.line, problem.field) == ("t.yaml", 8, "spec.steps[1].resources.cpu")
    assert str(problem) == "t.yaml:8: spec.steps[1].resources.cpu: not a quantity"


def test_format_path() -> None:
    assert format_path(()) == ""
    assert format_path(("spec", "steps", 3, "env", "HF_HOME")) == "spec.steps[3].env.HF_HOME"
    assert format_path((0, "a")) == "[0].a"


def test_duplicate_keys_are_rejected_with_the_line_of_the_second() -> None:
    text = "a: 1\nb:\n  c: 2\n  c: 3\n"
    with pytest.raises(InputError) as exc:
        parse_documents(text, "dup.yaml")
    assert problem_of(exc) == ("dup.yaml", 4, "duplicate key 'c'")


def test_duplicate_keys_are_recorded_when_lenient_and_the_last_wins() -> None:
    doc = one("a: 1\nb:\n  c: 2\n  c: 3\na: 4\n", strict=False)
    assert doc.data == {"a": 4, "b": {"c": 3}}
    assert doc.duplicates == [(4, "c"), (5, "a")]
    # Lines point at the value that is used.
    assert doc.line_of(("b", "c")) == 4
    assert doc.line_of(("a",)) == 5


def test_equal_keys_of_different_spelling_are_duplicates() -> None:
    with pytest.raises(InputError, match="duplicate key 1"):
        parse_documents("1: a\n0x1: b\n", "t.yaml")


def test_non_utf8_names_the_line_of_the_bad_byte(write: Any) -> None:
    path = write("latin1.yaml", b"a: 1\nb: 2\nc: caf\xe9\n")
    with pytest.raises(InputError) as exc:
        load_documents(path)
    file, line, message = problem_of(exc)
    assert (file, line) == (str(path), 3)
    assert "UTF-8" in message and "0xe9" in message


def test_utf8_with_bom_and_non_ascii_text_load(write: Any) -> None:
    path = write("bom.yaml", "\ufeffname: café ☕\n".encode())
    assert load_documents(path)[0].data == {"name": "café ☕"}


def test_missing_file_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError) as exc:
        load_documents(tmp_path / "nope.yaml")
    assert "cannot read" in problem_of(exc)[2]


@pytest.mark.parametrize(
    ("text", "found"),
    [("- a\n- b\n", "list"), ("just text\n", "str"), ("42\n", "int"), ("a: 1\n---\nb: 2\n", "2"), ("", "0"),
     ("# only a comment\n", "0")],
)
def test_job_and_catalog_files_are_exactly_one_mapping(write: Any, text: str, found: str) -> None:
    path = write("x.yaml", text)
    with pytest.raises(InputError) as exc:
        load_mapping(path)
    assert found in problem_of(exc)[2]
    assert problem_of(exc)[0] == str(path)


@pytest.mark.parametrize("text", ["---\na: 1\n", "a: 1\n---\n", "---\n---\na: 1\n---\n# end\n"])
def test_load_mapping_ignores_empty_documents_around_it(write: Any, text: str) -> None:
    assert load_mapping(write("x.yaml", text)).data == {"a": 1}


def test_an_explicit_null_document_is_a_document() -> None:
    assert [d.data for d in parse_documents("null\n---\n~\n", "t.yaml")] == [None, None]


def test_streams_skip_empty_documents_and_keep_their_index() -> None:
    docs = parse_documents("a: 1\n---\n---\nb: 2\n", "t.yaml")
    assert [(d.index, d.data) for d in docs] == [(0, {"a": 1}), (2, {"b": 2})]
    assert docs[1].line_of(("b",)) == 4


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("a: [1, 2\nb: 3\n", 2),  # unclosed flow sequence
        ("a: 1\n b: 2\n", 2),  # bad indentation
        ("a:\n\t- x\n", 2),  # tab indentation
        ("a: 'unterminated\n", 2),
        ("a: 1\n- b\n", 2),
        ("key: *undefined\n", 1),
    ],
)
def test_syntax_errors_name_the_line(text: str, line: int) -> None:
    with pytest.raises(InputError) as exc:
        parse_documents(text, "bad.yaml")
    file, got, message = problem_of(exc)
    assert (file, got) == ("bad.yaml", line)
    assert message.startswith("invalid YAML: ")


@pytest.mark.parametrize(("text", "line", "code"), [
    ("a: 1\nb: x\x00y\n", 2, "U+0000"),
    ("a: 1\n# caf\u00e9 \u2615\nb: [\x07]\n", 3, "U+0007"),  # wide characters before it: still its line
    ("a: 1\n---\nb: 2\nc: \x1b\n", 4, "U+001B"),  # in a later document
    ("a: \x85\nb: \x9f\n", 2, "U+009F"),
])
def test_characters_yaml_does_not_read_name_their_line(text: str, line: int, code: str) -> None:
    with pytest.raises(InputError) as exc:
        parse_documents(text, "bad.yaml")
    file, got, message = problem_of(exc)
    assert (file, got) == ("bad.yaml", line)
    assert message.startswith(f"control character {code} is not allowed in YAML text")


@pytest.mark.parametrize(("text", "line"), [("a: 1\n---\nb: 2\n", 3), ("---\na: 1\n---\n\n# x\nb: 2\n---\nc: 3\n", 6)])
def test_a_second_document_where_one_belongs_names_its_line(write: Any, text: str, line: int) -> None:
    path = write("x.yaml", text)
    with pytest.raises(InputError) as exc:
        load_mapping(path)
    assert problem_of(exc)[:2] == (str(path), line)
    assert "a second YAML document" in problem_of(exc)[2]


def test_unsupported_tags_are_errors_not_objects() -> None:
    with pytest.raises(InputError, match="unsupported YAML tag"):
        parse_documents("a: !!python/name:os.system ''\n", "t.yaml")


def test_timestamps_stay_text_even_when_they_are_no_date() -> None:
    assert one("a: 2026-01-02\nb: 2001-13-45\n").data == {"a": "2026-01-02", "b": "2001-13-45"}


@pytest.mark.parametrize("text", ["a: !!int ''\n", "a: !!bool maybe\n", "a: !!float x\n", "!!int"])
def test_explicit_tags_with_values_they_cannot_hold_are_input_errors(text: str) -> None:
    with pytest.raises(InputError, match="invalid (int|bool|float)"):
        parse_documents(text, "t.yaml")


def test_an_integer_python_refuses_to_convert_is_an_input_error() -> None:
    with pytest.raises(InputError) as exc:
        parse_documents("a: 1\nb: " + "9" * 5000 + "\n", "t.yaml")
    assert problem_of(exc)[1] == 2


@pytest.mark.parametrize("text", ["[" * 50_000 + "]" * 50_000, "- " * 30_000 + "x\n", "{a: " * 40_000 + "}" * 40_000,
                                  "a: " + "[" * 900 + "]" * 900 + "\n"])
def test_deep_nesting_is_an_input_error_not_a_crash(text: str) -> None:
    # libyaml's composer recurses in C: 60 KB of "- - - ..." used to kill the process with SIGSEGV.
    # Ours, or PyYAML's own limit (6.0.4 added one): either way an input error, never a crash.
    with pytest.raises(InputError, match="nested too deeply|maximum nesting depth") as exc:
        parse_documents(text, "deep.yaml")
    assert problem_of(exc)[1] is not None  # at a line, whichever limit was hit


def test_nesting_past_pythons_recursion_limit_names_the_line_of_the_deepest() -> None:
    text = "a: 1\nb:\n" + "".join("  " * i + "- \n" for i in range(1, 980))
    with pytest.raises(InputError, match="nested too deeply") as exc:
        parse_documents(text, "deep.yaml")
    assert problem_of(exc)[1] == 981


def test_moderate_nesting_still_loads() -> None:
    assert one("a: " + "[" * 200 + "1" + "]" * 200 + "\n").data["a"] is not None


# --- alias bombs: an error, fast and small, never an expansion ---------------------------------------------


def billion_laughs(levels: int = 9) -> str:
    lines = ['a0: &a0 "lol"']
    for i in range(1, levels + 1):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    return "\n".join(lines) + "\n"


def wide_bomb(width: int = 20_000) -> str:
    # Few levels, many plain strings: each alias expands a long list of strings.
    return "a: &a [" + ", ".join(["x"] * width) + "]\nb: [" + ", ".join(["*a"] * width) + "]\n"


def mapping_bomb(levels: int = 8) -> str:
    lines = ["m0: &m0 {k: v}"]
    for i in range(1, levels + 1):
        keys = ", ".join(f"k{j}: *m{i - 1}" for j in range(10))
        lines.append(f"m{i}: &m{i} {{{keys}}}")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("text", [billion_laughs(), wide_bomb(), mapping_bomb()], ids=["billion", "wide", "mapping"])
def test_alias_bombs_are_rejected_in_bounded_time_and_memory(text: str) -> None:
    tracemalloc.start()
    # This process's CPU time, not the wall clock: other processes on a loaded machine do not stretch it.
    started = time.process_time()
    try:
        with pytest.raises(InputError, match="aliases expand too far"):
            parse_documents(text, "bomb.yaml")
        spent = time.process_time() - started
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # Fully expanded these are 10^9, 4x10^8 and 10^8 values (hours of CPU); the loader stops after a few thousand.
    assert spent < 5
    assert peak < 64 * 2**20


def test_the_alias_allowance_scales_with_the_document() -> None:
    # One big anchored block reused once is a real-world pattern, not a bomb.
    width = 3 * ALIAS_EXPANSION_ALLOWANCE
    text = "a: &a [" + ", ".join(["x"] * width) + "]\nb: *a\n"
    assert len(one(text).data["b"]) == width


ANCHORS = """\
defaults: &defaults
  image: busybox
  env: &env {A: "1", B: "2"}
gpu: &gpu
  image: cuda
  accel: 1
steps:
  - <<: *defaults
    name: a
  - <<: [*gpu, *defaults]
    name: b
  - <<: *defaults
    image: override
    name: c
  - env: *env
    name: d
"""


def test_anchors_and_merge_keys_load_like_safe_load() -> None:
    doc = one(ANCHORS)
    expected = yaml.safe_load(ANCHORS)
    # PyYAML 6.0.4 lets the last of several merge sources win; the merge-key spec (and PyYAML up to 6.0.3) says
    # "keys in mapping nodes earlier in the sequence override keys specified in later mapping nodes".
    expected["steps"][1]["image"] = "cuda"
    assert doc.data == expected
    # The first merge source wins; explicit keys win over merged ones.
    assert doc.data["steps"][1]["image"] == "cuda"
    assert doc.data["steps"][2]["image"] == "override"


def test_lines_of_merged_and_overridden_keys() -> None:
    doc = one(ANCHORS)
    assert doc.line_of(("steps", 2, "image")) == 13  # the explicit override
    assert doc.line_of(("steps", 0, "image")) == 2  # from the anchor
    assert doc.line_of(("steps", 1, "image")) == 5  # from the first merge source
    assert doc.line_of(("steps", 3, "env", "B")) == 3


def test_merging_a_non_mapping_is_an_error() -> None:
    with pytest.raises(InputError, match="merges only mappings"):
        parse_documents("a: &a [1]\nb:\n  <<: *a\n", "t.yaml")


# --- properties ----------------------------------------------------------------------------------------------

keys = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCXYZ0123456789_-", min_size=1, max_size=12)
scalars = (
    st.none() | st.booleans() | st.integers(min_value=-(2**63), max_value=2**63)
    | st.floats(allow_nan=False) | st.text(max_size=30)
)
json_like = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
                         max_leaves=25)


def _leaf_paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(value, dict) and value:
        return [p for k, v in value.items() for p in _leaf_paths(v, (*path, k))]
    if isinstance(value, list) and value:
        return [p for i, v in enumerate(value) for p in _leaf_paths(v, (*path, i))]
    return [path]


def _same(a: Any, b: Any) -> bool:
    # == but with 0.0 vs -0.0 and int vs float kept apart, as YAML keeps them apart.
    if isinstance(a, float) and isinstance(b, float):
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def test_a_text_written_plain_and_quoted_keeps_each_ones_type() -> None:
    """Plain scalars' tags are resolved once per text (the loader's cache): the same text quoted stays a string,
    and every repeat of a plain one is read as the first was."""
    text = 'a: 1\nb: "1"\nc: 1\nd: null\ne: "null"\nf: [null, true, "true", 0x10, "0x10", 1.5, ~, x]\n'
    assert _same(one(text).data, yaml.safe_load(text))
    assert one(text).data == {"a": 1, "b": "1", "c": 1, "d": None, "e": "null",
                              "f": [None, True, "true", 16, "0x10", 1.5, None, "x"]}


@settings(max_examples=150, deadline=None)
@given(json_like, st.booleans())
def test_round_trip_equals_safe_load(data: Any, flow: bool) -> None:
    text = yaml.safe_dump(data, default_flow_style=flow, allow_unicode=True)
    if data is None:
        # safe_dump(None) is "null\n...": a document holding null, which is not skipped.
        assert one(text).data is None
        return
    assert _same(one(text).data, yaml.safe_load(text))


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(keys, json_like, min_size=1, max_size=5))
def test_line_of_a_leaf_points_at_its_key(data: dict[str, Any]) -> None:
    text = yaml.safe_dump(data, default_flow_style=False, allow_unicode=True, width=10_000)
    lines = text.splitlines()
    doc = one(text)
    for path in _leaf_paths(data):
        if not isinstance(path[-1], str):
            continue
        line = doc.line_of(path)
        assert path[-1] in lines[line - 1], (path, line, text)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_raise_nothing_but_input_errors(raw: bytes) -> None:
    from wf.core.loader import decode

    try:
        parse_documents(decode(raw, "r.yaml"), "r.yaml")
    except InputError as exc:
        assert all(p.file == "r.yaml" for p in exc.problems)


yamlish = st.lists(
    st.sampled_from(["a", ":", " ", "\n", "-", "&x", "*x", "<<", "[", "]", "{", "}", ",", "'", '"', "!!int", "!!str",
                     "?", "|", ">", "#", "---", "1", "0x", "2001-13-45", ".inf", "~", "\t", "%YAML 1.1", "\\"]),
    max_size=40,
).map("".join)


@settings(max_examples=300, deadline=None)
@given(yamlish)
def test_random_yaml_like_text_raises_nothing_but_input_errors(text: str) -> None:
    with contextlib.suppress(InputError):
        parse_documents(text, "r.yaml", strict=False)


def test_a_validator_finding_is_located_in_its_document() -> None:
    from wf.core.errors import Problem

    doc = one("spec:\n  steps:\n    - name: a\n      image: x\n")
    found = Problem.at(("spec", "steps", 0, "image"), "bad image")
    assert (found.file, found.line, found.field) == ("<input>", None, "spec.steps[0].image")
    located = doc.locate(found)
    assert str(located) == "t.yaml:4: spec.steps[0].image: bad image"
    # The JSON form (`wf lint -o json`) keeps its five keys; the path is for line lookups only.
    assert located.to_json() == {"file": "t.yaml", "line": 4, "field": "spec.steps[0].image", "message": "bad image",
                                 "severity": "error"}


def test_as_written_is_the_source_text_of_plain_scalars_through_merges_and_aliases() -> None:
    doc = one("""
base: &base {v: 1.10, flag: on, mode: 0755}
job:
  <<: *base
  args: [1.10, 010, ~, '', 2001-01-01]
  again: *base
""")
    paths = [("job", "v"), ("job", "flag"), ("job", "mode"), ("job", "args", 0), ("job", "args", 1),
             ("job", "args", 2), ("job", "args", 3), ("job", "again", "v"), ("job", "args"), ("job", "nope")]
    assert doc.as_written(paths) == ["1.10", "on", "0755", "1.10", "010", "~", "", "1.10", None, None]
    assert doc.data["job"]["v"] == 1.1  # the data itself stays YAML's: numeric fields read numbers
