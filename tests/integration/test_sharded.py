"""One experiment over two processes (issue #64, item 1): ``torchrun --nproc_per_node=2 -m fedrun`` on gloo gives the
one-process run's results exactly (each rank on one thread: a bucket's step, and a chunk of the evaluation's
users, is then the same computation in either), and rank 0 alone prints and writes (the refusals before training:
tests/test_distributed.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).parent
FEDRUN = shutil.which("fedrun") or str(BIN / "fedrun")
TORCHRUN = shutil.which("torchrun") or str(BIN / "torchrun")
# 3,000 items in 1 MB: the evaluation ranks its users in chunks of 87, dealt over the ranks as well
RUN = ["method=fedavg", "backbone=ncf", "dataset=synthetic", "dataset.n_users=200", "dataset.n_items=3000",
       "eval.memory_mb=1",
       "sim.clients_per_round=64", "sim.epochs=2", "sim.progress=false", "sim.threads=1", "sim.fast_path=off",
       "track=none", "attack=a_hum", "attack.fraction=0.05", "defense=median"]


def run(command: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=cwd, env=env)


def table(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("| ")]


def test_two_ranks_give_the_one_process_results(tmp_path):
    one = run([FEDRUN, *RUN], tmp_path)
    assert one.returncode == 0, one.stderr[-2000:]
    two = run([TORCHRUN, "--nproc_per_node=2", "-m", "fedrun", *RUN], tmp_path)
    assert two.returncode == 0, two.stderr[-3000:]
    assert table(one.stdout) and table(two.stdout) == table(one.stdout)  # printed once (rank 0), same numbers
    runs = sorted(p.name for p in (tmp_path / "outputs" / "runs").glob("*/*"))
    assert len(runs) == 3 and sum(name.endswith("-rank1") for name in runs) == 1
    rank1 = next((tmp_path / "outputs" / "runs").glob("*/*-rank1"))
    assert not (rank1 / "last_run.md").exists()  # rank 0 alone writes

