"""Robust rules against a brute-force per-row NumPy reference on ragged random uploads (rows with
1, 2 and many uploaders, ties, dense weights), Krum's selection against its formula, and bad
settings refused by name."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fedrun.defense._rows import order_statistics
from fedrun.defense.config import (
    HiCSConfig,
    KrumConfig,
    MultiKrumConfig,
    NormBoundConfig,
    RobustConfig,
    TrimmedMeanConfig,
)
from fedrun.defense.hics import HiCS
from fedrun.defense.krum import Krum, krum_scores, squared_distances
from fedrun.defense.median import Median, coordinate_median
from fedrun.defense.multi_krum import MultiKrum
from fedrun.defense.norm_bound import NormBound
from fedrun.defense.trimmed_mean import TrimmedMean
from fedrun.errors import ConfigError
from fedrun.types import Uploads
from tests.conftest import make_method, round_of


def ragged_uploads(seed: int, n_clients: int = 12, n_items: int = 9, d: int = 3, ties: bool = False) -> Uploads:
    """Each client uploads a random subset of rows (item 0: one uploader, item 1: two, the rest
    random), and a dense weight of shape [2, 2]."""
    gen = np.random.default_rng(seed)
    client, item = [0, 3, 5], [0, 1, 1]
    for c in range(n_clients):
        for i in range(2, n_items):
            if gen.random() < 0.5:
                client.append(c), item.append(i)
    delta = gen.normal(size=(len(item), d))
    if ties:
        delta = np.round(delta)  # many equal coordinates and equal rows
    return Uploads(n_clients, torch.tensor(client), torch.tensor(item), torch.tensor(delta, dtype=torch.float64),
                   {"w": torch.tensor(gen.normal(size=(n_clients, 2, 2)), dtype=torch.float64)})


def per_row(uploads: Uploads, rule) -> dict[int, np.ndarray]:
    """The reference: ``rule`` on each row's uploads (in upload order), one row at a time."""
    out = {}
    for item in sorted(set(uploads.row_item.tolist())):
        out[item] = rule(uploads.row_delta[uploads.row_item == item].numpy())
    return out


def trimmed(rows: np.ndarray, k: int) -> np.ndarray:
    k = min(k, (len(rows) - 1) // 2)
    ordered = np.sort(rows, axis=0)
    return ordered[k: len(rows) - k].mean(0)


def krum_reference(rows: np.ndarray, f: int, m: int, variant: str) -> np.ndarray:
    c = len(rows)
    if c <= 2:
        return rows.mean(0)
    scores = []
    for i in range(c):
        others = [j for j in range(c) if j != i]
        if variant == "closest_to_mean":
            scores.append(((rows[i] - rows[others].mean(0)) ** 2).sum())
        else:
            distances = sorted(((rows[i] - rows[j]) ** 2).sum() for j in others)
            n = min(max(c - f - 2, 1), c - 1)
            scores.append(sum(distances[:n]))
    order = sorted(range(c), key=lambda i: (scores[i], i))
    return rows[order[: min(m, c)]].mean(0)


def norm_bound(rows: np.ndarray, tau: float) -> np.ndarray:
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return (rows * np.minimum(1.0, tau / np.maximum(norms, 1e-30))).mean(0)


RULES = [
    ("median", lambda: Median(RobustConfig()), lambda r: np.median(r, axis=0)),
    ("trimmed_mean", lambda: TrimmedMean(TrimmedMeanConfig(beta=0.25)),
     lambda r: trimmed(r, int(np.floor(0.25 * len(r))))),
    ("trimmed_count", lambda: TrimmedMean(TrimmedMeanConfig(trim=2)), lambda r: trimmed(r, 2)),
    ("krum", lambda: Krum(KrumConfig(f=1)), lambda r: krum_reference(r, 1, 1, "nearest")),
    ("krum_mean_reading", lambda: Krum(KrumConfig(f=1, variant="closest_to_mean")),
     lambda r: krum_reference(r, 1, 1, "closest_to_mean")),
    ("multi_krum", lambda: MultiKrum(MultiKrumConfig(f=2, m=3)), lambda r: krum_reference(r, 2, 3, "nearest")),
    ("norm_bound", lambda: NormBound(NormBoundConfig(tau=0.8)), lambda r: norm_bound(r, 0.8)),
]


@pytest.mark.parametrize("name,make,reference", RULES, ids=[r[0] for r in RULES])
@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), ties=st.booleans())
def test_rule_equals_a_per_row_reference(name, make, reference, seed, ties):
    uploads = ragged_uploads(seed, ties=ties)
    aggregate = make().aggregate(uploads)
    want = per_row(uploads, reference)
    assert aggregate.items.tolist() == sorted(want)
    for row, item in enumerate(aggregate.items.tolist()):
        np.testing.assert_allclose(aggregate.item_delta[row].numpy(), want[item], rtol=1e-9, atol=1e-9)
    dense = uploads.dense["w"].reshape(uploads.n_clients, -1).numpy()  # every client uploads it
    np.testing.assert_allclose(aggregate.dense["w"].reshape(-1).numpy(), reference(dense), rtol=1e-9, atol=1e-9)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), count=st.integers(1, 40), ties=st.booleans())
def test_order_statistics_select_like_a_sort_and_median_is_unchanged_bit_for_bit(seed, count, ties):
    """The CPU selection (np.partition) puts every asked rank where a sort puts it, smaller values before and
    larger after; the median it gives is the sort's bit for bit (runs recorded before it stay reproducible),
    and the trimmed mean sums the same middle values."""
    generator = torch.Generator().manual_seed(seed)
    values = torch.randn(5, count, 4, generator=generator)  # [g, c, d] float32, as uploads are
    if ties:
        values = values.round()
    ordered = values.sort(dim=1).values
    low, high = count // 4, count - 1 - count // 4  # equal when one upload
    selected = order_statistics(values, (low, high))
    for rank in (low, high):
        assert torch.equal(selected[:, rank], ordered[:, rank])
    assert (selected[:, :low] <= selected[:, low: low + 1]).all()
    assert (selected[:, high + 1:] >= selected[:, high: high + 1]).all()
    assert torch.equal(selected.sort(dim=1).values, ordered)  # a permutation of each row's uploads
    c = count
    by_sort = ordered[:, c // 2] if c % 2 else (ordered[:, c // 2 - 1] + ordered[:, c // 2]) / 2
    assert torch.equal(coordinate_median(values), by_sort)
    k = TrimmedMean(TrimmedMeanConfig(beta=0.2)).trimmed(c)
    torch.testing.assert_close(TrimmedMean(TrimmedMeanConfig(beta=0.2)).reduce(values), ordered[:, k: c - k].mean(1),
                               rtol=1e-6, atol=1e-6)


def test_rows_with_one_or_two_uploaders_follow_the_documented_rule():
    uploads = ragged_uploads(0)
    one, two = uploads.row_delta[0], uploads.row_delta[1:3].mean(0)
    for make in [lambda: Median(RobustConfig()), lambda: TrimmedMean(TrimmedMeanConfig(beta=0.4)),
                 lambda: Krum(KrumConfig(f=3)), lambda: MultiKrum(MultiKrumConfig(f=1, m=1))]:
        aggregate = make().aggregate(uploads)
        torch.testing.assert_close(aggregate.item_delta[0], one)  # item 0: its one upload
        torch.testing.assert_close(aggregate.item_delta[1], two)  # item 1: the mean of its two


def test_krum_selects_the_upload_its_formula_scores_lowest():
    """Four honest uploads near 0 and one far away: Krum keeps an honest one, the outlier's score is
    the largest, and the selected upload is the argmin of Σ over its c − f − 2 nearest distances²."""
    rows = torch.tensor([[0.0, 0.1], [0.1, 0.0], [0.0, -0.1], [-0.1, 0.0], [9.0, 9.0]], dtype=torch.float64)
    uploads = Uploads(5, torch.arange(5), torch.zeros(5, dtype=torch.long), rows)
    chosen = Krum(KrumConfig(f=1)).aggregate(uploads).item_delta[0]
    d2 = torch.cdist(rows, rows).pow(2)
    scores = [float(d2[i][[j for j in range(5) if j != i]].sort().values[:2].sum()) for i in range(5)]
    assert scores.index(min(scores)) == 0 and max(scores) == scores[4]
    torch.testing.assert_close(chosen, rows[0])


def test_krum_scores_honest_uploads_exactly_beside_huge_ones_in_float32():
    """Krum scores by summing the c − f − 2 nearest distances; a shortcut that summed all and subtracted the
    farthest would lose an honest upload's score to float32 cancellation when attackers upload at 1e6 times its
    scale. The choice must be the one the formula makes in float64."""
    generator = torch.Generator().manual_seed(0)
    honest = 1e-3 * torch.randn(20, 8, generator=generator, dtype=torch.float64)
    rows = torch.cat([honest, 1e3 * torch.ones(2, 8, dtype=torch.float64)])  # [22, 8], f = 2 attackers
    d2 = torch.cdist(rows, rows).pow(2)
    n = 22 - 2 - 2
    scores = torch.stack([d2[i][torch.arange(22) != i].sort().values[:n].sum() for i in range(22)])
    uploads = Uploads(22, torch.arange(22), torch.zeros(22, dtype=torch.long), rows.float())
    chosen = Krum(KrumConfig(f=2)).aggregate(uploads).item_delta[0]
    torch.testing.assert_close(chosen, rows[int(scores.argmin())].float())


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), count=st.integers(3, 40), f=st.integers(0, 6), ties=st.booleans())
def test_krum_drops_its_farthest_distances_as_a_top_k_would_bit_for_bit(seed, count, f, ties):
    """Krum's distances come from one fused matmul, and for f ≤ 2 it zeroes each row's farthest distances by
    repeated max passes instead of a top-k. Both must give the bits of the forms they replaced. On continuous
    values the passes zero the positions the top-k zeroes; on tied values (small integers, whose sums float32
    keeps exact) they may zero another position of the same value, and the scores still agree."""
    generator = torch.Generator().manual_seed(seed)
    values = torch.randn(7, count, 5, generator=generator)  # [g, c, d]
    if ties:
        values = torch.randint(-2, 3, (7, count, 5), generator=generator).float()
    n = min(max(count - f - 2, 1), count - 1)  # neighbours scored
    dropped = count - 1 - n
    square = values.pow(2).sum(2)  # [g, c]; the distances in three passes, as Krum computed them before
    distance = (square.unsqueeze(2) + square.unsqueeze(1) - 2 * values @ values.transpose(1, 2)).clamp_min(0)
    assert torch.equal(squared_distances(values), distance)  # one fused matmul: −2 x·y is exact, same rounding
    distance.diagonal(dim1=1, dim2=2).zero_()
    if dropped:
        distance.scatter_(2, distance.topk(dropped, dim=2).indices, 0.0)
    if dropped < n:  # the branch that zeroes (the other sums the n nearest by a top-k, unchanged)
        assert torch.equal(krum_scores(values, f, "nearest"), distance.sum(2))


def test_sum_semantics_multiply_the_estimate_by_the_uploaders():
    uploads = ragged_uploads(3)
    mean = Median(RobustConfig()).aggregate(uploads)
    total = Median(RobustConfig(reduce="sum")).aggregate(uploads)
    count = torch.bincount(uploads.row_item)[mean.items].to(torch.float64).unsqueeze(1)
    torch.testing.assert_close(total.item_delta, mean.item_delta * count)
    torch.testing.assert_close(total.dense["w"], mean.dense["w"] * uploads.n_clients)


@pytest.mark.parametrize("rule", [lambda c: Median(RobustConfig(**c)), lambda c: Krum(KrumConfig(f=2, **c)),
                                  lambda c: TrimmedMean(TrimmedMeanConfig(trim=2, **c)),
                                  lambda c: NormBound(NormBoundConfig(tau=0.1, **c))],
                         ids=["median", "krum", "trimmed_mean", "norm_bound"])
@pytest.mark.parametrize("reduce", ["mean", "sum"])
def test_scope_rows_leaves_the_shared_weights_to_the_plain_rule(rule, reduce):
    """scope=rows: the item rows as under scope=all, the shared weights as the plain mean or sum."""
    uploads = ragged_uploads(4)
    everything = rule({"reduce": reduce}).aggregate(uploads)
    rows_only = rule({"reduce": reduce, "scope": "rows"}).aggregate(uploads)
    torch.testing.assert_close(rows_only.item_delta, everything.item_delta)
    plain = uploads.dense["w"].sum(0) if reduce == "sum" else uploads.dense["w"].mean(0)
    torch.testing.assert_close(rows_only.dense["w"], plain)
    assert not torch.allclose(everything.dense["w"], plain)


def test_an_outlier_moves_the_mean_but_not_the_robust_rules():
    rows = torch.tensor([[1.0], [1.1], [0.9], [1.0], [1.05], [1000.0]], dtype=torch.float64)
    uploads = Uploads(6, torch.arange(6), torch.zeros(6, dtype=torch.long), rows)
    for rule in [Median(RobustConfig()), TrimmedMean(TrimmedMeanConfig(trim=1)), Krum(KrumConfig(f=1)),
                 MultiKrum(MultiKrumConfig(f=1, m=3)), NormBound(NormBoundConfig(tau=1.2))]:
        assert float(rule.aggregate(uploads).item_delta[0, 0]) < 1.3, type(rule).__name__


@pytest.mark.parametrize("overrides,field", [
    (["defense=trimmed_mean", "defense.beta=0.5"], "defense.beta"),
    (["defense=trimmed_mean", "defense.trim=-1"], "defense.trim"),
    (["defense=krum", "defense.f=-1"], "defense.f"),
    (["defense=multi_krum", "defense.m=0"], "defense.m"),
    (["defense=norm_bound", "defense.tau=0"], "defense.tau"),
    (["defense=median", "defense.reduce=max"], "defense.reduce"),
    (["defense=median", "defense.scope=tower"], "defense.scope"),
    (["defense=hics", "defense.quantile=0"], "defense.quantile"),
    (["defense=hics", "defense.min_uploaders=0"], "defense.min_uploaders"),
])
def test_bad_settings_are_named(overrides, field):
    from fedrun.app.plan import plan
    from tests.conftest import SMALL, compose_cfg

    with pytest.raises(ConfigError) as refused:
        plan(compose_cfg(SMALL + overrides))
    assert refused.value.field == field


def hics_reference(uploads: Uploads, q: float, scale: float, min_uploaders: int, reduce: str):
    """HiCS one upload and one client at a time: clip each row to the q-quantile (⌈q·n⌉-th smallest) of
    the round's row norms, then each client's rows together to the q-quantile of the clients' totals,
    drop rows with fewer than ``min_uploaders`` uploaders, average or sum; dense: clip per client, then
    average or sum."""
    def kth(values, q):
        values = np.sort(values)
        return values[max(1, min(len(values), int(np.ceil(q * len(values))))) - 1]

    rows = uploads.row_delta.numpy().copy()
    norms = np.linalg.norm(rows, axis=1)
    bound = scale * kth(norms, q)
    for r in range(len(rows)):
        if norms[r] > bound:
            rows[r] *= bound / norms[r]
    clients = uploads.row_client.numpy()
    totals = np.array([np.sqrt((rows[clients == c] ** 2).sum()) for c in range(uploads.n_clients)])
    user_bound = scale * kth(totals[totals > 0], q)
    for r in range(len(rows)):
        if totals[clients[r]] > user_bound:
            rows[r] *= user_bound / totals[clients[r]]
    out = {}
    for item in sorted(set(uploads.row_item.tolist())):
        mine = rows[uploads.row_item.numpy() == item]
        if len(mine) >= min_uploaders:
            out[item] = mine.mean(0) if reduce == "mean" else mine.sum(0)
    dense = uploads.dense["w"].numpy().reshape(uploads.n_clients, -1)
    dense_norms = np.linalg.norm(dense, axis=1)
    dense_bound = scale * kth(dense_norms, q)
    clipped = np.stack([d * min(1.0, dense_bound / n) for d, n in zip(dense, dense_norms)])
    return out, (clipped.mean(0) if reduce == "mean" else clipped.sum(0)).reshape(2, 2)


@pytest.mark.parametrize("q,scale,min_uploaders,reduce", [(0.9, 1.0, 2, "mean"), (0.5, 2.0, 1, "sum"),
                                                            (1.0, 0.5, 3, "mean")])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_hics_equals_a_per_upload_reference(q, scale, min_uploaders, reduce, seed):
    uploads = ragged_uploads(seed)
    uploads.row_delta[::7] *= 50  # a few poisoned-size rows
    got = HiCS(HiCSConfig(quantile=q, scale=scale, min_uploaders=min_uploaders, reduce=reduce)).aggregate(uploads)
    rows, dense = hics_reference(uploads, q, scale, min_uploaders, reduce)
    assert got.items.tolist() == sorted(rows)
    for k, item in enumerate(got.items.tolist()):
        np.testing.assert_allclose(got.item_delta[k].numpy(), rows[item], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got.dense["w"].numpy(), dense, rtol=1e-10, atol=1e-12)


def test_hics_cuts_a_poisoned_row_to_a_benign_size():
    benign = torch.randn(40, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 0.01
    rows = torch.cat([benign, torch.full((2, 4), 5.0, dtype=torch.float64)])  # two attackers push item 0
    items = torch.cat([torch.arange(40) % 10, torch.zeros(2, dtype=torch.long)])
    uploads = Uploads(42, torch.arange(42), items, rows)
    got = HiCS(HiCSConfig(reduce="sum")).aggregate(uploads)
    assert float(got.item_delta[got.items == 0].norm()) < 0.2  # without HiCS: 20
    lonely = Uploads(3, torch.arange(3), torch.tensor([0, 0, 1]), torch.ones(3, 2, dtype=torch.float64))
    assert HiCS(HiCSConfig()).aggregate(lonely).items.tolist() == [0]  # item 1 had one uploader: not updated
    silent = Uploads(3, torch.arange(3), torch.tensor([0, 0, 1]), torch.zeros(3, 2, dtype=torch.float64))
    assert HiCS(HiCSConfig()).aggregate(silent).item_delta.abs().sum() == 0  # all-zero uploads: no bound to take


def test_krum_f_of_half_the_round_is_refused_before_training():
    with pytest.raises(ConfigError, match=r"defense\.f=8 .* fewer than half of the round's 16 clients"):
        make_method(["defense=krum", "defense.f=8"])  # SMALL: 16 clients per round


@pytest.mark.parametrize("defense", ["median", "trimmed_mean", "krum", "multi_krum", "norm_bound", "hics"])
def test_each_rule_trains_fedavg_and_refuses_exact_sum_methods(defense):
    from fedrun.app.plan import plan
    from tests.conftest import SMALL, compose_cfg

    rated = ["dataset.ratings=true", "backbone=pmf", "backbone.loss=mse"]
    for method in ["fedmf", "privrec", "fedrecpp", "fcf"]:
        with pytest.raises(ConfigError, match=f"for method={method}:") as refused:
            plan(compose_cfg(SMALL + rated + [f"method={method}", f"defense={defense}"]))
        assert refused.value.field == "defense"
    method, _ = make_method([f"defense={defense}", "backbone=ncf"])
    rounds = round_of(method)
    assert not rounds.uses_fast_path
    before = {k: v.clone() for k, v in method.public.net.items()}
    stats = rounds.train_round(0)
    assert np.isfinite(stats.loss)
    assert any(not torch.equal(before[k], v) for k, v in method.public.net.items())  # dense weights aggregated


def test_median_rows_script_classes_each_row_by_its_positive_uploaders():
    """The diagnostic behind the median's cost (fedrun/defense/diagnostics.py, behind
    scripts/investigations/median_rows.py): which uploads of a row come from clients holding the item, and the
    median against the mean per class of row, on a hand-made round."""
    from fedrun.defense import diagnostics
    n_items = 10
    train_keys = torch.tensor(sorted([5 * n_items + 1, 6 * n_items + 1, 7 * n_items + 1, 8 * n_items + 2]))
    senders = torch.tensor([5, 6, 7, 8])  # the round's clients, by upload index
    # item 1: three holders pulling different ways; item 2: one holder and three that drew it as a negative
    client = torch.tensor([0, 1, 2, 3, 0, 1, 2])
    item = torch.tensor([1, 1, 1, 2, 2, 2, 2])
    delta = torch.tensor([[1., 0.], [0., 1.], [1., 1.], [4., 4.], [-1., -1.], [-1., -1.], [-1., -1.]])
    uploads = Uploads(4, client, item, delta, {}, torch.ones(4))
    assert diagnostics.row_positives(uploads, senders, train_keys, n_items).tolist() == [True] * 4 + [False] * 3
    minority, majority = diagnostics.median_rows_record(uploads, senders, train_keys, n_items, min_uploaders=3)
    # item 2: the median (-1, -1) follows the three negatives against the mean (.25, .25): reading (a)
    assert minority["class"] == "positives a minority" and minority["positive share"] == 0.25
    assert minority["cos(median, mean)"] == pytest.approx(-1.0) and minority["|median| / |mean|"] == pytest.approx(4)
    assert majority["class"] == "positives at least half" and majority["positive share"] == 1.0
    # item 1: median (1, 1) against mean (2/3, 2/3): same direction, 1.5 times as long
    assert majority["cos(median, mean)"] == pytest.approx(1.0) and majority["|median| / |mean|"] == pytest.approx(1.5)
