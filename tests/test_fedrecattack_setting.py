"""The options FedRecAttack's code setting needs: a client loss summed over its examples, its L2 term
once per client step over the rows it touches, and sampled negatives drawn afresh at every evaluation."""

from __future__ import annotations

import torch

from fedrun.backbone.losses import per_client_loss
from fedrun.eval.config import SampledConfig
from fedrun.eval.sampled import Sampled
from tests.conftest import make_method, round_of

MF = ["backbone=mf", "backbone.dim=4", "sim.fast_path=off"]


def test_a_summed_client_loss_is_the_mean_times_the_examples():
    gen = torch.Generator().manual_seed(0)
    pos, neg = torch.randn(3, 5, generator=gen), torch.randn(3, 5, 2, generator=gen)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]], dtype=torch.bool)
    mean = per_client_loss("bpr", pos, neg, mask, None)
    total = per_client_loss("bpr", pos, neg, mask, None, reduction="sum")
    torch.testing.assert_close(total, mean * mask.sum(1) * 2)


def test_client_scoped_l2_counts_each_touched_row_once():
    method, env = make_method(MF + ["method.loss_reduction=sum", "method.l2_scope=client", "backbone.l2=0.1"])
    users = round_of(method).sampler.users(0)
    problem = method.client.problems(users, 0)[0]
    user = method.client.private.user[problem.batch.users]
    table = method.public.item[problem.items]
    got = method.client.local_loss(problem, user, table, method.public.net)
    plain = make_method(MF + ["method.loss_reduction=sum"])[0]  # same data and seeds, no L2
    data = plain.client.local_loss(problem, user, table, method.public.net)
    rows = torch.stack([(table[b][problem.item_mask[b]] ** 2).sum() for b in range(len(user))])
    torch.testing.assert_close(got, data + 0.05 * ((user ** 2).sum(1) + rows))
    assert not round_of(method).uses_fast_path  # the FedSGD pass computes the per-client mean loss only


def test_sampled_negatives_are_drawn_afresh_only_when_asked():
    _, env = make_method(MF)
    users = torch.arange(10)
    for resample in (False, True):
        def evaluator(resample=resample):
            config = SampledConfig(num_negatives=20, resample=resample)
            return Sampled(config, env.split, torch.device("cpu"), rating=False)
        sampled = evaluator()
        first, second = sampled.negatives("test", users).clone(), sampled.negatives("test", users).clone()
        assert torch.equal(first, second) != resample
        assert torch.equal(evaluator().negatives("test", users), first)  # the same seed, the same first draw


def test_the_floor_does_not_shift_a_resampling_evaluators_draws(tmp_path, monkeypatch):
    """The validation floor is evaluated before training; with negatives drawn afresh at every evaluation, it
    must not move the run's k-th draw (whether the floor came from the cache or was computed)."""
    from fedrun.eval.floor import floor_metrics

    monkeypatch.setenv("FEDRUN_CACHE_DIR", str(tmp_path))
    _, env = make_method(MF)
    users = torch.arange(10)

    def evaluator():
        return Sampled(SampledConfig(num_negatives=20, resample=True), env.split, torch.device("cpu"), rating=False)

    plain = evaluator()
    expected = [plain.negatives("valid", users).clone() for _ in range(2)]
    for _ in range(2):  # computed, then from the cache
        with_floor = evaluator()
        floor_metrics(with_floor, env, "valid")
        got = [with_floor.negatives("valid", users).clone() for _ in range(2)]
        assert all(torch.equal(a, b) for a, b in zip(got, expected))
