"""Safe YAML loading that keeps where every value came from.

PyYAML's C composer builds the node graph (aliases stay shared references, so composing is linear even for an
alias bomb); we then construct plain data ourselves so that we can reject duplicate keys, bound alias expansion
and answer "which line is spec.steps[3].resources.cpu on?" for error messages.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from wf.core.errors import InputError, PathKey, Problem


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """The safe loader, resolving each distinct plain scalar's tag once: the composer asks for every scalar,
    and PyYAML answers in Python with regular expressions (a fifth of composing a 4,000-step job), while a job's
    keys and values repeat. Quoted scalars and collections resolve by their kind alone (no path resolvers)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._tags: dict[Any, str] = {}

    def resolve(self, kind: type[Node], value: str | None, implicit: Any) -> str:
        key = value if kind is ScalarNode and implicit[0] else kind
        tag = self._tags.get(key)
        if tag is None:
            tag = self._tags[key] = super().resolve(kind, value, implicit)
        return tag


_constructor = yaml.constructor.SafeConstructor()
_STR = "tag:yaml.org,2002:str"
_MERGE = "tag:yaml.org,2002:merge"
_TIMESTAMP = "tag:yaml.org,2002:timestamp"
_NULL = "tag:yaml.org,2002:null"
# Values reached a second time through aliases may add at most this many nodes beyond the document's own:
# generous for real anchors (shared env blocks), fatal for "billion laughs".
ALIAS_EXPANSION_ALLOWANCE = 10_000
# Deeper than any manifest, and than the builder's own recursion allows.
MAX_NESTING = 1000
_NESTING_SCAN_ABOVE = 2000
# What YAML 1.1 reads (its printable set): a character outside it anywhere in the text is an error of the whole
# stream, which PyYAML reports with an offset, not a line.
_NOT_YAML = re.compile("[^\x09\x0a\x0d\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


class Stream:
    """A YAML stream's text, composed again into node graphs on the first line lookup and then shared by all
    its documents. Kept from the load, the graphs of 250 job specs held 100 MB through a whole
    `wf submit --watch`, for lookups only an error makes."""

    def __init__(self, text: str) -> None:
        self.text = text

    @cached_property
    def nodes(self) -> list[Node | None]:
        return list(yaml.compose_all(self.text, Loader=_Loader))

    def composed(self) -> list[Node | None]:
        """The node graphs for one use: the cached ones if a line lookup made them, else not kept."""
        return self.__dict__.get("nodes") or list(yaml.compose_all(self.text, Loader=_Loader))


@dataclass
class Document:
    """One YAML document: its plain data, and its stream for line lookups."""

    file: str
    index: int  # among the stream's documents, empty ones included
    data: Any
    stream: Stream
    # Keys given twice, as (line, key), when loaded leniently; the later value wins, as in Argo's own CLI.
    duplicates: list[tuple[int, Any]] = field(default_factory=list)
    # 1-based line where the document starts: a finding about the whole document needs no second compose.
    start_line: int = 1

    @property
    def node(self) -> Node:
        node = self.stream.nodes[self.index]
        assert node is not None, "empty documents are never Documents"
        return node

    def line_of(self, path: Sequence[PathKey]) -> int:
        """1-based line of the value at `path`, or of its deepest existing parent."""
        if not path:
            return self.start_line
        node = self.node
        for key in path:
            child = _child(node, key)
            if child is None:
                break
            node = child
        return node.start_mark.line + 1

    def as_written(self, paths: Sequence[Sequence[PathKey]]) -> list[str | None]:
        """The source text of the plain scalar at each path (`1.10`, `on`, `010`, `~` as typed, before YAML
        made them numbers, booleans or null), or None where the path leads to no scalar."""
        root = self.stream.composed()[self.index]
        out: list[str | None] = []
        for path in paths:
            node: Node | None = root
            for key in path:
                node = _child(node, key) if node is not None else None
            out.append(node.value if isinstance(node, ScalarNode) else None)
        return out

    def problem(self, path: Sequence[PathKey], message: str) -> Problem:
        return self.locate(Problem.at(path, message))

    def locate(self, problem: Problem) -> Problem:
        """The finding with this document's file and the line of the field it names."""
        return problem.in_file(self.file, self.line_of(problem.path))


def _child(node: Node, key: PathKey) -> Node | None:
    if isinstance(node, MappingNode) and isinstance(key, str):
        for k, v in _flattened_pairs(node):
            if isinstance(k, ScalarNode) and k.value == key:
                return v
    elif isinstance(node, SequenceNode) and isinstance(key, int) and 0 <= key < len(node.value):
        item: Node = node.value[key]
        return item
    return None


def _flattened_pairs(node: MappingNode) -> Iterator[tuple[Node, Node]]:
    """Pairs in the order that decides the value: explicit keys (the last of duplicates wins), then merge
    sources in order (the first source that has the key wins), as the data is built."""
    merges: list[Node] = []
    for k, v in reversed(node.value):
        if k.tag == _MERGE:
            merges[:0] = v.value if isinstance(v, SequenceNode) else [v]
        else:
            yield k, v
    for source in merges:
        if isinstance(source, MappingNode):
            yield from _flattened_pairs(source)


class _Builder:
    def __init__(self, file: str, strict: bool) -> None:
        self.file = file
        self.strict = strict
        self.duplicates: list[tuple[int, Any]] = []
        self.seen: set[int] = set()
        self.own = 0
        self.expanded = 0

    def fail(self, node: Node, message: str) -> InputError:
        return InputError([Problem(self.file, node.start_mark.line + 1, None, message)])

    def expand(self, node: Node) -> None:
        self.expanded += 1
        if self.expanded > ALIAS_EXPANSION_ALLOWANCE + self.own:
            raise self.fail(node, "YAML aliases expand too far (an alias bomb?); write the values out instead")

    def build(self, node: Node, again: bool = False) -> Any:
        if node.tag == _STR and type(node) is ScalarNode:  # the common case, first: loading is on the compile path
            if again:  # strings inside an aliased collection count too, or a wide bomb of plain strings expands
                self.expand(node)
            else:
                self.own += 1
            return node.value
        if not again and id(node) in self.seen:
            again = True
        if again:
            self.expand(node)
        else:
            self.own += 1
            self.seen.add(id(node))
        if isinstance(node, ScalarNode):
            # Timestamps and binary stay text: manifests are JSON-shaped (and "2001-13-45" is no date to reject).
            if node.tag == _TIMESTAMP:
                return node.value
            construct = _constructor.yaml_constructors.get(node.tag)
            if construct is None:
                raise self.fail(node, f"unsupported YAML tag {node.tag}")
            try:
                value = construct(_constructor, node)
            except (ValueError, IndexError, KeyError) as exc:  # 4301 digits, `!!int ''`, `!!bool maybe`
                reason = str(exc).split(";")[0]
                raise self.fail(node, f"invalid {node.tag.rsplit(':', 1)[-1]} {node.value[:40]!r}: {reason}") from None
            return value if isinstance(value, (int, float, bool, type(None))) else node.value
        if isinstance(node, SequenceNode):
            return [self.build(item, again) for item in node.value]
        if isinstance(node, MappingNode):
            out: dict[Any, Any] = {}
            explicit: set[Any] = set()
            for key_node, value_node in node.value:
                if key_node.tag == _MERGE:
                    sources = value_node.value if isinstance(value_node, SequenceNode) else [value_node]
                    # The first source that has a key wins (YAML merge semantics, as yaml.safe_load).
                    for source in reversed(sources):
                        merged = self.build(source, again)
                        if not isinstance(merged, dict):
                            raise self.fail(source, "'<<' merges only mappings")
                        for k, v in merged.items():
                            if k not in explicit:
                                out[k] = v
                    continue
                key = self.build(key_node, again)
                if isinstance(key, (list, dict)):
                    raise self.fail(key_node, "a mapping key must be a scalar")
                if key in explicit:
                    if self.strict:
                        raise self.fail(key_node, f"duplicate key {key!r}")
                    self.duplicates.append((key_node.start_mark.line + 1, key))
                explicit.add(key)
                out[key] = self.build(value_node, again)
            return out
        raise self.fail(node, "unsupported YAML node")


def decode(raw: bytes, file: str) -> str:
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise InputError([Problem(file, line, None, f"not UTF-8 text (byte 0x{raw[exc.start]:02x})")]) from None


def _check_nesting(text: str, file: str) -> None:
    """libyaml's composer recurses in C: some 30,000 levels of nesting (60 KB of "- - - ...") overflow the C stack
    and kill the process, out of RecursionError's reach. Each level takes a bracket or a column, so only texts
    that could nest that deep pay for a walk of the (non-recursive) event stream."""
    if text.count("[") + text.count("{") + 2 * max(map(len, text.splitlines()), default=0) <= _NESTING_SCAN_ABOVE:
        return
    if (found := _deepest(text, MAX_NESTING)) is not None:
        raise InputError([Problem(file, found[1], None, "YAML nested too deeply")])


def _deepest(text: str, limit: int | None = None) -> tuple[int, int | None] | None:
    """(depth, line) of the first collection nested deeper than `limit` (None: of the deepest one), from the
    event stream, which nests in no call stack; None if none is."""
    depth, deepest = 0, None
    for event in yaml.parse(text, Loader=_Loader):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > (limit if limit is not None else deepest[0] if deepest else 0):
                deepest = (depth, event.start_mark.line + 1 if event.start_mark else None)
                if limit is not None:
                    return deepest
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
    return deepest if limit is None else None


def parse_documents(text: str, file: str, strict: bool = True) -> list[Document]:
    """All documents of a YAML stream; empty documents are skipped. Lenient mode records duplicate keys."""
    docs: list[Document] = []
    stream = Stream(text)
    try:
        _check_nesting(text, file)
        for index, node in enumerate(yaml.compose_all(text, Loader=_Loader)):
            if node is None or (type(node) is ScalarNode and node.tag == _NULL and node.value == ""):
                continue  # nothing between two `---` (or after a trailing one) is no document
            builder = _Builder(file, strict)
            data = builder.build(node)
            docs.append(Document(file, index, data, stream, builder.duplicates, node.start_mark.line + 1))
    except yaml.reader.ReaderError:
        raise InputError([_unreadable(text, file)]) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        message = " ".join(str(p) for p in (exc.context, exc.problem) if p)
        raise InputError([Problem(file, line, None, f"invalid YAML: {message}")]) from None
    except yaml.YAMLError as exc:
        raise InputError([Problem(file, None, None, f"invalid YAML: {exc}")]) from None
    except RecursionError:  # Python's own limit, below MAX_NESTING once the caller's frames count
        found = _deepest(text)
        raise InputError([Problem(file, found[1] if found else None, None, "YAML nested too deeply")]) from None
    return docs


def _unreadable(text: str, file: str) -> Problem:
    """The first character YAML does not read (a NUL, a control byte), at its line."""
    found = _NOT_YAML.search(text)
    if found is None:  # PyYAML found one, so this does not happen; the stream's error is still this file's
        return Problem(file, None, None, "invalid YAML: a character YAML does not read")
    line, code = text.count("\n", 0, found.start()) + 1, ord(found[0])
    hint = f"; in a value, write it as an escape in double quotes (\"\\x{code:02x}\")" if 0 < code < 0x100 else ""
    return Problem(file, line, None, f"{unreadable_character(found[0])} is not allowed in YAML text{hint}")


def unreadable_character(text: str) -> str | None:
    """The first character of `text` YAML does not read, in words ("control character U+001B"), or None: a value
    given outside a file (a command line's) is held to what a file's text may hold."""
    found = _NOT_YAML.search(text)
    return f"control character U+{ord(found[0]):04X}" if found else None


def load_documents(path: str | Path, strict: bool = True) -> list[Document]:
    file = str(path)
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise InputError([Problem(file, None, None, f"cannot read: {exc.strerror}")]) from None
    return parse_documents(decode(raw, file), file, strict)


def extra_documents(docs: Sequence[Document]) -> Problem | None:
    """The finding for a file that must hold one document (a job spec, a catalog) and holds more: at the line
    where the second begins."""
    if len(docs) < 2:
        return None
    return docs[1].problem((), f"a second YAML document (of {len(docs)}): this file holds one; put each in "
                               "a file of its own")


def load_mapping(path: str | Path) -> Document:
    """Exactly one document, which must be a mapping (job specs and catalogs)."""
    docs = load_documents(path)
    if not docs:
        raise InputError([Problem(str(path), None, None, "expected one YAML document, found 0")])
    if problem := extra_documents(docs):
        raise InputError([problem])
    doc = docs[0]
    if not isinstance(doc.data, dict):
        raise InputError([doc.problem((), f"expected a mapping, found {type(doc.data).__name__}")])
    return doc
