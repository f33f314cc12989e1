"""Refresh the instance facts table from AWS: EC2 DescribeInstanceTypes for specs, the Pricing API for prices.

Imported only by the command that refreshes the table (boto3 is slow to import and needs credentials).
Spot savings have no AWS API (the Spot Instance Advisor publishes a file, not an API), so a refresh keeps the
savings already in the table.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from wf.core.errors import ClusterError, InputError
from wf.model.accelerators import GAUDI_RESOURCE, NEURON_RESOURCE, NVIDIA_GPU_RESOURCE
from wf.model.instances import InstanceType, data_path, format_table, known_instance_types

PRICING_REGION = "us-east-1"  # the Pricing API is served from a few regions only; us-east-1 is one
_GPU_RESOURCES = {"NVIDIA": NVIDIA_GPU_RESOURCE, "Habana": GAUDI_RESOURCE}
_ARCHES = {"x86_64": "amd64", "arm64": "arm64"}


@dataclass(frozen=True)
class RefreshResult:
    instances: dict[str, InstanceType]
    changes: list[str]  # human-readable "name: field old -> new"
    source: str
    as_of: str


def instance_from_ec2(info: dict[str, Any], previous: InstanceType | None = None) -> InstanceType:
    """One DescribeInstanceTypes entry -> InstanceType; price and Spot savings are carried from `previous`."""
    name = info["InstanceType"]
    arches = [a for a in info["ProcessorInfo"]["SupportedArchitectures"] if a in _ARCHES]
    if not arches:
        raise InputError(f"{name}: no supported architecture in {info['ProcessorInfo']['SupportedArchitectures']}")
    accelerators: dict[str, int] = {}
    for gpu in (info.get("GpuInfo") or {}).get("Gpus", []):
        resource = _GPU_RESOURCES.get(gpu.get("Manufacturer", ""))
        if resource:
            accelerators[resource] = accelerators.get(resource, 0) + int(gpu["Count"])
    neuron = sum(int(d["Count"]) for d in (info.get("NeuronInfo") or {}).get("NeuronDevices", []))
    if not neuron:  # older API answers describe Inferentia/Trainium only here
        neuron = sum(int(a["Count"]) for a in (info.get("InferenceAcceleratorInfo") or {}).get("Accelerators", []))
    if neuron:
        accelerators[NEURON_RESOURCE] = neuron
    network = info["NetworkInfo"]
    return InstanceType(
        name=name,
        vcpu=int(info["VCpuInfo"]["DefaultVCpus"]),
        memory_mib=int(info["MemoryInfo"]["SizeInMiB"]),
        arch=_ARCHES[arches[0]],  # type: ignore[arg-type]
        accelerators=accelerators,
        efa=int((network.get("EfaInfo") or {}).get("MaximumEfaInterfaces", 0)),
        max_pods=eni_max_pods(network),
        price_on_demand=previous.price_on_demand if previous else 0.0,
        spot_savings=previous.spot_savings if previous else None,
    )


def eni_max_pods(network: dict[str, Any]) -> int:
    """ENIs of the default network card x (IPv4 per ENI - 1) + 2, as amazon-eks-ami's eni-max-pods.txt."""
    cards = {card["NetworkCardIndex"]: card for card in network.get("NetworkCards", [])}
    default_card = cards.get(network.get("DefaultNetworkCardIndex", 0))
    interfaces = default_card["MaximumNetworkInterfaces"] if default_card else network["MaximumNetworkInterfaces"]
    return int(interfaces) * (int(network["Ipv4AddressesPerInterface"]) - 1) + 2


def describe_instance_types(ec2: Any) -> dict[str, dict[str, Any]]:
    """Every instance type the region offers. Asking for all of them (about ten pages) tells exactly which of
    ours are gone; naming an unknown type makes EC2 reject the whole request instead."""
    found: dict[str, dict[str, Any]] = {}
    for page in ec2.get_paginator("describe_instance_types").paginate():
        for info in page["InstanceTypes"]:
            found[info["InstanceType"]] = info
    return found


def on_demand_price(pricing: Any, name: str, region: str) -> float | None:
    """Hourly On-Demand USD price of Linux, shared tenancy, no pre-installed software; None if not listed."""
    filters = {
        "instanceType": name,
        "regionCode": region,
        "operatingSystem": "Linux",
        "tenancy": "Shared",
        "preInstalledSw": "NA",
        "capacitystatus": "Used",
        "licenseModel": "No License required",
    }
    response = pricing.get_products(
        ServiceCode="AmazonEC2",
        Filters=[{"Type": "TERM_MATCH", "Field": field, "Value": value} for field, value in filters.items()],
        FormatVersion="aws_v1",
        MaxResults=10,
    )
    prices = sorted(
        float(dimension["pricePerUnit"]["USD"])
        for product in response["PriceList"]
        for term in (json.loads(product) if isinstance(product, str) else product)["terms"].get("OnDemand", {}).values()
        for dimension in term["priceDimensions"].values()
        if dimension.get("unit") == "Hrs" and float(dimension["pricePerUnit"]["USD"]) > 0
    )
    return prices[0] if prices else None


def refresh_instance_table(
    names: Iterable[str] | None = None,
    *,
    region: str = "us-east-1",
    session: Any = None,
    with_prices: bool = True,
    today: dt.date | None = None,
) -> RefreshResult:
    """Fetch specs (and prices) for `names` (default: every type in the table) and diff them with the table."""
    import boto3  # only here: boto3 costs ~0.3 s to import
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    current = known_instance_types()
    wanted = sorted(set(names) if names is not None else current)
    session = session or boto3.session.Session()
    try:
        described = describe_instance_types(session.client("ec2", region_name=region))
        missing = [name for name in wanted if name not in described]
        if missing and names is not None:
            raise InputError(f"EC2 does not offer {', '.join(missing)} in {region}")
        refreshed = {name: instance_from_ec2(described[name], current.get(name))
                     for name in wanted if name in described}
        if with_prices:
            pricing = session.client("pricing", region_name=PRICING_REGION)
            for name, it in refreshed.items():
                price = on_demand_price(pricing, name, region)
                if price is not None:
                    refreshed[name] = replace(it, price_on_demand=price)
    except NoCredentialsError as exc:
        raise ClusterError(f"no AWS credentials for refreshing instance facts: {exc}") from exc
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        raise ClusterError(f"AWS refused the refresh ({code or 'error'}): {exc}") from exc
    except BotoCoreError as exc:
        raise ClusterError(f"AWS unreachable while refreshing instance facts: {exc}") from exc

    merged = dict(current)
    merged.update(refreshed)
    changes = [f"{name}: not offered in {region}, kept as it was" for name in missing]
    changes += [change for name in refreshed for change in _diff(current.get(name), refreshed[name])]
    what = "specs and On-Demand prices" if with_prices else "specs (prices kept from the previous table)"
    stamp = (today or dt.date.today()).isoformat()
    source = (f"EC2 DescribeInstanceTypes ({region}) and Pricing GetProducts, {what}, refreshed {stamp}; "
              "Spot savings kept from the previous table")
    return RefreshResult(merged, changes, source, stamp)


def _diff(old: InstanceType | None, new: InstanceType) -> list[str]:
    if old is None:
        return [f"{new.name}: added"]
    fields = ("vcpu", "memory_mib", "arch", "accelerators", "efa", "max_pods", "price_on_demand")
    return [f"{new.name}: {f} {getattr(old, f)!r} -> {getattr(new, f)!r}"
            for f in fields if getattr(old, f) != getattr(new, f)]


def write_table(result: RefreshResult, path: Path | None = None) -> Path:
    """Replace the table file atomically (write a sibling temp file, then rename)."""
    target = path or data_path()
    text = format_table(result.instances, source=result.source, as_of=result.as_of,
                        notes="Format: accelerators is resource=count pairs joined by ';' (empty for none).")
    fd, tmp = tempfile.mkstemp(prefix=".instances-", suffix=".csv", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
