"""The names wf shares with Kubernetes, Argo, Kueue and the mpi-operator: label keys, API kinds, name patterns,
quantities.

The compiler selects on the label keys, never on instance types, so node groups can change (or move from
eksctl to Karpenter) without touching a workflow. Every module that names one of these imports it from here.
"""

import re
from dataclasses import dataclass
from typing import Final

# Labels and annotations that tie compiled workflows, node groups and the local cluster together.
DOMAIN: Final = "wf.dev"
CLASS_LABEL: Final = f"{DOMAIN}/compute-class"
# On a node whose pods really run (wf.cluster.realnode): kwok and the simulated executor leave it and its pods alone.
REAL_NODE_LABEL: Final = f"{DOMAIN}/real-node"
# The taint of that key (value "true") keeping off a real node every pod but those `wf submit` placed there (their
# image is on it alone, wf.compile.placement.on_real_nodes): no other pod's image is pulled from a registry.
REAL_NODE_TAINT: Final = {"key": REAL_NODE_LABEL, "value": "true", "effect": "NoSchedule"}
CAPACITY_LABEL: Final = f"{DOMAIN}/capacity"
JOB_LABEL: Final = f"{DOMAIN}/job"
STEP_LABEL: Final = f"{DOMAIN}/step"
SUBMISSION_LABEL: Final = f"{DOMAIN}/submission"
# On pods the workflow's steps create through other controllers (an MPIJob's launcher and workers).
WORKFLOW_NAME_LABEL: Final = f"{DOMAIN}/workflow"
# On a multi-node step's resource pod: the name of the MPIJob it runs (one per run of the step), by which the
# MPIJob's launcher asks to share the pod's node.
MPIJOB_LABEL: Final = f"{DOMAIN}/mpijob"
# On an MPIJob one of whose workers stopped running while its launcher ran (a rank lost with its node, which fails
# mpirun), written by the node recorder: the step's failure condition reads it as an interruption. A key without
# dots or prefix, since Argo reads the condition's key as a gjson path, in which every dot is a step.
MPI_WORKER_LOST_ANNOTATION: Final = "wf-worker-lost"
# Where a workflow's attempts ran, kept by the node facts recorder (wf.controller.node_recorder) as each pod is
# bound, so its cost outlives the nodes: JSON, each node's instance type, capacity and zone once, and a multi-node
# attempt's launcher and worker nodes by the attempt's Argo node id (wf.compile.node_facts). While the workflow
# runs, under this key of its ledger (wf.controller.checkpoints: a ConfigMap it owns; every other key is a pod's
# name, which cannot hold "_"), not on the Workflow, which Argo's controller rewrites whole and reconciles on every
# change; once it has ended, copied onto it as the annotation below, where Argo's archive keeps it.
NODE_RECORD_KEY: Final = "_nodes"
NODE_FACTS_ANNOTATION: Final = f"{DOMAIN}/nodes"
# Where the node facts recorder serves wf's metrics (`wf platform record-nodes --metrics-address`): its default port,
# the platform bundle's Service's and Deployment's.
NODE_RECORDER_METRICS_PORT: Final = 9495
# The team a job spec names in its own labels (`metadata.labels.team`, the examples' convention), which compiled
# workflows and templates carry: `wf template list` shows it.
JOB_TEAM_LABEL: Final = "team"
# On a workflow `wf rerun --from STEP` started: STEP, the first step it ran again (what it reused: the steps
# before, of the workflow ARGO_RESUBMITTED_FROM_LABEL names).
RERUN_FROM_ANNOTATION: Final = f"{DOMAIN}/rerun-from"
# On a workflow `wf retry` retried: how many times. Its presence makes WF_RESUME true (a retried step's checkpoint
# location holds what its attempts before the retry saved); a `wf rerun` does not inherit it (new locations).
RETRIED_ANNOTATION: Final = f"{DOMAIN}/retried"
# A workflow namespace's Secret naming an S3-compatible store other than AWS's (the local cluster's): its endpoint
# and keys, under the environment names AWS's SDKs read, for Argo's init and wait containers and for the programs
# that write checkpoints to the store (an optional reference: on EKS there is none and the pod's role serves).
ARTIFACT_STORE_SECRET: Final = "wf-artifact-store"

# Argo's executor in every step's main container: Argo mounts it there and runs the program under it (emissary).
ARGOEXEC_IN_MAIN: Final = "/var/run/argo/argoexec"

# Read by the local cluster's simulated kubelet (kwok stages) to hold a pod Running or fail it.
SIM_DURATION: Final = f"sim.{DOMAIN}/duration"
SIM_EXIT_CODE: Final = f"sim.{DOMAIN}/exit-code"
# With an exit code: the termination message of the pod's containers (what a failing program printed to it).
SIM_MESSAGE: Final = f"sim.{DOMAIN}/message"
# Set by the simulated executor on a pod that was Running when its node was deleted and whose node name came back
# (a new machine under the old name): the simulated kubelet then finds its containers gone, as a real one does.
SIM_LOST: Final = f"sim.{DOMAIN}/lost"
# Set by the simulated executor on a running pod being deleted once it has kept the pod's log, as Argo's wait container
# uploads it before the kubelet ends the pod: the simulated kubelet then removes the pod, else at its grace's end.
SIM_LOGS_KEPT: Final = f"sim.{DOMAIN}/logs-kept"
# Read by the local cluster's simulated executor (wf.cluster.executor): the step's output parameters, as JSON.
SIM_OUTPUTS: Final = f"sim.{DOMAIN}/outputs"
# With a duration: the simulated program saves this many checkpoints, evenly over its work, when its step has a
# checkpoint location; the simulated executor then plays the pod, and a retry runs only the work left.
SIM_CHECKPOINTS: Final = f"sim.{DOMAIN}/checkpoints"
# Set by the simulated executor on a pod whose init container it plays (a multi-node step's release of the gang
# before): "done" lets the simulated kubelet run the pod, "failed" (with an exit code and message) fails it.
SIM_INIT: Final = f"sim.{DOMAIN}/init"
# On the local cluster's twin of the artifact store (ConfigMaps the simulated executor writes, one per object): the
# label marking them, and the annotation holding the object's key (the name holds its hash).
TWIN_ARTIFACT_LABEL: Final = f"sim.{DOMAIN}/artifact"
TWIN_ARTIFACT_KEY_ANNOTATION: Final = f"sim.{DOMAIN}/artifact-key"

ARCH_LABEL: Final = "kubernetes.io/arch"
OS_LABEL: Final = "kubernetes.io/os"
INSTANCE_TYPE_LABEL: Final = "node.kubernetes.io/instance-type"
ZONE_LABEL: Final = "topology.kubernetes.io/zone"
REGION_LABEL: Final = "topology.kubernetes.io/region"
EKS_CAPACITY_LABEL: Final = "eks.amazonaws.com/capacityType"
EKS_NODEGROUP_LABEL: Final = "eks.amazonaws.com/nodegroup"
# On a node Karpenter launched: its NodePool, whose nodeClassRef names the EC2NodeClass (launch template) it has.
KARPENTER_NODEPOOL_LABEL: Final = "karpenter.sh/nodepool"
# On a pod: the containers EKS's pod identity webhook gives no AWS credentials (IRSA's and EKS Pod Identity's alike,
# amazon-eks-pod-identity-webhook pkg/handler), comma-separated.
EKS_SKIP_CONTAINERS_ANNOTATION: Final = "eks.amazonaws.com/skip-containers"

CAPACITIES: Final = ("spot", "on-demand")
EKS_CAPACITY_VALUES: Final = {"spot": "SPOT", "on-demand": "ON_DEMAND"}


@dataclass(frozen=True)
class ApiKind:
    """One kind of a Kubernetes API that wf reads or writes: a manifest names it by `api_version` and `kind`,
    the API server's paths (and RBAC rules) by `group`, `version` and `plural`."""

    group: str
    version: str
    kind: str
    plural: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"


_ARGO = ("argoproj.io", "v1alpha1")
_KUEUE = ("kueue.x-k8s.io", "v1beta2")
# Argo's CRDs: the kinds a user writes (and `wf lint` validates), by kind, then the one Argo's executor reports a
# pod's outputs with.
WORKFLOW: Final = ApiKind(*_ARGO, "Workflow", "workflows")
WORKFLOW_TEMPLATE: Final = ApiKind(*_ARGO, "WorkflowTemplate", "workflowtemplates")
CLUSTER_WORKFLOW_TEMPLATE: Final = ApiKind(*_ARGO, "ClusterWorkflowTemplate", "clusterworkflowtemplates")
CRON_WORKFLOW: Final = ApiKind(*_ARGO, "CronWorkflow", "cronworkflows")
ARGO_KINDS: Final = {k.kind: k for k in (WORKFLOW, WORKFLOW_TEMPLATE, CLUSTER_WORKFLOW_TEMPLATE, CRON_WORKFLOW)}
WORKFLOW_TASK_RESULT: Final = ApiKind(*_ARGO, "WorkflowTaskResult", "workflowtaskresults")
# Kubeflow's mpi-operator: what a multi-node step creates (wf.compile.kinds.mpijob).
MPIJOB: Final = ApiKind("kubeflow.org", "v2beta1", "MPIJob", "mpijobs")
# Kueue's: the queues `wf kueue generate` writes, and the Workloads by which Kueue admits pods.
RESOURCE_FLAVOR: Final = ApiKind(*_KUEUE, "ResourceFlavor", "resourceflavors")
CLUSTER_QUEUE: Final = ApiKind(*_KUEUE, "ClusterQueue", "clusterqueues")
LOCAL_QUEUE: Final = ApiKind(*_KUEUE, "LocalQueue", "localqueues")
WORKLOAD: Final = ApiKind(*_KUEUE, "Workload", "workloads")
WORKLOAD_PRIORITY_CLASS: Final = ApiKind(*_KUEUE, "WorkloadPriorityClass", "workloadpriorityclasses")

# Argo's labels and annotations that wf reads or writes (argo-workflows workflow/common/common.go).
ARGO_DOMAIN: Final = "workflows.argoproj.io"
# On a workflow's pods: the workflow's name (selects them for `wf logs`, `wf retry` and the simulated executor).
ARGO_WORKFLOW_LABEL: Final = f"{ARGO_DOMAIN}/workflow"
# On a workflow: "true" once it has finished; `wf retry` resets it so the controller takes the workflow up again.
ARGO_COMPLETED_LABEL: Final = f"{ARGO_DOMAIN}/completed"
# On a finished workflow when Argo archives runs: "Pending" until its archive worker has copied it into the
# archive, then "Archived". Set back to "Pending" by the node recorder with the record it copies onto the workflow,
# so the archived copy is made again and holds it (the worker archives what the workflow is when it runs).
ARGO_ARCHIVING_STATUS_LABEL: Final = f"{ARGO_DOMAIN}/workflow-archiving-status"
ARGO_ARCHIVE_PENDING: Final = "Pending"
# On a workflow: its phase, which `wf retry` sets back to Running.
ARGO_PHASE_LABEL: Final = f"{ARGO_DOMAIN}/phase"
# On a workflow `wf rerun` started (Argo's own for `argo resubmit`): the finished workflow whose steps it reuses.
ARGO_RESUBMITTED_FROM_LABEL: Final = f"{ARGO_DOMAIN}/resubmitted-from-workflow"
# The container of an Argo pod that runs the step's program (workflow/common/common.go MainContainerName); Argo's
# own are `init` and `wait`.
ARGO_MAIN_CONTAINER: Final = "main"
# On a pod: the name of the workflow node it runs, whose last part names the step when wf's label is missing.
ARGO_NODE_NAME_ANNOTATION: Final = f"{ARGO_DOMAIN}/node-name"
# On a pod: the id of the workflow node it runs, the name of the WorkflowTaskResult that reports its outputs.
ARGO_NODE_ID_ANNOTATION: Final = f"{ARGO_DOMAIN}/node-id"
# On a workflow submitted from a WorkflowTemplate: the template's name (as `argo submit --from` sets it).
ARGO_WORKFLOW_TEMPLATE_LABEL: Final = f"{ARGO_DOMAIN}/workflow-template"
# On a workflow: "v1" when its pods are named by node id, not "<workflow>-<template>-<hash>" (v2).
ARGO_POD_NAME_FORMAT_ANNOTATION: Final = f"{ARGO_DOMAIN}/pod-name-format"
# On a WorkflowTaskResult: "true" once the executor has reported all of the pod's outputs.
ARGO_REPORT_OUTPUTS_COMPLETED_LABEL: Final = f"{ARGO_DOMAIN}/report-outputs-completed"
# On an artifact repositories ConfigMap: the key of the repository workflows use when they name none.
ARGO_DEFAULT_ARTIFACT_REPOSITORY_ANNOTATION: Final = f"{ARGO_DOMAIN}/default-artifact-repository"
# The pod volume holding the token of the account Argo's own containers run as, where Argo mounts it in them
# (workflow/common/common.go ServiceAccountTokenVolumeName, ServiceAccountTokenMountPath), present when the
# workflow or template names `executor.serviceAccountName`.
ARGO_EXECUTOR_TOKEN_VOLUME: Final = "exec-sa-token"
ARGO_EXECUTOR_TOKEN_PATH: Final = "/var/run/secrets/kubernetes.io/serviceaccount"
# Argo's own places in a step's pod (workflow/common/common.go): VarRunArgoPath, the executor binary and its shared
# volume in every container; ExecutorArtifactBaseDir, ExecutorStagingEmptyDir, SecretVolMountPath and
# EnvConfigMountPath, all under /argo.
ARGO_VAR_RUN_PATH: Final = "/var/run/argo"
ARGO_EXECUTOR_ROOT: Final = "/argo"
# Where Kubernetes (kubernetes.io/serviceaccount) and EKS (IRSA's eks.amazonaws.com, Pod Identity's
# pods.eks.amazonaws.com) mount a pod's service account tokens.
SERVICE_ACCOUNT_TOKENS_ROOT: Final = "/var/run/secrets"
# The Secret that volume is, for an executor account (util/secrets/secret_name.go TokenName; manifests/rbac.yaml).
ARGO_EXECUTOR_TOKEN_SECRET: Final = "{account}.service-account-token"

# The labels by which a pod names its Kueue queue and the priority of its workload.
KUEUE_QUEUE_LABEL: Final = f"{LOCAL_QUEUE.group}/queue-name"
KUEUE_PRIORITY_LABEL: Final = f"{WORKLOAD_PRIORITY_CLASS.group}/priority-class"
# Each team namespace's LocalQueue is named `default`: Kueue (LocalQueueDefaulting, GA in v0.17) then puts
# every pod of a managed namespace that has no queue-name label into it, so a job that names neither team
# nor namespace (its namespace comes from the kube context at submit time) still cannot bypass the quota.
KUEUE_LOCAL_QUEUE: Final = "default"

# Workflow pods' service accounts in every workflow namespace (manifests/rbac.yaml): the step's container runs as
# STEP_ACCOUNT, which holds no permission and gets no API token; Argo's own containers authenticate as
# EXECUTOR_ACCOUNT (the executor's Role), a multi-node step's resource pod as MPIJOB_EXECUTOR_ACCOUNT (the same
# plus creating, reading and deleting MPIJobs).
STEP_ACCOUNT: Final = "wf-workflow"
EXECUTOR_ACCOUNT: Final = "wf-executor"
MPIJOB_EXECUTOR_ACCOUNT: Final = "wf-mpijob-executor"

# Where the platform publishes its catalog in a cluster: `wf submit` compiles with it (wf.controller.catalog_source).
CATALOG_NAMESPACE: Final = "wf-system"
CATALOG_CONFIGMAP: Final = "wf-catalog"
CATALOG_KEY: Final = "catalog.yaml"

# The step cache (wf.compile.cache): Argo v4.0 keeps memoization ConfigMaps in its controller's own namespace
# (workflow/controller/cache/cache.go), so each workflow namespace gets one there, named with this prefix.
STEP_CACHE_PREFIX: Final = "wf-step-cache"

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
