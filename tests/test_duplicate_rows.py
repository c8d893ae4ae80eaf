"""``duplicate_rows=once``: a client's repeated item row uploads one use's gradient, as the A-hum code's server
adds a client's per-example gradients with ``grad[items] += g`` (an indexed add that keeps one value per index)."""

from __future__ import annotations

import pytest
import torch

from fedrun.kernels.batching import LocalProblem
from fedrun.kernels.local import problem_loss
from tests.conftest import make_method, round_of

# few items, many negatives: every client draws some negatives twice
TINY = ["dataset=synthetic", "dataset.n_users=40", "dataset.n_items=25", "dataset.mean_length=6", "track=none",
        "sim.progress=false", "sim.clients_per_round=8", "sim.fast_path=off", "backbone=ncf", "sim.device=cpu",
        "method.num_negatives=4", "method.loss_reduction=mean", "method.optimizer.lr=0.5",
        "method.optimizer.user_lr=null"]


def per_position(problem: LocalProblem, b: int) -> tuple[torch.Tensor, LocalProblem]:
    """Client ``b``'s examples with one local row per use, as the code lays them out: (items [U], the problem)."""
    real = problem.batch.pos_mask[b]  # [P]
    positives = problem.items[b, problem.pos_slot[b, real]]  # [p]
    negatives = problem.items[b, problem.neg_slot[b, real]]  # [p, n]
    p, n = negatives.shape
    items = torch.cat([positives, negatives.reshape(-1)])  # [p + p·n]
    batch = type(problem.batch)(problem.batch.users[b:b + 1], positives.unsqueeze(0),
                                torch.ones(1, p, dtype=torch.bool), None)
    return items, LocalProblem(batch, items.unsqueeze(0), torch.ones(1, items.numel(), dtype=torch.bool),
                               torch.arange(p).unsqueeze(0), (p + torch.arange(p * n)).view(1, p, n))


def test_once_uploads_the_codes_indexed_add_of_per_use_gradients():
    method, env = make_method(["method.duplicate_rows=once", "sim.buckets=1"], base=TINY)  # one bucket: one problem
    client, public = method.client, method.public
    users = torch.arange(8)
    (problem,) = client.problems(users, 0)
    uploads = client.step(problem).uploads
    repeated = 0
    for b, user_id in enumerate(problem.batch.users.tolist()):
        items, alone = per_position(problem, b)
        rows = public.item[items].detach().clone().requires_grad_(True)  # [U, di]: one row per use
        user = client.private.user[user_id:user_id + 1].detach().clone().requires_grad_(True)
        loss = problem_loss(env.backbone, alone, user, rows.unsqueeze(0), public.net)
        (grad,) = torch.autograd.grad(loss.sum(), rows)
        kept = torch.zeros_like(public.item)
        kept[items] += grad  # the code's server: one value per repeated index
        mine = uploads.row_client == b
        expected = -0.5 * kept[uploads.row_item[mine]]
        torch.testing.assert_close(uploads.row_delta[mine], expected, rtol=1e-5, atol=1e-7)
        repeated += int(items.numel() - items.unique().numel())
    assert repeated > 0  # the case the setting is about occurred


def test_sum_keeps_the_default_and_once_leaves_the_fast_path():
    auto = [o for o in TINY if o != "sim.fast_path=off"]
    method, _ = make_method([], base=auto)
    assert method.config.duplicate_rows == "sum" and round_of(method).uses_fast_path
    once, _ = make_method(["method.duplicate_rows=once"], base=auto)
    assert not round_of(once).uses_fast_path  # the FedSGD pass sums a row's uses


def test_an_unknown_duplicate_rows_value_is_refused_by_name():
    from fedrun.errors import ConfigError

    with pytest.raises(ConfigError, match="duplicate_rows"):
        make_method(["method.duplicate_rows=twice"], base=TINY)


def test_once_is_refused_where_a_rows_uses_have_different_gradients():
    from fedrun.errors import ConfigError

    refusal = r"method.duplicate_rows='once' is not allowed: expected sum with backbone lightgcn"
    with pytest.raises(ConfigError, match=refusal):
        make_method(["method.duplicate_rows=once", "backbone=lightgcn"], base=TINY)
