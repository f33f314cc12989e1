"""The `local_cluster` fixture: one throwaway local cluster per test session.

It builds what is missing (cached under ~/.cache/wf), starts the cluster in a temporary work directory on
free loopback ports, and tears it down at the end, checking that no process it started is left. The user's
own kubeconfig is never touched: the context is merged into a kubeconfig inside the temp directory.

If the cluster cannot start, every test using it errors loudly; it is never skipped.

Usage:
    @pytest.mark.cluster
    def test_x(local_cluster, kube):
        kube                                  # wf's client (wf.controller.client.Kube), one for the session
        local_cluster.kubeconfig              # Path of a kubeconfig whose current context is the cluster
        local_cluster.context                 # e.g. "wf-e2e1234"
        local_cluster.namespace               # "wf": where workflows run (the context's namespace)
        local_cluster.state.namespaces        # every namespace set up for workflows (wf + the examples')

A test that starts a cluster of its own gets its client from `connected(handle)`, closed when the block ends.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from wf.cluster.runtime import ClusterState, LocalCluster
from wf.controller.client import Kube, Target, connect
from wf.render.platform import WORKFLOW_NAMESPACE

_PR_SET_CHILD_SUBREAPER = 36
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
_E2E = Path(__file__).resolve().parent
# The background build of the components the session's cluster tests need (pytest_collection_finish).
_background_build: subprocess.Popen[bytes] | None = None
_SESSION_STARTED = time.time()  # this module is imported as the session collects


@dataclass(frozen=True)
class ClusterHandle:
    name: str
    context: str
    kubeconfig: Path
    namespace: str
    cluster: LocalCluster
    state: ClusterState
    up_seconds: float


@contextmanager
def connected(handle: ClusterHandle) -> Iterator[Kube]:
    """wf's own client for the cluster, built as `wf --kubeconfig K --context C` builds it; closed afterwards."""
    kube = connect(Target(kubeconfig=str(handle.kubeconfig), context=handle.context))
    try:
        yield kube
    finally:
        kube.api_client.close()


def become_subreaper() -> None:
    """Make this process adopt orphaned descendants. kwokctl starts the components and exits; where PID 1
    does not reap (containers), a killed component would otherwise stay a zombie forever."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def example_namespaces() -> list[str]:
    """Every namespace the example job specs name, so examples run unmodified on the test cluster."""
    found: set[str] = set()
    for path in sorted(EXAMPLES.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            namespace = ((doc or {}).get("metadata") or {}).get("namespace") if isinstance(doc, dict) else None
            if namespace:
                found.add(namespace)
    return sorted(found)


def start_cluster(
    root: Path, name: str, nodes_per_group: int = 1, namespaces: Sequence[str] = (), autoscaler: str | None = None,
    queues: bool | None = None, real_nodes: int = 0,
) -> ClusterHandle:
    """A cluster for tests: real nodes, when it has any, reach no registry (no test sends traffic off the machine)."""
    cluster = LocalCluster(name, root=root / "clusters")
    kubeconfig = root / "kubeconfig"
    started = time.monotonic()
    try:
        state = cluster.up(
            nodes_per_group=nodes_per_group, namespaces=namespaces, merge_into=kubeconfig, autoscaler=autoscaler,
            queues=queues, real_nodes=real_nodes, registry=False,
        )
    except BaseException:
        cluster.down()  # a half-started cluster must not leak processes either
        raise
    return ClusterHandle(
        name=name,
        context=state.context,
        kubeconfig=kubeconfig,
        namespace=WORKFLOW_NAMESPACE,
        cluster=cluster,
        state=state,
        up_seconds=time.monotonic() - started,
    )


def stop_cluster(handle: ClusterHandle) -> None:
    """`down`, then prove it: no process it started runs and none of its ports is still listened on."""
    components = handle.cluster.status()
    handle.cluster.down()
    left = [f"{c.name} (pid {c.pid})" for c in components if c.pid and _alive(c.pid)]
    assert not left, f"cluster {handle.name}: processes left after down: {left}"
    listening = [f"{c.name} (port {c.port})" for c in components if c.port and _listened_on(c.port)]
    assert not listening, f"cluster {handle.name}: ports still listened on after down: {listening}"


def _listened_on(port: int) -> bool:
    # SO_REUSEADDR: connections lingering in TIME_WAIT are not a listener.
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def _alive(pid: int) -> bool:
    from wf.cluster.processes import is_running

    return is_running(pid)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Whatever uses the cluster is a cluster test, marked or not, so `-m "not cluster"` leaves it out.
    for item in items:
        if "local_cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.cluster)
    # The unit tests first, then the cluster tests that need only the default components, then those that need
    # optional ones (`components` marker): on a cold machine the background build (below) makes each while the
    # tests before it run. A stable sort: each group keeps its files' order.
    items.sort(key=lambda item: 0 if not _is_e2e(item) else 2 if item.get_closest_marker("components") else 1)


def _is_e2e(item: pytest.Item) -> bool:
    return Path(str(item.path)).is_relative_to(_E2E)


def _tell(config: pytest.Config, line: str) -> None:
    """A line on the terminal while the tests' output is captured."""
    with config.pluginmanager.getplugin("capturemanager").global_and_fixture_disabled():
        print(line, file=sys.stderr, flush=True)


def _background_log() -> Path:
    from wf.cluster import build

    return build.cache_dir() / "src" / "background-build.log"


def pytest_collection_finish(session: pytest.Session) -> None:
    """Build what the collected cluster tests need in a background process at the lowest CPU priority, in the order
    they need it: a cold build takes most of half an hour on 2 cores, and the unit tests (then the tests on the
    default components) leave a core idle meanwhile. A test that needs a component the background build has not
    finished waits for its lock; one it has not started yet is built by the test as before, so a failed or slow
    background build changes nothing but time."""
    global _background_build
    from wf.cluster import build

    if session.config.option.collectonly or not any(_is_e2e(item) for item in session.items):
        return
    if os.environ.get("PYTEST_XDIST_WORKER", "gw0") != "gw0":
        return  # each pytest-xdist worker collects every test; the first one builds for all
    names = [c.name for c in build.components() if not c.optional]
    for item in session.items:
        marker = item.get_closest_marker("components")
        names += [name for name in (marker.args if marker else ()) if name not in names]
    known = {c.name: c for c in build.components()}
    if unknown := [name for name in names if name not in known]:
        raise pytest.UsageError(f"@pytest.mark.components names no component {', '.join(unknown)} (wf cluster "
                                f"build knows {', '.join(known)})")
    missing = [name for name in names if not known[name].is_built(build.cache_dir())]
    if not missing:
        return
    log = _background_log()
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        process = subprocess.Popen(
            ["nice", "-n", "19", sys.executable, "-m", "wf", "cluster", "build", *missing],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, process_group=0,
        )
    _background_build = process
    _tell(session.config, f"wf cluster build {' '.join(missing)}: in the background (log: {log})")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Stop the background build if the tests ended first (it leaves no process behind), and say if it failed. Under
    pytest-xdist the first worker waits for it instead, unless interrupted: the other worker's tests may need it."""
    global _background_build
    if _background_build is None:
        return
    process, _background_build = _background_build, None
    if "PYTEST_XDIST_WORKER" in os.environ and exitstatus != pytest.ExitCode.INTERRUPTED:
        process.wait()
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    elif process.returncode != 0:
        _tell(session.config, f"the background build failed (exit {process.returncode}); the tests built what "
                              f"they needed themselves. Its log ends:\n{_background_log().read_text()[-3000:]}")


def build_with_progress(config: pytest.Config) -> None:
    """Build what is missing, one line per step on the terminal: a cold build takes minutes, and CI logs should
    show it working rather than fall silent. A wait behind the background build says what that build is doing."""
    from wf.cluster import build

    def progress(component: build.Component, step: str, elapsed: float) -> None:
        if step == "cached":
            return
        if step.startswith("waiting") and (doing := _background_step()):
            step += f"; the background build: {doing}"
        _tell(config, f"\nwf cluster build: {component.name} {component.version}: {step} ({elapsed:.0f}s)")

    build.build_all(progress=progress)


def _background_step() -> str | None:
    """The background build's last line, if it is this session's."""
    log = _background_log()
    try:
        if log.stat().st_mtime < _SESSION_STARTED:
            return None
        lines = log.read_text().splitlines()
    except OSError:
        return None
    return lines[-1] if lines else None


@pytest.fixture(scope="session")
def local_cluster(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Iterator[ClusterHandle]:
    become_subreaper()
    build_with_progress(pytestconfig)
    root = tmp_path_factory.mktemp("wf-cluster")
    # Two nodes per group: the multi-node example's MPIJob holds two DL1 nodes at once.
    handle = start_cluster(root, f"e2e{os.getpid()}", nodes_per_group=2, namespaces=example_namespaces())
    try:
        yield handle
    finally:
        stop_cluster(handle)


@pytest.fixture(scope="session")
def kube(local_cluster: ClusterHandle) -> Iterator[Kube]:
    """The session cluster's client, shared by every test: its request counts run from the session's start."""
    with connected(local_cluster) as client:
        yield client


@pytest.fixture(scope="session")
def real_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterHandle]:
    """A cluster with one real node beside simulated ones (one per node group), shared by the real-node tests: a
    cluster of its own per file bought nothing but its start. `down` must leave no trace of the node: no mount, no
    network namespace, no cgroup, no run directory."""
    from wf.cluster import realnode

    become_subreaper()
    root = tmp_path_factory.mktemp("wf-real")
    handle = start_cluster(root, f"real{os.getpid()}", real_nodes=1)
    node = realnode.RealNode(handle.cluster.workdir, 0)
    try:
        yield handle
    finally:
        stop_cluster(handle)
        left = realnode._mounts_under([str(root), str(node.dir), str(node.run_dir)])
        assert not left, f"mounts left after down: {left}"
        assert not Path("/run/netns", node.netns).exists(), "the node's network namespace is left"
        assert not list(node._cgroup_dirs()), "cgroups left after down"
        assert not node.run_dir.exists()
