"""The scheduler's static filters against node groups: nodeSelector, required node affinity, taints vs
tolerations, requests vs allocatable (extended resources included), and explain()'s wording."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from wf.compile.schedulability import PodConstraints, explain, judge, pod_requests
from wf.core.constants import ARCH_LABEL, CAPACITY_LABEL, CLASS_LABEL
from wf.core.units import parse_quantity
from wf.model.catalog import Catalog, Taint
from wf.model.nodegroups import NodeGroup, node_groups


@pytest.fixture(scope="module")
def groups(mixed_catalog: Catalog) -> list[NodeGroup]:
    """The node groups of a catalog whose cpu class mixes r5.4xlarge and r5.8xlarge."""
    return node_groups(mixed_catalog)


def group(groups: list[NodeGroup], name: str) -> NodeGroup:
    return next(g for g in groups if g.name == name)


def requests(**quantities: str) -> dict[str, Decimal]:
    return {k.replace("_", "-").replace("habana-ai-gaudi", "habana.ai/gaudi"): parse_quantity(v)
            for k, v in quantities.items()}


GAUDI_TOLERATION = {"key": "habana.ai/gaudi", "operator": "Equal", "value": "true", "effect": "NoSchedule"}


# --- tolerations ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("toleration", "ok"),
    [
        ({"operator": "Exists"}, True),  # no key: tolerates everything
        ({"key": "habana.ai/gaudi", "operator": "Exists"}, True),
        ({"key": "habana.ai/gaudi", "operator": "Exists", "effect": "NoSchedule"}, True),
        ({"key": "habana.ai/gaudi", "operator": "Exists", "effect": "NoExecute"}, False),
        ({"key": "habana.ai/gaudi", "operator": "Equal", "value": "true"}, True),
        ({"key": "habana.ai/gaudi", "value": "true"}, True),  # operator defaults to Equal
        ({"key": "habana.ai/gaudi", "operator": "Equal", "value": "false"}, False),
        ({"key": "habana.ai/gaudi", "operator": "Equal"}, False),  # Equal with no value matches only ""
        ({"key": "other", "operator": "Exists"}, False),
        ({"operator": "Exists", "effect": "NoExecute"}, False),
    ],
)
def test_tolerates(toleration: dict[str, Any], ok: bool) -> None:
    assert Taint(key="habana.ai/gaudi", value="true", effect="NoSchedule").tolerated_by([toleration]) is ok


def test_equal_toleration_of_an_empty_valued_taint() -> None:
    assert Taint(key="k", effect="NoSchedule").tolerated_by([{"key": "k", "operator": "Equal"}])
    assert not Taint(key="k", effect="NoSchedule").tolerated_by([])


def test_untolerated_taints_block_the_group(groups: list[NodeGroup]) -> None:
    gaudi = group(groups, "gaudi-spot-us-east-1a")
    pod = PodConstraints(node_selector={CLASS_LABEL: "gaudi"}, requests=requests(cpu="1"))
    assert judge(pod, gaudi).reasons == ["untolerated taint habana.ai/gaudi=true:NoSchedule"]
    tolerated = PodConstraints(node_selector={CLASS_LABEL: "gaudi"}, tolerations=[GAUDI_TOLERATION],
                               requests=requests(cpu="1"))
    assert judge(tolerated, gaudi).fits


def test_prefer_no_schedule_taints_do_not_block(catalog: Catalog) -> None:
    data = catalog.model_dump(by_alias=True)
    data["computeClasses"][0]["taints"] = [{"key": "soft", "value": "x", "effect": "PreferNoSchedule"}]
    cpu = next(g for g in node_groups(Catalog.model_validate(data)) if g.compute_class == "cpu")
    assert judge(PodConstraints(), cpu).fits


# --- nodeSelector and affinity ----------------------------------------------------------------------------------

def test_node_selector(groups: list[NodeGroup]) -> None:
    cpu = group(groups, "cpu-spot-us-east-1a")
    assert judge(PodConstraints(node_selector={CLASS_LABEL: "cpu", CAPACITY_LABEL: "spot", ARCH_LABEL: "amd64",
                                               "topology.kubernetes.io/zone": "us-east-1a",
                                               "node.kubernetes.io/instance-type": "r5.8xlarge"}), cpu).fits
    assert judge(PodConstraints(node_selector={CAPACITY_LABEL: "on-demand"}), cpu).reasons == [
        f"nodeSelector {CAPACITY_LABEL}=on-demand (nodes have {CAPACITY_LABEL}=spot)"]
    assert judge(PodConstraints(node_selector={"disktype": "ssd"}), cpu).reasons == [
        "nodeSelector disktype=ssd (nodes have no disktype label)"]


def test_instance_type_selector_matches_one_instance_of_the_group(groups: list[NodeGroup]) -> None:
    cpu = group(groups, "cpu-spot-us-east-1a")
    for instance in cpu.instance_types:
        assert judge(PodConstraints(node_selector={"node.kubernetes.io/instance-type": instance}), cpu).fits


def affinity(*expressions: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"matchExpressions": list(expressions)}]


@pytest.mark.parametrize(
    ("terms", "fits"),
    [
        (affinity({"key": CLASS_LABEL, "operator": "In", "values": ["cpu", "gpu"]}), True),
        (affinity({"key": CLASS_LABEL, "operator": "In", "values": ["gpu"]}), False),
        (affinity({"key": CLASS_LABEL, "operator": "NotIn", "values": ["gpu"]}), True),
        (affinity({"key": CLASS_LABEL, "operator": "NotIn", "values": ["cpu"]}), False),
        (affinity({"key": "absent", "operator": "NotIn", "values": ["x"]}), True),  # NotIn holds without the label
        (affinity({"key": CLASS_LABEL, "operator": "Exists"}), True),
        (affinity({"key": "absent", "operator": "Exists"}), False),
        (affinity({"key": "absent", "operator": "DoesNotExist"}), True),
        (affinity({"key": CLASS_LABEL, "operator": "DoesNotExist"}), False),
        (affinity({"key": "rank", "operator": "Gt", "values": ["5"]}), False),  # label absent
        # Terms are ORed, expressions within a term ANDed.
        (affinity({"key": CLASS_LABEL, "operator": "In", "values": ["cpu"]},
                  {"key": CAPACITY_LABEL, "operator": "In", "values": ["on-demand"]}), False),
        ([*affinity({"key": CLASS_LABEL, "operator": "In", "values": ["gpu"]}),
          *affinity({"key": CAPACITY_LABEL, "operator": "In", "values": ["spot"]})], True),
        ([{"matchExpressions": []}], False),  # an empty term matches nothing
        ([{}], False),
        (affinity({"key": CLASS_LABEL, "operator": "Bogus", "values": ["cpu"]}), False),
    ],
)
def test_required_node_affinity(groups: list[NodeGroup], terms: list[dict[str, Any]], fits: bool) -> None:
    verdict = judge(PodConstraints(affinity_terms=terms), group(groups, "cpu-spot-us-east-1a"))
    assert verdict.fits is fits
    if not fits:
        assert verdict.reasons == ["required node affinity matches no node of the group"]


def test_gt_and_lt_compare_integers(catalog: Catalog) -> None:
    data = catalog.model_dump(by_alias=True)
    data["computeClasses"][0]["labels"] = {"rank": "7", "name": "abc"}
    cpu = next(g for g in node_groups(Catalog.model_validate(data)) if g.compute_class == "cpu")

    def fits(operator: str, value: str, key: str = "rank") -> bool:
        return judge(PodConstraints(affinity_terms=affinity({"key": key, "operator": operator, "values": [value]})),
                     cpu).fits

    assert fits("Gt", "5") and not fits("Gt", "7") and not fits("Gt", "10")
    assert fits("Lt", "10") and not fits("Lt", "7") and not fits("Lt", "3")
    assert not fits("Gt", "1", key="name")  # not an integer: no match
    assert not fits("Gt", "x")


# --- requests ---------------------------------------------------------------------------------------------------

def test_requests_against_the_largest_instance(groups: list[NodeGroup]) -> None:
    cpu = group(groups, "cpu-spot-us-east-1a")
    assert judge(PodConstraints(requests=requests(cpu="30", memory="200Gi")), cpu).fits  # r5.8xlarge
    reasons = judge(PodConstraints(requests=requests(cpu="64")), cpu).reasons
    assert len(reasons) == 1 and reasons[0].startswith("requests 64 cpu; r5.")


def test_extended_resources_missing_on_the_node(groups: list[NodeGroup]) -> None:
    cpu = group(groups, "cpu-spot-us-east-1a")
    assert judge(PodConstraints(requests=requests(habana_ai_gaudi="1")), cpu).reasons == [
        "requests 1 habana.ai/gaudi; r5.8xlarge has 0"]  # the largest instance
    assert not judge(PodConstraints(requests={"hugepages-2Mi": parse_quantity("2Mi")}), cpu).fits
    assert not judge(PodConstraints(requests={"vpc.amazonaws.com/efa": Decimal(1)}), cpu).fits


def test_gaudi_extras_fit_the_gaudi_group(groups: list[NodeGroup]) -> None:
    gaudi = group(groups, "gaudi-spot-us-east-1a")
    pod = PodConstraints(tolerations=[GAUDI_TOLERATION], requests={
        "habana.ai/gaudi": Decimal(8), "hugepages-2Mi": parse_quantity("42000Mi"),
        "vpc.amazonaws.com/efa": Decimal(4), "memory": parse_quantity("640Gi"), "cpu": Decimal(86)})
    assert judge(pod, gaudi).fits
    too_much = PodConstraints(tolerations=[GAUDI_TOLERATION], requests={"hugepages-2Mi": parse_quantity("42002Mi")})
    assert not judge(too_much, gaudi).fits


def test_pod_requests_sum_containers_and_take_the_largest_init() -> None:
    total, skipped = pod_requests(
        [{"resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
         {"resources": {"limits": {"cpu": "2", "nvidia.com/gpu": 1}}},  # a missing request defaults to the limit
         {}],
        [{"resources": {"requests": {"cpu": "4"}}}, {"resources": {"requests": {"memory": "512Mi"}}}],
    )
    assert total == {"cpu": Decimal(4), "memory": parse_quantity("1Gi"), "nvidia.com/gpu": Decimal(1)}
    assert skipped == []


def test_pod_requests_skip_templated_values() -> None:
    templated = {"resources": {"requests": {"cpu": "{{inputs.parameters.cpu}}", "memory": "1Gi"}}}
    total, skipped = pod_requests([templated], [])
    assert total == {"memory": parse_quantity("1Gi")}
    assert skipped == ["cpu={{inputs.parameters.cpu}}"]


# --- explain() ------------------------------------------------------------------------------------------------

def test_explain_is_none_when_some_group_fits(groups: list[NodeGroup]) -> None:
    assert explain(PodConstraints(), groups) is None
    assert explain(PodConstraints(node_selector={CLASS_LABEL: "gpu"}, tolerations=[
        {"key": "nvidia.com/gpu", "operator": "Exists"}], requests=requests(cpu="2")), groups) is None


def test_explain_speaks_of_sizes_in_the_developers_terms(groups: list[NodeGroup]) -> None:
    pod = PodConstraints(node_selector={CLASS_LABEL: "gaudi"}, tolerations=[GAUDI_TOLERATION],
                         requests={"habana.ai/gaudi": Decimal(16)})
    assert explain(pod, groups) == "no gaudi node offers 16 habana.ai/gaudi; dl1.24xlarge has 8"


def test_explain_memory_in_gi(groups: list[NodeGroup]) -> None:
    pod = PodConstraints(node_selector={CLASS_LABEL: "cpu"}, requests=requests(memory="1Ti"))
    message = explain(pod, groups)
    assert message is not None and message.startswith("no cpu node offers 1024Gi memory; r5.8xlarge has ")


def test_explain_an_unknown_class(groups: list[NodeGroup]) -> None:
    assert explain(PodConstraints(node_selector={CLASS_LABEL: "tpu"}), groups) == (
        "no node group of compute class 'tpu'; the catalog has cpu, gaudi, gpu, graviton")


def test_explain_names_the_nearest_group_and_its_reasons(groups: list[NodeGroup]) -> None:
    message = explain(PodConstraints(node_selector={"kubernetes.io/os": "windows"}), groups)
    assert message == ("no node group fits; nearest is cpu-on-demand-us-east-1a: "
                       "nodeSelector kubernetes.io/os=windows (nodes have kubernetes.io/os=linux)")
    message = explain(PodConstraints(node_selector={CLASS_LABEL: "gaudi"}), groups)
    assert message == ("no node group fits; nearest is gaudi-spot-us-east-1a: "
                       "untolerated taint habana.ai/gaudi=true:NoSchedule")


def test_explain_without_groups() -> None:
    assert explain(PodConstraints(), []) == "the catalog has no node groups"


def test_arch_is_part_of_the_fit(groups: list[NodeGroup]) -> None:
    pod = PodConstraints(node_selector={CLASS_LABEL: "graviton", ARCH_LABEL: "amd64"})
    message = explain(pod, groups)
    assert message is not None and "kubernetes.io/arch=amd64 (nodes have kubernetes.io/arch=arm64)" in message


def test_a_pod_that_fits_only_the_larger_type_fits_but_not_every_type(groups: list[NodeGroup]) -> None:
    cpu = group(groups, "cpu-spot-us-east-1a")
    pod = PodConstraints(node_selector={CLASS_LABEL: "cpu"}, requests=requests(cpu="20"))
    verdict = judge(pod, cpu)
    assert verdict.fits and not verdict.fits_every_type
    assert [(s.instance, s.resource, s.wanted, s.have) for s in verdict.shortfalls] == [
        ("r5.4xlarge", "cpu", Decimal(20), Decimal("15.89"))]
    small = PodConstraints(node_selector={CLASS_LABEL: "cpu"}, requests=requests(cpu="15"))
    assert judge(small, cpu).fits_every_type
    # Pinned to the larger type, the smaller one is not a candidate: nothing to warn about.
    pinned = PodConstraints(node_selector={CLASS_LABEL: "cpu", "node.kubernetes.io/instance-type": "r5.8xlarge"},
                            requests=requests(cpu="20"))
    assert judge(pinned, cpu).fits_every_type


def test_least_allocatable_is_what_every_type_offers(groups: list[NodeGroup]) -> None:
    least = group(groups, "cpu-spot-us-east-1a").least_allocatable()
    assert (least["cpu"], least["memory"]) == (Decimal("15.89"), 118312 * Decimal(2**20))
    # Gaudi: the hugepage pool is carved out of memory.
    gaudi = group(groups, "gaudi-spot-us-east-1a")
    assert gaudi.allocatable("dl1.24xlarge")["memory"] == f"{718987 - 42000}Mi"
    assert gaudi.allocatable("dl1.24xlarge")["hugepages-2Mi"] == "42000Mi"
