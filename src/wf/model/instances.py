"""EC2 instance facts (vCPU, memory, accelerators, EFA, max pods, price) and the node allocatable they imply.

The table lives in ``wf/data/instances.csv``; it is parsed once, on first use, with the standard library only,
because ``wf compile`` and ``wf lint`` read it on every run. Its ``# source:`` and ``# as-of:`` header lines are
the module constants ``SOURCE`` and ``AS_OF``, so a refreshed table (``wf.aws.instances_refresh``, EC2 and Pricing
APIs) can never disagree with what the module claims about it.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Literal

from wf.model.accelerators import ACCELERATOR_RESOURCES

DATA_FILE = "instances.csv"
COLUMNS = (
    "name",
    "vcpu",
    "memory_mib",
    "arch",
    "accelerators",
    "efa",
    "max_pods",
    "price_on_demand",
    "spot_savings",
)
METADATA_KEYS = ("source", "as-of")
ARCHES = ("amd64", "arm64")

# EKS AL2023 AMI (awslabs/amazon-eks-ami nodeadm/internal/kubelet/config.go, read 2026-08):
# kubeReserved cpu reserves 6% of the first core, 1% of the second, 0.5% of cores 3-4 and 0.25% of the rest,
# each range computed in integer millicores; kubeReserved memory is 11Mi per pod + 255Mi;
# evictionHard memory.available is 100Mi.
_CPU_RESERVE_RANGES = ((0, 1000, 600), (1000, 2000, 100), (2000, 4000, 50), (4000, None, 25))  # basis points
_MEMORY_RESERVE_BASE_MIB = 255
_MEMORY_RESERVE_PER_POD_MIB = 11
_EVICTION_HARD_MEMORY_MIB = 100
# The kernel never sees all of the nominal instance memory. Karpenter models this with
# vmMemoryOverheadPercent (default 0.075); without it, the AMI formula alone overstates allocatable by
# about 8% and simulated nodes would accept pods that real nodes reject. With it, our figures equal
# Karpenter's published allocatable, e.g. dl1.24xlarge: cpu 95690m, memory 718987Mi, pods 737, and
# c5.xlarge 3920m / 6584Mi, c5.9xlarge 35840m / 65269Mi (instance-types.md, commit 0c5e7d81).
_VM_MEMORY_OVERHEAD_PER_MILLE = 75
# Graviton kernels keep 64 MiB of CMA that pods cannot use (Karpenter pkg/providers/instancetype/types.go,
# memory()); it explains why g5g.8xlarge shows 57632Mi where an x86 type of the same size shows 57691Mi.
_ARM64_CMA_MIB = 64


@dataclass(frozen=True)
class InstanceType:
    name: str
    vcpu: int
    memory_mib: int
    arch: Literal["amd64", "arm64"]
    accelerators: dict[str, int] = field(default_factory=dict, hash=False)
    efa: int = 0
    max_pods: int = 110
    price_on_demand: float = 0.0
    spot_savings: float | None = None

    @property
    def family(self) -> str:
        return self.name.split(".", 1)[0]

    @property
    def allocatable_cpu_millis(self) -> int:
        total = self.vcpu * 1000
        reserved = 0
        for start, end, basis_points in _CPU_RESERVE_RANGES:
            if total <= start:
                break
            top = total if end is None else min(total, end)
            reserved += (top - start) * basis_points // 10000
        return total - reserved

    @property
    def allocatable_memory_mib(self) -> int:
        visible = self.memory_mib - (_ARM64_CMA_MIB if self.arch == "arm64" else 0)
        vm_overhead = -(-visible * _VM_MEMORY_OVERHEAD_PER_MILLE // 1000)  # ceiling, as Karpenter
        kube_reserved = _MEMORY_RESERVE_BASE_MIB + _MEMORY_RESERVE_PER_POD_MIB * self.max_pods
        return visible - vm_overhead - kube_reserved - _EVICTION_HARD_MEMORY_MIB

    def spot_price(self, unknown_savings: float | None = None) -> float | None:
        """Hourly On-Demand price x (1 - the Spot advisor's savings): indicative only, real Spot prices vary by
        zone and hour. A type with no measured savings is priced at `unknown_savings`, or not at all (None)."""
        savings = self.spot_savings if self.spot_savings is not None else unknown_savings
        if savings is None:
            return None
        return round(self.price_on_demand * (1 - savings), 6)

    def price(self, capacity: str | None) -> float:
        """Hourly price of a node at `capacity`: the Spot estimate on Spot where the type has one, else On-Demand.
        The one rule of the cost table (wf.controller.cost), which wf's cost metrics read."""
        spot = self.spot_price() if capacity == "spot" else None
        return self.price_on_demand if spot is None else spot


def parse_accelerators(text: str) -> dict[str, int]:
    """'nvidia.com/gpu=4' or 'a=1;b=2' -> {resource: count}; '' -> {}."""
    result: dict[str, int] = {}
    for pair in filter(None, (p.strip() for p in text.split(";"))):
        resource, sep, count = pair.partition("=")
        if not sep or resource not in ACCELERATOR_RESOURCES or not count.isdigit() or int(count) < 1:
            raise ValueError(f"bad accelerator {pair!r}: expected <resource>=<count> with one of "
                             f"{', '.join(ACCELERATOR_RESOURCES)}")
        result[resource] = int(count)
    return result


def format_accelerators(accelerators: dict[str, int]) -> str:
    return ";".join(f"{resource}={count}" for resource, count in sorted(accelerators.items()))


def parse_table(text: str, source: str = DATA_FILE) -> dict[str, InstanceType]:
    """Parse the CSV table; '#' lines are comments. Errors name the source line."""
    lines = text.splitlines()
    rows = [(number, line) for number, line in enumerate(lines, 1) if line.strip() and not line.startswith("#")]
    if not rows:
        raise ValueError(f"{source}: no header row")
    header_line, header = rows[0]
    if tuple(next(csv.reader([header]))) != COLUMNS:
        raise ValueError(f"{source}:{header_line}: header must be {','.join(COLUMNS)}")
    table: dict[str, InstanceType] = {}
    for number, line in rows[1:]:
        values = next(csv.reader(io.StringIO(line)))
        if len(values) != len(COLUMNS):
            raise ValueError(f"{source}:{number}: expected {len(COLUMNS)} fields, got {len(values)}")
        try:
            instance = _row_to_instance(dict(zip(COLUMNS, values, strict=True)))
        except ValueError as exc:
            raise ValueError(f"{source}:{number}: {exc}") from None
        if instance.name in table:
            raise ValueError(f"{source}:{number}: duplicate instance type {instance.name}")
        table[instance.name] = instance
    return table


def _row_to_instance(row: dict[str, str]) -> InstanceType:
    if row["arch"] not in ARCHES:
        raise ValueError(f"arch {row['arch']!r} is not one of {', '.join(ARCHES)}")
    savings = float(row["spot_savings"]) if row["spot_savings"] else None
    if savings is not None and not 0 <= savings < 1:
        raise ValueError(f"spot_savings {savings} is not a fraction in [0, 1)")
    instance = InstanceType(
        name=row["name"],
        vcpu=int(row["vcpu"]),
        memory_mib=int(row["memory_mib"]),
        arch=row["arch"],  # type: ignore[arg-type]  # checked against ARCHES above
        accelerators=parse_accelerators(row["accelerators"]),
        efa=int(row["efa"]),
        max_pods=int(row["max_pods"]),
        price_on_demand=float(row["price_on_demand"]),
        spot_savings=savings,
    )
    if instance.vcpu < 1 or instance.memory_mib < 1 or instance.max_pods < 1 or instance.efa < 0:
        raise ValueError(f"{instance.name}: vcpu, memory_mib and max_pods must be positive, efa not negative")
    return instance


def format_table(
    instances: dict[str, InstanceType] | list[InstanceType], *, source: str, as_of: str, notes: str = ""
) -> str:
    """The inverse of parse_table and parse_metadata: the metadata and notes as '#' lines, then sorted rows."""
    items = instances.values() if isinstance(instances, dict) else instances
    out = io.StringIO()
    out.write("# EC2 instance facts used for placement, node simulation and cost hints. One row per instance type.\n")
    out.write(f"# source: {source}\n# as-of: {as_of}\n")
    for line in notes.splitlines():
        out.write(f"# {line}".rstrip() + "\n")
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    for it in sorted(items, key=_sort_key):
        writer.writerow([
            it.name, it.vcpu, it.memory_mib, it.arch, format_accelerators(it.accelerators), it.efa,
            it.max_pods, repr(it.price_on_demand), "" if it.spot_savings is None else repr(it.spot_savings),
        ])
    return out.getvalue()


_SIZE_ORDER = {"medium": 0, "large": 1, "xlarge": 2, "metal": 10_000}


def _sort_key(it: InstanceType) -> tuple[str, int, str]:
    family, _, size = it.name.partition(".")
    if size.endswith("xlarge") and size[:-6].isdigit():
        rank = 2 + int(size[:-6])
    else:
        rank = _SIZE_ORDER.get(size.split("-")[0], 5_000)
    return family, rank, size


def parse_metadata(text: str) -> dict[str, str]:
    """The '# key: value' lines of the comment block before the header row (e.g. source, as-of)."""
    metadata: dict[str, str] = {}
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        key, sep, value = line[1:].strip().partition(": ")
        if sep and key in METADATA_KEYS:
            metadata[key] = value.strip()
    return metadata


def data_path() -> Path:
    return Path(__file__).parent / "data" / DATA_FILE


@cache
def _load() -> tuple[dict[str, InstanceType], dict[str, str]]:
    text = data_path().read_text(encoding="utf-8")
    source = f"wf/data/{DATA_FILE}"
    metadata = parse_metadata(text)
    missing = [key for key in METADATA_KEYS if key not in metadata]
    if missing:
        raise ValueError(f"{source}: header lacks '# {missing[0]}: ...'")
    return parse_table(text, source), metadata


def known_instance_types() -> dict[str, InstanceType]:
    return _load()[0]


def __getattr__(name: str) -> str:
    # SOURCE and AS_OF are read from the table header on first access, not at import.
    if name == "SOURCE":
        return _load()[1]["source"]
    if name == "AS_OF":
        return _load()[1]["as-of"]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def instance_type(name: str) -> InstanceType:
    """The facts for one instance type; unknown names raise ValueError naming the closest known ones."""
    table = known_instance_types()
    found = table.get(name)
    if found is not None:
        return found
    import difflib  # only on the error path: keeps the import off the compile path

    close = difflib.get_close_matches(name, table.keys(), n=3, cutoff=0.6)
    hint = f"did you mean {', '.join(close)}?" if close else (
        "known families: " + ", ".join(sorted({it.family for it in table.values()})))
    raise ValueError(f"unknown instance type {name!r}; {hint}")
