"""Label and annotation keys that tie compiled workflows, node groups and the local cluster together.

The compiler selects on these, never on instance types, so node groups can change (or move from eksctl to
Karpenter) without touching a workflow.
"""

from typing import Final

DOMAIN: Final = "wf.dev"
CLASS_LABEL: Final = f"{DOMAIN}/compute-class"
CAPACITY_LABEL: Final = f"{DOMAIN}/capacity"
JOB_LABEL: Final = f"{DOMAIN}/job"
STEP_LABEL: Final = f"{DOMAIN}/step"
SUBMISSION_LABEL: Final = f"{DOMAIN}/submission"
# On pods the workflow's steps create through other controllers (an MPIJob's launcher and workers).
WORKFLOW_NAME_LABEL: Final = f"{DOMAIN}/workflow"

# Read by the local cluster's simulated kubelet (kwok stages) to hold a pod Running or fail it.
SIM_DURATION: Final = f"sim.{DOMAIN}/duration"
SIM_EXIT_CODE: Final = f"sim.{DOMAIN}/exit-code"

ARCH_LABEL: Final = "kubernetes.io/arch"
OS_LABEL: Final = "kubernetes.io/os"
INSTANCE_TYPE_LABEL: Final = "node.kubernetes.io/instance-type"
ZONE_LABEL: Final = "topology.kubernetes.io/zone"
REGION_LABEL: Final = "topology.kubernetes.io/region"
EKS_CAPACITY_LABEL: Final = "eks.amazonaws.com/capacityType"
EKS_NODEGROUP_LABEL: Final = "eks.amazonaws.com/nodegroup"

CAPACITIES: Final = ("spot", "on-demand")
EKS_CAPACITY_VALUES: Final = {"spot": "SPOT", "on-demand": "ON_DEMAND"}
