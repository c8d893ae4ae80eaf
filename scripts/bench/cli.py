"""How long the command line takes to answer (issue #66): help, info, a misspelt option, a refused value, ``--cfg``,
the tracking store's start-up, and a one-epoch run with MLflow's client in a second process or in the run's own,
each in a fresh process, with whether that process imported torch / MLflow.

    python scripts/bench/cli.py --repeats 5

Wall and CPU seconds (user + system of the child) are medians over the repeats; run it on a quiet machine (the
targets are "under 1 s when quiet"). No timed assertion anywhere: the table goes to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
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
    "fedrun info method=fedcl, its partner list composed (cache empty)": ["info", "method=fedcl"],
    "fedrun info method=fedcl, its partner list cached": ["info", "method=fedcl"],
    "misspelt option (method=fedcll)": ["method=fedcll"],
    "refused value (privacy=ldp privacy.epsilon=-1)": ["privacy=ldp", "privacy.epsilon=-1"],
    "refused value (method=fedcl method.optimizer.lr=abc)": ["method=fedcl", "method.optimizer.lr=abc"],
    "fedrun --cfg job": ["--cfg", "job"],
}

QUICK_RUN = ["dataset=synthetic", "dataset.n_users=200", "dataset.n_items=300", "sim.clients_per_round=64",
             "sim.epochs=1", "sim.progress=false"]

TRACKING_START = """
import time
start = time.perf_counter()
from fedrun.track.mlflow import Mlflow, MlflowConfig
tracker = Mlflow(MlflowConfig(uri={uri!r}))
tracker.start("bench-cli", "bench", {{"a": 1}}, {{}})
tracker.finish("FINISHED")
print(time.perf_counter() - start)
"""


def timed(argv: list[str], env: dict[str, str], cwd: str) -> tuple[float, float, float, set[str]]:
    """(wall s to the first line of output, wall s to the end, child CPU s, which of torch / mlflow it imported) of
    one fresh ``python -X importtime`` process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as err, subprocess.Popen(  # stderr to a file: its import log never blocks
            [sys.executable, "-X", "importtime", *argv], stdout=subprocess.PIPE, stderr=err, text=True, env=env,
            cwd=cwd) as child:
        assert child.stdout is not None
        first_line = child.stdout.readline()
        first = time.perf_counter() - start
        child.communicate()
        err.seek(0)
        stderr = err.read()
    wall = time.perf_counter() - start
    if not first_line:  # nothing on stdout (a refusal prints on stderr): the first output is the end
        first = wall
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    imported = {m for m in ("torch", "mlflow") if re.search(rf"\|\s+{m}$", stderr, re.MULTILINE)}
    return first, wall, cpu, imported


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as scratch:  # each command runs there: what it writes (outputs/) goes too
        cache = Path(scratch) / "cache"  # fedrun's cache (parsed data, info's partner lists), emptied where a row says
        env = {**os.environ, "PYTHONPATH": str(ROOT), "FEDRUN_CACHE_DIR": str(cache)}
        cases = {name: ["-m", "fedrun", *argv] for name, argv in COMMANDS.items()}
        uri = f"sqlite:///{scratch}/mlflow.db"
        subprocess.run([sys.executable, "-c", TRACKING_START.format(uri=uri)], check=True, capture_output=True,
                       cwd=scratch, env=env)  # the store's first use creates its tables: not what a later run pays
        cases["tracking start-up (create a run in an existing SQLite store)"] = [
            "-c", TRACKING_START.format(uri=uri)]
        for process in ("true", "false"):  # MLflow's client in a second process (fedrun.track.recorder) or here
            cases[f"one-epoch run, track.process={process}"] = ["-m", "fedrun", *QUICK_RUN, f"track.uri={uri}",
                                                                f"track.process={process}"]
        cases["one-epoch run, track=none (what tracking adds to the two above)"] = ["-m", "fedrun", *QUICK_RUN,
                                                                                    "track=none"]
        for name, argv in cases.items():
            runs = []
            for _ in range(args.repeats):
                if "cache empty" in name:
                    shutil.rmtree(cache, ignore_errors=True)
                runs.append(timed(argv, env, scratch))
            imported = sorted(set().union(*(r[3] for r in runs)))
            rows.append([name, *(f"{statistics.median(r[i] for r in runs):.2f}" for i in range(3)),
                         ", ".join(imported) or "neither"])
    print(markdown(["command", "first output s", "wall s", "CPU s", "imports"], rows))
    print(f"\nmedians of {args.repeats} fresh processes each")


if __name__ == "__main__":
    main()
