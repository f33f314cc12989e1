"""The local cluster's sizing: flags that let the simulated cluster keep up with thousands of nodes and pods
on two cores. Every flag was checked against the `--help` of the pinned binaries; each value says why.

For a real EKS cluster the same Argo knobs are in the platform bundle (wf.render.platform), sized for it.
"""

from __future__ import annotations

# Extra flags per control-plane component, sized for ~3,200 nodes and ~10,000 pods on two cores.
TUNING: dict[str, dict[str, str]] = {
    "kube-apiserver": {
        # Defaults 400/200. With priority and fairness on (default) their sum is the server's whole
        # concurrency, shared by kwok's 32 workers, the scheduler, the controller-manager, Argo, Karpenter
        # and wf; a request refused with 429 is retried later, which only slows the day down.
        "max-requests-inflight": "800",
        "max-mutating-requests-inflight": "400",
        # Unset, a SIGTERM leaves open watches (every controller's) to its HTTP server's shutdown, which waits for
        # them the whole request timeout: a minute or more before it exits, every `down` and repair. Set, it
        # closes them (clients reconnect) within this grace period.
        "shutdown-watch-termination-grace-period": "5s",
        # On by default since 1.34 (beta): a list's later pages (its continue token) are served from the watch
        # cache's snapshot at the first page's revision, waiting for the cache to reach it, and a page the cache
        # does not reach within seconds fails with 504 "Too large resource version" where up to 1.33 it was read
        # from etcd (k8s.io/apiserver cacher: ShouldDelegateContinue). On a full-size day the loaded API server's
        # watch cache fell 538 to 5,458 revisions behind etcd, and the storm's drain and the day's reading each died
        # on that 504 at a later page (benchmarks/README.md). Off, such a page is read from etcd again, as the first
        # page already is when the cache lags (the consistent read's fallback).
        "feature-gates": "ListFromCacheSnapshot=false",
    },
    "kube-scheduler": {
        # Default 50/100: binding 8,000 pods would take minutes of client-side throttling alone.
        "kube-api-qps": "500",
        "kube-api-burst": "1000",
    },
    "kube-controller-manager": {
        # Default 20/30: the pod garbage collector deletes the pods of a vanished node one request each,
        # and the node lifecycle controller updates every node; 150 vanished nodes must not queue minutes.
        "kube-api-qps": "200",
        "kube-api-burst": "400",
    },
    "kwok-controller": {
        # Default INFO logs a line per simulated pod change: 5 MB a minute at scale, formatted by a busy core.
        "v": "WARN",
    },
}

# Go's garbage collector (GOGC, default 100: collect when the heap doubles what was live). A CPU profile of the API
# server over a rehearsal day (benchmarks/scale.py --profile) spent 17% of its CPU marking and 3% more in allocation
# assists. Collecting at 3x the live heap instead of 2x halves how often that is paid: at rehearsal size the API
# server and Argo's controller each used 10% less CPU, for 47% and 67% more peak memory; at full size 2% and 9%
# less, for 66% and 61% more (9.0 GB and 5.5 GB), with the day no shorter (benchmarks/README.md).
GOGC = "200"
GO_RUNTIME_ENV: dict[str, dict[str, str]] = {
    "kube-apiserver": {"GOGC": GOGC},
    "workflow-controller": {"GOGC": GOGC},
}

# kwokctl's own options. Node leases: kwok renews each node's Lease every quarter of its duration; at kwokctl's
# 200 s that was 40,000 writes (the API server's largest item) in one run of the scale benchmark, to keep
# 3,200 simulated nodes Ready. 20 minutes cuts that sixfold; the node lifecycle controller's grace period
# follows, or it would mark nodes NotReady between renewals. Nothing here relies on lease expiry: a reclaimed
# node is a deleted Node object, as on EKS. kwokctl multiplies both by its heartbeat factor (5; its default 40 s
# is the 200 s above), so these are a fifth of the flags the processes get (checked in kwok.yaml).
KWOKCTL_HEARTBEAT_FACTOR = 5
KWOKCTL_OPTIONS: dict[str, int] = {
    "nodeLeaseDurationSeconds": 1200 // KWOKCTL_HEARTBEAT_FACTOR,
    "kubeControllerManagerNodeMonitorGracePeriodMilliseconds": 1_200_000 // KWOKCTL_HEARTBEAT_FACTOR,
}

# kwok-controller's KwokConfiguration (the simulated kubelets). Defaults: 4 workers each, 1 pod syncer.
# kwok 0.8 applies its defaults only when no KwokConfiguration is given (config.GetKwokConfiguration), so giving
# one drops them all: the defaults we rely on are spelled out, above all the debugging handlers that serve pod
# logs to the API server (without them `kubectl logs` gets 405).
KWOK_OPTIONS: dict[str, int | bool | str] = {
    "cidr": "10.0.0.0/24",
    "enableDebuggingHandlers": True,
    "enableProfilingHandler": True,
    "enablePodsOnNodeSyncListPager": True,
    # Pods move Pending -> Running -> Succeeded by these workers; at 4, thousands of bound pods wait.
    "podPlayStageParallelism": 16,
    # Nodes only change on create and heartbeat; a few more workers for a 3,200-node start and storms.
    "nodePlayStageParallelism": 8,
    # Leases renew every lease duration / 4 (KWOKCTL_OPTIONS: every 300 s, ~11/s at 3,200 nodes); 8 workers
    # keep a 3,200-node start from falling behind on a busy machine.
    "nodeLeaseParallelism": 8,
    "podsOnNodeSyncParallelism": 4,
}

# Argo's workflow-controller locally: the same reasoning as wf.render.platform.argo_controller_patch
# for a real cluster, sized for a loopback API server.
CONTROLLER_ARGS = (
    # Default 20/30: each pod costs Argo several requests (create, label patches, cleanup); with the
    # defaults, 250 workflows of 32 pods were mostly still Running after 25 minutes (issue 10).
    "--qps", "200",
    "--burst", "300",
    # Default 4: completed pods are labelled and deleted by these workers.
    "--pod-cleanup-workers", "8",
)

# Up to this many nodes per group the local cluster is test-sized (make run: 2; a rehearsal of the day: 20).
SMALL_CLUSTER_NODES_PER_GROUP = 20


def requeue_time(nodes_per_group: int) -> str:
    """Argo's DEFAULT_REQUEUE_TIME: the least time between two reconciliations of one workflow. Each one that
    changes something rewrites the whole Workflow (100 KB for 32 steps) through the API server to every watcher.
    A test-sized cluster runs a few workflows: 1 s (Argo's own dev setting) keeps each step's hand-over quick.
    At the platform's size 250 workflows would be rewritten up to 250 times a second; 5 s lets one write carry
    several pod changes, at the price of up to 5 s per DAG level (Argo's default is 10 s; its source suggests
    up to 30 s under high load)."""
    return "1s" if nodes_per_group <= SMALL_CLUSTER_NODES_PER_GROUP else "5s"
