"""Full and sampled ranking metrics against a brute-force reference (masking and ties included)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fedrun.data.interactions import Interactions
from fedrun.data.splits import Split
from fedrun.errors import ConfigError
from fedrun.eval.config import FullConfig, SampledConfig
from fedrun.eval.full import Full
from fedrun.eval.metrics import MISS, pessimistic_ranks
from fedrun.eval.sampled import Sampled


class FixedScores:
    """A method stand-in whose scores are a fixed matrix."""

    def __init__(self, scores: torch.Tensor):
        self.scores = scores

    def score_users(self, users, history=()):
        return self.scores[users].clone()

    def score_pairs(self, users, items, history=()):
        return self.scores[users, items]

    rank_pairs = score_pairs  # as Method's default: sampled ranking orders by the pair scores


def random_split(n_users=40, n_items=30, seed=0):
    rng = np.random.default_rng(seed)
    parts = {}
    taken = [set() for _ in range(n_users)]
    for name, count in (("train", 6), ("valid", 1), ("test", 3)):
        users, items = [], []
        for u in range(n_users):
            choices = [i for i in rng.permutation(n_items) if i not in taken[u]][: rng.integers(0, count + 1)]
            taken[u].update(choices)
            users += [u] * len(choices)
            items += list(choices)
        parts[name] = Interactions(np.array(users, dtype=np.int64), np.array(items, dtype=np.int64), n_users, n_items)
    return Split(parts["train"], parts["valid"], parts["test"], "test")


def brute_force(scores, split, part, ks, mask_valid):
    """Per user: rank_t = #{j ≠ t unmasked : s_j >= s_t}; a masked target is a miss."""
    scores = scores.numpy()
    target = getattr(split, part)
    masked = {}
    for p in [split.train] + ([split.valid] if mask_valid else []):
        for u, i in zip(p.user, p.item):
            masked.setdefault(int(u), set()).add(int(i))
    sums, n_users = {}, 0
    for u in sorted(set(target.user.tolist())):
        targets = target.item[target.user == u].tolist()
        n_users += 1
        row = scores[u]
        ranks = []
        for t in targets:
            if t in masked.get(u, set()):
                ranks.append(math.inf)
                continue
            hidden = masked.get(u, set())
            ranks.append(sum(1 for j in range(len(row)) if j != t and j not in hidden and row[j] >= row[t]))
        for k in ks:
            hits = [r for r in ranks if r < k]
            idcg = sum(1 / math.log2(i + 2) for i in range(min(len(targets), k)))
            values = {"hr": float(bool(hits)), "recall": len(hits) / len(targets),
                      "ndcg": sum(1 / math.log2(r + 2) for r in hits) / idcg,
                      "mrr": max((1 / (r + 1) for r in hits), default=0.0)}
            for name, v in values.items():
                sums[f"{name}_at_{k}"] = sums.get(f"{name}_at_{k}", 0.0) + v
    return {k: v / n_users for k, v in sums.items()}


@pytest.mark.parametrize("integer_scores", [True, False])
@pytest.mark.parametrize("part", ["valid", "test"])
def test_full_ranking_matches_brute_force(integer_scores, part):
    split = random_split()
    gen = torch.Generator().manual_seed(1)
    raw = torch.randint(0, 4, (40, 30), generator=gen) if integer_scores else torch.randn(40, 30, generator=gen)
    scores = raw.to(torch.float32)  # integer scores: many ties
    ks = [1, 3, 5, 10]
    evaluator = Full(FullConfig(ks=ks, memory_mb=1), split, torch.device("cpu"), rating=False)
    evaluator.chunk_users = lambda n_items: 7  # several chunks
    got = evaluator.evaluate(FixedScores(scores), part)
    want = brute_force(scores, split, part, ks, mask_valid=(part == "test"))
    assert got.keys() == want.keys()
    for name in want:
        assert got[name] == pytest.approx(want[name], abs=1e-9), name


def test_ties_are_pessimistic():
    scores = torch.zeros(1, 5)  # every item tied: the target ranks last among 5
    ranks = pessimistic_ranks(scores, torch.tensor([[2]]), torch.tensor([[True]]), k_max=10)
    assert ranks.item() == 4
    ranks = pessimistic_ranks(scores, torch.tensor([[2]]), torch.tensor([[True]]), k_max=3)
    assert ranks.item() == MISS


def test_masked_target_is_never_a_hit():
    scores = torch.tensor([[float("-inf"), 0.0, 1.0]])
    assert pessimistic_ranks(scores, torch.tensor([[0]]), torch.tensor([[True]]), 5).item() == MISS


@pytest.mark.parametrize("ties", ["pessimistic", "random"])
def test_sampled_protocol_never_favours_the_target(ties):
    split = random_split(seed=3)
    scores = torch.zeros(40, 30)  # all tied
    evaluator = Sampled(SampledConfig(ks=[1, 5], num_negatives=9, ties=ties), split, torch.device("cpu"), rating=False)
    got = evaluator.evaluate(FixedScores(scores), "test")
    if ties == "pessimistic":
        assert got["hr_at_5"] == 0.0  # tied with 9 negatives → rank 9
    else:
        assert 0.3 < got["hr_at_5"] < 0.7  # uniform rank in 0..9 → P(rank < 5) = 0.5
    negatives = evaluator.negatives("test", torch.nonzero(evaluator.stores["test"].sizes() > 0).squeeze(1))
    every = {(int(u), int(i)) for p in (split.train, split.valid, split.test) for u, i in zip(p.user, p.item)}
    users = torch.nonzero(evaluator.stores["test"].sizes() > 0).squeeze(1)
    assert not any((int(u), int(i)) in every for u, row in zip(users, negatives) for i in row)


def test_sampled_ranks_count_better_negatives():
    split = random_split(seed=4)
    scores = torch.arange(30, dtype=torch.float32).repeat(40, 1)  # higher item id = higher score
    evaluator = Sampled(SampledConfig(ks=[100], metrics=["mrr"], num_negatives=5), split, torch.device("cpu"),
                        rating=False)
    users = torch.nonzero(evaluator.stores["test"].sizes() > 0).squeeze(1)
    negatives = evaluator.negatives("test", users)
    targets, mask, _ = evaluator.stores["test"].gather(users)
    want = []
    for b in range(users.numel()):
        for t in targets[b][mask[b]].tolist():
            want.append(1 / (1 + sum(1 for n in negatives[b].tolist() if n >= t)))
    got = evaluator.evaluate(FixedScores(scores), "test")
    assert got["mrr_at_100"] == pytest.approx(np.mean(want))


def test_precision_is_hits_over_k():
    from fedrun.eval.metrics import from_ranks

    ranks = torch.tensor([[0, 3, MISS], [7, MISS, MISS]])
    mask = torch.tensor([[True, True, True], [True, False, False]])
    out = from_ranks(ranks, mask, [5], ["precision", "recall"])
    assert out["precision_at_5"].tolist() == [2 / 5, 0.0]
    assert out["recall_at_5"].tolist() == [2 / 3, 0.0]


def test_sampled_negatives_must_fit_beside_the_busiest_users_items():
    """More negatives than the busiest user has non-interacted items could only be drawn with repeats: refused,
    naming the field and the largest allowed value."""
    split = random_split(seed=3)
    every = np.concatenate([p.user for p in (split.train, split.valid, split.test) if p is not None])
    items = np.concatenate([p.item for p in (split.train, split.valid, split.test) if p is not None])
    busiest = max(len(set(items[every == u])) for u in np.unique(every))
    allowed = split.n_items - busiest
    Sampled(SampledConfig(ks=[1], num_negatives=allowed), split, torch.device("cpu"), rating=False)
    with pytest.raises(ConfigError, match=rf"eval.num_negatives={allowed + 1} .* at most {allowed}"):
        Sampled(SampledConfig(ks=[1], num_negatives=allowed + 1), split, torch.device("cpu"), rating=False)


def with_listed_negatives(split, count, seed=0):
    """``split`` with ``count`` listed test negatives per test user (any items, as a split file may list them)."""
    rng = np.random.default_rng(seed)
    users = np.unique(split.test.user)
    rows = Interactions(np.repeat(users, count), rng.integers(0, split.n_items, users.size * count),
                        split.n_users, split.n_items)
    return Split(split.train, None, split.test, split.protocol, {"test": rows})


def test_listed_negatives_are_the_candidates_ranked():
    """eval.negatives=split ranks each test target against exactly the negatives the split lists, in file order."""
    split = with_listed_negatives(random_split(seed=5), 4)
    scores = torch.arange(30, dtype=torch.float32).repeat(40, 1)
    evaluator = Sampled(SampledConfig(ks=[100], metrics=["mrr"], num_negatives=4, negatives="split"), split,
                        torch.device("cpu"), rating=False)
    users = torch.nonzero(evaluator.stores["test"].sizes() > 0).squeeze(1)
    listed = split.negatives["test"]
    assert evaluator.negatives("test", users).tolist() == [listed.item[listed.user == u].tolist() for u in users]
    want = []
    targets, mask, _ = evaluator.stores["test"].gather(users)
    for b, u in enumerate(users.tolist()):
        negatives = listed.item[listed.user == u].tolist()
        want += [1 / (1 + sum(1 for n in negatives if n >= t)) for t in targets[b][mask[b]].tolist()]
    assert evaluator.evaluate(FixedScores(scores), "test")["mrr_at_100"] == pytest.approx(np.mean(want))


def test_listed_negatives_are_refused_where_the_split_has_none_or_another_count():
    cpu = torch.device("cpu")
    with pytest.raises(ConfigError, match="eval.negatives='split' .*lists no negatives"):
        Sampled(SampledConfig(ks=[1], num_negatives=4, negatives="split"), random_split(seed=5), cpu, rating=False)
    with pytest.raises(ConfigError, match=r"eval.num_negatives=5 .*\[4\]"):
        Sampled(SampledConfig(ks=[1], num_negatives=5, negatives="split"), with_listed_negatives(random_split(), 4),
                cpu, rating=False)
    with pytest.raises(ConfigError, match="eval.negatives='split' .*valid"):  # listed for test only
        Sampled(SampledConfig(ks=[1], num_negatives=4, negatives="split"), with_listed_negatives(random_split(), 4),
                cpu, rating=False).negatives("valid", torch.tensor([0]))
    with pytest.raises(ConfigError, match="resample"):
        SampledConfig(negatives="split", resample=True)


def test_auto_takes_the_listed_negatives_where_a_split_lists_them_and_draws_elsewhere():
    cpu = torch.device("cpu")
    listed = Sampled(SampledConfig(ks=[1], num_negatives=4), with_listed_negatives(random_split(seed=5), 4), cpu,
                     rating=False)
    drawn = Sampled(SampledConfig(ks=[1], num_negatives=4), random_split(seed=5), cpu, rating=False)
    assert listed.listed and not drawn.listed
    assert not Sampled(SampledConfig(ks=[1], num_negatives=4, negatives="drawn"),
                       with_listed_negatives(random_split(seed=5), 4), cpu, rating=False).listed
