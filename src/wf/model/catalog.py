"""The platform's compute-class catalog: the one file node groups and workflow placement both derive from."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import AfterValidator, ConfigDict, Field, PrivateAttr, ValidationInfo, model_validator

from wf.core.constants import CAPACITIES, CATALOG_CONFIGMAP, CATALOG_NAMESPACE, DOMAIN
from wf.core.errors import InputError, PathKey, Problem, did_you_mean
from wf.core.loader import Document, load_mapping, parse_documents
from wf.core.modeling import DEFER_CHECKS, StrictModel, dns_label_problem, labels_problems, parse_model, raise_problems
from wf.core.paths import MountPath
from wf.core.units import parse_duration
from wf.model.accelerators import profile
from wf.model.instances import InstanceType, instance_type
from wf.model.teams import Queues, Team, amounts

Capacity = Literal["spot", "on-demand"]
Arch = Literal["amd64", "arm64"]
Effect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]
HARD_EFFECTS: tuple[Effect, ...] = ("NoSchedule", "NoExecute")

CATALOG_ENV = "WF_CATALOG"
# The project file: found in the job file's folder or the nearest one above it, as git finds `.git`; it names the
# project's catalog (`catalog: PATH`, relative to the file), so wf works from any directory of the project.
PROJECT_FILE = ".wf.yaml"
# Label prefixes kubelet refuses to set on itself (eksctl rejects them in node-group labels too).
_RESERVED_LABEL_PREFIXES = ("kubernetes.io/", "k8s.io/")
_ALLOWED_RESERVED = ("node.kubernetes.io/", "node-role.kubernetes.io/")


class Taint(StrictModel):
    """A node taint: the catalog's declaration and the one renderer of every form wf writes or reads.

    Kubernetes form (core/v1 Taint, `value` omitted when empty as the API server does), text `key=value:Effect`
    (kubectl taint), the cluster-autoscaler tag value `value:Effect`, the exact toleration, and the rule that
    decides whether a set of tolerations lets a pod onto a node carrying it.
    """

    model_config = ConfigDict(frozen=True)  # hashable: consistency compares sets of taints

    key: str
    value: str = ""
    effect: Effect

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"

    @property
    def is_hard(self) -> bool:
        """Only NoSchedule and NoExecute keep a pod off a node; PreferNoSchedule is a scoring preference."""
        return self.effect in HARD_EFFECTS

    def to_kubernetes(self) -> dict[str, str]:
        out = {"key": self.key, "value": self.value, "effect": self.effect}
        if not self.value:
            del out["value"]
        return out

    @classmethod
    def from_kubernetes(cls, data: Mapping[str, Any]) -> Taint:
        """A taint as a cluster or a hand-written config states it; read as given (not validated), so a config
        with an unknown effect is reported by the check comparing it, not refused while reading."""
        return cls.model_construct(key=str(data.get("key", "")), value=str(data.get("value", "") or ""),
                                   effect=str(data.get("effect", "")))

    @classmethod
    def from_text(cls, key: str, text: str) -> Taint:
        """eksctl's unmanaged-group map form `key: value:Effect` (also cluster-autoscaler's taint tag)."""
        value, _, effect = text.rpartition(":")
        return cls.model_construct(key=key, value=value, effect=effect)

    @property
    def autoscaler_tag_value(self) -> str:
        """cluster-autoscaler's node-template taint tag value: `value:Effect` (it drops tags without the effect)."""
        return f"{self.value}:{self.effect}"

    def toleration(self) -> dict[str, str]:
        """The toleration that admits exactly this taint."""
        if self.value:
            return {"key": self.key, "operator": "Equal", "value": self.value, "effect": self.effect}
        return {"key": self.key, "operator": "Exists", "effect": self.effect}

    def tolerated_by(self, tolerations: Iterable[Mapping[str, Any]]) -> bool:
        """The kube-scheduler's TaintToleration rule (k8s.io/api core/v1 Toleration.ToleratesTaint)."""
        for t in tolerations:
            if t.get("effect") and t["effect"] != self.effect:
                continue
            key = t.get("key") or ""
            if (t.get("operator") or "Equal") == "Exists":
                if not key or key == self.key:
                    return True
            elif key == self.key and (t.get("value") or "") == self.value:
                return True
        return False

    def repels(self, tolerations: Iterable[Mapping[str, Any]]) -> bool:
        """Whether this taint keeps a pod with these tolerations off the node."""
        return self.is_hard and not self.tolerated_by(tolerations)


class Accelerator(StrictModel):
    model_config = ConfigDict(frozen=True)  # part of a NodeGroup's identity (wf.model.nodegroups)

    resource: str = Field(description="Extended resource the device plugin advertises, e.g. habana.ai/gaudi")
    count: int = Field(gt=0, description="Devices per node")


# Pod Security Standards, "baseline" (kubernetes.io/docs/concepts/security/pod-security-standards): the only
# capabilities a pod may add; anything else, host namespaces, host paths or a privileged container needs
# `privileged`.
BASELINE_CAPABILITIES = frozenset({"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                                   "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"})


class PodSecurity(StrictModel):
    """What a class's pods may have beyond wf's hardened default (every capability dropped, no privilege
    escalation, the runtime's default seccomp profile): what its accelerator's images need. Compiled pods take
    `capabilities` and `hostIPC`; lint allows the rest in hand-written Argo manifests only."""

    capabilities: list[str] = Field(default_factory=list, description="Added back, e.g. SYS_NICE")
    host_ipc: bool = Field(default=False, alias="hostIPC")
    host_pid: bool = Field(default=False, alias="hostPID")
    host_network: bool = Field(default=False, alias="hostNetwork")
    host_paths: list[str] = Field(default_factory=list, alias="hostPaths",
                                  description="Host directories (and what is under them) pods may mount")
    privileged: bool = False

    @property
    def beyond_baseline(self) -> bool:
        """Whether such a pod needs a namespace whose Pod Security admission is `privileged`."""
        return (self.host_ipc or self.host_pid or self.host_network or bool(self.host_paths) or self.privileged
                or not set(self.capabilities) <= BASELINE_CAPABILITIES)


def _dns_label(value: str) -> str:
    if problem := dns_label_problem(value):
        raise ValueError(problem)
    return value


class PrometheusInfo(StrictModel):
    """The cluster's Prometheus, which scrapes Argo's controller and Kueue (`wf platform render`'s metrics.yaml):
    where it runs and as whom, and whether the Prometheus Operator configures it."""

    operator: bool = Field(
        default=False, description="The Prometheus Operator runs it: the bundle holds ServiceMonitors; otherwise a "
                                   "scrape configuration for Prometheus' scrape_config_files")
    namespace: Annotated[str, AfterValidator(_dns_label)] = Field(
        default="monitoring", description="Its namespace (the scrape configuration's ConfigMap goes there)")
    service_account: Annotated[str, AfterValidator(_dns_label)] = Field(
        default="prometheus", alias="serviceAccount",
        description="The service account it scrapes as, which the bundle lets find Argo's and Kueue's endpoints "
                    "and read Kueue's metrics (Kueue asks the API server about every scrape)")


class ClusterInfo(StrictModel):
    name: str
    region: str
    version: str = Field(pattern=r"^1\.\d+$")
    availability_zones: list[str] = Field(alias="availabilityZones", min_length=1)
    autoscaler: Literal["cluster-autoscaler", "karpenter"] = Field(
        default="cluster-autoscaler",
        description="What adds and removes nodes: cluster-autoscaler for the eksctl node groups, or Karpenter's "
                    "NodePools (`wf platform render` installs the matching one)")
    prometheus: PrometheusInfo = Field(
        default_factory=PrometheusInfo,
        description="The Prometheus that scrapes Argo's and Kueue's metrics (what `wf report` and "
                    "`wf platform check --prometheus` ask)")
    wf_image: str | None = Field(
        default=None, alias="wfImage", pattern=r"^[^\s]+$",
        description="An image with wf installed (its `wf` on PATH), which the platform's own wf components run: the "
                    "node facts recorder that keeps each workflow's nodes for its cost (`wf platform render` adds "
                    "its Deployment only with it)")


class ComputeClass(StrictModel):
    name: str
    instance_types: list[str] = Field(alias="instanceTypes", min_length=1)
    capacity: list[Capacity] = Field(default_factory=lambda: list[Capacity](["spot"]), min_length=1)
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
        description=(
            "Retries for Spot interruptions and evictions, on their own budget (default 5 on Spot, 2 on-demand)"
        ),
    )
    spot_fallback_after: int | None = Field(
        default=None, ge=1, le=20, alias="spotFallbackAfter",
        description="Spot interruptions of one step after which its next attempt runs On-Demand (when the class "
                    "offers on-demand capacity); unset: every attempt stays on Spot",
    )
    pod_security: PodSecurity | None = Field(
        default=None, alias="podSecurity",
        description="What the class's pods may have beyond wf's hardened default; default: what its "
                    "accelerator's images need (wf.model.accelerators), for the pods holding its devices")

    @property
    def default_capacity(self) -> Capacity:
        return self.capacity[0]

    @cached_property
    def instances(self) -> list[InstanceType]:
        return [instance_type(name) for name in self.instance_types]

    @property
    def relaxations(self) -> PodSecurity:
        """The class's pod security relaxations, given or its accelerator's."""
        if self.pod_security is not None:
            return self.pod_security
        needs = profile(self.accelerator.resource if self.accelerator else None)
        return PodSecurity(capabilities=list(needs.capabilities), hostIPC=needs.host_ipc)

    @property
    def resolved_arch(self) -> str:
        return self.arch or self.instances[0].arch

    def zones(self, cluster: ClusterInfo) -> list[str]:
        return self.availability_zones or cluster.availability_zones


class S3Store(StrictModel):
    bucket: str
    region: str
    key_format: str = Field(
        default="{{workflow.namespace}}/{{workflow.name}}/{{pod.name}}", alias="keyFormat",
        description="Object key layout, in Argo's variables")


class CheckpointVolume(StrictModel):
    """A shared volume (FSx for Lustre, EFS) that steps may keep checkpoints on: a PersistentVolumeClaim of this
    name in every namespace where workflows run."""

    claim: str = Field(description="PersistentVolumeClaim name")
    mount_path: MountPath = Field(default="/wf/checkpoints", alias="mountPath")
    compute_classes: list[str] | None = Field(
        default=None, alias="computeClasses",
        description="Classes whose nodes reach the volume (e.g. an FSx file system in their zone); unset: all")


class CheckpointPolicy(StrictModel):
    """Where steps keep checkpoints and how long: under `prefix` in the artifact store, where an S3 lifecycle rule
    (`wf.compile.artifacts.lifecycle_rule`) removes them `keepDays` after they were written."""

    prefix: str = Field(default="checkpoints", pattern=r"^[A-Za-z0-9][-_.A-Za-z0-9]*$",
                        description="Key prefix of every checkpoint in the bucket")
    keep_days: int = Field(default=7, ge=1, le=3650, alias="keepDays",
                           description="Days a checkpoint is kept after it was written")
    volumes: dict[str, CheckpointVolume] = Field(default_factory=dict,
                                                 description="Shared volumes a step may name as its store")


class ArtifactStore(StrictModel):
    """Where step artifacts live, reached with the pod's identity (IRSA or EKS Pod Identity), never keys."""

    s3: S3Store
    checkpoints: CheckpointPolicy = Field(default_factory=CheckpointPolicy)
    service_accounts: dict[str, str] = Field(
        default_factory=dict, alias="serviceAccounts",
        description="Namespace -> service account bound to a role that can read and write the bucket")


def _max_age(value: str | int) -> str | int:
    if parse_duration(value) > 10 * 365 * 86400:
        raise ValueError("must be at most ten years")
    return value


class CachePolicy(StrictModel):
    """How long a cached step result (job specs' `cache:`) is reused: Argo's memoization ignores an entry older
    than `maxAge` and replaces it with the next run's."""

    max_age: Annotated[str | int, AfterValidator(_max_age)] = Field(
        default="7d", alias="maxAge", description="e.g. 7d, 12h; a result older than this is computed again")

    @property
    def max_age_seconds(self) -> int:
        return parse_duration(self.max_age)


class Catalog(StrictModel):
    api_version: Literal["wf/v1"] = Field(default="wf/v1", alias="apiVersion")
    kind: Literal["Catalog"] = "Catalog"
    cluster: ClusterInfo
    compute_classes: list[ComputeClass] = Field(alias="computeClasses", min_length=1)
    default_class: str | None = Field(default=None, alias="defaultClass",
                                      description="Class of steps whose job names none")
    artifacts: ArtifactStore | None = Field(default=None, description="Store of the artifacts steps hand on")
    cache: CachePolicy = Field(default_factory=CachePolicy, description="Cached step results (job specs' `cache:`)")
    queues: Queues | None = Field(default=None, description="Teams, their quotas and priorities (Kueue)")
    step_service_accounts: dict[str, list[str]] = Field(
        default_factory=dict, alias="stepServiceAccounts",
        description="Namespace -> service accounts a job spec may name (spec.serviceAccount): its steps then run "
                    "as that account, with its Kubernetes API token; every other step's container gets no token")
    _source: str = PrivateAttr(default="<python>")  # where it was read from, for messages

    @model_validator(mode="after")
    def _checked(self, info: ValidationInfo) -> Catalog:
        if not (info.context or {}).get(DEFER_CHECKS):
            raise_problems(self.problems(), self._source)
        return self

    @property
    def source(self) -> str:
        return self._source

    def problems(self) -> list[Problem]:
        out: list[Problem] = []
        region = self.cluster.region
        for i, zone in enumerate(self.cluster.availability_zones):
            if not _zone_in_region(zone, region):
                out.append(Problem.at(("cluster", "availabilityZones", i),
                                      f"zone {zone!r} is not in region {region!r}"))
        seen: set[str] = set()
        for c, cls in enumerate(self.compute_classes):
            at: tuple[PathKey, ...] = ("computeClasses", c)
            if problem := dns_label_problem(cls.name, "compute class name"):
                out.append(Problem.at((*at, "name"), problem))
            if cls.name in seen:
                out.append(Problem.at((*at, "name"), f"duplicate compute class {cls.name!r}"))
            seen.add(cls.name)
            out += _class_problems(cls, at, self.cluster)
        if self.default_class is not None and self.default_class not in seen:
            out.append(Problem.at(("defaultClass",),
                                  f"unknown compute class {self.default_class!r}; classes: {sorted(seen)}"))
        for name, volume in (self.artifacts.checkpoints.volumes if self.artifacts else {}).items():
            for i, class_name in enumerate(volume.compute_classes or []):
                if class_name not in seen:
                    out.append(Problem.at(("artifacts", "checkpoints", "volumes", name, "computeClasses", i),
                                          f"unknown compute class {class_name!r}; classes: {sorted(seen)}"))
        if self.queues and not out:  # quotas name classes: check them once the classes are sound
            out += self.queues.problems()
            for t, team in enumerate(self.queues.teams):
                out += _quota_problems(team, ("queues", "teams", t), self)
        return out

    def allows_step_account(self, account: str, namespace: str | None) -> bool:
        """Whether steps in `namespace` may run as `account` with its token; a namespace not known yet (an offline
        compile) takes any the catalog lists, and the submit checks again where it goes."""
        if namespace is None:
            return any(account in names for names in self.step_service_accounts.values())
        return account in self.step_service_accounts.get(namespace, [])

    def compute_class(self, name: str) -> ComputeClass:
        for cls in self.compute_classes:
            if cls.name == name:
                return cls
        raise KeyError(name)

    @property
    def class_names(self) -> list[str]:
        return [c.name for c in self.compute_classes]

    def unknown_class(self, name: str) -> str:
        """What is wrong with a class name the catalog lacks, in the same words wherever a class is named."""
        return (f"unknown compute class {name!r}{did_you_mean(name, self.class_names)}; "
                f"the catalog has: {', '.join(self.class_names)}")

    def to_yaml(self) -> str:
        data = self.model_dump(by_alias=True, exclude_defaults=True, mode="json")
        data = {"apiVersion": self.api_version, "kind": self.kind, **data}
        return yaml.safe_dump(data, sort_keys=False)

    @classmethod
    def from_yaml_text(cls, text: str, source: str) -> Catalog:
        docs = parse_documents(text, source)
        if len(docs) != 1 or not isinstance(docs[0].data, dict):
            raise_problems([Problem.at((), "a catalog is one YAML mapping")], source)
        return catalog_from_document(docs[0])


def catalog_from_document(doc: Document) -> Catalog:
    catalog = parse_model(Catalog, doc)
    catalog._source = doc.file
    return catalog


def _zone_in_region(zone: str, region: str) -> bool:
    return zone.startswith(region) and len(zone) > len(region) and zone[len(region):].isalnum()


def _class_problems(cls: ComputeClass, at: tuple[PathKey, ...], cluster: ClusterInfo) -> list[Problem]:
    out: list[Problem] = []
    instances: list[InstanceType] = []
    for i, name in enumerate(cls.instance_types):
        try:
            instances.append(instance_type(name))
        except ValueError as exc:
            out.append(Problem.at((*at, "instanceTypes", i), str(exc)))
    if len(set(cls.instance_types)) != len(cls.instance_types):
        out.append(Problem.at((*at, "instanceTypes"), "instance types are listed twice"))
    if len(set(cls.capacity)) != len(cls.capacity):
        out.append(Problem.at((*at, "capacity"), f"capacity lists a value twice; choose from {list(CAPACITIES)}"))
    if cls.spot_fallback_after is not None and set(cls.capacity) != set(CAPACITIES):
        out.append(Problem.at((*at, "spotFallbackAfter"),
                               "falling back from Spot to On-Demand needs capacity [spot, on-demand]"))
    elif cls.spot_fallback_after is not None and cls.interruption_retries is not None \
            and cls.spot_fallback_after > cls.interruption_retries:
        out.append(Problem.at((*at, "spotFallbackAfter"), f"never reached: a step gets {cls.interruption_retries} "
                                                           "interruption retries (interruptionRetries)"))
    arches = {i.arch for i in instances}
    if len(arches) > 1:
        mixed = ", ".join(f"{i.name} ({i.arch})" for i in instances)
        out.append(Problem.at((*at, "instanceTypes"),
                              f"instance types mix architectures: {mixed}; use one class per arch"))
    elif cls.arch and arches and cls.arch not in arches:
        out.append(Problem.at((*at, "arch"), f"arch {cls.arch} does not match the instance types ({arches.pop()})"))
    for z, zone in enumerate(cls.availability_zones or []):
        if not _zone_in_region(zone, cluster.region):
            out.append(Problem.at((*at, "availabilityZones", z), f"zone {zone!r} is not in region {cluster.region!r}"))
    if cls.accelerator:
        resource, count = cls.accelerator.resource, cls.accelerator.count
        for inst in instances:
            has = inst.accelerators.get(resource, 0)
            if has < count:
                out.append(Problem.at((*at, "accelerator", "count"),
                            f"{inst.name} has {has} {resource}, fewer than the {count} the class declares"))
    if cls.efa:
        for inst in instances:
            if inst.efa < 1:
                out.append(Problem.at((*at, "efa"), f"{inst.name} has no EFA interface"))
    out += labels_problems(cls.labels, (*at, "labels"))
    for key in cls.labels:
        if key.startswith(f"{DOMAIN}/"):
            out.append(Problem.at((*at, "labels", key), f"labels under {DOMAIN}/ are set by wf itself"))
        elif any(key.startswith(p) or f".{p}" in key for p in _RESERVED_LABEL_PREFIXES) and not key.startswith(
            _ALLOWED_RESERVED
        ):
            out.append(Problem.at((*at, "labels", key), "kubelet may not set labels under kubernetes.io/ or k8s.io/"))
    taint_keys: set[tuple[str, str]] = set()
    for t, taint in enumerate(cls.taints):
        if problem := labels_problems({taint.key: taint.value}, ()):
            out.append(Problem.at((*at, "taints", t), problem[0].message.replace("label", "taint")))
        if (taint.key, taint.effect) in taint_keys:
            out.append(Problem.at((*at, "taints", t), f"taint {taint.key}:{taint.effect} is declared twice"))
        taint_keys.add((taint.key, taint.effect))
    if cls.min_size > cls.max_size:
        out.append(Problem.at((*at, "minSize"), f"minSize {cls.min_size} exceeds maxSize {cls.max_size}"))
    return out


def catalog_path(path: str | Path | None = None, *, near: str | Path | None = None) -> Path | None:
    """The catalog file, in the documented order (README, The catalog): --catalog, else WF_CATALOG, else the one
    the project file names, searched from `near` (a job file or folder) upwards, then from the working directory
    upwards (a job written outside the project, compiled inside it). None when none names one: a cluster command
    then reads the cluster's copy (wf.controller.catalog_source)."""
    if path:
        return Path(path)
    if env := os.environ.get(CATALOG_ENV):
        return Path(env)
    project = (project_file(Path(near)) if near else None) or project_file(Path.cwd())
    return _named_in(project) if project else None


def project_file(start: Path) -> Path | None:
    """The nearest project file at or above `start` (a file's folder, or a folder)."""
    folder = start.resolve()
    if not folder.is_dir():
        folder = folder.parent
    for candidate in (folder, *folder.parents):
        if (candidate / PROJECT_FILE).is_file():
            return candidate / PROJECT_FILE
    return None


def _named_in(project: Path) -> Path:
    doc = load_mapping(project)
    problems = [doc.problem((key,), f"unknown setting{did_you_mean(str(key), ['catalog'])}; a project file holds "
                                   "`catalog: PATH`") for key in doc.data if key != "catalog"]
    named = doc.data.get("catalog")
    if not isinstance(named, str) or not named:
        problems.append(doc.problem(("catalog",) if "catalog" in doc.data else (),
                                    "name the compute-class catalog: `catalog: PATH` (relative to this file)"))
    if problems:
        raise InputError(problems)
    catalog = project.parent / str(named)
    if not catalog.is_file():
        raise InputError([doc.problem(("catalog",), f"no such file: {catalog}")])
    return catalog


def no_catalog(near: str | Path | None = None, *, cluster: str | None = None) -> InputError:
    """The error when nothing names a catalog, naming every place it is looked for."""
    start = Path(near).resolve() if near else Path.cwd()
    where = " or ".join(str(f) for f in dict.fromkeys([start if start.is_dir() else start.parent, Path.cwd()]))
    configmap = f"ConfigMap {CATALOG_NAMESPACE}/{CATALOG_CONFIGMAP}"
    in_cluster = (f"and the cluster ({cluster}) has none installed ({configmap})" if cluster else
                  f"commands that reach a cluster also read the one installed there ({configmap})")
    return InputError(
        f"no compute-class catalog: pass --catalog FILE, set {CATALOG_ENV}=FILE, or write `catalog: PATH` in a "
        f"{PROJECT_FILE} file in {where}, or a folder above; {in_cluster}", file=near or Path.cwd())


def load_catalog(path: str | Path | None = None, *, near: str | Path | None = None) -> Catalog:
    """The catalog found by `catalog_path`; InputError naming every place looked in when there is none."""
    found = catalog_path(path, near=near)
    if found is None:
        raise no_catalog(near)
    return catalog_from_document(load_mapping(found))


def _quota_problems(team: Team, at: tuple[PathKey, ...], catalog: Catalog) -> list[Problem]:
    out: list[Problem] = []
    seen: set[tuple[str, str]] = set()
    for q, quota in enumerate(team.quotas):
        qat = (*at, "quotas", q)
        try:
            cls = catalog.compute_class(quota.compute)
        except KeyError:
            out.append(Problem.at((*qat, "compute"), catalog.unknown_class(quota.compute)))
            continue
        capacity = quota.capacity or cls.default_capacity
        if capacity not in cls.capacity:
            out.append(Problem.at((*qat, "capacity"),
                                  f"compute class {cls.name!r} offers {' and '.join(cls.capacity)}, not {capacity}"))
        if (cls.name, capacity) in seen:
            out.append(Problem.at((*qat, "compute"), f"team {team.name} has two quotas for {cls.name} {capacity}"))
        seen.add((cls.name, capacity))
        limits = [("borrowingLimit", quota.borrowing_limit), ("lendingLimit", quota.lending_limit)]
        if not cls.accelerator:
            if quota.accelerators:
                out.append(Problem.at((*qat, "accelerators"), f"compute class {cls.name!r} has no accelerators"))
            for key, limit in limits:
                if limit and limit.accelerators is not None:
                    out.append(Problem.at((*qat, key, "accelerators"),
                                          f"compute class {cls.name!r} has no accelerators"))
        if quota.lending_limit:
            nominal = amounts(quota)
            for resource, value in amounts(quota.lending_limit).items():
                given = nominal[resource]
                if value is not None and given is not None and value > given:
                    out.append(Problem.at((*qat, "lendingLimit", resource),
                                f"lends more {resource} than the nominal quota of {given}"))
    return out
