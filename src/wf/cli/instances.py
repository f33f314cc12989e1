"""`wf instances list|refresh`: the instance facts placement, node simulation and cost estimates read."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from wf.cli.options import Format, ReportOutput
from wf.cli.output import print_line, print_report, print_table

app = typer.Typer()
instances_app = typer.Typer(help="Instance facts (vCPU, memory, accelerators, price) that placement and cost read.",
                            no_args_is_help=True)
app.add_typer(instances_app, name="instances")


@instances_app.command("list")
def list_command(
    family: Annotated[str | None, typer.Argument(help="Only this family, e.g. dl1 or c7g.")] = None,
    output: ReportOutput = Format.text.value,
) -> None:
    """The table, with its source and date."""
    from rich.table import Table

    from wf.model.instances import AS_OF, SOURCE, known_instance_types

    chosen = {name: it for name, it in known_instance_types().items() if not family or it.family == family}
    if output == Format.json.value:
        print_report({"asOf": AS_OF, "source": SOURCE, "instanceTypes": [
            {"name": name, "vcpu": it.vcpu, "memoryMiB": it.memory_mib, "arch": it.arch,
             "accelerators": it.accelerators, "efa": it.efa, "maxPods": it.max_pods,
             "priceOnDemand": it.price_on_demand, "spotSavings": it.spot_savings} for name, it in chosen.items()]})
        return
    table = Table(box=None, pad_edge=False, title=f"as of {AS_OF}", title_justify="left")
    for column in ("type", "vCPU", "memory", "arch", "accelerators", "EFA", "pods", "$/h on-demand", "spot saving"):
        table.add_column(column, no_wrap=column == "type")
    for name, it in chosen.items():
        accelerators = ", ".join(f"{n} {r.rsplit('/', 1)[-1]}" for r, n in it.accelerators.items()) or "-"
        saving = f"{it.spot_savings:.0%}" if it.spot_savings is not None else "-"
        table.add_row(name, str(it.vcpu), f"{it.memory_mib // 1024}Gi", it.arch, accelerators, str(it.efa),
                      str(it.max_pods), f"{it.price_on_demand:.4f}", saving)
    print_table(table)
    print_line(f"source: {SOURCE}", style="dim")


@instances_app.command("refresh")
def refresh_command(
    types: Annotated[
        list[str] | None, typer.Argument(help="Instance types (default: every type in the table).")
    ] = None,
    pricing_region: Annotated[
        str, typer.Option("--pricing-region", help="AWS region whose instance specs and prices to read.")
    ] = "us-east-1",
    no_prices: Annotated[bool, typer.Option("--no-prices", help="Specs only (no Pricing API calls).")] = False,
    file: Annotated[
        Path | None, typer.Option("--file", help="Write the table here instead of the packaged one.")
    ] = None,
) -> None:
    """Re-read the table from the EC2 and Pricing APIs (needs AWS credentials) and print what changed."""
    from wf.aws.instances_refresh import refresh_instance_table, write_table

    result = refresh_instance_table(types, region=pricing_region, with_prices=not no_prices)
    for change in result.changes:
        print_line(change)
    path = write_table(result, file)
    print_line(f"{len(result.changes)} changes; wrote {path}", err=True)
