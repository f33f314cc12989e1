"""Derive the Argo field table (`fields.json`) from hera's generated pydantic models.

hera's models are generated from Argo's swagger, so walking them once gives every field name (by its
JSON alias), its type and whether it is required, without copying a schema file into the repo. The
validator then reads the small table instead of importing hera (0.6 s) on the `wf compile` hot path.

Run `python -m wf.argo.generate` after upgrading hera; a test fails while the committed table differs
from what the installed hera produces.

Type encoding in the table (JSON):
  "string" "integer" "number" "boolean"   JSON scalars (integer: no booleans, integral numbers only)
  "int-or-string"                          Kubernetes IntOrString
  "quantity"                               Kubernetes Quantity (string in Kubernetes' grammar, or a number)
  "any"                                    any JSON value (Argo Item: withItems elements)
  "object"                                 any JSON object (free-form, like x-kubernetes-preserve-unknown-fields)
  ["list", T]  ["map", T]                  array of T; object with string keys and T values
  "@<definition>"                          a model, e.g. "@io.argoproj.workflow.v1alpha1.Template"
"""

from __future__ import annotations

import json
import re
import types
import typing
from typing import Any

from wf.argo.schema import KIND_MODELS, TABLE_PATH

# Models that hera generates without fields but whose content is free-form JSON, so any keys are valid.
# Every other field-less model (NoneStrategy, ZipStrategy, SuppliedValueFrom, RetryNodeAntiAffinity) is
# a placeholder that must be written as `{}`.
FREE_FORM_MODELS = {
    # Template.plugin: "the structure of a plugin template is free-form" (hera field description);
    # the full CRD marks it x-kubernetes-preserve-unknown-fields.
    "io.argoproj.workflow.v1alpha1.Plugin": "object",
    # ObjectMeta.managedFields[].fieldsV1: "a set of fields in a data structure like a Trie, in JSON format".
    "io.k8s.apimachinery.pkg.apis.meta.v1.FieldsV1": "object",
}

# Root models whose wire form is wider than hera's Python type.
WIRE_TYPES = {
    # hera types Quantity as `str`, but Kubernetes' Quantity unmarshals JSON numbers too
    # (`cpu: 2`, `nvidia.com/gpu: 1`), and the Argo CRDs declare it `anyOf: [integer, string]`.
    "io.k8s.apimachinery.pkg.api.resource.Quantity": "quantity",
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString": "int-or-string",
}

# Fields where hera's Python type is narrower than Argo's swagger, which would reject valid manifests.
FIELD_OVERRIDES = {
    # hera 7.1 types the probe's port `int`; Argo's swagger and Kubernetes say IntOrString (`port: http`).
    ("io.k8s.api.core.v1.HTTPGetAction", "port"): "int-or-string",
}

_MODELS_PACKAGE = "hera.workflows.models."


def definition_name(model: type) -> str:
    """The swagger definition name hera generated `model` from, e.g. io.k8s.api.core.v1.Container."""
    module = model.__module__
    if not module.startswith(_MODELS_PACKAGE):
        raise ValueError(f"{model!r} is not one of hera's generated models")
    return f"{module[len(_MODELS_PACKAGE):]}.{model.__name__}"


def _argo_version(models_module: types.ModuleType) -> str:
    match = re.search(r"argo-workflows/(v[0-9][^/]*)/api/openapi-spec", models_module.__doc__ or "")
    if not match:
        raise ValueError("cannot tell which Argo version hera's models were generated from")
    return match.group(1)


class _Walker:
    def __init__(self) -> None:
        from pydantic import AwareDatetime, BaseModel, RootModel

        self._aware_datetime = AwareDatetime
        self._base_model = BaseModel
        self._root_model = RootModel
        self.models: dict[str, dict[str, Any]] = {}

    def model(self, model: Any) -> str:
        name = definition_name(model)
        if name in FREE_FORM_MODELS:
            return FREE_FORM_MODELS[name]
        if name in WIRE_TYPES:
            return WIRE_TYPES[name]
        if issubclass(model, self._root_model):
            root: str = self.type_of(model.model_fields["root"].annotation, f"{name}.root")
            return root
        if name not in self.models:
            entry: dict[str, Any] = {"fields": {}, "required": []}
            self.models[name] = entry  # registered before recursing: models are recursive (Template)
            for attribute, info in model.model_fields.items():
                key = info.alias or attribute
                override = FIELD_OVERRIDES.get((name, key))
                entry["fields"][key] = override or self.type_of(info.annotation, f"{name}.{key}")
                if info.is_required():
                    entry["required"].append(key)
            entry["required"].sort()
        return "@" + name

    def type_of(self, annotation: Any, where: str) -> Any:
        origin = typing.get_origin(annotation)
        args = typing.get_args(annotation)
        if origin is typing.Annotated:
            # Base64Str and friends: pydantic metadata over a plain str on the wire.
            return self.type_of(args[0], where)
        if origin in (typing.Union, types.UnionType):
            members = [a for a in args if a is not type(None)]
            if len(members) == 1:
                return self.type_of(members[0], where)
            if set(members) == {str, int}:
                return "int-or-string"
            raise TypeError(f"{where}: unsupported union {annotation!r}")
        if origin is list:
            return ["list", self.type_of(args[0], where)]
        if origin is dict:
            if args[0] is not str:
                raise TypeError(f"{where}: map keys must be strings, got {annotation!r}")
            return ["map", self.type_of(args[1], where)]
        if annotation is Any:
            return "any"
        if annotation is bool:
            return "boolean"
        if annotation is int:
            return "integer"
        if annotation is float:
            return "number"
        if annotation is str:
            return "string"
        if annotation is self._aware_datetime:  # meta/v1 Time: RFC 3339 text on the wire
            return "string"
        if isinstance(annotation, type) and issubclass(annotation, self._base_model):
            return self.model(annotation)
        raise TypeError(f"{where}: unsupported type {annotation!r}")


def generate() -> dict[str, Any]:
    """Walk hera's models from the four kinds and return the field table."""
    import hera
    from hera.workflows import models

    walker = _Walker()
    kinds = {}
    for kind, definition in KIND_MODELS.items():
        model = getattr(models, definition.rsplit(".", 1)[1])
        if definition_name(model) != definition:
            raise ValueError(f"hera's {kind} model is {definition_name(model)}, expected {definition}")
        kinds[kind] = walker.model(model)[1:]
    for name, key in FIELD_OVERRIDES:
        if key not in walker.models.get(name, {}).get("fields", {}):
            raise ValueError(f"FIELD_OVERRIDES names {name}.{key}, which hera's models no longer have")
    return {
        "source": f"hera-workflows {hera.__version__} models, generated from Argo Workflows "
        f"{_argo_version(models)} swagger; regenerate with `python -m wf.argo.generate`",
        "kinds": kinds,
        "models": {name: walker.models[name] for name in sorted(walker.models)},
    }


def render(table: dict[str, Any]) -> str:
    # One model per line: small, and a hera upgrade shows up as a readable diff.
    lines = ["{", f'"source": {json.dumps(table["source"])},', f'"kinds": {json.dumps(table["kinds"])},']
    lines.append('"models": {')
    models = table["models"]
    for index, name in enumerate(models):
        comma = "," if index < len(models) - 1 else ""
        lines.append(f"{json.dumps(name)}: {json.dumps(models[name], separators=(',', ':'))}{comma}")
    lines += ["}", "}"]
    return "\n".join(lines) + "\n"


def main() -> None:
    table = generate()
    TABLE_PATH.write_text(render(table), encoding="utf-8")
    print(f"wrote {TABLE_PATH} ({len(table['models'])} models)")


if __name__ == "__main__":
    main()
