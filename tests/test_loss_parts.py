"""scripts/investigations/loss_parts.py: FedCL's logged loss is exactly Eq. 1's data term plus the L2 term its
parts name, and
reading the parts leaves the run as it is."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import fedrun.method.fedcl as fedcl
from fedrun.app.plan import build_run
from tests.conftest import SMALL, compose_cfg

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts" / "investigations"))

from loss_parts import loss_parts  # noqa: E402

L2, LOCAL = 0.02, 4
# one client per round: a round's mean over clients is its mean over the examples scored, as the parts are
FED = [*SMALL, "dataset.n_users=20", "method=fedcl", "backbone=ncf", "backbone.dim=8", "backbone.layers=[16,8]",
       f"backbone.l2={L2}", "method.semi_hard=0", "privacy=none", f"method.local_negatives={LOCAL}",
       "method.local_store=20", "sim.clients_per_round=1"]


def test_the_parts_add_up_to_the_logged_loss_and_leave_the_run_unchanged():
    (parts,) = loss_parts(FED, epochs=1)
    l2_term = L2 * (parts["user_sq"] + parts["positive_sq"] + LOCAL * parts["negative_sq"])
    assert parts["loss"] == pytest.approx(parts["data"] + l2_term, rel=1e-5)
    assert l2_term > 0 and parts["data"] > 0
    assert fedcl.mixup_loss.__name__ == "mixup_loss"  # restored
    plain = build_run(compose_cfg(FED))
    rounds = range(plain.trainer.rounds_per_epoch())
    assert sum(plain.trainer.train_round(r).loss for r in rounds) / len(rounds) == pytest.approx(parts["loss"], abs=0)
