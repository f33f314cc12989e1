"""The cluster operations as Python functions for notebooks and CI scripts, returning typed results.

    import wf
    runs = wf.watch(wf.submit("jobs/bert.yaml", context="wf-local"))
    assert runs.succeeded, runs.failures
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wf.controller.archive import Archive
from wf.controller.client import Kube, Target, connect
from wf.controller.cost import JobCost
from wf.controller.submit import BATCH_LABEL, Submitted
from wf.controller.view import Display
from wf.controller.watch import WatchOutcome

__all__ = ["Run", "Runs", "Submitted", "delete", "get", "list_workflows", "logs", "retry", "stop", "submit", "watch"]


@dataclass(frozen=True)
class Run:
    """How one watched workflow ended."""

    name: str
    namespace: str
    phase: str  # Succeeded | Failed | Error | Deleted | Running (when watching stopped first)
    failed_steps: tuple[tuple[str, str], ...]  # (step, Argo's message)
    message: str
    cost: JobCost | None

    @property
    def succeeded(self) -> bool:
        return self.phase == "Succeeded"


@dataclass(frozen=True)
class Runs:
    runs: tuple[Run, ...]
    stopped: bool  # watching was interrupted (Ctrl-C); the workflows were not
    outcome: WatchOutcome

    @property
    def succeeded(self) -> bool:
        return not self.stopped and all(r.succeeded for r in self.runs)

    @property
    def failures(self) -> list[str]:
        return [f"{r.name}: {step}: {message}" for r in self.runs for step, message in r.failed_steps] + [
            f"{r.name}: {r.phase}" for r in self.runs if not r.succeeded and not r.failed_steps]


def _kube(kube: Kube | None, **where: str | None) -> Kube:
    return kube or connect(Target(**where))


def submit(jobs: Any, *, dry_run: bool = False, parameters: dict[str, str] | None = None,
           catalog: str | Path | None = None, namespace: str | None = None, context: str | None = None,
           kubeconfig: str | None = None, eks_cluster: str | None = None, region: str | None = None,
           role_arn: str | None = None, rate: float = 20.0, burst: int = 40, skip_existing: bool = False,
           no_cache: bool = False, kube: Kube | None = None) -> list[Submitted]:
    """Submit job files, folders or TrainingJob objects; compiled with the cluster's catalog unless given one.
    `skip_existing`: what an earlier run of the same submit created is returned (`existing`), not created again.
    `no_cache`: cached steps run again and save their results afresh (wf.compile.cache.refreshed).
    Stopped part way (Ctrl-C included): SubmitInterrupted, saying what was created, what may have been and what
    was not."""
    from wf.controller.catalog_source import resolve_catalog
    from wf.controller.submit import check_parameters, load_jobs, submit_jobs

    sources = list(jobs) if isinstance(jobs, (list, tuple)) else [jobs]
    loaded = load_jobs(sources)
    check_parameters(loaded, parameters or {})
    client = _kube(kube, context=context, kubeconfig=kubeconfig, eks_cluster=eks_cluster, region=region,
                   role_arn=role_arn)
    # A project's job files name its catalog (its project file), wherever the command runs.
    near = next((Path(s) for s in sources if isinstance(s, (str, Path))), None)
    resolved = resolve_catalog(client, catalog, near=near)
    return submit_jobs(client, loaded, resolved, namespace=namespace, parameters=parameters, dry_run=dry_run,
                       skip_existing=skip_existing, no_cache=no_cache, rate=rate, burst=burst)


def _targets(workflows: Any, default_namespace: str) -> tuple[list[tuple[str, str]], str]:
    items = list(workflows) if isinstance(workflows, (list, tuple)) else [workflows]
    targets, batches = [], set()
    for item in items:
        if isinstance(item, Submitted):
            targets.append((item.namespace, item.name))
            batches.add(item.batch)
        else:
            targets.append((default_namespace, str(item)))
    selector = f"{BATCH_LABEL}={batches.pop()}" if len(batches) == 1 and None not in batches and \
        all(isinstance(i, Submitted) for i in items) else ""
    return targets, selector


def watch(workflows: Any = (), *, selector: str = "", namespace: str | None = None, context: str | None = None,
          kubeconfig: str | None = None, eks_cluster: str | None = None, region: str | None = None,
          role_arn: str | None = None, display: Display | None = None, with_cost: bool = True,
          catalog: str | Path | None = None, timeout: float | None = None, kube: Kube | None = None,
          archive: Archive | None = None) -> Runs:
    """Watch workflows (names or submit()'s results, or every one `selector` matches) to their end through one
    stream per namespace (or for `timeout` seconds: `Runs.outcome.timed_out`). `archive`: the Argo Server whose
    database holds the steps of workflows too big for their object (wf.argo.nodes)."""
    from wf.controller.catalog_source import resolve_catalog
    from wf.controller.watch import watch_workflows

    client = _kube(kube, context=context, kubeconfig=kubeconfig, eks_cluster=eks_cluster, region=region,
                   role_arn=role_arn)
    targets, batch = _targets(workflows, namespace or client.namespace)
    outcome = watch_workflows(client, targets, display=display, label_selector=selector or batch,
                              namespace=namespace, with_cost=with_cost, timeout=timeout,
                              catalog_loader=lambda: resolve_catalog(client, str(catalog) if catalog else None),
                              hydrate=archive.hydrated if archive else None)
    runs = []
    for key in targets or outcome.followed:
        view = outcome.views.get(key)
        phase = "Deleted" if key in outcome.deleted else (view.phase if view else "Unknown")
        failed = tuple((s.name, s.failure) for s in view.failed_steps) if view else ()
        runs.append(Run(key[1], key[0], phase, failed, view.message if view else "", outcome.costs.get(key)))
    return Runs(tuple(runs), outcome.stopped, outcome)


def get(name: str, *, namespace: str | None = None, context: str | None = None, kubeconfig: str | None = None,
        kube: Kube | None = None) -> dict[str, Any]:
    from wf.controller.ops import get_workflow

    client = _kube(kube, context=context, kubeconfig=kubeconfig)
    return get_workflow(client, name, namespace)


def list_workflows(*, namespace: str | None = None, all_namespaces: bool = False, selector: str = "",
                   context: str | None = None, kubeconfig: str | None = None,
                   kube: Kube | None = None) -> list[dict[str, Any]]:
    from wf.controller.listing import list_workflows as list_

    client = _kube(kube, context=context, kubeconfig=kubeconfig)
    return list_(client, namespace, all_namespaces=all_namespaces, label_selector=selector)


def logs(name: str, *, step: str | None = None, follow: bool = False, tail: int | None = None,
         namespace: str | None = None, context: str | None = None, kubeconfig: str | None = None,
         kube: Kube | None = None) -> Iterator[str]:
    from wf.controller.ops import log_lines

    client = _kube(kube, context=context, kubeconfig=kubeconfig)
    return log_lines(client, name, namespace, step=step, follow=follow, tail=tail)


def retry(name: str, *, namespace: str | None = None, context: str | None = None, kubeconfig: str | None = None,
          kube: Kube | None = None) -> dict[str, Any]:
    from wf.controller.ops import retry_workflow

    return retry_workflow(_kube(kube, context=context, kubeconfig=kubeconfig), name, namespace)


def stop(name: str, *, namespace: str | None = None, context: str | None = None, kubeconfig: str | None = None,
         kube: Kube | None = None) -> dict[str, Any]:
    from wf.controller.ops import stop_workflow

    return stop_workflow(_kube(kube, context=context, kubeconfig=kubeconfig), name, namespace)


def delete(name: str, *, namespace: str | None = None, context: str | None = None, kubeconfig: str | None = None,
           kube: Kube | None = None) -> None:
    from wf.controller.ops import delete_workflow

    delete_workflow(_kube(kube, context=context, kubeconfig=kubeconfig), name, namespace)
