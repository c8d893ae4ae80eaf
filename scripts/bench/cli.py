"""How long the command line takes to answer (issue #66): help, info, a misspelt option, a refused value, ``--cfg``,
and the tracking store's start-up, each in a fresh process, with whether that process imported torch / MLflow.

    python scripts/bench/cli.py --repeats 5

Wall and CPU seconds (user + system of the child) are medians over the repeats; run it on a quiet machine (the
targets are "under 1 s when quiet"). No timed assertion anywhere: the table goes to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from fedrun.report.table import markdown  # noqa: E402  (after the path: the script runs from a checkout)

COMMANDS = {
    "fedrun --help": ["--help"],
    "fedrun info": ["info"],
    "fedrun info method=fedcl": ["info", "method=fedcl"],
    "misspelt option (method=fedcll)": ["method=fedcll"],
    "refused value (privacy=ldp privacy.epsilon=-1)": ["privacy=ldp", "privacy.epsilon=-1"],
    "refused value (method=fedcl method.optimizer.lr=abc)": ["method=fedcl", "method.optimizer.lr=abc"],
    "fedrun --cfg job": ["--cfg", "job"],
}

TRACKING_START = """
import time
start = time.perf_counter()
from fedrun.track.mlflow import Mlflow, MlflowConfig
tracker = Mlflow(MlflowConfig(uri={uri!r}))
tracker.start("bench-cli", "bench", {{"a": 1}}, {{}})
tracker.finish("FINISHED")
print(time.perf_counter() - start)
"""


def timed(argv: list[str], env: dict[str, str], cwd: str) -> tuple[float, float, set[str]]:
    """(wall s, child CPU s, which of torch / mlflow it imported) of one fresh ``python -X importtime`` process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-X", "importtime", *argv], capture_output=True, text=True, env=env,
                          cwd=cwd)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    imported = {m for m in ("torch", "mlflow") if re.search(rf"\|\s+{m}$", done.stderr, re.MULTILINE)}
    return wall, cpu, imported


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    rows = []
    with tempfile.TemporaryDirectory() as scratch:  # each command runs there: what it writes (outputs/) goes too
        cases = {name: ["-m", "fedrun", *argv] for name, argv in COMMANDS.items()}
        uri = f"sqlite:///{scratch}/mlflow.db"
        subprocess.run([sys.executable, "-c", TRACKING_START.format(uri=uri)], check=True, capture_output=True,
                       cwd=scratch, env=env)  # the store's first use creates its tables: not what a later run pays
        cases["tracking start-up (create a run in an existing SQLite store)"] = [
            "-c", TRACKING_START.format(uri=uri)]
        for name, argv in cases.items():
            runs = [timed(argv, env, scratch) for _ in range(args.repeats)]
            imported = sorted(set().union(*(r[2] for r in runs)))
            rows.append([name, f"{statistics.median(r[0] for r in runs):.2f}",
                         f"{statistics.median(r[1] for r in runs):.2f}", ", ".join(imported) or "neither"])
    print(markdown(["command", "wall s (median)", "CPU s (median)", "imports"], rows))


if __name__ == "__main__":
    main()
