"""Errors that the CLI turns into exit codes (see DESIGN.md: 1 work failed, 2 bad input, 3 cluster)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Problem:
    """One finding about an input: where it is and what is wrong, in the developer's terms."""

    file: str
    line: int | None
    field: str | None
    message: str
    severity: str = "error"  # "warning": reported, but the work is not failed

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        if self.severity != "error":
            where += f": {self.severity}"
        return f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"


class WfError(Exception):
    exit_code = 1


class InputError(WfError):
    """Bad input or usage: nothing was changed (exit 2)."""

    exit_code = 2

    def __init__(self, problems: list[Problem] | str, file: str | Path | None = None) -> None:
        if isinstance(problems, str):
            problems = [Problem(str(file or "<input>"), None, None, problems)]
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


class ClusterError(WfError):
    """The cluster is unreachable or forbids the request (exit 3)."""

    exit_code = 3


class WorkFailed(WfError):
    """The work itself failed: lint findings, a workflow that ended Failed or Error (exit 1)."""

    exit_code = 1
