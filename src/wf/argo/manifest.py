"""A resource template's manifest, which Argo reads as text: its `{{...}}` tags are substituted before it is parsed.

Argo substitutes a template's tags over the template marshalled as JSON (v4.0.7 workflow/common/util.go
SubstituteParams, util/template Replace), and only then does the controller parse the manifest as YAML
(workflow/controller/operator.go executeResource, to add the owner reference) and argoexec create it. An expression
tag (`{{=...}}`) is JSON-unmarshalled before expr parses it (util/template/expression_template.go
expressionReplaceStrict), which undoes the template's JSON escapes; nothing undoes the manifest's own YAML quoting. A
tag inside a single-quoted scalar reaches expr with its quotes doubled (`inputs.parameters[''application-attempt'']`:
"unexpected token Identifier"), and a long quoted scalar is folded across lines, which can split a tag.

So every string that holds a tag is written as a literal block scalar (`|-`), whose text YAML keeps byte for byte:
no escape, no fold. A string YAML cannot hold in that style (a line ending in a space) is double-quoted, unfolded:
that style escapes only `"`, `\\` and unprintable characters, which no tag wf writes contains (tests/test_mpijob.py
reads every tag of every step kind as Argo does). A value substituted into the manifest is not escaped either, so a
block scalar also holds any one-line value (quotes, colons, `#`, braces: an item that is a JSON object).
"""

from __future__ import annotations

import sys
from typing import Any

import yaml

TAG_START = "{{"


class _Dumper(yaml.SafeDumper):
    pass


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if TAG_START in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _text)


def manifest_text(obj: dict[str, Any]) -> str:
    """`obj` as a resource template's manifest: YAML whose tags Argo reads exactly as they are in `obj`'s strings."""
    return yaml.dump(obj, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=sys.maxsize)
