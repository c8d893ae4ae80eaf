"""The L2 step on a private user row: methods whose clients step their row with plain SGD on a mean loss
holding ‖u‖² once per example declare its lr (``Method.l2_step_lr``); one step then multiplies the row by
1 − 2·lr·l2 through the L2 term, and the build refuses an l2 that makes that factor 0 or negative (it would
flip the rows' sign every step instead of shrinking them; measured: FedCL's federated NCF on Sports at
l2 .1, lr 10, diverged, docs/results/below-floor.md)."""

from __future__ import annotations

import pytest
import torch

from fedrun.errors import ConfigError
from tests.conftest import make_method, round_of
from tests.test_unread_settings import SMALL_VIEWS

CASES = {  # method → the overrides it runs with here
    "fedcl-mf": ["method=fedcl", "backbone=mf", "method.semi_hard=0", "privacy=none"],
    "fedcl-ncf": ["method=fedcl", "backbone=ncf", "method.semi_hard=0", "privacy=none"],
    "fedcl-copies": ["method=fedcl", "backbone=ncf", "method.semi_hard=0", "privacy=none", "sim.fast_path=off"],
    "fedcl-ldp": ["method=fedcl", "backbone=mf", "method.n_clusters=5"],
    "fedavg-balanced": ["method=fedavg", "backbone=mf"],
    "fedavg-mean": ["method=fedavg", "backbone=ncf", "method.loss_reduction=mean"],
    "fedavg-copies": ["method=fedavg", "backbone=mf", "sim.fast_path=off"],
    "fedgnn": ["method=fedgnn", "backbone=lightgcn"],
    "perfedrec": ["method=perfedrec", "backbone=lightgcn"],
    "perfedrecpp": ["method=perfedrecpp", "backbone=lightgcn", "method.pretrain_rounds=0"],
    "cl4fedrec": ["method=cl4fedrec", "backbone=ncf", *SMALL_VIEWS],
    "rcl4fedrec": ["method=rcl4fedrec", "backbone=ncf", "method.hot_items=10", *SMALL_VIEWS],
    "simgcl": ["method=simgcl", "backbone=ncf"],
    "union": ["method=union", "backbone=ncf"],
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_l2_term_shrinks_a_user_row_by_the_declared_factor(case):
    """From the same start, the rows trained one round with l2 and without differ by exactly −2·lr·l2·u on
    the round's clients, and not at all elsewhere. float64, so the difference is not float32 rounding."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        start, _ = make_method([*CASES[case], "sim.seed=1"])
        lr = type(start).l2_step_lr(start.config)
        assert lr == start.config.optimizer.private_lr
        user = start.client.private.user.clone()  # [U, d] before the round
        trained = {}
        for l2 in (0.0, 0.001):
            method, _ = make_method([*CASES[case], "sim.seed=1", f"backbone.l2={l2}"])
            round_of(method).train_round(0)
            trained[l2] = method.client.private.user
        stepped = (trained[0.0] != user).any(1)  # [U]: the round's clients
        assert 0 < int(stepped.sum()) <= 16
        shrink = trained[0.001] - trained[0.0]  # [U, d]
        torch.testing.assert_close(shrink[stepped], -2 * lr * 0.001 * user[stepped])
        assert not shrink[~stepped].any()
    finally:
        torch.set_default_dtype(previous)


@pytest.mark.parametrize("overrides,match", [
    (["method=fedcl", "backbone=ncf", "backbone.l2=0.1"], r"backbone.l2=0.1 .*under 0.05 .*lr 10: .* = -1 "),
    (["method=fedcl", "backbone=mf", "backbone.l2=0.02", "method.optimizer.user_lr=30"], r"under 0.0167 .*lr 30"),
    (["method=fedavg", "backbone=mf", "backbone.l2=0.2"], r"under 0.167 .*method=fedavg at its user rows' lr 3"),
])
def test_an_l2_that_would_flip_the_user_rows_is_refused(overrides, match):
    with pytest.raises(ConfigError, match=match):
        make_method(overrides)


@pytest.mark.parametrize("overrides", [
    ["method=fedcl", "backbone=mf", "backbone.l2=0.04"],  # under the bound
    ["method=fedcl", "backbone=mf", "backbone.l2=0.1", "method.optimizer.name=adam", "method.optimizer.lr=0.01"],
    ["method=fedavg", "backbone=mf", "backbone.l2=0.2", "method.loss_reduction=sum"],  # no mean: not declared
    ["method=central", "backbone=mf", "backbone.l2=0.5"],
])
def test_an_l2_the_step_can_take_is_accepted(overrides):
    make_method(overrides)
