"""Offline commands: compile, lint, schema. No cluster, no network."""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer

from wf.cli.options import CatalogOption, FileOption, LintOutput, ObjectOutput, Output, with_target
from wf.cli.output import emit, print_document, print_line, print_report
from wf.controller.client import Target, connect
from wf.core.errors import WfError, WorkFailed

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
    """Compile a job spec into an Argo manifest."""
    from wf.compile.workflow import compile_job
    from wf.model.catalog import load_catalog
    from wf.spec.job import load_job

    manifest = compile_job(load_job(job), load_catalog(catalog), kind=kind.value if kind else None)
    check_compiled(manifest)
    print_document(manifest, output or Output.yaml.value, file)


def check_compiled(manifest: dict[str, Any]) -> None:
    """The compiler's output passes the same strict validation as hand-written manifests, or we say it's our bug."""
    from wf import argo

    if problems := argo.validate(manifest):
        detail = "; ".join(f"{p.field}: {p.message}" for p in problems[:5])
        raise WfError(f"internal error: the compiled manifest is invalid ({detail}); please report it")


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
    from wf.model.catalog import Catalog
    from wf.spec.job import TrainingJob

    model = TrainingJob if of is SchemaFor.job else Catalog
    schema = model.model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    emit(json.dumps(schema, indent=2) + "\n", file)

