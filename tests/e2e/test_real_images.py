"""Images on a real node, which reaches no registry: the local Python image runs the example program as uid 65534
on a read-only root in a pod of the restricted profile's shape, a deletion's SIGTERM is saved within the grace
period and a second pod resumes from the save; an archive `wf cluster image import` took runs under the name it
printed; the tiny-train example runs there as a workflow; the twin is compared with it. The session's real-node
cluster (conftest.real_cluster), one real node beside simulated ones."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import V1Eviction, V1ObjectMeta

from image_archives import docker_save
from wf.cluster import build, images, realnode
from wf.cluster.install import delete_nodes
from wf.controller.client import Kube, pod_log
from wf.core.constants import ARGO_NODE_ID_ANNOTATION, REAL_NODE_LABEL, REAL_NODE_TAINT

from .conftest import ClusterHandle, connected
from .test_controller_e2e import job_file, wf_cli
from .test_real_node import _stored_keys

ROOT = Path(__file__).resolve().parents[2]
TRUTH = "[-0.705, -1.397, 0.604, -1.71]"

pytestmark = [pytest.mark.cluster, pytest.mark.components(*realnode.COMPONENTS)]


@pytest.fixture(scope="module")
def kube(real_cluster: ClusterHandle) -> Iterator[Kube]:
    with connected(real_cluster) as client:
        yield client


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory the pods' uid 65534 can write, on a path it can reach (pytest's own is root's alone)."""
    path = Path(tempfile.mkdtemp(prefix="wf-real-"))
    path.chmod(0o777)
    try:
        yield path
    finally:
        shutil.rmtree(path)


def pod(name: str, image: str, command: list[str] | None = None, env: dict[str, str] | None = None,
        checkpoints: Path | None = None) -> dict[str, Any]:
    """A pod for the real node as the restricted Pod Security profile shapes it: non-root, the runtime's seccomp
    filter, every capability dropped, no privilege escalation, a read-only root."""
    container: dict[str, Any] = {
        "name": "main", "image": image, "imagePullPolicy": "IfNotPresent",
        "env": [{"name": k, "value": v} for k, v in (env or {}).items()],
        "resources": {"limits": {"cpu": "250m", "memory": "128Mi"}},
        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "capabilities": {"drop": ["ALL"]}},
    }
    if command:
        container["command"] = command
    spec: dict[str, Any] = {
        "nodeSelector": {realnode.REAL_NODE_LABEL: "true"}, "restartPolicy": "Never",
        "tolerations": [{"operator": "Equal", **REAL_NODE_TAINT}],
        "terminationGracePeriodSeconds": 20, "containers": [container],
        "securityContext": {"runAsNonRoot": True, "runAsUser": 65534, "seccompProfile": {"type": "RuntimeDefault"}},
    }
    if checkpoints is not None:
        container["volumeMounts"] = [{"name": "checkpoints", "mountPath": "/ck"}]
        spec["volumes"] = [{"name": "checkpoints", "hostPath": {"path": str(checkpoints), "type": "Directory"}}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def _within(seconds: float, ready: Callable[[], Any]) -> bool:
    deadline = time.monotonic() + seconds
    while not ready():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.3)
    return True


def until(what: str, ready: Callable[[], Any], timeout: float = 90) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := ready():
            return found
        time.sleep(0.3)
    raise AssertionError(f"not within {timeout:.0f}s: {what}")


def phase(kube: Kube, name: str, namespace: str | None = None) -> str | None:
    from kubernetes.client.exceptions import ApiException

    try:
        return str(kube.core.read_namespaced_pod(name, namespace or kube.namespace).status.phase)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def train(*extra: str) -> list[str]:
    return ["python3", f"{images.EXAMPLES_DIR}/tiny_train.py", "train", "--truth", TRUTH, "--lr", "0.05",
            "--seed", "7", "--steps", "300", "--step-seconds", "0.05", "--save-every", "2", *extra]


def test_the_python_image_saves_on_sigterm_within_the_grace_period_and_a_new_pod_resumes(
        kube: Kube, shared_dir: Path) -> None:
    checkpoint = shared_dir / "checkpoint.json"
    env = {"WF_CHECKPOINT_DIR": "/ck", "WF_RESUME": "false", "WF_ATTEMPT": "0"}
    kube.core.create_namespaced_pod(kube.namespace, pod("first", images.PYTHON, train(), env, shared_dir))
    until("a periodic save", lambda: checkpoint.is_file() and json.loads(checkpoint.read_text())["saved"] == "periodic")
    started = time.monotonic()
    kube.core.delete_namespaced_pod("first", kube.namespace)
    until("the pod's end", lambda: phase(kube, "first") is None, timeout=30)
    assert time.monotonic() - started < 20  # the save ended the program, not the grace period's SIGKILL
    saved = json.loads(checkpoint.read_text())
    assert saved["saved"] == "SIGTERM" and 0 < saved["step"] < 300
    assert checkpoint.stat().st_uid == 65534  # the image's user wrote it

    env = {**env, "WF_RESUME": "true", "WF_ATTEMPT": "1"}
    kube.core.create_namespaced_pod(kube.namespace, pod("resumed", images.PYTHON, train(), env, shared_dir))
    until("the resumed pod's success", lambda: phase(kube, "resumed") in ("Succeeded", "Failed"))
    log = pod_log(kube.core, "resumed", kube.namespace, container="main")
    assert phase(kube, "resumed") == "Succeeded", log
    assert log.splitlines()[0] == f"attempt 1: resumed at step {saved['step']} (SIGTERM save) from /ck"
    assert log.splitlines()[-1].startswith("done: 300 steps")
    assert json.loads(checkpoint.read_text())["step"] == 300
    kube.core.delete_namespaced_pod("resumed", kube.namespace, grace_period_seconds=0)


def test_an_imported_archive_runs_under_the_name_import_printed(real_cluster: ClusterHandle, kube: Kube,
                                                                tmp_path: Path) -> None:
    busybox = _file_of(images.archive(images.BUSYBOX, build.cache_dir()), "bin/busybox")  # built by `up`
    files = [images.File("/bin/busybox", busybox), images.File("/bin/echo", link="busybox")]
    archive = tmp_path / "hello.tar"
    archive.write_bytes(docker_save(["hello:1"], files))
    env = {**os.environ, "WF_DATA_HOME": str(real_cluster.cluster.workdir.parent.parent)}
    imported = subprocess.run([sys.executable, "-m", "wf", "cluster", "image", "import", "--name", real_cluster.name,
                               str(archive)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.splitlines() == ["docker.io/library/hello:1"]

    kube.core.create_namespaced_pod(kube.namespace, pod("hello", "hello:1", ["echo", "hello from an archive"]))
    until("the pod's end", lambda: phase(kube, "hello") in ("Succeeded", "Failed"), timeout=60)
    assert phase(kube, "hello") == "Succeeded"
    assert pod_log(kube.core, "hello", kube.namespace, container="main") == "hello from an archive\n"


def _file_of(archive: Path, path: str) -> bytes:
    """A file of the one layer of an image archive images.py wrote."""
    with tarfile.open(archive) as tar:
        def blob(digest: str) -> bytes:
            return tar.extractfile(f"blobs/sha256/{digest.removeprefix('sha256:')}").read()

        manifest = json.loads(blob(json.load(tar.extractfile("index.json"))["manifests"][0]["digest"]))
        with tarfile.open(fileobj=io.BytesIO(blob(manifest["layers"][0]["digest"]))) as layer:
            return layer.extractfile(path).read()


NAMESPACE = "ml-training"  # the example's


def _cli(handle: ClusterHandle, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return wf_cli(handle, *args, timeout=timeout, env={"WF_DATA_HOME": str(handle.cluster.workdir.parent.parent)})


def _past_argos_recent_start(kube: Kube, namespace: str, workflow: str, pod: Any) -> bool:
    """Whether Argo has had the pod's node Running for more than its RECENTLY_STARTED_POD_DURATION (10 s from the
    attempt's start), with 2 s to spare. A pod gone sooner is submitted again under its name, with no retry and no
    interruption counted, so its program starts over with WF_ATTEMPT 0 and no WF_RESUME (Argo's pod
    reconciliation; seen on both kinds of node, and by this module's tests when an eviction came that early)."""
    status = kube.custom.get_namespaced_custom_object("argoproj.io", "v1alpha1", namespace, "workflows",
                                                      workflow).get("status") or {}
    node = (status.get("nodes") or {}).get(pod.metadata.annotations.get(ARGO_NODE_ID_ANNOTATION, ""), {})
    return node.get("phase") == "Running" and time.time() - _epoch(node.get("startedAt")) > 12


def _long_tiny_train(handle: ClusterHandle, kube: Kube) -> tuple[str, Any]:
    """tiny-train submitted with 60 s trials (the example's 30 s, -p steps=1200: room for a busy machine's slow
    look), and a trial that has saved but is not yet half done, once there is one that Argo would retry if it
    went: (workflow, trial pod)."""
    submitted = _cli(handle, "submit", str(ROOT / "examples" / "tiny-train.yaml"), "-p", "steps=1200", "-o", "name")
    assert submitted.returncode == 0, submitted.stderr
    name = submitted.stdout.strip().removeprefix("workflow/")

    def saving_trial() -> Any:
        selector = f"workflows.argoproj.io/workflow={name},wf.dev/step=train"
        for p in kube.core.list_namespaced_pod(NAMESPACE, label_selector=selector).items:
            if p.status.phase == "Running" and _past_argos_recent_start(kube, NAMESPACE, name, p):
                saves = re.findall(r"step (\d+): saved checkpoint \(periodic\)",
                                   pod_log(kube.core, p.metadata.name, NAMESPACE, container="main"))
                if saves and int(saves[-1]) < 600:
                    return p
        return None

    return name, until("a trial's first save", saving_trial, timeout=180)


def _attempt_rows(got: str) -> list[str]:
    """The rows of `wf get`'s attempts table (a step with more than one attempt)."""
    table = got.partition("attempts of")[2].partition("cost of")[0]
    return [line for line in table.splitlines() if line.startswith("│ ")]


def test_the_tiny_train_example_runs_on_the_real_node_and_a_retry_resumes_from_what_it_saved(
        real_cluster: ClusterHandle, kube: Kube) -> None:
    """examples/tiny-train.yaml as `make run` submits it, on a cluster with simulated cpu nodes beside the real
    one: its image is only on the real node, so every pod goes there; its checkpoints go to the cluster's S3
    store (the namespace's Secret names it); one trial's pod evicted mid-run (a drain's SIGTERM) saves, Argo
    retries it, and the retry goes on from that save; outputs pass between the steps through Argo's executor."""
    namespace = NAMESPACE
    name, trial = _long_tiny_train(real_cluster, kube)
    selector = f"workflows.argoproj.io/workflow={name}"

    def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return _cli(real_cluster, *args, timeout=timeout)

    # Evicted as a drain evicts (a Spot notice's): SIGTERM, the pod's grace period to save.
    kube.core.create_namespaced_pod_eviction(trial.metadata.name, namespace, V1Eviction(
        metadata=V1ObjectMeta(name=trial.metadata.name, namespace=namespace)))
    evicted = trial.metadata.name
    if not _within(40, lambda: phase(kube, evicted, namespace) in (None, "Failed")):
        node = realnode.RealNode(real_cluster.cluster.workdir, 0)
        said = [line for line in node.log_file("kubelet").read_text(errors="replace").splitlines() if evicted in line]
        seen = kube.core.read_namespaced_pod(evicted, namespace)
        raise AssertionError(f"{evicted} still {seen.status.phase} 40 s after its eviction (deletion "
                             f"{seen.metadata.deletion_timestamp}); the kubelet on it:\n" + "\n".join(said[-30:]))
    waited = cli("wait", "-n", namespace, name, "--timeout", "5m", timeout=360)
    got = cli("get", "-n", namespace, name)
    assert waited.returncode == 0, f"{waited.stdout}{waited.stderr}\n{got.stdout}"

    real = {n.metadata.name for n in kube.core.list_node(label_selector=REAL_NODE_LABEL).items}
    pods = kube.core.list_namespaced_pod(namespace, label_selector=selector).items
    assert len(pods) == 3 and {p.spec.node_name for p in pods} <= real, [(p.metadata.name, p.spec.node_name)
                                                                           for p in pods]
    logs = cli("logs", "-n", namespace, name, "--step", "train")
    assert logs.returncode == 0, logs.stderr
    # The retry went on from the save the evicted program made on SIGTERM, within its grace period.
    resumed_at = re.findall(r"attempt 1: resumed at step (\d+) \(SIGTERM save\) from s3://", logs.stdout)
    assert len(resumed_at) == 1, f"{logs.stdout}\n{got.stdout}"
    (resumed,) = resumed_at
    # The evicted attempt's log as its wait container archived it: every periodic save before that one. (Its last
    # line, the SIGTERM save's, may be missing: Argo's wait container can read the log an instant before the
    # runtime has written the line the program printed as it exited.)
    # (Live pods' lines are prefixed [train], a gone pod's archived ones with its item's row, [train(1:...)].)
    periodic = [int(n) for n in re.findall(r"^\[train\(.*\)\] step (\d+): saved checkpoint \(periodic\)$",
                                           logs.stdout, re.M)]
    assert periodic and max(periodic) <= int(resumed) < 1200, f"{logs.stdout}\n{got.stdout}"
    assert logs.stdout.count("done: 1200 steps") == 2, logs.stdout
    # The program saved and exited 143 within its grace period. Argo ends the attempt "pod deleted" when the pod
    # was gone before it read the pod's last status, else "Error (exit code 143)" with the stop hook's mark (a race
    # on a real node; the twin always gives the first): both interruption signs, so Argo retried it.
    rows = _attempt_rows(got.stdout)
    ended = [i for i, line in enumerate(rows) if "pod deleted" in line or "main: Error (exit code 143)" in line]
    assert len(rows) == 2 and ended == [0] and "succeeded" in rows[1], got.stdout
    keys = _stored_keys(real_cluster)
    keys = [k for k in keys if k.startswith(f"checkpoints/{namespace}/{name}/train/")]
    assert len(keys) == 2 and all(k.endswith("/checkpoint.json") for k in keys), keys  # one per trial
    print(f"\n{got.stdout}\n{logs.stdout}")


def test_a_real_node_lost_mid_step_is_an_interruption_and_the_retries_resume_from_what_was_saved(
        real_cluster: ClusterHandle, kube: Kube) -> None:
    """The machine under the real node goes while both trials train on it: kubelet, containerd and every
    container killed (no SIGTERM, so no last save), its Node deleted, as an instance that vanishes. `up` starts
    the node again at once, a new machine under the old name, whose kubelet runs the old pods again and
    containerd ends them 'Unknown (exit code 255)' (seen here first: the retries were spent on the application
    budget until that became an interruption sign). Argo retries both as interruptions, and each retry resumes
    from the last periodic save a program wrote to the S3 store."""
    name, _ = _long_tiny_train(real_cluster, kube)
    def saved(pod: Any) -> bool:
        return pod.status.phase == "Running" and "saved checkpoint (periodic)" in pod_log(
            kube.core, pod.metadata.name, NAMESPACE, container="main")

    until("both trials saving", lambda: sum(map(saved, kube.core.list_namespaced_pod(
        NAMESPACE, label_selector=f"workflows.argoproj.io/workflow={name},wf.dev/step=train").items)) == 2,
        timeout=120)
    node = realnode.RealNode(real_cluster.cluster.workdir, 0)
    node_name = node.node_name()
    assert node_name is not None
    node.stop(lambda _: None)
    delete_nodes(real_cluster.cluster.kubeconfig, [node_name])
    real_cluster.cluster.up(merge_into=real_cluster.kubeconfig)  # the node comes back, an empty machine
    waited = _cli(real_cluster, "wait", "-n", NAMESPACE, name, "--timeout", "5m", timeout=360)
    got = _cli(real_cluster, "get", "-n", NAMESPACE, name)
    assert waited.returncode == 0, f"{waited.stdout}{waited.stderr}\n{got.stdout}"
    rows = _attempt_rows(got.stdout)
    assert len(rows) == 4 and [("interrupted" in r, "succeeded" in r) for r in rows] == [
        (True, False), (False, True)] * 2, got.stdout
    logs = _cli(real_cluster, "logs", "-n", NAMESPACE, name, "--step", "train")
    # Retried on the interruption budget (WF_ATTEMPT 1), each from a save its program made, no SIGTERM's.
    resumed = [int(n) for n in re.findall(r"attempt 1: resumed at step (\d+) \(periodic save\)", logs.stdout)]
    assert len(resumed) == 2 and all(0 < n < 1200 for n in resumed), f"{logs.stdout}\n{got.stdout}"
    assert logs.stdout.count("done: 1200 steps") == 2, logs.stdout
    print(f"\n{got.stdout}")


def test_a_real_memory_limit_exceeded_is_the_programs_failure_not_an_interruption(
        real_cluster: ClusterHandle, tmp_path: Path) -> None:
    """A program past its memory limit is killed by the kernel (runc's cgroup), not taken away with its node: Argo
    says OOMKilled, the retry expression leaves it to the application retries (none here), `wf get` calls it the
    program's failure."""
    steps = [{"name": "hog", "resources": {"cpu": "250m", "memory": "32Mi"},
              "command": ["python3", "-c", "blocks = [bytearray(8 << 20) for _ in range(64)]"]}]
    job = job_file(tmp_path, "oom", steps, image=images.PYTHON)
    submitted = _cli(real_cluster, "submit", str(job), "-o", "name")
    assert submitted.returncode == 0, submitted.stderr
    name = submitted.stdout.strip().removeprefix("workflow/")
    waited = _cli(real_cluster, "wait", name, "--timeout", "3m", timeout=240)
    got = _cli(real_cluster, "get", name)
    assert waited.returncode != 0, got.stdout  # it failed
    (line,) = [line for line in got.stdout.splitlines() if line.startswith(f"{name} hog:")]
    assert line.endswith("Failed [cpu/spot] on cpu-spot-us-east-1a-real-0 - main: OOMKilled (exit code 137)"), line
    assert "attempts of" not in got.stdout, got.stdout  # one attempt: not retried as an interruption
    print(f"\n{got.stdout}")


def test_the_programs_own_sigterm_or_sigkill_is_its_failure_and_the_kubelets_is_an_interruption(
        real_cluster: ClusterHandle, kube: Kube, tmp_path: Path) -> None:
    """Exit 143 and 137 alike, told apart by the main container's stop hook, which the kubelet runs only when it
    stops the container: a program that exits 143 or is killed by its own SIGKILL fails (no application retries
    here) with no interruption; an evicted one, holding its pod past the kubelet's report with a finalizer so that
    Argo reads the pod's last status (not `pod deleted`), ends `main: Error (exit code 143)` with the hook's mark
    and is retried as an interruption."""
    from test_placement import STOP_MARK

    namespace = "wf"  # job_file's
    sleeper = ["python3", "-c", "import signal, sys, time\n"
               "signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))\ntime.sleep(45)"]
    own = [{"name": "exit-143", "resources": {"cpu": "250m", "memory": "64Mi"},
            "command": ["python3", "-c", "import time; time.sleep(2); raise SystemExit(143)"]},
           {"name": "sigkill", "resources": {"cpu": "250m", "memory": "64Mi"},
            "command": ["python3", "-c",
                        "import os, signal, time\ntime.sleep(2)\nos.kill(os.getpid(), signal.SIGKILL)"]}]
    names = {}
    for key, steps in (("own", own), ("evicted", [{"name": "sleep", "resources": {"cpu": "250m", "memory": "64Mi"},
                                                   "command": sleeper}])):
        submitted = _cli(real_cluster, "submit", str(job_file(tmp_path, f"stop-{key}", steps, image=images.PYTHON)),
                         "-o", "name")
        assert submitted.returncode == 0, submitted.stderr
        names[key] = submitted.stdout.strip().removeprefix("workflow/")

    def running_sleeper() -> Any:
        selector = f"workflows.argoproj.io/workflow={names['evicted']}"
        pods = [p for p in kube.core.list_namespaced_pod(namespace, label_selector=selector).items
                if p.status.phase == "Running"]
        return pods[0] if pods and _past_argos_recent_start(kube, namespace, names["evicted"], pods[0]) else None

    held = until("the sleeper running", running_sleeper, timeout=120).metadata.name
    finalizer = "wf.dev/e2e-hold"
    kube.core.patch_namespaced_pod(held, namespace, {"metadata": {"finalizers": [finalizer]}})
    try:
        kube.core.create_namespaced_pod_eviction(held, namespace, V1Eviction(
            metadata=V1ObjectMeta(name=held, namespace=namespace)))
        until("the evicted pod Failed", lambda: phase(kube, held, namespace) == "Failed", timeout=90)
        (main,) = [c for c in kube.core.read_namespaced_pod(held, namespace).status.container_statuses
                   if c.name == "main"]
        assert (main.state.terminated.exit_code, main.state.terminated.message) == (143, STOP_MARK), main
        node_id = kube.core.read_namespaced_pod(held, namespace).metadata.annotations[ARGO_NODE_ID_ANNOTATION]

        def argo_read_it() -> bool:
            workflow = kube.custom.get_namespaced_custom_object("argoproj.io", "v1alpha1", namespace, "workflows",
                                                                names["evicted"])
            return workflow["status"]["nodes"][node_id]["phase"] not in ("Pending", "Running")

        until("Argo read the evicted pod's last status", argo_read_it, timeout=60)
    finally:
        kube.core.patch_namespaced_pod(held, namespace, {"metadata": {"finalizers": None}})
    waited = {key: _cli(real_cluster, "wait", "-n", namespace, name, "--timeout", "4m", timeout=300)
              for key, name in names.items()}
    got = {key: _cli(real_cluster, "get", "-n", namespace, name).stdout for key, name in names.items()}
    print(f"\n{got['own']}\n{got['evicted']}")
    assert waited["own"].returncode != 0 and waited["evicted"].returncode == 0, got
    for step_name, code in (("exit-143", 143), ("sigkill", 137)):
        (line,) = [line for line in got["own"].splitlines() if line.startswith(f"{names['own']} {step_name}:")]
        assert line.endswith(f"Failed [cpu/spot] on cpu-spot-us-east-1a-real-0 - main: Error (exit code {code})"), line
    assert "attempts of" not in got["own"], got["own"]  # one attempt each: not retried as interruptions
    rows = _attempt_rows(got["evicted"])
    assert len(rows) == 2 and "interrupted" in rows[0] and "succeeded" in rows[1], got["evicted"]
    workflow = kube.custom.get_namespaced_custom_object("argoproj.io", "v1alpha1", namespace, "workflows",
                                                        names["evicted"])
    first = min((n for n in workflow["status"]["nodes"].values() if n["type"] == "Pod"), key=lambda n: n["startedAt"])
    assert first["message"] == f"main: Error (exit code 143): {STOP_MARK}", first


def test_an_image_that_does_not_exist_is_a_clear_error_in_get_and_the_watch_not_an_interruption(
        real_cluster: ClusterHandle, kube: Kube, tmp_path: Path) -> None:
    """A step whose image the real node does not hold: the kubelet pulls it, the pull fails, and Argo keeps the step
    Pending with the kubelet's reason (ErrImagePull, then ImagePullBackOff), forever. `wf get` and the watch name
    the image and say it will not start; nothing counts it as an interruption. The test cluster's real node reaches
    no registry (`up --no-registry`): containerd sends the pull to 127.0.0.1, refused there, and nothing leaves the
    machine; the error says where it went."""
    from wf.compile.placement import on_real_nodes

    missing = "registry.invalid/wf/no-such-image:1"
    job = job_file(tmp_path, "no-image", [{"name": "main", "resources": {"cpu": "250m", "memory": "64Mi"},
                                           "command": ["python3", "-c", "print('never')"]}], image=missing)
    compiled = _cli(real_cluster, "compile", str(job), "-o", "json")
    assert compiled.returncode == 0, compiled.stderr
    manifest = json.loads(compiled.stdout)
    assert on_real_nodes(manifest, frozenset({missing})), manifest  # placed as if the node held the image
    created = kube.custom.create_namespaced_custom_object("argoproj.io", "v1alpha1", "wf", "workflows", manifest)
    name = created["metadata"]["name"]
    try:
        refusal = re.compile(rf"image '{re.escape(missing)}' cannot be pulled \((ErrImagePull|ImagePullBackOff)\)")

        def refused() -> str | None:
            got = _cli(real_cluster, "get", name, "-n", "wf")
            return got.stdout if refusal.search(got.stdout) else None

        got = until("wf get naming the image", refused, timeout=120)
        (pod,) = kube.core.list_namespaced_pod("wf", label_selector=f"workflows.argoproj.io/workflow={name}").items
        # The kubelet's events of the pull say where it went: to loopback, nowhere else.
        said = [e.message for e in kube.core.list_namespaced_event(
            "wf", field_selector=f"involvedObject.name={pod.metadata.name}").items if e.reason == "Failed"]
        assert any(realnode.NO_REGISTRY.removeprefix("http://") in (m or "") for m in said), said
        (line,) = [line for line in got.splitlines() if line.startswith(f"{name} main:")]
        assert "Pending" in line and "on cpu-spot-us-east-1a-real-0" in line, got
        # One attempt, never ended: nothing to retry, no interruption counted (the summary would name one).
        assert "attempts of" not in got and "interruption" not in got.replace("interrupted attempts count", ""), got
        try:
            watched = subprocess.run(
                [sys.executable, "-m", "wf", "watch", name, "-n", "wf", "--plain"], capture_output=True,
                env={**os.environ, "KUBECONFIG": str(real_cluster.kubeconfig)}, timeout=20, cwd=ROOT)
            output = watched.stdout.decode()
            raise AssertionError(f"the watch ended (exit {watched.returncode}) on a step that cannot start: {output}")
        except subprocess.TimeoutExpired as waited:
            output = (waited.stdout or b"").decode()
        assert refusal.search(output), output
        print(f"\n{got}\n{output}")
    finally:
        kube.custom.delete_namespaced_custom_object("argoproj.io", "v1alpha1", "wf", "workflows", name)


# The twin's contract, one small workflow of each thing a step does: an output parameter and an artifact passed on,
# a fan-out over an output, a step evicted mid-run and retried, a failed step retried once and failing again. Each
# step's program really does, on the real node, what its sim.wf.dev annotations tell the simulation to play.
_TWIN_STEPS: list[dict[str, Any]] = [
    {"name": "produce", "command": ["python3", "-c", (
        "import json, pathlib; print('producing'); pathlib.Path('/tmp/n').write_text('3'); "
        "pathlib.Path('/tmp/items.json').write_text(json.dumps(['a', 'b'])); "
        "pathlib.Path('/tmp/data.txt').write_text('payload')")],
     "outputs": {"parameters": {"n": "/tmp/n", "items": "/tmp/items.json"}, "artifacts": {"data": "/tmp/data.txt"}},
     "annotations": {"sim.wf.dev/duration": "1s", "sim.wf.dev/outputs": '{"n": "3", "items": ["a", "b"]}'}},
    {"name": "fan", "needs": ["produce"], "forEach": "{{steps.produce.outputs.items}}",
     "command": ["python3", "-c", "print('item {{item}} of {{steps.produce.outputs.n}}')"],
     "annotations": {"sim.wf.dev/duration": "1s"}},
    {"name": "consume", "needs": ["produce"],
     "command": ["python3", "-c", "import sys; print(open(sys.argv[1]).read())", "{{steps.produce.outputs.data}}"],
     "annotations": {"sim.wf.dev/duration": "1s"}},
    {"name": "long", "command": ["python3", "-c", "import time; time.sleep(30); print('long done')"],
     "annotations": {"sim.wf.dev/duration": "30s"}},
    {"name": "fail", "needs": ["fan", "consume", "long"], "retries": 1,
     "command": ["python3", "-c", "import sys; print('failing'); sys.exit(3)"],
     "annotations": {"sim.wf.dev/duration": "1s", "sim.wf.dev/exit-code": "3"}},
]


def _twin_summary(handle: ClusterHandle, kube: Kube, name: str) -> dict[str, Any]:
    """What a user reads of a run, with what differs by nature between two runs (names, nodes, times) left out:
    each step's phase and attempts (phase, message, interruption), each pod's outputs, and `wf get`'s step lines."""
    from wf.controller.steps import workflow_view

    workflow = kube.custom.get_namespaced_custom_object("argoproj.io", "v1alpha1", "wf", "workflows", name)
    view = workflow_view(workflow)
    steps = {row.name: {"phase": row.phase,
                        "attempts": [(a.phase, a.message, a.interrupted) for a in row.attempts]} for row in view.steps}
    outputs = {}
    for node in workflow["status"]["nodes"].values():
        if node.get("type") == "Pod" and node.get("outputs"):
            given = node["outputs"]
            outputs[node["displayName"]] = {
                "parameters": {p["name"]: p.get("value") for p in given.get("parameters") or []},
                "artifacts": sorted(a["name"] for a in given.get("artifacts") or []),
            }
    got = _cli(handle, "get", "-n", "wf", name).stdout
    lines = sorted(re.sub(r" on \S+", " on NODE", line.replace(name, "W")) for line in got.splitlines()
                   if line.startswith(f"{name} "))
    return {"phase": view.phase, "steps": steps, "outputs": outputs, "get": lines}


def test_the_twin_plays_what_the_real_node_does(real_cluster: ClusterHandle, kube: Kube, tmp_path: Path) -> None:
    """The same workflow twice at once: on the real node (its image is there only) and on the simulated nodes (an
    image no real node holds), one step of each evicted once Argo has it Running, as a drain evicts. Everything a
    user reads of the two runs (phases, attempts and their messages, outputs, `wf get`'s step lines) is the same, but
    for the evicted attempt's message on the real node (a race, below)."""
    names: dict[str, str] = {}
    for where, image in (("real", images.PYTHON), ("twin", "python:3.11")):
        job = job_file(tmp_path, f"twin-{where}", _TWIN_STEPS, image=image)
        submitted = _cli(real_cluster, "submit", str(job), "-o", "name")
        assert submitted.returncode == 0, submitted.stderr
        names[where] = submitted.stdout.strip().removeprefix("workflow/")
    real_nodes = {n.metadata.name for n in kube.core.list_node(label_selector=REAL_NODE_LABEL).items}

    def running_long(name: str) -> Any:
        """The long step's pod, once an eviction would be an attempt Argo retries (_past_argos_recent_start)."""
        selector = f"workflows.argoproj.io/workflow={name},wf.dev/step=long"
        pods = [p for p in kube.core.list_namespaced_pod("wf", label_selector=selector).items
                if p.status.phase == "Running"]
        return pods[0] if len(pods) == 1 and _past_argos_recent_start(kube, "wf", name, pods[0]) else None

    evicted: dict[str, str] = {}

    def evict_when_running() -> bool:
        for where, name in names.items():
            if where not in evicted and (pod_ := running_long(name)) is not None:
                assert (pod_.spec.node_name in real_nodes) == (where == "real"), (where, pod_.spec.node_name)
                kube.core.create_namespaced_pod_eviction(pod_.metadata.name, "wf", V1Eviction(
                    metadata=V1ObjectMeta(name=pod_.metadata.name, namespace="wf")))
                evicted[where] = pod_.metadata.name
        return len(evicted) == len(names)

    until("both long steps running, then evicted", evict_when_running, timeout=120)
    for where, name in names.items():
        waited = _cli(real_cluster, "wait", "-n", "wf", name, "--timeout", "5m", timeout=360)
        assert waited.returncode != 0, (where, waited.stdout)  # `fail` failed it
    real, twin = (_twin_summary(real_cluster, kube, names[w]) for w in ("real", "twin"))
    print(f"\nreal: {json.dumps(real, indent=1)}\ntwin: {json.dumps(twin, indent=1)}")
    # The evicted step on the real node: the program exits 143 on the SIGTERM, and Argo ends the attempt "pod
    # deleted" if the pod was gone before it read the pod's last status, else with the exit code and the stop hook's
    # mark (a race). Both are interruptions, retried as such.
    from test_placement import STOP_MARK

    ((first_phase, first_message, first_interrupted), second) = real["steps"]["long"]["attempts"]
    assert first_phase in ("Failed", "Error") and first_interrupted, real["steps"]["long"]
    assert first_message in ("pod deleted", f"main: Error (exit code 143): {STOP_MARK}"), first_message
    assert tuple(second) == ("Succeeded", "", False), real["steps"]["long"]
    assert twin["steps"]["long"]["attempts"][0] == ("Error", "pod deleted", True), twin["steps"]["long"]
    assert any(line.startswith("W long: Succeeded") and "interrupted 1x" in line for line in real["get"]), real
    real["steps"]["long"]["attempts"][0] = ("Error", "pod deleted", True)  # the twin's ending, the race's first
    # Whether the evicted attempt's log was reported (its outputs) is the same race: Argo has it when it read the
    # pod's last status, as the twin's executor sometimes does too.
    for summary in (real, twin):
        summary["outputs"].pop("long(0)", None)
    assert real == twin


def _epoch(stamp: str | None) -> float:
    from wf.core.units import parse_time

    parsed = parse_time(stamp)
    return parsed.timestamp() if parsed else time.time()
