"""A template as Argo runs it: the workflow's `spec.templateDefaults` merged in, and its input parameters substituted.

Argo v4.0.7 (workflow/controller/operator.go, mergedTemplateDefaultsInto) merges the defaults into every template
it resolves, DAGs included, by a strategic merge patch of the template onto the defaults: mappings merge key by key,
the template's value winning, and a list or scalar the template has replaces the defaults' (a list whose Kubernetes
type declares a merge key, such as a container's `env`, is merged by that key instead: wf's defaults hold none).
The defaults' template types (`container`, `dag`, `resource`...) reach only templates of that type.
"""

from __future__ import annotations

import copy
import re
from typing import Any

# Argo's template types (wfv1.TemplateType): a default of one reaches only a template of that type.
TEMPLATE_TYPES = ("container", "containerSet", "script", "resource", "dag", "steps", "suspend", "data", "http",
                  "plugin")
_TAG = re.compile(r"\{\{\s*([^{}=\s][^{}]*?)\s*\}\}")  # a simple tag (not an expression, `{{=...}}`)


def merge(defaults: dict[str, Any], own: dict[str, Any], fresh: bool = True) -> dict[str, Any]:
    """`own` merged onto `defaults` as a strategic merge patch without merge keys: a new dict (in `own`'s order, then
    the keys only the defaults have), neither changed. `fresh`: nothing in it is shared with either (a manifest's
    objects, which YAML would otherwise write as anchors); else values not merged are theirs, for a reader."""
    keep = copy.deepcopy if fresh else _same
    out: dict[str, Any] = {}
    for key, value in own.items():
        default = defaults.get(key)
        out[key] = merge(default, value, fresh) if isinstance(value, dict) and isinstance(default, dict) else \
            keep(value)
    out.update((k, keep(v)) for k, v in defaults.items() if k not in own)
    return out


def _same(value: Any) -> Any:
    return value


def with_defaults(spec: dict[str, Any], template: dict[str, Any], fresh: bool = True) -> dict[str, Any]:
    """`template` of the workflow spec `spec` with the spec's templateDefaults merged in, as Argo runs it (`fresh`:
    as merge's)."""
    defaults = spec.get("templateDefaults")
    if not isinstance(defaults, dict) or not defaults:
        return template
    kind = next((t for t in TEMPLATE_TYPES if t in template), None)
    applicable = {k: v for k, v in defaults.items() if k not in TEMPLATE_TYPES or k == kind}
    return merge(applicable, template, fresh)


def self_contained(spec: dict[str, Any]) -> dict[str, Any]:
    """The workflow spec `spec` with its templateDefaults merged into each template and its workflowMetadata
    annotations substituted where a template names them: each template whole, as another workflow's `templateRef`
    runs it (Argo merges the calling workflow's defaults and annotations, not those of the template's own spec)."""
    annotations = _annotations(spec)
    out = {k: v for k, v in spec.items() if k != "templateDefaults"}
    out["templates"] = [_substituted(with_defaults(spec, t), annotations) for t in spec.get("templates") or []]
    return out


def _annotations(spec: dict[str, Any]) -> dict[str, str]:
    """The global variables Argo makes of a spec's workflowMetadata annotations."""
    annotations = (spec.get("workflowMetadata") or {}).get("annotations") or {}
    return {f"workflow.annotations.{k}": str(v) for k, v in annotations.items()}


def as_run(manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each template of an Argo manifest by name, as Argo runs it: the spec's templateDefaults merged in, then the
    workflow's annotations (spec.workflowMetadata's) and the template's own input parameters that have a value or
    default substituted for their tags; other tags stay."""
    spec = manifest.get("spec") or {}
    spec = spec.get("workflowSpec") or spec
    globals_ = _annotations(spec)
    out = {}
    for template in spec.get("templates") or []:
        merged = with_defaults(spec, template)
        inputs = {f"inputs.parameters.{p['name']}": str(p.get("value", p.get("default")))
                  for p in (merged.get("inputs") or {}).get("parameters") or []
                  if isinstance(p, dict) and ("value" in p or "default" in p)}
        out[str(template.get("name"))] = _substituted(merged, globals_ | inputs)
    return out


def _substituted(node: Any, values: dict[str, str]) -> Any:
    if isinstance(node, str):
        return _TAG.sub(lambda m: values.get(m.group(1), m.group(0)), node) if "{{" in node else node
    if isinstance(node, dict):
        return {k: _substituted(v, values) for k, v in node.items()}
    if isinstance(node, list):
        return [_substituted(v, values) for v in node]
    return node
