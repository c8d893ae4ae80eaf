"""Splits, filtering, the client store and negative sampling on small synthetic tables."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedrun.data import filtering, splits
from fedrun.data.client_store import ClientStore
from fedrun.data.interactions import Interactions
from fedrun.data.negatives import sample_batch_negatives, sample_negatives
from fedrun.errors import ConfigError
from tests.conftest import compose_cfg, needs_data


def table(rows, n_users=None, n_items=None, with_order=True):
    rows = np.asarray(rows, dtype=np.int64)
    return Interactions(rows[:, 0], rows[:, 1], n_users or int(rows[:, 0].max()) + 1,
                        n_items or int(rows[:, 1].max()) + 1, None, rows[:, 2] if with_order else None)


def pairs(data):
    return sorted(zip(data.user.tolist(), data.item.tolist()))


def test_leave_one_out_takes_the_last_items_in_time_order():
    data = table([[0, 5, 3], [0, 6, 1], [0, 7, 2], [0, 8, 0], [1, 1, 0], [1, 2, 1]])
    split = splits.leave_one_out(data, with_valid=True)
    assert pairs(split.test) == [(0, 5)]
    assert pairs(split.valid) == [(0, 7)]
    assert pairs(split.train) == [(0, 6), (0, 8), (1, 1), (1, 2)]  # user 1 has < 3 rows: all train


def test_loo_needs_order():
    with pytest.raises(ConfigError, match="dataset.split.protocol"):
        splits.leave_one_out(table([[0, 1, 0], [0, 2, 1]], with_order=False), with_valid=False)


def test_temporal_ratio_and_random_ratio_cover_every_row_once():
    rng = np.random.default_rng(0)
    rows = [[u, i, t] for u in range(20) for t, i in enumerate(rng.permutation(50)[:10])]
    data = table(rows, 20, 50)
    for split in (splits.temporal_ratio(data, 0.2, 0.1),
                  splits.random_ratio(data, 0.2, 0.1, True, np.random.default_rng(1)),
                  splits.random_ratio(data, 0.2, 0.1, False, np.random.default_rng(1))):
        assert sorted(pairs(split.train) + pairs(split.valid) + pairs(split.test)) == pairs(data)
    temporal = splits.temporal_ratio(data, 0.2, 0.1)
    for u in range(20):
        times = {i: t for uu, i, t in rows if uu == u}
        test_t = [times[i] for uu, i in pairs(temporal.test) if uu == u]
        train_t = [times[i] for uu, i in pairs(temporal.train) if uu == u]
        assert len(test_t) == 2 and min(test_t) > max(train_t)


def test_kfold_partitions_rows_and_seed_changes_split():
    data = table([[u, i, 0] for u in range(10) for i in range(10)], 10, 10)
    tests = [pairs(splits.kfold(data, 5, f, 0.0, np.random.default_rng(7)).test) for f in range(5)]
    assert sorted(sum(tests, [])) == pairs(data)
    other = pairs(splits.kfold(data, 5, 0, 0.0, np.random.default_rng(8)).test)
    assert other != tests[0]


def test_k_core_filter_repeats_until_stable():
    # items 9 and 3 have 1 row; dropping them leaves users 2 and 3 with 1 row, which must go too.
    data = table([[0, 1, 0], [0, 2, 0], [1, 1, 0], [1, 2, 0], [2, 9, 0], [2, 1, 0], [3, 3, 0], [3, 2, 0]])
    core = filtering.filter_counts(data, min_user=2, min_item=2, k_core=True)
    assert pairs(data.take(np.flatnonzero(core))) == [(0, 1), (0, 2), (1, 1), (1, 2)]
    once = filtering.filter_counts(data, min_user=2, min_item=2, k_core=False)
    assert pairs(data.take(np.flatnonzero(once))) == [(0, 1), (0, 2), (1, 1), (1, 2), (2, 1), (3, 2)]


def test_client_store_gathers_padded_rows_in_time_order():
    data = table([[1, 4, 2], [1, 3, 0], [1, 5, 1], [0, 2, 0]], 3, 6)
    store = ClientStore.from_interactions(data)
    items, mask, _ = store.gather(torch.tensor([1, 2, 0]))
    assert items.tolist() == [[3, 5, 4], [0, 0, 0], [2, 0, 0]]
    assert mask.tolist() == [[True] * 3, [False] * 3, [True, False, False]]


def test_negatives_are_never_positives():
    pos = torch.tensor([[0, 1, 2, 3], [5, 6, 0, 0]])
    mask = torch.tensor([[True] * 4, [True, True, False, False]])
    neg = sample_batch_negatives(torch.tensor([7, 9]), pos, mask, 50, 8, seed=0)
    assert neg.shape == (2, 4, 50)
    assert not torch.isin(neg[0], pos[0]).any()
    assert not torch.isin(neg[1], torch.tensor([5, 6])).any()
    assert set(neg[1].unique().tolist()) == {0, 1, 2, 3, 4, 7}  # item 0 is padding, not a positive
    keys = torch.tensor([0 * 8 + 1, 1 * 8 + 2, 1 * 8 + 3])
    drawn = sample_negatives(torch.tensor([0, 1]), 200, 8, keys, seed=0)
    assert not (drawn[0] == 1).any() and not torch.isin(drawn[1], torch.tensor([2, 3])).any()


def test_a_clients_negatives_do_not_depend_on_its_batch():
    pos = torch.tensor([[0, 1, 2, 3], [5, 6, 0, 0]])
    mask = torch.tensor([[True] * 4, [True, True, False, False]])
    together = sample_batch_negatives(torch.tensor([7, 9]), pos, mask, 3, 50, seed=5)
    alone = sample_batch_negatives(torch.tensor([9]), pos[1:, :2], mask[1:, :2], 3, 50, seed=5)
    assert torch.equal(together[1, :2], alone[0])
    assert not torch.equal(together, sample_batch_negatives(torch.tensor([7, 9]), pos, mask, 3, 50, seed=6))


def test_hashed_negatives_are_uniform():
    drawn = sample_negatives(torch.arange(200), 500, 10, torch.empty(0, dtype=torch.int64), seed=1)
    counts = torch.bincount(drawn.reshape(-1), minlength=10).double()
    expected = drawn.numel() / 10
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 27.9  # chi-square, 9 degrees of freedom, p = 0.001


def test_draw_ids_give_repeated_users_independent_negatives():
    users = torch.tensor([3, 3, 3])
    drawn = sample_negatives(users, 20, 1000, torch.empty(0, dtype=torch.int64), seed=0, draw_ids=torch.arange(3))
    assert not torch.equal(drawn[0], drawn[1]) and not torch.equal(drawn[1], drawn[2])


@needs_data
@pytest.mark.parametrize("damage", [b"", b"not an npz file", b"PK\x03\x04 truncated zip"])
def test_a_corrupt_parse_cache_is_rebuilt_not_a_traceback(damage, tmp_path, monkeypatch):
    """The parse cache is keyed by the files' checksums; a truncated or corrupt cache file (a full disk, a
    killed writer) is deleted and the files are parsed again."""
    from fedrun.app.plan import plan

    monkeypatch.setenv("FEDRUN_CACHE_DIR", str(tmp_path / "cache"))
    dataset = plan(compose_cfg(["dataset=ml-100k", "track=none"])).dataset
    expected = dataset.load_parts()
    (cached,) = (tmp_path / "cache").glob("ml-100k-*.npz")
    cached.write_bytes(damage)
    again = dataset.load_parts()
    assert again.keys() == expected.keys()
    assert all((again[k].user == expected[k].user).all() for k in expected)
    assert cached.exists() and cached.stat().st_size > 1000  # rebuilt
