"""eksctl ClusterConfig generation: schema, golden output, the reference Gaudi group, drift detection."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from jsonschema import Draft7Validator

from upstream import EKSCTL
from wf.core.errors import InputError
from wf.lint import drift
from wf.model.catalog import Catalog, load_catalog
from wf.model.nodegroups import node_groups
from wf.render import eksctl

ROOT = Path(__file__).resolve().parents[1]
CATALOG = ROOT / "eksctl" / "catalog.yaml"
COMMITTED = ROOT / "eksctl" / "cluster.yaml"
GOLDEN = ROOT / "tests" / "golden" / "eksctl-default.yaml"
CA = "k8s.io/cluster-autoscaler/node-template"

WEST = """
apiVersion: wf/v1
kind: Catalog
cluster: {name: west, region: us-west-2, version: "1.33",
          availabilityZones: [us-west-2a, us-west-2b, us-west-2c]}
computeClasses:
  - name: cpu
    instanceTypes: [c6i.8xlarge]
    capacity: [spot, on-demand]
  - name: gpu
    instanceTypes: [g5.2xlarge]
    capacity: [on-demand, spot]
    accelerator: {resource: nvidia.com/gpu, count: 1}
    taints: [{key: nvidia.com/gpu, value: "true", effect: NoExecute}]
  - name: trainium
    instanceTypes: [trn1.32xlarge]
    capacity: [on-demand]
    accelerator: {resource: aws.amazon.com/neuron, count: 16}
    taints: [{key: aws.amazon.com/neuron, value: "true", effect: NoSchedule}]
    efa: true
  - name: graviton-gpu
    instanceTypes: [g5g.8xlarge]
    accelerator: {resource: nvidia.com/gpu, count: 1}
"""


@pytest.fixture(scope="session")
def validator() -> Draft7Validator:
    return Draft7Validator(json.loads(EKSCTL.file("pkg/apis/eksctl.io/v1alpha5/assets/schema.json").read_text()))


@pytest.fixture(scope="module")
def default() -> Catalog:
    return load_catalog(CATALOG)


@pytest.fixture(scope="module")
def west() -> Catalog:
    return Catalog.from_yaml_text(WEST, "west.yaml")


def groups_by_name(config: dict) -> dict[str, dict]:
    return {g["name"]: g for g in config["managedNodeGroups"]}


def schema_errors(validator: Draft7Validator, text: str) -> list[str]:
    return [f"{list(e.absolute_path)}: {e.message}" for doc in yaml.safe_load_all(text)
            for e in validator.iter_errors(doc)]


def test_default_catalog_output_is_schema_valid(validator, default):
    assert schema_errors(validator, eksctl.render(default)) == []


def test_other_region_output_is_schema_valid(validator, west):
    assert schema_errors(validator, eksctl.render(west)) == []


def test_golden_default(default):
    text = eksctl.render(default, catalog_label="eksctl/catalog.yaml")
    if os.environ.get("WF_UPDATE_GOLDEN"):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()


def test_output_is_deterministic(default):
    # A fresh interpreter: dict order or hash seeds must not leak into the bytes.
    code = "from wf.model.catalog import load_catalog; from wf.render import eksctl; " \
           f"print(eksctl.render(load_catalog({str(CATALOG)!r})), end='')"
    env = {**os.environ, "PYTHONHASHSEED": "123", "PYTHONPATH": str(ROOT / "src")}
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    assert other == eksctl.render(default)


def test_committed_cluster_yaml_matches_catalog(default):
    assert drift.cluster_config_drift(default, COMMITTED) == []


def test_header_names_catalog_and_forbids_edits(default):
    head = eksctl.render(default, catalog_label="eksctl/catalog.yaml").splitlines()[0]
    assert head.startswith(eksctl.GENERATED_MARK) and "eksctl/catalog.yaml" in head and "Do not edit" in head


def test_reference_gaudi_group(default):
    config = eksctl.cluster_config(default)
    gaudi = [g for g in config["managedNodeGroups"] if g["labels"]["wf.dev/compute-class"] == "gaudi"]
    assert [g["name"] for g in gaudi] == ["gaudi-spot-us-east-1a"]
    g = gaudi[0]
    assert g["spot"] is True and g["instanceTypes"] == ["dl1.24xlarge"]
    assert g["availabilityZones"] == ["us-east-1a"]
    assert g["labels"]["k8s.amazonaws.com/accelerator"] == "gaudi"
    assert g["taints"] == [{"key": "habana.ai/gaudi", "value": "true", "effect": "NoSchedule"}]
    assert g["efaEnabled"] is True
    assert g["minSize"] == 0 and g["desiredCapacity"] == 0 and g["maxSize"] == 16 and g["volumeSize"] == 500
    tags = g["tags"]
    assert tags[f"{CA}/taint/habana.ai/gaudi"] == "true:NoSchedule"
    assert tags[f"{CA}/label/k8s.amazonaws.com/accelerator"] == "gaudi"
    assert tags[f"{CA}/resources/habana.ai/gaudi"] == "8"
    assert tags[f"{CA}/resources/hugepages-2Mi"] == "42000Mi"
    assert tags[f"{CA}/resources/vpc.amazonaws.com/efa"] == "4"
    # 42000 MiB of 2 MiB pages, before kubelet starts so that it advertises them.
    assert any("vm.nr_hugepages=21000" in c for c in g["preBootstrapCommands"])


def test_gaudi_group_says_what_eksctl_cannot_do(default):
    text = eksctl.render(default)
    block = text[text.index("# gaudi / spot / us-east-1a"):text.index("- name: gaudi-spot-us-east-1a")]
    assert "no Gaudi support" in block and "Habana driver AMI" in block and "device plugin" in block


def test_every_group_has_common_settings(default):
    for g in eksctl.cluster_config(default)["managedNodeGroups"]:
        assert g["propagateASGTags"] is True
        assert g["privateNetworking"] is True
        # The node's role stays the node's: IMDSv2 only, no pod reaches the metadata service (eksctl: hop limit
        # 1), and no add-on policy on that role (eksctl refuses them beside disablePodIMDS; cluster-autoscaler
        # has its own role).
        assert g["disableIMDSv1"] is True and g["disablePodIMDS"] is True
        assert "iam" not in g
        assert g["amiFamily"] == "AmazonLinux2023"
        assert "instanceType" not in g  # eksctl rejects instanceType beside instanceTypes
        assert len(g["availabilityZones"]) == 1
        for key, value in g["labels"].items():
            assert g["tags"][f"{CA}/label/{key}"] == value
        for taint in g.get("taints", []):
            assert g["tags"][f"{CA}/taint/{taint['key']}"] == f"{taint['value']}:{taint['effect']}"


def test_on_demand_groups_are_not_spot(default):
    groups = groups_by_name(eksctl.cluster_config(default))
    assert "spot" not in groups["cpu-on-demand-us-east-1b"]
    assert groups["cpu-on-demand-us-east-1b"]["instanceTypes"] == ["r5.4xlarge", "r6i.4xlarge"]
    assert groups["cpu-spot-us-east-1b"]["spot"] is True


def test_other_region_one_group_per_class_capacity_zone(west):
    config = eksctl.cluster_config(west)
    assert config["metadata"] == {"name": "west", "region": "us-west-2", "version": "1.33"}
    assert config["availabilityZones"] == ["us-west-2a", "us-west-2b", "us-west-2c"]
    zones = ["us-west-2a", "us-west-2b", "us-west-2c"]
    expected = [f"{cls}-{cap}-{z}" for cls, caps in
                [("cpu", ["spot", "on-demand"]), ("gpu", ["on-demand", "spot"]), ("trainium", ["on-demand"]),
                 ("graviton-gpu", ["spot"])]
                for cap in caps for z in zones]
    assert [g["name"] for g in config["managedNodeGroups"]] == expected
    groups = groups_by_name(config)
    gpu = groups["gpu-spot-us-west-2b"]
    assert gpu["taints"] == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoExecute"}]
    assert gpu["tags"][f"{CA}/taint/nvidia.com/gpu"] == "true:NoExecute"
    assert gpu["tags"][f"{CA}/resources/nvidia.com/gpu"] == "1"
    trn = groups["trainium-on-demand-us-west-2c"]
    assert trn["efaEnabled"] is True and trn["availabilityZones"] == ["us-west-2c"]
    assert trn["tags"][f"{CA}/resources/aws.amazon.com/neuron"] == "16"
    assert trn["tags"][f"{CA}/resources/vpc.amazonaws.com/efa"] == "8"
    assert "preBootstrapCommands" not in trn
    # eksctl's AL2023 table has no arm64 NVIDIA AMI type; Bottlerocket does.
    assert groups["graviton-gpu-spot-us-west-2a"]["amiFamily"] == "Bottlerocket"
    assert len(config["managedNodeGroups"]) == len(node_groups(west))


def test_accelerated_ami_comments(west):
    text = eksctl.render(west)
    assert "AL2023_x86_64_NVIDIA" in text and "AL2023_x86_64_NEURON" in text


def test_single_zone_cluster_is_rejected():
    text = WEST.replace("availabilityZones: [us-west-2a, us-west-2b, us-west-2c]", "availabilityZones: [us-west-2a]")
    with pytest.raises(InputError) as err:
        eksctl.cluster_config(Catalog.from_yaml_text(text, "one-zone.yaml"))
    assert err.value.problems[0].field == "cluster.availabilityZones"


def test_overlong_group_name_is_rejected():
    text = WEST.replace("name: trainium", "name: " + "t" * 50)
    with pytest.raises(InputError, match="longer than EKS allows"):
        eksctl.cluster_config(Catalog.from_yaml_text(text, "long.yaml"))


# --- drift ------------------------------------------------------------------------------------------------


def write(tmp_path: Path, text: str, name: str = "cluster.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_drift_names_first_differing_group_and_field(tmp_path, default):
    text = eksctl.render(default)
    edited = text.replace("k8s.amazonaws.com/accelerator: gaudi", "k8s.amazonaws.com/accelerator: gpu", 1)
    path = write(tmp_path, edited)
    problems = drift.cluster_config_drift(default, path)
    first = problems[0]
    assert "node group gaudi-spot-us-east-1a" in first.message
    assert first.field == "managedNodeGroups[6].labels.k8s.amazonaws.com/accelerator"
    assert first.line == edited.splitlines().index("      k8s.amazonaws.com/accelerator: gpu") + 1
    assert "wf eksctl generate" in first.message


def test_drift_reports_changed_catalog(tmp_path, default):
    path = write(tmp_path, eksctl.render(default))
    changed = Catalog.from_yaml_text(CATALOG.read_text().replace("maxSize: 16", "maxSize: 32"), str(CATALOG))
    problems = drift.cluster_config_drift(changed, path)
    assert [p.field for p in problems] == ["managedNodeGroups[6].maxSize"]
    assert "node group gaudi-spot-us-east-1a: maxSize is 16; the catalog generates 32" in problems[0].message


def test_drift_reports_missing_and_extra_groups(tmp_path, default):
    config = eksctl.cluster_config(default)
    config["managedNodeGroups"][0]["name"] = "renamed"
    path = write(tmp_path, eksctl.GENERATED_MARK + "\n" + yaml.safe_dump(config, sort_keys=False))
    messages = [p.message for p in drift.cluster_config_drift(default, path)]
    assert any("node group cpu-spot-us-east-1a is missing" in m for m in messages)
    assert any("node group renamed is not generated from the catalog" in m for m in messages)


def test_drift_in_comments_only(tmp_path, default):
    text = eksctl.render(default).replace("# gpu / spot / us-east-1a", "# hand-edited comment")
    path = write(tmp_path, text)
    problems = drift.cluster_config_drift(default, path)
    assert len(problems) == 1 and "comments or layout" in problems[0].message
    assert problems[0].line == text.splitlines().index("  # hand-edited comment") + 1


def test_header_path_does_not_count_as_drift(tmp_path, default):
    path = write(tmp_path, eksctl.render(default, catalog_label="/elsewhere/catalog.yaml"))
    assert drift.cluster_config_drift(default, path) == []


HAND = """
apiVersion: eksctl.io/v1alpha5
kind: ClusterConfig
metadata: {name: ml-workflows, region: us-east-1}
availabilityZones: [us-east-1a, us-east-1b, us-east-1c]
managedNodeGroups:
  - name: system
    instanceType: m5.large
  - name: gaudi-a
    instanceTypes: [dl1.24xlarge, p4d.24xlarge]
    availabilityZones: [us-east-1b]
    labels: {wf.dev/compute-class: gaudi, wf.dev/capacity: spot, k8s.amazonaws.com/accelerator: habana}
    taints: [{key: habana.ai/gaudi, value: "true", effect: NoExecute}]
nodeGroups:
  - name: blog-style
    instanceType: dl1.24xlarge
    availabilityZones: [us-east-1a]
    labels: {wf.dev/compute-class: gaudi, wf.dev/capacity: spot, k8s.amazonaws.com/accelerator: gaudi}
    taints: {habana.ai/gaudi: "true:NoSchedule"}
"""


def test_hand_written_config_drift_field_by_field(tmp_path, default):
    path = write(tmp_path, HAND)
    problems = drift.cluster_config_drift(default, path)
    by_field = {(p.field, p.message.split(":")[0]) for p in problems}
    fields = [p.field for p in problems if p.message.startswith("node group gaudi-a")]
    assert fields == [
        "managedNodeGroups[1].labels.k8s.amazonaws.com/accelerator",
        "managedNodeGroups[1].taints",
        "managedNodeGroups[1].availabilityZones",
        "managedNodeGroups[1].instanceTypes",
        "managedNodeGroups[1]",  # labelled Spot, but not a Spot group
    ]
    # The unmanaged, blog-style group agrees on labels, taints (map form) and zone, but is On-Demand.
    blog = [p for p in problems if p.message.startswith("node group blog-style")]
    assert len(blog) == 1 and "is not a Spot group" in blog[0].message
    assert ("managedNodeGroups[0]", "node group system") not in by_field  # not ours: no class label
    line = HAND.splitlines().index("    taints: [{key: habana.ai/gaudi, value: \"true\", effect: NoExecute}]") + 1
    assert next(p for p in problems if p.field == "managedNodeGroups[1].taints").line == line


def test_hand_written_unknown_class(tmp_path, default):
    path = write(tmp_path, HAND.replace("wf.dev/compute-class: gaudi, wf.dev/capacity: spot, "
                                        "k8s.amazonaws.com/accelerator: habana", "wf.dev/compute-class: tpu"))
    problems = drift.cluster_config_drift(default, path)
    assert any("compute class 'tpu' is not in the catalog" in p.message for p in problems)


def test_not_a_cluster_config(tmp_path, default):
    path = write(tmp_path, "apiVersion: v1\nkind: ConfigMap\n")
    with pytest.raises(InputError, match="expected one eksctl ClusterConfig"):
        drift.cluster_config_drift(default, path)


# --- CLI ----------------------------------------------------------------------------------------------------


def run_wf(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    env.pop("WF_CATALOG", None)
    return subprocess.run([sys.executable, "-c", "from wf.cli.app import main; main()", *args],
                          capture_output=True, text=True, cwd=cwd, env=env)


def test_cli_generate_to_file(tmp_path, default):
    out = tmp_path / "cluster.yaml"
    result = run_wf("eksctl", "generate", "--catalog", str(CATALOG), "--file", str(out))
    assert result.returncode == 0, result.stderr
    assert drift.cluster_config_drift(default, out) == []


def test_cli_generate_stdout_matches_committed():
    result = run_wf("eksctl", "generate")
    assert result.returncode == 0, result.stderr
    assert result.stdout == COMMITTED.read_text()


def test_cli_bad_catalog_exits_2(tmp_path):
    bad = write(tmp_path, WEST.replace("c6i.8xlarge", "c6i.8xlargee"), "catalog.yaml")
    result = run_wf("eksctl", "generate", "--catalog", str(bad))
    assert result.returncode == 2
    assert "catalog.yaml" in result.stderr and "instanceTypes" in result.stderr


def test_drift_accepts_a_loaded_document(tmp_path, default):
    from wf.core.loader import load_documents

    text = eksctl.render(default).replace("maxSize: 40", "maxSize: 41", 1)
    doc = load_documents(write(tmp_path, text))[0]
    problems = drift.cluster_config_drift(default, doc)
    assert problems[0].field == "managedNodeGroups[" + str(
        [g.name for g in node_groups(default)].index("gpu-spot-us-east-1a")) + "].maxSize"
