"""LightFR_init: median quantisation of centrally trained MF factors, ranked by Hamming similarity."""

from __future__ import annotations

import pytest
import torch

from fedrun.errors import ConfigError
from fedrun.method.median_quantized import quantize
from fedrun.retrieval.hamming import hamming_distances, pack_codes
from tests.conftest import make_method, round_of

INIT = ["method=median_quantized", "backbone=pmf", "backbone.dim=16", "dataset.ratings=true",
        "dataset.split.protocol=random_ratio", "dataset.split.valid=false"]


def test_each_dimension_is_cut_at_its_median():
    factors = torch.randn(101, 8, generator=torch.Generator().manual_seed(0)) + 3.0
    codes = quantize(factors)
    assert set(codes.unique().tolist()) == {-1.0, 1.0}
    assert torch.equal((codes > 0).sum(0), torch.full((8,), 51))  # 50 below, the median and 50 above
    assert torch.equal(quantize(factors.abs() + 0.1, "zero"), torch.ones(101, 8))  # every factor > 0


def test_scores_rank_items_by_hamming_distance_of_the_trained_codes():
    method, env = make_method(INIT)
    round_of(method).train_round(0)
    users = torch.arange(5)
    scores = method.score_users(users)  # [5, I]
    user_codes, item_codes = method.codes()
    distance = hamming_distances(pack_codes(user_codes[users]), pack_codes(item_codes))  # [5, I]
    torch.testing.assert_close(scores, 16.0 - 2.0 * distance.float())  # b_uᵀd_i = f − 2·Hamming
    items = torch.tensor([3, 1, 4, 1, 5])
    torch.testing.assert_close(method.score_pairs(users, items), scores[torch.arange(5), items])


@pytest.mark.parametrize("overrides,field", [(["method.cut=mean"], "method.cut"), (["backbone=ncf"], "backbone")])
def test_bad_settings_are_named(overrides, field):
    with pytest.raises(ConfigError) as err:
        make_method(INIT + overrides)
    assert err.value.field == field
