"""The instance facts table: coverage, the EKS allocatable formula, lookups and the table format."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal

import pytest

from wf.model.instances import (
    AS_OF,
    SOURCE,
    InstanceType,
    format_table,
    instance_type,
    known_instance_types,
    parse_metadata,
    parse_table,
)
from wf.model.nodegroups import instance_allocatable, node_share

REQUIRED_FAMILIES = (
    "m5", "c5", "c6i", "c7g", "r5", "r6i", "g4dn", "g5", "g5g", "g6", "p3", "p4d", "p5", "dl1", "trn1", "inf2",
)


def test_every_required_family_is_present() -> None:
    families = {it.family for it in known_instance_types().values()}
    assert set(REQUIRED_FAMILIES) <= families


def test_cpu_families_cover_xlarge_to_24xlarge() -> None:
    table = known_instance_types()
    for family in ("m5", "c5", "c6i", "r5", "r6i"):
        for size in ("xlarge", "2xlarge", "4xlarge", "12xlarge", "24xlarge", "metal"):
            assert f"{family}.{size}" in table, f"{family}.{size}"


def test_default_catalog_types_are_known() -> None:
    for name in ("r5.4xlarge", "r5.8xlarge", "dl1.24xlarge", "c7g.8xlarge", "g5.2xlarge", "g4dn.2xlarge"):
        assert instance_type(name).name == name


@pytest.mark.parametrize(
    ("name", "cpu_millis", "memory_mib", "pods"),
    [
        # Karpenter's published allocatable (website/content/en/docs/reference/instance-types.md, AL2023).
        ("dl1.24xlarge", 95690, 718987, 737),
        ("c5.xlarge", 3920, 6584, 58),
        ("c5.4xlarge", 15890, 27381, 234),
        ("c5.9xlarge", 35840, 65269, 234),
        ("c5.18xlarge", 71750, 127934, 737),
        ("c5.24xlarge", 95690, 173400, 737),
        ("g4dn.2xlarge", 7910, 29636, 29),
        ("g5.48xlarge", 191450, 723299, 345),
        ("g5g.8xlarge", 31850, 57632, 234),  # arm64: 64 MiB CMA
        ("g6.16xlarge", 63770, 234021, 737),
    ],
)
def test_allocatable_matches_karpenter(name: str, cpu_millis: int, memory_mib: int, pods: int) -> None:
    it = instance_type(name)
    assert it.max_pods == pods
    assert abs(it.allocatable_cpu_millis - cpu_millis) <= 10
    assert abs(it.allocatable_memory_mib - memory_mib) <= 16


def test_cpu_reservation_ranges() -> None:
    def alloc(vcpu: int) -> int:
        return InstanceType("x.test", vcpu, 4096, "amd64", max_pods=10).allocatable_cpu_millis

    assert alloc(1) == 1000 - 60  # 6% of the first core
    assert alloc(2) == 2000 - 60 - 10  # 1% of the second
    assert alloc(4) == 4000 - 60 - 10 - 10  # 0.5% of cores 3-4
    assert alloc(8) == 8000 - 80 - 10  # 0.25% above


def test_memory_reservation_grows_with_max_pods() -> None:
    few = InstanceType("x.test", 4, 16384, "amd64", max_pods=10)
    many = InstanceType("x.test", 4, 16384, "amd64", max_pods=110)
    assert few.allocatable_memory_mib - many.allocatable_memory_mib == 11 * 100


def test_graviton_families_are_arm64() -> None:
    table = known_instance_types()
    for it in table.values():
        expected = "arm64" if it.family in ("c7g", "g5g") else "amd64"
        assert it.arch == expected, it.name


@pytest.mark.parametrize(
    ("family", "resource"),
    [
        ("g4dn", "nvidia.com/gpu"), ("g5", "nvidia.com/gpu"), ("g5g", "nvidia.com/gpu"), ("g6", "nvidia.com/gpu"),
        ("p3", "nvidia.com/gpu"), ("p4d", "nvidia.com/gpu"), ("p5", "nvidia.com/gpu"),
        ("dl1", "habana.ai/gaudi"), ("trn1", "aws.amazon.com/neuron"), ("inf2", "aws.amazon.com/neuron"),
    ],
)
def test_accelerator_families_carry_their_resource(family: str, resource: str) -> None:
    members = [it for it in known_instance_types().values() if it.family == family]
    assert members
    for it in members:
        assert set(it.accelerators) == {resource}, it.name
        assert it.accelerators[resource] >= 1


def test_cpu_families_have_no_accelerators() -> None:
    for it in known_instance_types().values():
        if it.family in ("m5", "c5", "c6i", "c7g", "r5", "r6i"):
            assert it.accelerators == {}, it.name


def test_specific_accelerator_counts_and_efa() -> None:
    assert instance_type("dl1.24xlarge").accelerators == {"habana.ai/gaudi": 8}
    assert instance_type("dl1.24xlarge").efa == 4
    assert instance_type("p4d.24xlarge").accelerators == {"nvidia.com/gpu": 8}
    assert instance_type("p4d.24xlarge").efa == 4
    assert instance_type("trn1.32xlarge").accelerators == {"aws.amazon.com/neuron": 16}
    assert instance_type("g5.2xlarge").accelerators == {"nvidia.com/gpu": 1}


def test_prices_and_savings_are_plausible() -> None:
    for it in known_instance_types().values():
        assert 0.01 < it.price_on_demand < 200, it.name
        assert it.spot_savings is None or 0 < it.spot_savings < 1, it.name
    dl1 = instance_type("dl1.24xlarge")
    assert dl1.price_on_demand == pytest.approx(13.10904)
    assert dl1.spot_price() == pytest.approx(13.10904 * 0.12)
    unmeasured = replace(dl1, spot_savings=None)  # priced only at savings the caller assumes
    assert unmeasured.spot_price() is None and unmeasured.spot_price(0.6) == pytest.approx(13.10904 * 0.4)


def test_unknown_name_suggests_close_matches() -> None:
    with pytest.raises(ValueError, match=r"r5\.4xlarge") as info:
        instance_type("r5.4xlarg")
    assert "unknown instance type 'r5.4xlarg'" in str(info.value)


def test_unknown_name_without_close_match_lists_families() -> None:
    with pytest.raises(ValueError, match="known families: .*dl1"):
        instance_type("zz9.huge")


def test_table_round_trips_through_format() -> None:
    table = known_instance_types()
    text = format_table(table, source="somewhere", as_of="2030-01-01", notes="a note\nformat: x")
    assert parse_table(text) == table
    assert parse_metadata(text) == {"source": "somewhere", "as-of": "2030-01-01"}


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("a.b,4,1024,sparc,,0,10,0.1,", "arch 'sparc'"),
        ("a.b,4,1024,amd64,nvidia.com/gpu=x,0,10,0.1,", "bad accelerator"),
        ("a.b,4,1024,amd64,foo.io/tpu=1,0,10,0.1,", "bad accelerator"),
        ("a.b,4,1024,amd64,,0,10,0.1,1.5", "spot_savings"),
        ("a.b,4,1024,amd64,,0,10", "expected 9 fields, got 7"),
    ],
)
def test_bad_rows_name_the_line(row: str, message: str) -> None:
    text = "# comment\nname,vcpu,memory_mib,arch,accelerators,efa,max_pods,price_on_demand,spot_savings\n" + row
    with pytest.raises(ValueError, match=message) as info:
        parse_table(text, "t.csv")
    assert str(info.value).startswith("t.csv:3:")


def test_duplicate_rows_are_rejected() -> None:
    header = "name,vcpu,memory_mib,arch,accelerators,efa,max_pods,price_on_demand,spot_savings\n"
    row = "a.b,4,1024,amd64,,0,10,0.1,\n"
    with pytest.raises(ValueError, match="duplicate instance type a.b"):
        parse_table(header + row + row)


def test_provenance_is_cited() -> None:
    assert "karpenter-provider-aws" in SOURCE and "amazon-eks-ami" in SOURCE
    assert AS_OF == "2026-01-19"


# --- refresh from AWS (moto for EC2, botocore's Stubber for the Pricing API, which moto does not implement) ---

@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.setenv(key, "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.delenv("AWS_PROFILE", raising=False)


def _price_list(usd: str) -> str:
    import json

    return json.dumps({"product": {"sku": "X"}, "terms": {"OnDemand": {"X.JRTCKXETXF": {"priceDimensions": {
        "X.JRTCKXETXF.6YS6EN2CT7": {"unit": "Hrs", "pricePerUnit": {"USD": usd}}}}}}})


def test_refresh_from_ec2_matches_the_shipped_table(aws_env: None) -> None:
    """moto's DescribeInstanceTypes data is recorded from real AWS: an independent check of every row."""
    import datetime as dt

    from moto import mock_aws

    from wf.aws.instances_refresh import refresh_instance_table

    with mock_aws():
        result = refresh_instance_table(with_prices=False, today=dt.date(2030, 1, 2))
    # Types moto's recording no longer has (p3 since 5.2.1, dl1 since 5.2.5, as AWS retires them) are kept as
    # they were and said so; every other row must equal what EC2 reports.
    missing = [c.split(":")[0] for c in result.changes if c.endswith(": not offered in us-east-1, kept as it was")]
    assert result.changes == [f"{name}: not offered in us-east-1, kept as it was" for name in missing]
    assert set(missing) <= {"p3.2xlarge", "p3.8xlarge", "p3.16xlarge", "dl1.24xlarge"}
    assert result.instances == known_instance_types()
    assert len(known_instance_types()) - len(missing) >= 85
    assert result.as_of == "2030-01-02"
    assert "DescribeInstanceTypes (us-east-1)" in result.source


def test_refresh_reads_prices_from_the_pricing_api(aws_env: None) -> None:
    import boto3
    from botocore.stub import ANY, Stubber
    from moto import mock_aws

    from wf.aws.instances_refresh import refresh_instance_table

    class Session:
        """boto3 session whose pricing client is stubbed (moto has no Pricing API); EC2 goes to moto."""

        def __init__(self) -> None:
            self.pricing = boto3.client("pricing", region_name="us-east-1")
            self.stub = Stubber(self.pricing)

        def client(self, service: str, region_name: str) -> object:
            return self.pricing if service == "pricing" else boto3.client(service, region_name=region_name)

    session = Session()
    session.stub.add_response(
        "get_products", {"PriceList": [_price_list("14.2500000000")], "FormatVersion": "aws_v1"},
        {"ServiceCode": "AmazonEC2", "Filters": ANY, "FormatVersion": "aws_v1", "MaxResults": 10})
    with mock_aws(), session.stub:
        result = refresh_instance_table(["r5.4xlarge"], session=session)
    assert result.instances["r5.4xlarge"].price_on_demand == 14.25
    assert result.changes == ["r5.4xlarge: price_on_demand 1.008 -> 14.25"]
    assert result.instances["r5.4xlarge"].spot_savings == 0.65  # no AWS API for the advisor: kept


def test_refresh_unknown_type_is_bad_input(aws_env: None) -> None:
    from moto import mock_aws

    from wf.aws.instances_refresh import refresh_instance_table
    from wf.core.errors import InputError

    with mock_aws(), pytest.raises(InputError, match="r5.4xlarg"):
        refresh_instance_table(["r5.4xlarg"], with_prices=False)


def test_refresh_without_credentials_is_a_cluster_error(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    import boto3

    from wf.aws.instances_refresh import refresh_instance_table
    from wf.core.errors import ClusterError

    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    session = boto3.session.Session(region_name="us-east-1")
    with pytest.raises(ClusterError, match="no AWS credentials"):
        refresh_instance_table(["r5.4xlarge"], session=session, with_prices=False)


def test_written_table_loads_back(aws_env: None, tmp_path) -> None:
    from moto import mock_aws

    from wf.aws.instances_refresh import refresh_instance_table, write_table

    with mock_aws():
        result = refresh_instance_table(["g4dn.2xlarge"], with_prices=False)
    path = write_table(result, tmp_path / "instances.csv")
    text = path.read_text()
    assert parse_table(text) == result.instances
    assert parse_metadata(text)["as-of"] == result.as_of
    assert [p.name for p in tmp_path.iterdir()] == ["instances.csv"]  # no temp file left behind


def test_a_node_known_only_by_its_type_has_its_devices_hugepage_pool_carved_out() -> None:
    # What cost divides by: dl1.24xlarge allocatable 718987Mi, 42000Mi of it pre-allocated for 8 Gaudi cards.
    allocatable = instance_allocatable("dl1.24xlarge")
    assert allocatable["memory"] == (718987 - 42000) * Decimal(2**20)
    assert allocatable["hugepages-2Mi"] == 42000 * Decimal(2**20)
    half = {"memory": allocatable["memory"] / 2, "habana.ai/gaudi": Decimal(1)}
    assert node_share(half, allocatable) == 0.5
    assert instance_allocatable("r5.4xlarge")["memory"] == 118312 * Decimal(2**20)
