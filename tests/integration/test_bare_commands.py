"""Every method's bare command trains on real data: `fedrun method=X dataset=Y` with nothing else (the paper's
setting of the other groups, conf/setting/) runs a few rounds on the smallest dataset of each family it applies
to, and the training loss stays finite and falls. A default learning rate chosen on one dataset used to diverge
on another: FedAvg-MF at lr 10 on Beauty, whose loss jumped from .69 to 1.0 when the second epoch revisited the
clients (round 88) and reached inf in round 1410."""

from __future__ import annotations

import math

import pytest

from fedrun.app.plan import build_run
from tests.conftest import compose_cfg, needs_data

pytestmark = [needs_data, pytest.mark.integration]

FAMILIES = {  # the smallest dataset of each family, and the methods whose papers use that kind of data
    "ml-100k": ["fedavg", "central", "fedcl", "bil", "cl4fedrec", "rcl4fedrec", "simgcl", "union", "fedrec",
                "fedrecpp"],  # MovieLens (implicit; ratings for the PMF methods)
    "beauty": ["fedavg", "fedcl"],  # Amazon sequences, 9 items per user
    "yelp-perfedrec": ["fedavg", "central", "fedgnn", "perfedrec", "perfedrecpp"],  # Yelp
    "filmtrust": ["lightfr", "fcf", "fedmf", "metamf", "privrec", "svdpp", "median_quantized", "fedrec",
                  "fedrecpp"],  # explicit ratings
}
# after any pre-training rounds: a little more than an epoch where that is cheap (a client's private rows move
# again in the second), at least 4 rounds, at most 24 (a BPR loss sits at ln 2 for the first rounds on Yelp); the
# methods whose rounds cost seconds and whose loss falls from the first round (the graph methods; the contrastive
# NCF family, 256 clients a round) 4; central, whose round is an epoch, 2. Beauty's FedAvg case runs into the
# second epoch, which starts at round 88, where FedAvg-MF at lr 10 first diverged
MIN_ROUNDS, MAX_ROUNDS = 4, 24
SHORTER = {"fedgnn": 4, "perfedrec": 4, "perfedrecpp": 4, "cl4fedrec": 4, "rcl4fedrec": 4, "simgcl": 4, "union": 4,
           "central": 2}
LONGER = {("beauty", "fedavg"): 97}
QUIET = ["track=none", "sim.progress=false"]


@pytest.mark.parametrize("dataset,method", [(d, m) for d, methods in FAMILIES.items() for m in methods])
def test_a_bare_command_trains(dataset, method):
    built = build_run(compose_cfg([f"method={method}", f"dataset={dataset}", *QUIET]))
    per_epoch = built.trainer.rounds_per_epoch()
    rounds = LONGER.get((dataset, method)) or min(max(MIN_ROUNDS, math.ceil(1.1 * per_epoch)), MAX_ROUNDS,
                                                  SHORTER.get(method, MAX_ROUNDS), per_epoch * built.plan.sim.epochs)
    # a method that pre-trains (PerFedRec++) is checked on its pre-training rounds, its own default; the
    # fine-tuning that follows is PerFedRec's, checked in PerFedRec's case
    losses = [built.trainer.train_round(r).loss for r in range(rounds)]
    assert all(math.isfinite(loss) for loss in losses), losses
    third = max(1, len(losses) // 3)
    first, last = sum(losses[:third]) / third, sum(losses[-third:]) / third
    assert last < first, f"{method} on {dataset}: loss {first:.4g} → {last:.4g} over {len(losses)} rounds ({losses})"
