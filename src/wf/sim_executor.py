"""The local cluster's stand-in for the output reporting of Argo's executor (the `wait` container).

On a real cluster the wait container of a pod whose template declares outputs reads the files the step wrote,
uploads artifacts and reports the values to the controller as a WorkflowTaskResult named after the node id,
labelled with the workflow and `report-outputs-completed` (Argo v4 workflow/executor/taskresult.go); until that
arrives the controller keeps the node Running (workflow/controller/operator.go). Under kwok nothing runs the
step's program, so this process does the reporting when such a pod has Succeeded:

- a parameter takes its value from the pod's `sim.wf.dev/outputs` annotation (a JSON object, NAME -> value;
  values that are not strings are written as JSON, so a list becomes the JSON list a fan-out reads), else from
  the parameter's `valueFrom.default`, else the empty string;
- an artifact is reported at the key the artifact repository's layout gives it; nothing is uploaded.

Run by `wf cluster up` with the cluster's admin kubeconfig: python -m wf.sim_executor --kubeconfig PATH
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path
from typing import Any

from wf.constants import ARGO_GROUP, ARGO_VERSION, SIM_OUTPUTS, WORKFLOW_TASK_RESULTS

OUTPUTS_ANNOTATION = SIM_OUTPUTS
WORKFLOW_LABEL = "workflows.argoproj.io/workflow"
COMPLETED_LABEL = "workflows.argoproj.io/report-outputs-completed"
NODE_ID_ANNOTATION = "workflows.argoproj.io/node-id"
TEMPLATE_ENV = "ARGO_TEMPLATE"
GROUP, VERSION, PLURAL = ARGO_GROUP, ARGO_VERSION, WORKFLOW_TASK_RESULTS

log = logging.getLogger("wf.sim_executor")


def task_result(pod: dict[str, Any]) -> dict[str, Any] | None:
    """The WorkflowTaskResult the executor would create for `pod` (API-shaped dict), or None when the pod has
    not Succeeded or its template declares no outputs."""
    if (pod.get("status") or {}).get("phase") != "Succeeded":
        return None
    meta = pod.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    template = _template(pod)
    declared = (template or {}).get("outputs") or {}
    if not declared.get("parameters") and not declared.get("artifacts") or NODE_ID_ANNOTATION not in annotations:
        return None
    given = _annotated_values(annotations.get(OUTPUTS_ANNOTATION))
    outputs: dict[str, Any] = {}
    if declared.get("parameters"):
        outputs["parameters"] = [
            {"name": p["name"], "value": _text(given[p["name"]]) if p["name"] in given
             else str((p.get("valueFrom") or {}).get("default", ""))}
            for p in declared["parameters"]]
    if declared.get("artifacts"):
        prefix = f"{meta.get('namespace')}/{(meta.get('labels') or {}).get(WORKFLOW_LABEL)}/{meta.get('name')}"
        outputs["artifacts"] = [{"name": a["name"], "path": a.get("path", ""), "s3": {"key": f"{prefix}/{a['name']}.tgz"}}
                                for a in declared["artifacts"]]
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "WorkflowTaskResult",
        "metadata": {
            "name": annotations[NODE_ID_ANNOTATION],
            "namespace": meta.get("namespace"),
            "labels": {WORKFLOW_LABEL: (meta.get("labels") or {}).get(WORKFLOW_LABEL, ""), COMPLETED_LABEL: "true"},
            "ownerReferences": [r for r in meta.get("ownerReferences") or [] if r.get("kind") == "Workflow"],
        },
        "outputs": outputs,
    }


def _template(pod: dict[str, Any]) -> dict[str, Any] | None:
    """The template Argo hands its executor in ARGO_TEMPLATE (on the init and wait containers)."""
    spec = pod.get("spec") or {}
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        for env in container.get("env") or []:
            if env.get("name") == TEMPLATE_ENV and env.get("value"):
                try:
                    value = json.loads(env["value"])
                except ValueError:
                    return None
                return value if isinstance(value, dict) else None
    return None


def _annotated_values(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    try:
        values = json.loads(text)
    except ValueError:
        log.warning("%s is not JSON; the outputs take their defaults", OUTPUTS_ANNOTATION)
        return {}
    return values if isinstance(values, dict) else {}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def serve(kubeconfig: Path) -> None:
    """Watch workflow pods in every namespace and report the outputs of those that Succeeded, once each;
    on a lost watch or an unreachable API server, list again after a pause."""
    from kubernetes import watch
    from kubernetes.client import CoreV1Api, CustomObjectsApi
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    from wf.controller.client import connect

    api = connect(kubeconfig=str(kubeconfig)).api_client
    core, custom = CoreV1Api(api), CustomObjectsApi(api)
    reported: set[str] = set()

    def handle(pod: dict[str, Any]) -> None:
        uid = (pod.get("metadata") or {}).get("uid", "")
        if uid in reported or (result := task_result(pod)) is None:
            return
        meta = result["metadata"]
        try:
            custom.create_namespaced_custom_object(GROUP, VERSION, meta["namespace"], PLURAL, result)
        except ApiException as exc:
            if exc.status != 409:
                raise
            custom.patch_namespaced_custom_object(GROUP, VERSION, meta["namespace"], PLURAL, meta["name"], result)
        reported.add(uid)
        log.info("reported outputs of %s/%s (node %s)", meta["namespace"], pod["metadata"]["name"], meta["name"])

    while True:
        try:
            listed = core.list_pod_for_all_namespaces(label_selector=WORKFLOW_LABEL)
            for pod in listed.items:
                handle(api.sanitize_for_serialization(pod))
            stream = watch.Watch().stream(core.list_pod_for_all_namespaces, label_selector=WORKFLOW_LABEL,
                                          resource_version=listed.metadata.resource_version, timeout_seconds=300)
            for event in stream:
                handle(api.sanitize_for_serialization(event["object"]))
        except (ApiException, HTTPError, OSError) as exc:
            log.warning("watching pods: %s; listing again", exc)
            time.sleep(1)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m wf.sim_executor", description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", type=Path, required=True)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    serve(args.kubeconfig)


if __name__ == "__main__":
    main()
