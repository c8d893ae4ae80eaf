"""scripts/investigations/loss_parts.py, run as a user runs it: FedCL's logged loss is exactly Eq. 1's data term
plus the L2 term its parts name, and reading the parts leaves the run as it is (its loss equals a plain run's)."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fedrun.app.plan import build_run
from tests.conftest import SMALL, compose_cfg

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "investigations" / "loss_parts.py"
L2, LOCAL = 0.02, 4
# one client per round: a round's mean over clients is its mean over the examples scored, as the parts are
FED = [*SMALL, "dataset.n_users=20", "method=fedcl", "backbone=ncf", "backbone.dim=8", "backbone.layers=[16,8]",
       f"backbone.l2={L2}", "method.semi_hard=0", "privacy=none", f"method.local_negatives={LOCAL}",
       "method.local_store=20", "sim.clients_per_round=1", "sim.device=cpu", "sim.threads=1"]  # one summation order


def test_the_parts_add_up_to_the_logged_loss_and_leave_the_run_unchanged(tmp_path):
    out = tmp_path / "parts.csv"
    done = subprocess.run([sys.executable, str(SCRIPT), "--epochs", "1", "--out", str(out), *FED],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    with out.open() as handle:
        (row,) = list(csv.DictReader(handle))
    parts = {k: float(v) for k, v in row.items()}  # csv writes each float's shortest exact repr
    l2_term = L2 * (parts["user_sq"] + parts["positive_sq"] + LOCAL * parts["negative_sq"])
    assert parts["loss"] == pytest.approx(parts["data"] + l2_term, rel=1e-5)
    assert l2_term > 0 and parts["data"] > 0
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the script's run (sim.threads=1), so the sums are the same floats
    try:
        plain = build_run(compose_cfg(FED))
        rounds = range(plain.trainer.rounds_per_epoch())
        loss = sum(plain.trainer.train_round(r).loss for r in rounds) / len(rounds)
    finally:
        torch.set_num_threads(threads)
    assert loss == pytest.approx(parts["loss"], abs=0)
