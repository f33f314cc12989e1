"""Run history on a database: Argo's persistence as rendered for the local cluster and for EKS (checked against
Argo's own documented configuration), the platform's Argo Server, the archive reader behind `wf list --archived`
and `wf get` of a deleted run (against a fake Argo Server), and the local PostgreSQL's pieces that need no server."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any
from urllib.error import HTTPError, URLError
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml

from test_platform import CONTROLLER_KEYS, bundle
from upstream import ARGO
from wf.cli.app import main
from wf.cluster import build, postgres, processes
from wf.cluster.install import pinned_versions
from wf.compile.artifacts import REPOSITORY_REF
from wf.compile.workflow import compile_job
from wf.controller.archive import Archive
from wf.core.constants import ARGO_MAIN_CONTAINER, EKS_SKIP_CONTAINERS_ANNOTATION
from wf.core.errors import ClusterError, InputError
from wf.model.catalog import Catalog
from wf.render import platform


def run_main(*args: str) -> int:
    with pytest.raises(SystemExit) as exit_info:
        main(list(args))
    return int(exit_info.value.code or 0)


# --- Argo's persistence, as rendered ------------------------------------------------------------------------------


def _documented_persistence() -> dict[str, Any]:
    """The `persistence` example of Argo's documented controller ConfigMap (of the release the cluster runs)."""
    documented = yaml.safe_load(ARGO.file(CONTROLLER_KEYS).read_text())["data"]["persistence"]
    return dict(yaml.safe_load(documented))


def test_persistence_uses_argos_own_field_names_with_the_secret_by_reference() -> None:
    documented = _documented_persistence()
    rendered = platform.persistence(platform.ArgoDatabase(host="argo.rds.example.com"))
    assert set(rendered) <= set(documented)
    assert set(rendered["postgresql"]) <= set(documented["postgresql"])
    assert rendered["archive"] is True and rendered["nodeStatusOffLoad"] is True and rendered["archiveTTL"] == "30d"
    assert rendered["postgresql"] == {
        "host": "argo.rds.example.com", "port": 5432, "database": "argo", "tableName": "argo_workflows",
        "userNameSecret": {"name": platform.ARGO_DATABASE_SECRET, "key": "username"},
        "passwordSecret": {"name": platform.ARGO_DATABASE_SECRET, "key": "password"},
        "ssl": True, "sslMode": "require"}


def test_the_local_cluster_s_argo_keeps_its_history_in_the_local_database_without_tls(catalog: Catalog) -> None:
    database = platform.ArgoDatabase(host="127.0.0.1", port=15432, ssl=False)
    objects = platform.local_objects(catalog, platform.workflow_namespaces(catalog), database)
    (configmap,) = (o for o in objects if o["metadata"]["name"] == platform.ARGO_CONFIGMAP)
    persistence = yaml.safe_load(configmap["data"]["persistence"])
    assert persistence["postgresql"]["host"] == "127.0.0.1" and persistence["postgresql"]["port"] == 15432
    assert persistence["postgresql"]["ssl"] is False and "sslMode" not in persistence["postgresql"]
    # Without a database (what `wf platform check` compares), there is none.
    assert "persistence" not in platform.argo_configmap(catalog, local=True)["data"]


def test_the_bundle_points_argo_at_rds_and_archives_logs_to_the_catalogs_bucket(catalog: Catalog) -> None:
    database = platform.parse_database("argo.abc.us-east-1.rds.amazonaws.com:5433", "--argo-database")
    files = platform.bundle(catalog, pinned_versions(), "123456789012", database)
    persistence = yaml.safe_load(files["argo-configmap.yaml"][0]["data"]["persistence"])
    assert persistence["postgresql"]["host"] == "argo.abc.us-east-1.rds.amazonaws.com"
    assert persistence["postgresql"]["port"] == 5433 and persistence["postgresql"]["ssl"] is True
    assert catalog.artifacts is not None
    repositories = [yaml.safe_load(o["data"]["s3"]) for o in files["configmaps.yaml"] if "s3" in o.get("data", {})]
    assert repositories and all(r["archiveLogs"] is True and r["s3"]["bucket"] == catalog.artifacts.s3.bucket
                                for r in repositories)
    # Without --argo-database, no persistence (Argo's default: no archive).
    assert "persistence" not in bundle(catalog)["argo-configmap.yaml"][0]["data"]


def test_every_job_archives_its_logs_and_only_argos_containers_get_the_bucket_s_role(
        catalog: Catalog, make_job: Any) -> None:
    # No artifact anywhere: in a namespace whose artifact account the catalog names, the workflow still uses the
    # repository (its `archiveLogs` keeps each pod's log) and runs as that account.
    job = make_job([{"name": "prep", "command": ["x"]},
                    {"name": "train", "command": ["y"], "needs": ["prep"], "checkpoint": {}}])
    spec = compile_job(job, catalog, namespace="ml-training")["spec"]
    assert spec["artifactRepositoryRef"] == REPOSITORY_REF and spec["serviceAccountName"] == "wf-workflow"
    pods = {t["name"]: t for t in spec["templates"] if "container" in t}
    # EKS's webhook gives the role to Argo's init and wait containers only, unless the program writes the bucket.
    assert pods["prep"]["metadata"]["annotations"][EKS_SKIP_CONTAINERS_ANNOTATION] == ARGO_MAIN_CONTAINER
    assert EKS_SKIP_CONTAINERS_ANNOTATION not in pods["train"]["metadata"].get("annotations", {})
    # A namespace the store names no account for: nothing to archive with, so no repository.
    assert "artifactRepositoryRef" not in compile_job(job, catalog, namespace="elsewhere")["spec"]
    # A job that names its steps' account gives that account's identity to its program: no skip.
    allowing = catalog.model_copy(update={"step_service_accounts": {"ml-training": ["trainer"]}})
    own = make_job([{"name": "prep", "command": ["x"]}], serviceAccount="trainer")
    named = compile_job(own, allowing, namespace="ml-training")["spec"]
    assert named["serviceAccountName"] == "trainer"
    assert all(EKS_SKIP_CONTAINERS_ANNOTATION not in t["metadata"].get("annotations", {})
               for t in named["templates"] if "container" in t)


def test_the_platforms_argo_server_is_pinned_in_client_auth_and_reads_only(catalog: Catalog) -> None:
    files = bundle(catalog)
    (deployment,) = files["argo-server.yaml"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"quay.io/argoproj/argocli:v{pinned_versions().argo}"
    assert container["args"] == ["server", "--auth-mode=client"]
    (role,) = files["argo-server-role.yaml"]
    assert role["metadata"]["name"] == "argo-server-cluster-role"  # upstream's, narrowed by the patch
    verbs = {verb for rule in role["rules"] for verb in rule["verbs"]}
    assert verbs == {"get", "list", "watch"}
    namespaced = {o["kind"]: o for o in files["argo-server-rbac.yaml"]}
    (secrets,) = (r for r in namespaced["Role"]["rules"] if "secrets" in r["resources"])
    assert secrets == {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"],
                       "resourceNames": [platform.ARGO_DATABASE_SECRET]}
    kustomization = platform.kustomization(catalog, pinned_versions(), files)
    patches = [p["path"] for p in kustomization["patches"]]
    assert {"argo-server.yaml", "argo-server-role.yaml"} <= set(patches)
    assert "argo-server-rbac.yaml" in kustomization["resources"]


@pytest.mark.parametrize("value", ["", ":5432", "host:port", "host:70000", "user@host", "https://host/db"])
def test_a_database_address_that_is_not_one_is_refused_naming_the_option(value: str) -> None:
    with pytest.raises(InputError, match="--argo-database: .* is not a database address"):
        platform.parse_database(value, "--argo-database")


def test_render_refuses_a_bad_database_address_without_a_traceback(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert run_main("platform", "render", "-f", str(tmp_path / "out"), "--argo-database", "host:port") == 2
    err = capsys.readouterr().err
    assert "--argo-database" in err and "Traceback" not in err and not (tmp_path / "out").exists()


# --- the archive, through a fake Argo Server ----------------------------------------------------------------------


class FakeArgoServer:
    """Argo Server's archive API as grpc-gateway serves it: pages by offset, a run by uid, errors as JSON."""

    def __init__(self, runs: list[dict[str, Any]], page: int = 2) -> None:
        self.runs = runs
        self.page = page
        self.asked: list[tuple[str, dict[str, list[str]], dict[str, str]]] = []

    def __call__(self, url: str, headers: dict[str, str]) -> bytes:
        parts = urlsplit(url)
        query = parse_qs(parts.query)
        self.asked.append((parts.path, query, headers))
        if parts.path == "/api/v1/archived-workflows":
            offset = int(query.get("listOptions.continue", ["0"])[0])
            fields = query.get("listOptions.fieldSelector", [""])[0]
            chosen = [r for r in self.runs if f"metadata.name={r['metadata']['name']}" in fields
                      or "metadata.name=" not in fields]
            items = [{"metadata": r["metadata"], "status": {"phase": r["status"]["phase"]}}
                     for r in chosen[offset:offset + self.page]]
            more = offset + self.page < len(chosen)
            return json.dumps({"metadata": {"continue": str(offset + self.page)} if more else {},
                               "items": items or None}).encode()
        last = parts.path.rsplit("/", 1)[-1]
        live = parts.path.startswith("/api/v1/workflows/")  # by name, hydrated
        for run in self.runs:
            if run["metadata"]["name" if live else "uid"] == last:
                return json.dumps(run).encode()
        raise HTTPError(url, 404, "Not Found", {}, io.BytesIO(b'{"code": 5, "message": "not found"}'))  # type: ignore[arg-type]


def _run(name: str, uid: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "wf", "uid": uid},
            "status": {"phase": "Succeeded", "nodes": {name: {"id": name, "type": "DAG"}}}}


def test_archived_runs_are_read_a_page_at_a_time_with_argos_list_options() -> None:
    from datetime import UTC, datetime

    server = FakeArgoServer([_run(f"job-{i}", f"uid-{i}") for i in range(5)])
    archive = Archive("http://127.0.0.1:2746/", "--argo-server", token="Bearer abc", fetch=server)
    since = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
    names = [r["metadata"]["name"] for r in archive.runs("wf", since=since, selector="wf.dev/job=bert")]
    assert names == [f"job-{i}" for i in range(5)]
    assert [q["listOptions.continue"] for _, q, _ in server.asked] == [["0"], ["2"], ["4"]]
    path, query, headers = server.asked[0]
    assert path == "/api/v1/archived-workflows" and query["namespace"] == ["wf"]
    assert query["listOptions.fieldSelector"] == ["spec.startedAt>2026-12-01T10:00:00Z"]
    assert query["listOptions.labelSelector"] == ["wf.dev/job=bert"]
    assert headers["Authorization"] == "Bearer abc"


def test_an_archived_run_is_found_by_name_and_read_whole_by_its_uid() -> None:
    server = FakeArgoServer([_run("bert-a", "uid-a"), _run("bert-b", "uid-b")])
    archive = Archive("http://127.0.0.1:2746", "the local cluster's", fetch=server)
    run = archive.run("wf", "bert-b")
    assert run is not None and run["metadata"]["uid"] == "uid-b" and run["status"]["nodes"]
    assert server.asked[-1][0] == "/api/v1/archived-workflows/uid-b"
    assert archive.run("wf", "never-ran") is None


@pytest.mark.parametrize(("failure", "error", "said"), [
    (HTTPError("u", 403, "Forbidden", {}, io.BytesIO(b'{"message": "permission denied"}')),  # type: ignore[arg-type]
     ClusterError, "refused: HTTP 403 permission denied"),
    (HTTPError("u", 500, "Internal", {}, io.BytesIO(b'{"message": "archive not reachable"}')),  # type: ignore[arg-type]
     ClusterError, "answered HTTP 500: archive not reachable"),
    (HTTPError("u", 404, "Not Found", {}, io.BytesIO(b"<html>")), InputError, "is not Argo Server's API"),  # type: ignore[arg-type]
    (URLError("Connection refused"), ClusterError, "cannot reach Argo Server at http://127.0.0.1:1 "
                                                   r"\(WF_ARGO_SERVER\): Connection refused"),
])
def test_an_argo_server_that_fails_is_named_with_where_its_address_came_from(
        failure: Exception, error: type[Exception], said: str) -> None:
    def fetch(url: str, headers: dict[str, str]) -> bytes:
        raise failure

    with pytest.raises(error, match=said):
        list(Archive("http://127.0.0.1:1", "WF_ARGO_SERVER", fetch=fetch).runs("wf"))


def test_an_answer_that_is_not_argo_servers_is_bad_input() -> None:
    archive = Archive("http://127.0.0.1:9090", "--argo-server", fetch=lambda url, headers: b"<html>Prometheus")
    with pytest.raises(InputError, match="not Argo Server's API.*begins '<html>Prometheus'"):
        list(archive.runs("wf"))
    with pytest.raises(InputError, match="--argo-server: 'argo:2746' is not an Argo Server address"):
        Archive("argo:2746", "--argo-server")


def test_without_an_argo_server_archived_listing_says_what_to_configure(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from wf.cli import workflows
    from wf.controller import ops
    from wf.controller.client import Kube

    kube = Kube(api_client=None, namespace="wf", context="prod", server="https://eks")
    monkeypatch.setattr(workflows, "connect", lambda target: kube)
    monkeypatch.delenv("WF_ARGO_SERVER", raising=False)
    assert run_main("list", "--archived", "--since", "7d") == 2
    err = capsys.readouterr().err
    assert "--argo-server" in err and "WF_ARGO_SERVER" in err and "Traceback" not in err

    def gone(*args: Any) -> Any:
        raise ops.WorkflowNotFound("no workflow 'bert-a' in namespace wf (prod)")

    monkeypatch.setattr(ops, "get_workflow", gone)
    assert run_main("get", "bert-a") == 2
    err = capsys.readouterr().err
    assert "no workflow 'bert-a'" in err and "--argo-server" in err
    assert run_main("list", "--archived", "--since", "a week") == 2
    assert "--since" in capsys.readouterr().err


def test_an_archived_run_is_listed_and_shown_as_a_live_one(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from wf.cli import workflows
    from wf.controller import ops

    monkeypatch.setattr(workflows, "connect", lambda target: None)
    run = {"metadata": {"name": "bert-a", "namespace": "wf", "uid": "uid-a", "creationTimestamp":
                        "2026-12-01T10:00:00Z", "labels": {"wf.dev/job": "bert"}},
           "status": {"phase": "Succeeded", "progress": "1/1", "startedAt": "2026-12-01T10:00:01Z",
                      "finishedAt": "2026-12-01T10:05:01Z"}}
    monkeypatch.setattr(workflows, "archive_of", lambda kube, server: Archive(
        "http://127.0.0.1:2746", "--argo-server", fetch=FakeArgoServer([run])))
    assert run_main("list", "--archived", "--since", "30000d", "-n", "wf") == 0
    assert "bert-a" in capsys.readouterr().out

    def gone(*args: Any) -> Any:
        raise ops.WorkflowNotFound("no workflow 'bert-a' in namespace wf")

    monkeypatch.setattr(ops, "get_workflow", gone)
    assert run_main("get", "bert-a", "-n", "wf", "-o", "json") == 0
    assert json.loads(capsys.readouterr().out)["metadata"]["uid"] == "uid-a"


# --- the local PostgreSQL and Argo Server's build -----------------------------------------------------------------


def test_the_newest_installed_postgresql_server_is_used(tmp_path: Path) -> None:
    for version in ("13", "15", "9.6"):
        (tmp_path / version / "bin").mkdir(parents=True)
        for program in ("postgres", "initdb"):
            (tmp_path / version / "bin" / program).touch()
    (tmp_path / "16" / "bin").mkdir(parents=True)  # a client-only install: no server
    assert postgres.server_binaries(tmp_path) == tmp_path / "15" / "bin"


def test_without_a_postgresql_server_the_error_says_how_to_install_it(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match="apt-get install postgresql"):
        postgres.server_binaries(tmp_path)


def test_a_program_runs_as_an_account_only_when_asked() -> None:
    import pwd

    assert processes.as_user(None) == {}
    me = pwd.getpwuid(__import__("os").getuid())
    assert processes.as_user(me.pw_name) == {"user": me.pw_uid, "group": me.pw_gid, "extra_groups": []}


def test_argo_server_is_built_with_the_controller_on_loopback_without_the_ui() -> None:
    (argo,) = (c for c in build.components() if c.name == "argo")
    assert argo.binaries == ("workflow-controller", "argo")
    assert argo.placeholders == ("ui/dist/app/index.html",)
    (server,) = (p for p in argo.patches if p.file == "server/apiserver/argoserver.go")
    patched = server.apply('\taddress := fmt.Sprintf(":%d", port)\n')
    assert "wfServerAddr(port)" in patched and '"127.0.0.1:%d"' in patched and "WF_SERVER_ADDR" in patched


# --- archived logs: the simulated wait container, and `wf logs` of a pod that is gone ------------------------------


ARCHIVE_LOCATION = {"archiveLogs": True, "s3": {"bucket": "ml-artifacts", "region": "us-east-1",
                                                "key": "ml/wf-abc/wf-abc-train-123"}}


def pod(phase: str, template: dict[str, Any]) -> dict[str, Any]:
    """A workflow pod as the simulated executor sees it: Argo's template in its init container's environment."""
    return {"metadata": {"name": "wf-abc-train-123", "namespace": "ml", "uid": "u1",
                         "labels": {"workflows.argoproj.io/workflow": "wf-abc"},
                         "annotations": {"workflows.argoproj.io/node-id": "wf-abc-123"}},
            "spec": {"initContainers": [{"name": "init", "env": [{"name": "ARGO_TEMPLATE",
                                                                  "value": json.dumps(template)}]}],
                     "containers": [{"name": "main"}]},
            "status": {"phase": phase}}


def test_an_ended_pod_s_log_is_reported_as_argo_s_main_logs_artifact_failed_or_not() -> None:
    from wf.cluster.executor import archived_log_location, task_result

    template = {"name": "train", "archiveLocation": ARCHIVE_LOCATION}
    logs = archived_log_location(pod("Failed", template))
    assert logs == {"name": "main-logs", "s3": {**ARCHIVE_LOCATION["s3"], "key": "ml/wf-abc/wf-abc-train-123/main.log"}}
    result = task_result(pod("Failed", template), logs)
    assert result is not None and result["outputs"] == {"artifacts": [logs]}
    assert archived_log_location(pod("Running", template)) is None  # still writing it
    evicted = pod("Running", template)
    evicted["metadata"]["deletionTimestamp"] = "2026-12-02T10:00:00Z"
    assert archived_log_location(evicted) == logs  # the wait container uploads it on its way out
    assert archived_log_location(pod("Succeeded", {"name": "train"})) is None  # a repository without archiveLogs
    assert task_result(pod("Failed", {"name": "train"})) is None


class _FakeCore:
    """The pod is gone; the twin's store holds its archived log."""

    def __init__(self, twin: dict[str, dict[str, str]]) -> None:
        self.twin = twin

    def read_namespaced_pod_log(self, *args: Any, **kwargs: Any) -> str:
        from kubernetes.client.exceptions import ApiException

        raise ApiException(status=404, reason="Not Found")

    def read_namespaced_config_map(self, name: str, namespace: str) -> Any:
        from types import SimpleNamespace

        from kubernetes.client.exceptions import ApiException

        if name not in self.twin:
            raise ApiException(status=404, reason="Not Found")
        return SimpleNamespace(data=self.twin[name])


def test_the_log_of_a_pod_that_is_gone_is_read_from_the_twins_store() -> None:
    from types import SimpleNamespace

    from wf.controller.archived_logs import twin_name, twin_object
    from wf.controller.ops import _attempt_log

    key = "ml/wf-abc/wf-abc-train-123/main.log"
    stored = twin_object("ml", key, "epoch 1\nepoch 2\nepoch 3\n")
    assert stored["metadata"]["name"] == twin_name(key) and len(twin_name(key)) < 63
    core = _FakeCore({stored["metadata"]["name"]: stored["data"]})
    kube: Any = SimpleNamespace(core=core, context="wf-local", namespace="ml", where=lambda ns=None: "here")
    node = {"outputs": {"artifacts": [{"name": "main-logs", "s3": {"key": key}}]}}
    lines = list(_attempt_log(kube, "ml", "wf-abc-train-123", 2, node))
    assert lines == ["(pod wf-abc-train-123 is gone: its log as Argo archived it)", "epoch 2", "epoch 3"]
    assert list(_attempt_log(kube, "ml", "wf-abc-train-123", None, {})) == [
        "(no log from pod wf-abc-train-123: Not Found)"]


def test_a_live_workflow_whose_steps_argo_offloaded_is_shown_hydrated_by_argo_server(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from wf.cli import workflows
    from wf.controller import ops

    away = {"metadata": {"name": "wide-a", "namespace": "wf", "uid": "uid-w"},
            "status": {"phase": "Running", "offloadNodeStatusVersion": "fnv:123"}}
    hydrated = {**away, "status": {"phase": "Running", "nodes": {"wide-a": {"id": "wide-a", "type": "DAG"}}}}
    server = FakeArgoServer([hydrated])
    monkeypatch.setattr(workflows, "connect", lambda target: None)
    monkeypatch.setattr(ops, "get_workflow", lambda kube, name, namespace: away)
    monkeypatch.setattr(workflows, "archive_of", lambda kube, argo_server: Archive("http://127.0.0.1:2746", "x",
                                                                                 fetch=server))
    assert run_main("get", "wide-a", "-n", "wf", "-o", "json") == 0
    assert json.loads(capsys.readouterr().out)["status"]["nodes"]
    assert server.asked[-1][0] == "/api/v1/workflows/wf/wide-a"


def test_the_report_reads_offloaded_steps_and_the_runs_whose_live_object_is_gone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from datetime import UTC, datetime

    from wf.cli import report
    from wf.controller import listing

    kept, gone = _run("bert-a", "uid-a"), _run("bert-b", "uid-b")
    away = {"metadata": {"name": "wide-c", "namespace": "wf", "uid": "uid-c"},
            "status": {"phase": "Succeeded", "offloadNodeStatusVersion": "fnv:1"}}
    hydrated = {**away, "status": {"phase": "Succeeded", "nodes": {"wide-c": {"id": "wide-c", "type": "DAG"}}}}
    pages: dict[str, list[dict[str, Any]]] = {"wf": [kept, away], "team-b": []}
    monkeypatch.setattr(listing, "iter_workflows", lambda kube, namespace, page: iter(pages[namespace]))
    # The archive holds every finished run, the live ones too: those are read once, from the cluster.
    server = FakeArgoServer([kept, gone, hydrated])
    archive = Archive("http://127.0.0.1:2746", "--argo-server", fetch=server)
    since = datetime(2026, 12, 1, tzinfo=UTC)
    read = list(report._workflows(None, ["wf", "team-b"], archive, since))  # type: ignore[arg-type]
    assert [(w["metadata"]["name"], bool(w["status"].get("nodes"))) for w in read] == \
        [("bert-a", True), ("wide-c", True), ("bert-b", True)]
    wholes = [path for path, _, _ in server.asked if path.startswith("/api/v1/archived-workflows/")]
    assert wholes == ["/api/v1/archived-workflows/uid-b"]
    listed = [q for path, q, _ in server.asked if path == "/api/v1/archived-workflows"]
    assert {q["namespace"][0] for q in listed} == {"wf", "team-b"}
    assert listed[0]["listOptions.fieldSelector"] == ["spec.startedAt>2026-12-01T00:00:00Z"]
    # Without a run history, the live objects alone, as they are.
    assert [w["metadata"]["name"] for w in report._workflows(None, ["wf"], None, since)] == ["bert-a", "wide-c"]  # type: ignore[arg-type]


def test_an_archived_logs_bucket_comes_from_the_workflows_repository_when_argo_reports_only_its_key() -> None:
    from wf.controller.archived_logs import archived_log_artifact, workflow_repository

    node = {"outputs": {"artifacts": [{"name": "main-logs", "s3": {"key": "wf/w/w-train-1/main.log"}}]}}
    workflow = {"status": {"artifactRepositoryRef": {"configMap": "wf-artifact-repositories", "artifactRepository": {
        "archiveLogs": True, "s3": {"bucket": "b", "region": "us-east-1", "endpoint": "10.96.0.10:9000"}}}}}
    artifact = archived_log_artifact(node, workflow_repository(workflow))
    assert artifact == {"name": "main-logs", "s3": {"bucket": "b", "region": "us-east-1",
                                                    "key": "wf/w/w-train-1/main.log"}}
    located = {"outputs": {"artifacts": [{"name": "main-logs", "s3": {"bucket": "own", "key": "k/main.log"}}]}}
    assert archived_log_artifact(located, workflow_repository(workflow))["s3"]["bucket"] == "own"  # type: ignore[index]
    assert workflow_repository({"status": {}}) == {}
