"""Start-up benchmark: what a `wf` command costs beyond the bare interpreter, measured against it in the same run.

    python benchmarks/startup.py [--runs 15] [--src src] [--against OTHER/src]

Whole processes, taken in turns (one of each per round, so a busy neighbour slows all of them alike):
`python -c pass`, the libraries' own import (typer, pydantic, PyYAML), `python -m wf --help` and
`python -m wf compile examples/bert-large-pretrain.yaml`. The result is
each one's median wall time and its ratio to the interpreter's. --src chooses the wf source tree the commands
import; --against adds the same commands from another tree (e.g. an older version) to the same turns. Where the
time goes: `python -X importtime -m wf compile examples/data-prep.yaml 2>&1 >/dev/null | sort -t'|' -k2 -n | tail -30`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
INTERPRETER = "python -c pass"
# The floor under any typed CLI of pydantic models: importing the libraries wf is built on, nothing of wf's.
LIBRARIES = "python -c 'import typer, pydantic, yaml'"
WF_COMMANDS = {
    "wf --help": ["-m", "wf", "--help"],
    "wf compile examples/bert-large-pretrain.yaml": ["-m", "wf", "compile", "examples/bert-large-pretrain.yaml"],
}


def wall_time(args: list[str], src: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, *args], check=True, cwd=ROOT, stdout=subprocess.DEVNULL,
                   env={**os.environ, "PYTHONPATH": src})
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--src", default=str(ROOT / "src"), help="the wf source tree the commands run")
    parser.add_argument("--against", help="another wf source tree, measured in the same turns")
    args = parser.parse_args()
    commands = {INTERPRETER: (["-c", "pass"], args.src),
                LIBRARIES: (["-c", "import typer, pydantic, yaml"], args.src)}
    commands |= {label: (argv, args.src) for label, argv in WF_COMMANDS.items()}
    if args.against:
        commands |= {f"{label} (--against)": (argv, args.against) for label, argv in WF_COMMANDS.items()}
    for argv, src in commands.values():  # warm the file cache and the bytecode
        wall_time(argv, src)
    times: dict[str, list[float]] = {label: [] for label in commands}
    for _ in range(args.runs):
        for label, (argv, src) in commands.items():
            times[label].append(wall_time(argv, src))
    medians = {label: statistics.median(runs) for label, runs in times.items()}
    print(f"median of {args.runs} runs each, taken in turns")
    print(f"{'':58} {'wall':>8} {'/ python':>9}")
    for label, median in medians.items():
        print(f"{label:58} {median:7.3f}s {median / medians[INTERPRETER]:8.1f}x")


if __name__ == "__main__":
    main()
