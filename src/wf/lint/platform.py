"""A live cluster against the catalog: what is wrong, and the command that fixes it. Pure: the rendered platform
(`wf.render.platform.Expected`) and the live objects go in, findings come out; `wf.controller.platform_check`
reads the cluster.

Objects are compared on wf's fields only (the API server adds defaults, status and its own metadata): every
field the rendering sets must be there with the same value (quantities by amount). ConfigMaps wf owns whole
(Argo's, the catalog, the artifact repository) must hold exactly the rendered data, parsed as YAML; Kueue's
carries upstream's settings too, so only wf's keys are compared.

Nodes are compared with their node group: labels, taints, instance type, zone and architecture; an accelerator
class's nodes must advertise the class's devices (and EFA interfaces), which only a running device plugin
makes them do; a node whose launch template the API shows (Karpenter's EC2NodeClass) must keep its pods from the
instance metadata service. Node counts are checked against minSize and maxSize where nodes come from node groups (not
on the local cluster, whose simulated nodes are a fixed number per group).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import yaml

from wf.core.constants import (
    ARCH_LABEL,
    CAPACITY_LABEL,
    CATALOG_NAMESPACE,
    CLASS_LABEL,
    INSTANCE_TYPE_LABEL,
    KARPENTER_NODEPOOL_LABEL,
    ZONE_LABEL,
)
from wf.core.units import parse_quantity
from wf.model.accelerators import HUGEPAGES_2MI
from wf.model.catalog import Catalog, Taint
from wf.model.nodegroups import NodeGroup, node_groups
from wf.render import karpenter, platform
from wf.render.platform import Component, Expected
from wf.render.scrape import Source

Key = tuple[str, str, str | None, str]  # apiVersion, kind, namespace, name
APPLY_BUNDLE = "wf platform render -f platform/ && kubectl apply --server-side -k platform/"
LOCAL_FIX = "wf cluster up"
# ConfigMaps that also hold settings not wf's (Kueue's serving ports and leader election): wf's keys only.
_PARTIAL_CONFIGMAPS = {(platform.KUEUE_NAMESPACE, platform.KUEUE_CONFIGMAP)}


@dataclass(frozen=True)
class Finding:
    subject: str  # what is wrong, in the platform's terms: "node group gaudi-spot-us-east-1a", "ClusterQueue mapping"
    problem: str
    fix: str  # the command that fixes it

    def to_json(self) -> dict[str, str]:
        return {"subject": self.subject, "problem": self.problem, "fix": self.fix}

    def __str__(self) -> str:
        return f"{self.subject}: {self.problem}\n  fix: {self.fix}"


@dataclass(frozen=True)
class Live:
    """What the cluster holds: its nodes, each wanted object (None when absent), the kinds it does not serve,
    and the local cluster's record of its process components (None on a real cluster)."""

    nodes: list[dict[str, Any]]
    objects: Mapping[Key, dict[str, Any] | None]
    unserved: frozenset[tuple[str, str]]  # (apiVersion, kind)
    local: Mapping[str, str] | None


@dataclass(frozen=True)
class Scrapes:
    """A Prometheus' word on the jobs asked: each job's targets, as (health, last error); health is Prometheus'
    `up`, `down` or `unknown` (not scraped yet). No target: it scrapes no such job."""

    url: str
    targets: Mapping[str, list[tuple[str, str]]]


def key(obj: Mapping[str, Any]) -> Key:
    meta = obj["metadata"]
    return obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"]


def deployment_key(component: Component) -> Key:
    return "apps/v1", "Deployment", component.namespace, component.deployment


def wanted(expected: Expected) -> list[Key]:
    """Every object the comparison reads: the reader fetches these (and the nodes)."""
    return [*(key(o) for o in [*expected.objects, *expected.daemonsets, *expected.autoscaler]),
            *(deployment_key(c) for c in expected.components),
            ("v1", "ConfigMap", CATALOG_NAMESPACE, platform.LOCAL_MARKER)]


def compare(catalog: Catalog, expected: Expected, live: Live, scrapes: Scrapes | None = None) -> list[Finding]:
    """Every way the cluster departs from the rendering; with `scrapes`, also each metrics source (of the
    components that run) its Prometheus does not scrape."""
    fix = LOCAL_FIX if live.local is not None else APPLY_BUNDLE
    out = _nodes(catalog, live)
    out += [f for c in expected.components for f in _component(c, live)]
    for obj in [*expected.daemonsets, *expected.autoscaler]:
        out += _workload(obj, live)
    for obj in expected.objects:
        out += _object(obj, live, fix)
    if scrapes is not None:
        out += [f for source in scraped(expected, live) for f in _scraped(catalog, source, scrapes, live)]
    return out


def scraped(expected: Expected, live: Live) -> list[Source]:
    """The metrics sources Prometheus should scrape: the local cluster's of the components it runs (one that does
    not run is a finding of its own), a real cluster's all."""
    return [s for s in expected.metrics if live.local is None or s.component in live.local]


def _scraped(catalog: Catalog, source: Source, scrapes: Scrapes, live: Live) -> list[Finding]:
    subject = f"Prometheus ({scrapes.url})"
    what = f"{source.component}'s metrics (job {source.job}, Service {source.namespace}/{source.service})"
    targets = scrapes.targets.get(source.job) or []
    prometheus = catalog.cluster.prometheus
    if not targets:
        if live.local is not None:
            fix = LOCAL_FIX
        elif prometheus.operator:
            fix = (f"{APPLY_BUNDLE}; the Prometheus resource's serviceMonitorSelector and "
                   f"serviceMonitorNamespaceSelector must select ServiceMonitor {source.namespace}/wf-{source.job}")
        else:
            fix = (f"{APPLY_BUNDLE}; mount ConfigMap {prometheus.namespace}/{platform.SCRAPE_CONFIGMAP} in "
                   f"Prometheus and list its {platform.SCRAPE_FILE} in scrape_config_files")
        return [Finding(subject, f"does not scrape {what}", fix)]
    if any(health != "down" for health, _ in targets):
        return []  # one target up is enough; `unknown`: not scraped yet
    error = next((e for _, e in targets if e), "no error given")
    denied = (f"; an account without ClusterRole {platform.METRICS_READER} is refused (401 or 403)"
              if source.authorized else "")
    return [Finding(subject, f"fails to scrape {what}: {len(targets)} targets down, the last error: {error}{denied}",
                    f"{scrapes.url}/api/v1/targets?state=active gives each target's lastError")]


def _subject(obj: Mapping[str, Any]) -> str:
    meta = obj["metadata"]
    where = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{obj['kind']} {where}{meta['name']}"


def _object(want: dict[str, Any], live: Live, fix: str) -> list[Finding]:
    subject = _subject(want)
    if (want["apiVersion"], want["kind"]) in live.unserved:
        return [Finding(subject, f"the API server does not serve {want['apiVersion']} {want['kind']} "
                                 "(its CRDs are not installed)", fix)]
    have = live.objects.get(key(want))
    if have is None:
        return [Finding(subject, "missing", fix)]
    if want["kind"] == "ConfigMap":
        meta = want["metadata"]
        exact = (meta.get("namespace"), meta["name"]) not in _PARTIAL_CONFIGMAPS
        problems = _configmap(want.get("data") or {}, have.get("data") or {}, exact)
    else:
        problems = differences({k: v for k, v in want.items() if k not in ("apiVersion", "kind", "metadata")},
                               have, "")
        for part in ("labels", "annotations"):
            problems += differences(want["metadata"].get(part) or {}, have["metadata"].get(part) or {},
                                    f"metadata.{part}")
    return [Finding(subject, problem, fix) for problem in problems]


def _configmap(want: Mapping[str, str], have: Mapping[str, str], exact: bool) -> list[str]:
    out = []
    for name, text in want.items():
        if name not in have:
            out.append(f"data.{name}: missing")
            continue
        try:
            live_value = yaml.safe_load(have[name])
        except yaml.YAMLError as exc:
            out.append(f"data.{name}: not YAML ({exc.__class__.__name__})")
            continue
        found = differences(yaml.safe_load(text), live_value, f"data.{name}", exact=exact)
        out += found[:3] + ([f"data.{name}: {len(found) - 3} more differences"] if len(found) > 3 else [])
    return out


def differences(want: Any, have: Any, path: str, *, exact: bool = False) -> list[str]:
    """Where `have` departs from `want`: every mapping key of `want` with an equal value (lists item by item);
    with `exact`, keys `want` lacks are differences too."""
    where = path or "."
    if isinstance(want, dict):
        if not isinstance(have, dict):
            return [f"{where}: {_show(have)} instead of a mapping"]
        out = []
        for k, value in want.items():
            sub = f"{path}.{k}" if path else str(k)
            out += differences(value, have[k], sub, exact=exact) if k in have else [f"{sub}: missing"]
        if exact:
            out += [f"{path}.{k}: not in the rendering" if path else f"{k}: not in the rendering"
                    for k in have if k not in want]
        return out
    if isinstance(want, list):
        if not isinstance(have, list) or len(have) != len(want):
            return [f"{where}: {_show(have)} instead of {_show(want)}"]
        return [d for i, (w, h) in enumerate(zip(want, have, strict=True))
                for d in differences(w, h, f"{path}[{i}]", exact=exact)]
    return [] if _same(want, have) else [f"{where}: {_show(have)} instead of {_show(want)}"]


def _same(want: Any, have: Any) -> bool:
    if want == have or (not isinstance(want, bool) and str(want) == str(have)):
        return True
    try:
        return parse_quantity(str(want)) == parse_quantity(str(have))
    except ValueError:
        return False


def _show(value: Any) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, width=10**6).strip().removesuffix("...").strip()
    return text if len(text) <= 80 else text[:77] + "..."


def _tag(image: str) -> str:
    name = image.rsplit("/", 1)[-1]
    return name.split("@", 1)[0].partition(":")[2]


def _component(component: Component, live: Live) -> list[Finding]:
    subject = f"{component.name} ({component.namespace}/{component.deployment})"
    if live.local is not None:
        version = live.local.get(component.name)
        if version is None:
            flag = " --queues" if component.name == "kueue" else ""
            return [Finding(component.name, "not running on the local cluster", f"{LOCAL_FIX}{flag}")]
        if version != component.version:
            return [Finding(component.name, f"the local cluster runs {version}, wf pins {component.version}",
                            f"wf cluster down && {LOCAL_FIX}")]
        return []
    have = live.objects.get(deployment_key(component))
    if have is None:
        return [Finding(subject, "not installed", APPLY_BUNDLE)]
    containers = have.get("spec", {}).get("template", {}).get("spec", {}).get("containers") or [{}]
    tag = _tag(containers[0].get("image", ""))
    out = []
    if tag.removeprefix("v") != component.version:
        out.append(Finding(subject, f"runs {tag or 'an untagged image'}, wf pins {component.tag}", APPLY_BUNDLE))
    if not (have.get("status") or {}).get("readyReplicas"):
        out.append(Finding(subject, "no ready replica",
                           f"kubectl -n {component.namespace} describe deployment {component.deployment}"))
    return out


def _workload(want: dict[str, Any], live: Live) -> list[Finding]:
    """A device plugin's DaemonSet or the autoscaler: present, at the rendered image, ready everywhere it runs."""
    subject = _subject(want)
    if live.local is not None:
        return []  # simulated nodes advertise their devices themselves; nothing autoscales them
    if (want["apiVersion"], want["kind"]) in live.unserved:
        return [Finding(subject, f"{want['kind']} is not served: install Karpenter (its Helm chart) first",
                        "helm upgrade --install karpenter oci://public.ecr.aws/karpenter/karpenter -n kube-system")]
    have = live.objects.get(key(want))
    if have is None:
        return [Finding(subject, "missing", APPLY_BUNDLE)]
    if want["kind"] not in ("DaemonSet", "Deployment"):
        return [Finding(subject, p, APPLY_BUNDLE) for p in differences(want["spec"], have.get("spec") or {}, "spec")]
    image = want["spec"]["template"]["spec"]["containers"][0]["image"]
    containers = have.get("spec", {}).get("template", {}).get("spec", {}).get("containers") or [{}]
    out = []
    if containers[0].get("image") != image:
        out.append(Finding(subject, f"runs {containers[0].get('image')}, wf pins {image}", APPLY_BUNDLE))
    status = have.get("status") or {}
    ready, wanted_count = (status.get("numberReady", 0), status.get("desiredNumberScheduled", 0)) \
        if want["kind"] == "DaemonSet" else (status.get("readyReplicas", 0), 1)
    if ready < wanted_count:
        meta = want["metadata"]
        out.append(Finding(subject, f"{ready} of {wanted_count} pods ready",
                           f"kubectl -n {meta['namespace']} describe {want['kind'].lower()} {meta['name']}"))
    return out


def _nodes(catalog: Catalog, live: Live) -> list[Finding]:
    groups = {(g.compute_class, g.capacity, g.zone): g for g in node_groups(catalog)}
    by_group: dict[tuple[str, str, str], list[dict[str, Any]]] = {k: [] for k in groups}
    out: list[Finding] = []
    local = live.local is not None
    for node in live.nodes:
        labels = node["metadata"].get("labels") or {}
        cls = labels.get(CLASS_LABEL)
        if cls is None:
            continue  # not a node of wf's classes (system node groups)
        name = node["metadata"]["name"]
        group = groups.get((cls, labels.get(CAPACITY_LABEL, ""), labels.get(ZONE_LABEL, "")))
        if group is None:
            out.append(Finding(f"node {name}", f"compute class {cls}, capacity {labels.get(CAPACITY_LABEL)}, zone "
                                               f"{labels.get(ZONE_LABEL)}: no node group of the catalog",
                               LOCAL_FIX if local else f"kubectl drain {name} --ignore-daemonsets (and remove "
                                                       "its node group: eksctl delete nodegroup)"))
            continue
        by_group[(group.compute_class, group.capacity, group.zone)].append(node)
        out += _node(group, node, local)
        out += _metadata_access(node, live)
    if not local:
        for k, group in groups.items():
            count = len(by_group[k])
            if count < group.min_size or count > group.max_size:
                out.append(Finding(f"node group {group.name}", f"{count} nodes, the catalog says "
                                                               f"{group.min_size} to {group.max_size}",
                                   f"eksctl scale nodegroup --cluster {catalog.cluster.name} --name {group.name} "
                                   f"--nodes-min {group.min_size} --nodes-max {group.max_size}"))
    return out


def _node(group: NodeGroup, node: dict[str, Any], local: bool) -> list[Finding]:
    name = node["metadata"]["name"]
    labels = node["metadata"].get("labels") or {}
    subject = f"node {name} (node group {group.name})"
    out: list[Finding] = []

    def found(problem: str, fix: str) -> None:
        out.append(Finding(subject, problem, LOCAL_FIX if local else fix))

    for k, v in {**group.labels, ARCH_LABEL: group.arch}.items():
        if labels.get(k) != v:
            found(f"label {k}={labels.get(k)} instead of {v}" if k in labels else f"label {k}={v} missing",
                  f"kubectl label nodes {name} {k}={v} --overwrite")
    instance = labels.get(INSTANCE_TYPE_LABEL)
    if instance not in group.instance_types:
        found(f"instance type {instance}, the class has {', '.join(group.instance_types)}",
              f"eksctl create nodegroup --config-file eksctl/cluster.yaml --include {group.name}")
    live_taints = [Taint.from_kubernetes(t) for t in (node.get("spec") or {}).get("taints") or []]
    for taint in group.taints:
        if taint not in live_taints:
            other = [str(t) for t in live_taints if t.key == taint.key]
            found(f"taint {taint} {'replaced by ' + ', '.join(other) if other else 'missing'}",
                  f"kubectl taint nodes {name} {taint} --overwrite")
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    devices = dict(group.template_resources())
    devices.pop(HUGEPAGES_2MI, None)  # pre-allocated by the node group's boot commands, not by a plugin
    for resource, count in devices.items():
        have = _amount(allocatable.get(resource))
        if have < Decimal(count):
            found(f"advertises {have} {resource}, the class needs {count}: its device plugin is not running there",
                  f"{APPLY_BUNDLE}; then kubectl -n kube-system get pods -o wide --field-selector spec.nodeName={name}")
    return out


def _metadata_access(node: dict[str, Any], live: Live) -> list[Finding]:
    """A node whose launch template lets its pods reach the instance metadata service, and with it the node's IAM
    role, where the Kubernetes API shows the template: a Karpenter node's (its NodePool's EC2NodeClass). An eksctl
    group's launch template is not an object of the API; `wf lint eksctl/` holds the committed config to
    disablePodIMDS (wf.render.eksctl.NODE_METADATA)."""
    name = node["metadata"]["name"]
    pool = live.objects.get((karpenter.NODEPOOL_API, "NodePool", None,
                             (node["metadata"].get("labels") or {}).get(KARPENTER_NODEPOOL_LABEL, "")))
    ref = (((pool or {}).get("spec") or {}).get("template", {}).get("spec", {}).get("nodeClassRef") or {}).get("name")
    node_class = live.objects.get((karpenter.NODECLASS_API, "EC2NodeClass", None, ref or ""))
    if node_class is None:
        return []  # not a node of wf's NodePools; a missing pool or class is a finding of its own
    exposure = karpenter.metadata_exposure((node_class.get("spec") or {}).get("metadataOptions") or {})
    if exposure is None:
        return []
    return [Finding(f"node {name} (EC2NodeClass {ref})",
                    f"lets its pods reach the instance metadata service and the node's IAM role ({exposure})",
                    f"{APPLY_BUNDLE} (Karpenter replaces the drifted nodes)")]


def _amount(value: Any) -> Decimal:
    try:
        return parse_quantity(str(value)) if value is not None else Decimal(0)
    except ValueError:
        return Decimal(0)
