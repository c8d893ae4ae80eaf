"""SVD++ (Koren 2008, Eq. 15): scores equal the formula written per pair, pair and full-catalogue
scores agree, training lowers the squared error, and a non-MF backbone is named."""

from __future__ import annotations

import pytest
import torch

from fedrun.errors import ConfigError
from tests.conftest import CPU_ORACLE, make_method, round_of

SVDPP = ["method=svdpp", "backbone=pmf", "backbone.dim=4", "backbone.init_std=0.1", "dataset.ratings=true",
         "dataset.split.protocol=random_ratio", "dataset.split.valid=false", "method.batch_size=64"]


def test_scores_follow_koren_eq15_per_pair():
    method, env = make_method(SVDPP + [CPU_ORACLE])
    round_of(method).train_round(0)  # biases and factors away from their initial values
    with torch.no_grad():
        method.user_bias.normal_(generator=torch.Generator().manual_seed(1))
    for user, item in [(0, 3), (5, 0), (17, env.n_items - 1)]:
        start, end = env.train.indptr[user], env.train.indptr[user + 1]
        rated = env.train.items[start:end]
        implicit = method.implicit[rated].sum(0) / max(rated.numel(), 1) ** 0.5
        want = (method.mean + method.user_bias[user] + method.item_bias[item]
                + method.item[item] @ (method.user[user] + implicit))
        got = method.score_pairs(torch.tensor([user]), torch.tensor([item]))
        torch.testing.assert_close(got, want.detach().reshape(1), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(method.score_users(torch.tensor([user]))[0, item], got[0], rtol=1e-5, atol=1e-6)


def test_training_lowers_the_squared_error():
    method, _ = make_method(SVDPP + ["method.optimizer.lr=0.01"])
    losses = [round_of(method).train_round(r).loss for r in range(20)]
    assert losses[-1] < 0.5 * losses[0]


@pytest.mark.parametrize("override,field", [(["backbone=ncf"], "backbone"), (["backbone=mf", "dataset.ratings=false"],
                                                                            "backbone")])
def test_bad_backbones_are_named(override, field):
    with pytest.raises(ConfigError, match=field):
        make_method(SVDPP + override)
