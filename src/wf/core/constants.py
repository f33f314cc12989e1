"""The names wf shares with Kubernetes and Argo: label keys, Argo kinds and plurals, name patterns, quantities.

The compiler selects on the label keys, never on instance types, so node groups can change (or move from
eksctl to Karpenter) without touching a workflow. Every module that names one of these imports it from here.
"""

import re
from typing import Final

# Labels and annotations that tie compiled workflows, node groups and the local cluster together.
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
# With an exit code: the termination message of the pod's containers (what a failing program printed to it).
SIM_MESSAGE: Final = f"sim.{DOMAIN}/message"
# Read by the local cluster's simulated executor (wf.cluster.executor): the step's output parameters, as JSON.
SIM_OUTPUTS: Final = f"sim.{DOMAIN}/outputs"

ARCH_LABEL: Final = "kubernetes.io/arch"
OS_LABEL: Final = "kubernetes.io/os"
INSTANCE_TYPE_LABEL: Final = "node.kubernetes.io/instance-type"
ZONE_LABEL: Final = "topology.kubernetes.io/zone"
REGION_LABEL: Final = "topology.kubernetes.io/region"
EKS_CAPACITY_LABEL: Final = "eks.amazonaws.com/capacityType"
EKS_NODEGROUP_LABEL: Final = "eks.amazonaws.com/nodegroup"

CAPACITIES: Final = ("spot", "on-demand")
EKS_CAPACITY_VALUES: Final = {"spot": "SPOT", "on-demand": "ON_DEMAND"}

# Argo's API: the group and version of its CRDs, and the resource (plural) of each kind wf reads or writes.
ARGO_GROUP: Final = "argoproj.io"
ARGO_VERSION: Final = "v1alpha1"
ARGO_API_VERSION: Final = f"{ARGO_GROUP}/{ARGO_VERSION}"
ARGO_PLURALS: Final = {
    "Workflow": "workflows",
    "WorkflowTemplate": "workflowtemplates",
    "ClusterWorkflowTemplate": "clusterworkflowtemplates",
    "CronWorkflow": "cronworkflows",
}
ARGO_KINDS: Final = tuple(ARGO_PLURALS)
WORKFLOWS: Final = ARGO_PLURALS["Workflow"]
# Not a kind a user writes: what Argo's executor reports a pod's outputs with.
WORKFLOW_TASK_RESULTS: Final = "workflowtaskresults"

# Kueue's API, and the labels by which a pod names its queue and the priority of its workload.
KUEUE_GROUP: Final = "kueue.x-k8s.io"
KUEUE_VERSION: Final = "v1beta2"
KUEUE_API_VERSION: Final = f"{KUEUE_GROUP}/{KUEUE_VERSION}"
KUEUE_QUEUE_LABEL: Final = f"{KUEUE_GROUP}/queue-name"
KUEUE_PRIORITY_LABEL: Final = f"{KUEUE_GROUP}/priority-class"
# Each team namespace's LocalQueue is named `default`: Kueue (LocalQueueDefaulting, GA in v0.17) then puts
# every pod of a managed namespace that has no queue-name label into it, so a job that names neither team
# nor namespace (its namespace comes from the kube context at submit time) still cannot bypass the quota.
KUEUE_LOCAL_QUEUE: Final = "default"

# Where the platform publishes its catalog in a cluster: `wf submit` compiles with it (wf.controller.catalog_source).
CATALOG_NAMESPACE: Final = "wf-system"
CATALOG_CONFIGMAP: Final = "wf-catalog"
CATALOG_KEY: Final = "catalog.yaml"

# Kubernetes name grammar (apimachinery validation): a DNS-1123 label (namespaces, label name parts) is at
# most 63 characters, a DNS-1123 subdomain (object names, label prefixes) at most 253.
DNS1123_LABEL: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_LABEL_MAX: Final = 63
DNS1123_SUBDOMAIN: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS1123_SUBDOMAIN_MAX: Final = 253
QUALIFIED_NAME: Final = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
LABEL_VALUE: Final = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
LABEL_VALUE_MAX: Final = 63

# Kubernetes' Quantity grammar (resource.Quantity, as in the CRDs' `pattern`): a signed number, then a binary
# or decimal SI suffix or a decimal exponent.
QUANTITY: Final = re.compile(
    r"^(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?P<suffix>[KMGTPE]i|[numkMGTPE]|[eE][+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))?$"
)

# Where a step reads the files another step wrote (`{{steps.S.outputs.O}}` as an Argo input artifact path).
INPUTS_ROOT = "/wf/inputs"
