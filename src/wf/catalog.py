"""The platform's compute-class catalog: the one file node groups and workflow placement both derive from."""

from __future__ import annotations

import os
from functools import cached_property
from pathlib import Path
from typing import Literal

import yaml
from pydantic import Field, PrivateAttr, ValidationInfo, model_validator

from wf.instances import InstanceType, instance_type
from wf.labels import CAPACITIES, DOMAIN
from wf.loader import Document, PathKey, load_mapping, parse_documents
from wf.modeling import DEFER_CHECKS, StrictModel, dns_label_problem, labels_problems, parse_model, raise_problems
from wf.teams import Queues

Capacity = Literal["spot", "on-demand"]
Arch = Literal["amd64", "arm64"]
Effect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]
ProblemList = list[tuple[tuple[PathKey, ...], str]]

DEFAULT_CATALOG = Path("eksctl/catalog.yaml")
CATALOG_ENV = "WF_CATALOG"
# Label prefixes kubelet refuses to set on itself (eksctl rejects them in node-group labels too).
_RESERVED_LABEL_PREFIXES = ("kubernetes.io/", "k8s.io/")
_ALLOWED_RESERVED = ("node.kubernetes.io/", "node-role.kubernetes.io/")


class Taint(StrictModel):
    key: str
    value: str = ""
    effect: Effect

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"


class Accelerator(StrictModel):
    resource: str = Field(description="Extended resource the device plugin advertises, e.g. habana.ai/gaudi")
    count: int = Field(gt=0, description="Devices per node")


class ClusterInfo(StrictModel):
    name: str
    region: str
    version: str = Field(pattern=r"^1\.\d+$")
    availability_zones: list[str] = Field(alias="availabilityZones", min_length=1)


class ComputeClass(StrictModel):
    name: str
    instance_types: list[str] = Field(alias="instanceTypes", min_length=1)
    capacity: list[Capacity] = Field(default_factory=lambda: ["spot"], min_length=1)
    availability_zones: list[str] | None = Field(default=None, alias="availabilityZones")
    accelerator: Accelerator | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[Taint] = Field(default_factory=list)
    efa: bool = False
    arch: Arch | None = Field(default=None, description="Defaults to the instance types' architecture")
    min_size: int = Field(default=0, ge=0, alias="minSize")
    max_size: int = Field(default=20, ge=1, alias="maxSize")
    volume_size: int = Field(default=100, ge=20, alias="volumeSize", description="Root volume GiB")
    interruption_retries: int | None = Field(
        default=None, ge=0, le=20, alias="interruptionRetries",
        description="Retries for Spot interruptions and evictions, on their own budget (default 5 on Spot, 2 on-demand)",
    )

    @property
    def default_capacity(self) -> Capacity:
        return self.capacity[0]

    @cached_property
    def instances(self) -> list[InstanceType]:
        return [instance_type(name) for name in self.instance_types]

    @cached_property
    def largest(self) -> InstanceType:
        """The instance that can hold the biggest pod: what a request is checked against."""
        return max(self.instances, key=lambda i: (i.allocatable_cpu_millis, i.allocatable_memory_mib))

    @property
    def resolved_arch(self) -> str:
        return self.arch or self.instances[0].arch

    def zones(self, cluster: ClusterInfo) -> list[str]:
        return self.availability_zones or cluster.availability_zones


class Catalog(StrictModel):
    api_version: Literal["wf/v1"] = Field(default="wf/v1", alias="apiVersion")
    kind: Literal["Catalog"] = "Catalog"
    cluster: ClusterInfo
    compute_classes: list[ComputeClass] = Field(alias="computeClasses", min_length=1)
    queues: Queues | None = Field(default=None, description="Teams, their quotas and priorities (Kueue)")
    _source: str = PrivateAttr(default="<python>")  # where it was read from, for messages

    @model_validator(mode="after")
    def _checked(self, info: ValidationInfo) -> Catalog:
        if not (info.context or {}).get(DEFER_CHECKS):
            raise_problems(self.problems(), self._source)
        return self

    @property
    def source(self) -> str:
        return self._source

    def problems(self) -> ProblemList:
        out: ProblemList = []
        region = self.cluster.region
        for i, zone in enumerate(self.cluster.availability_zones):
            if not _zone_in_region(zone, region):
                out.append((("cluster", "availabilityZones", i), f"zone {zone!r} is not in region {region!r}"))
        seen: set[str] = set()
        for c, cls in enumerate(self.compute_classes):
            at: tuple[PathKey, ...] = ("computeClasses", c)
            if problem := dns_label_problem(cls.name, "compute class name"):
                out.append(((*at, "name"), problem))
            if cls.name in seen:
                out.append(((*at, "name"), f"duplicate compute class {cls.name!r}"))
            seen.add(cls.name)
            out += _class_problems(cls, at, self.cluster)
        if self.queues and not out:  # quotas name classes: check them once the classes are sound
            out += self.queues.problems(self)
        return out

    def compute_class(self, name: str) -> ComputeClass:
        for cls in self.compute_classes:
            if cls.name == name:
                return cls
        raise KeyError(name)

    @property
    def class_names(self) -> list[str]:
        return [c.name for c in self.compute_classes]

    def to_yaml(self) -> str:
        data = self.model_dump(by_alias=True, exclude_defaults=True, mode="json")
        data = {"apiVersion": self.api_version, "kind": self.kind, **data}
        return yaml.safe_dump(data, sort_keys=False)

    @classmethod
    def from_yaml_text(cls, text: str, source: str) -> Catalog:
        docs = parse_documents(text, source)
        if len(docs) != 1 or not isinstance(docs[0].data, dict):
            raise_problems([((), "a catalog is one YAML mapping")], source)
        return catalog_from_document(docs[0])


def catalog_from_document(doc: Document) -> Catalog:
    catalog = parse_model(Catalog, doc)
    catalog._source = doc.file
    return catalog


def _zone_in_region(zone: str, region: str) -> bool:
    return zone.startswith(region) and len(zone) > len(region) and zone[len(region):].isalnum()


def _class_problems(cls: ComputeClass, at: tuple[PathKey, ...], cluster: ClusterInfo) -> ProblemList:
    out: ProblemList = []
    instances: list[InstanceType] = []
    for i, name in enumerate(cls.instance_types):
        try:
            instances.append(instance_type(name))
        except ValueError as exc:
            out.append(((*at, "instanceTypes", i), str(exc)))
    if len(set(cls.instance_types)) != len(cls.instance_types):
        out.append(((*at, "instanceTypes"), "instance types are listed twice"))
    if len(set(cls.capacity)) != len(cls.capacity):
        out.append(((*at, "capacity"), f"capacity lists a value twice; choose from {list(CAPACITIES)}"))
    arches = {i.arch for i in instances}
    if len(arches) > 1:
        mixed = ", ".join(f"{i.name} ({i.arch})" for i in instances)
        out.append(((*at, "instanceTypes"), f"instance types mix architectures: {mixed}; use one class per arch"))
    elif cls.arch and arches and cls.arch not in arches:
        out.append(((*at, "arch"), f"arch {cls.arch} does not match the instance types ({arches.pop()})"))
    for z, zone in enumerate(cls.availability_zones or []):
        if not _zone_in_region(zone, cluster.region):
            out.append(((*at, "availabilityZones", z), f"zone {zone!r} is not in region {cluster.region!r}"))
    if cls.accelerator:
        resource, count = cls.accelerator.resource, cls.accelerator.count
        for i, inst in enumerate(instances):
            has = inst.accelerators.get(resource, 0)
            if has < count:
                out.append(((*at, "accelerator", "count"),
                            f"{inst.name} has {has} {resource}, fewer than the {count} the class declares"))
    if cls.efa:
        for inst in instances:
            if inst.efa < 1:
                out.append(((*at, "efa"), f"{inst.name} has no EFA interface"))
    out += labels_problems(cls.labels, (*at, "labels"))
    for key in cls.labels:
        if key.startswith(f"{DOMAIN}/"):
            out.append(((*at, "labels", key), f"labels under {DOMAIN}/ are set by wf itself"))
        elif any(key.startswith(p) or f".{p}" in key for p in _RESERVED_LABEL_PREFIXES) and not key.startswith(
            _ALLOWED_RESERVED
        ):
            out.append(((*at, "labels", key), "kubelet may not set labels under kubernetes.io/ or k8s.io/"))
    taint_keys: set[tuple[str, str]] = set()
    for t, taint in enumerate(cls.taints):
        if problem := labels_problems({taint.key: taint.value}, ()):
            out.append(((*at, "taints", t), problem[0][1].replace("label", "taint")))
        if (taint.key, taint.effect) in taint_keys:
            out.append(((*at, "taints", t), f"taint {taint.key}:{taint.effect} is declared twice"))
        taint_keys.add((taint.key, taint.effect))
    if cls.min_size > cls.max_size:
        out.append(((*at, "minSize"), f"minSize {cls.min_size} exceeds maxSize {cls.max_size}"))
    return out


def catalog_path(path: str | Path | None = None) -> Path:
    """--catalog, else WF_CATALOG, else the project's eksctl/catalog.yaml (the cluster's copy is the controller's job)."""
    if path:
        return Path(path)
    if env := os.environ.get(CATALOG_ENV):
        return Path(env)
    return DEFAULT_CATALOG


def load_catalog(path: str | Path | None = None) -> Catalog:
    return catalog_from_document(load_mapping(catalog_path(path)))
