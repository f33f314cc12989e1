"""Offline commands: compile, lint, schema. No cluster, no network."""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from wf.cli.options import CatalogOption, FileOption, LintOutput, ObjectOutput, Output, with_target
from wf.cli.output import emit, print_document, print_line, print_report
from wf.controller.client import Target, connect
from wf.core.errors import InputError, WorkFailed

app = typer.Typer()


class Kind(str, Enum):
    workflow = "Workflow"
    template = "WorkflowTemplate"
    cron = "CronWorkflow"


@app.command("compile")
def compile_command(
    job: Annotated[Path, typer.Argument(help="Job spec (kind: TrainingJob).")],
    output: ObjectOutput = Output.yaml.value,
    file: FileOption = None,
    kind: Annotated[
        Kind | None, typer.Option("--kind", help="Default: CronWorkflow with a schedule, else Workflow.")
    ] = None,
    catalog: CatalogOption = None,
) -> None:
    """Compile a job spec into an Argo manifest: refused, with nothing written, whenever `wf lint` would refuse it."""
    from wf.lint.documents import check_job, load_job_document
    from wf.model.catalog import load_catalog
    from wf.model.nodegroups import node_groups

    document = load_job_document(job)  # a spec too big to compile is refused before it is parsed
    loaded = load_catalog(catalog, near=job)
    manifest, problems = check_job(document, loaded, node_groups(loaded), kind.value if kind else None)
    if errors := [p for p in problems if p.severity == "error"]:
        raise InputError(errors)
    assert manifest is not None
    for warning in problems:
        print_line(str(warning), err=True)
    print_document(manifest, output or Output.yaml.value, file)


@app.command("lint")
@with_target()
def lint_command(
    paths: Annotated[
        list[Path], typer.Argument(help="Files or folders: job specs, Argo manifests, catalogs, eksctl configs.")
    ],
    output: LintOutput = "text",
    server: Annotated[
        bool, typer.Option("--server", help="Also dry-run every manifest against the API server.")
    ] = False,
    catalog: CatalogOption = None,
    *,
    target: Target,
) -> None:
    """Validate job specs and Argo manifests offline and prove every step can schedule (exit 1 on findings)."""
    from wf.lint.documents import lint_paths

    result = lint_paths(paths, catalog)
    if server:
        from wf.controller.server_lint import server_problems

        result.problems += server_problems(result.manifests, connect(target), namespace=target.namespace)
    if output == "json":
        payload = {
            "ok": not result.errors,
            "files": result.files,
            "documents": result.documents,
            "skipped": result.skipped,
            "problems": [p.to_json() for p in result.problems],
        }
        print_report(payload)
    else:
        for problem in result.problems:
            print_line(str(problem))
        summary = f"{result.files} files, {result.documents} documents: "
        warnings = len(result.problems) - len(result.errors)
        summary += f"{len(result.errors)} errors" if result.errors else "ok"
        summary += f", {warnings} warnings" if warnings else ""
        print_line(summary, err=True)
    if result.errors:
        raise typer.Exit(WorkFailed.exit_code)


class SchemaFor(str, Enum):
    job = "job"
    catalog = "catalog"


@app.command("schema")
def schema_command(
    of: Annotated[SchemaFor, typer.Option("--for", help="Which document's schema.")] = SchemaFor.job,
    file: FileOption = None,
) -> None:
    """Print the JSON Schema of job specs (for yaml-language-server and editors)."""
    from wf.jobspec.job import TrainingJob
    from wf.model.catalog import Catalog

    model = TrainingJob if of is SchemaFor.job else Catalog
    schema = model.model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    emit(json.dumps(schema, indent=2) + "\n", file)

