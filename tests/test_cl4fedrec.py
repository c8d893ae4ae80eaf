"""CL4FedRec / rCL4FedRec / SimGCL / UNION: each loss term against a direct per-client computation,
the item-view step against single-client autograd, the vectorized client step against one client at a
time, the synthetic-user fit (Eq. 4–5), the regularizer (Eq. 14) on a hand-computed example, bad
input, and the server-side work running on public parameters only."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from fedrun.errors import ConfigError
from fedrun.kernels.config import ClientOptimizer
from fedrun.method._contrastive import (
    draw_synthetic_items,
    info_nce,
    item_contrastive,
    optimizer_first_step,
    uniform_views,
    uniformity_penalty,
    user_contrastive,
)
from fedrun.method.rcl4fedrec import regularizer_loss
from fedrun.method.union import union_contrastive
from tests.conftest import CPU_ORACLE, make_method, round_of
from tests.test_privacy_boundary import Poison, reachable

NCF = ["backbone=ncf", "backbone.variant=mlp", "backbone.dim=8", "backbone.layers=[16,8,4]", CPU_ORACLE]
# the mechanics under the paper's optimizer as printed (Adam, summed losses) and a plain mean server
CL = ["method=cl4fedrec", "method.synthetic_users=6", "method.synthetic_items=5", "method.synthetic_fit_steps=20",
      "method.optimizer.name=adam", "method.loss_reduction=sum", "defense=mean"] + NCF


def cos(a, b):
    return float(torch.dot(a, b) / (a.norm() * b.norm()))


# -- the loss terms ------------------------------------------------------------------------------

def test_uniform_views_have_norm_eta_follow_the_sign_and_depend_only_on_the_key():
    user = torch.randn(5, 7, generator=torch.Generator().manual_seed(0))
    keys = torch.tensor([3, 9, 4, 1, 0])
    a, b = uniform_views(user, keys, seed=11, eta=0.1)
    assert torch.allclose(a.norm(dim=1), torch.full((5,), 0.1)) and torch.allclose(b.norm(dim=1), torch.full((5,), 0.1))
    assert torch.all(a * user >= 0) and torch.all(b * user >= 0)  # ε = ε ⊙ sign(u)
    assert not torch.allclose(a, b)
    alone, _ = uniform_views(user[2:3], keys[2:3], seed=11, eta=0.1)  # the same client in another bucket
    assert torch.equal(alone[0], a[2])
    other, _ = uniform_views(user, keys, seed=12, eta=0.1)
    assert not torch.allclose(other, a)


def test_user_contrastive_equals_eq7_per_client():
    gen = torch.Generator().manual_seed(1)
    user, synthetic = torch.randn(4, 6, generator=gen), torch.randn(5, 6, generator=gen)
    noise = uniform_views(user, torch.arange(4), 3, 0.1)
    got = user_contrastive(user, noise, synthetic, tau=0.2)
    for b in range(4):
        u1, u2 = user[b] + noise[0][b], user[b] + noise[1][b]
        pos = math.exp(cos(u1, u2) / 0.2)
        neg = sum(math.exp(cos(user[b], s) / 0.2) for s in synthetic)
        assert got[b].item() == pytest.approx(-math.log(pos / (pos + neg)), rel=1e-5)


def test_item_contrastive_equals_eq10_per_client_and_ignores_padding():
    gen = torch.Generator().manual_seed(2)
    v1, v2 = torch.randn(3, 4, 5, generator=gen), torch.randn(3, 4, 5, generator=gen)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]], dtype=torch.bool)
    for reduction in ("sum", "mean"):
        got = item_contrastive(v1, v2, mask, 0.2, reduction)
        for b in range(3):
            items = [k for k in range(4) if mask[b, k]]
            terms = [-math.log(math.exp(cos(v1[b, k], v2[b, k]) / 0.2)
                               / sum(math.exp(cos(v1[b, k], v2[b, j]) / 0.2) for j in items)) for k in items]
            want = sum(terms) if reduction == "sum" else sum(terms) / len(terms)
            assert got[b].item() == pytest.approx(want, rel=1e-5, abs=1e-6)
    v1.requires_grad_(True)
    item_contrastive(v1, v2, mask, 0.2, "sum").sum().backward()
    assert torch.isfinite(v1.grad).all() and torch.all(v1.grad[2, 1:] == 0)


def test_union_contrastive_equals_its_definition_per_client():
    gen = torch.Generator().manual_seed(3)
    anchors, negatives = torch.randn(2, 4, 3, generator=gen), torch.randn(2, 4, 2, 3, generator=gen)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]], dtype=torch.bool)
    got = union_contrastive(anchors, mask, negatives, 0.5, "sum")
    for b in range(2):
        items = [k for k in range(4) if mask[b, k]]
        total = 0.0
        for k in items:
            pos = sum(math.exp(cos(anchors[b, k], anchors[b, j]) / 0.5) for j in items if j != k)
            neg = sum(math.exp(cos(anchors[b, k], negatives[b, k, m]) / 0.5) for m in range(2))
            total += -math.log(pos / (pos + neg))
        assert got[b].item() == pytest.approx(total, rel=1e-5)
    lone = union_contrastive(anchors, torch.tensor([[1, 0, 0, 0], [0, 0, 0, 0]], dtype=torch.bool), negatives,
                             0.5, "sum")
    assert torch.equal(lone, torch.zeros(2))  # an item with no other interacted item has no positive


def test_info_nce_is_the_log_softmax_of_the_positive():
    a, p = torch.tensor([[1.0, 0.0]]), torch.tensor([[1.0, 1.0]])
    negatives = torch.tensor([[0.5, -0.5]])
    logits = torch.tensor([cos(a[0], p[0]), 0.5, -0.5]) / 0.2
    assert info_nce(a, p, negatives, 0.2).item() == pytest.approx(-torch.log_softmax(logits, 0)[0].item(), rel=1e-6)


def test_uniformity_penalty_is_eq12():
    gen = torch.Generator().manual_seed(4)
    items = torch.randn(1, 50, 3, generator=gen)
    z = (items[0] - items[0].mean(0)) / items[0].std(0)
    corr = torch.corrcoef(z.T)
    want = float(torch.linalg.matrix_norm(corr)) / 3
    got = uniformity_penalty(items, torch.ones(1, 50, dtype=torch.bool))
    assert got.item() == pytest.approx(want, rel=1e-5)


def test_optimizer_first_step_is_a_fresh_optimizers_step():
    grad = torch.tensor([0.3, -2.0, 0.0])
    for name in ("adam", "sgd"):
        config = ClientOptimizer(name, 0.01)
        param = torch.zeros(3, requires_grad=True)
        opt = config.make([param])
        param.grad = grad.clone()
        opt.step()
        assert torch.allclose(optimizer_first_step(grad, config), param.detach(), atol=1e-7)


# -- the client step -------------------------------------------------------------------------------

def test_item_views_are_one_loss_step_under_each_user_view_per_client():
    method, env = make_method(CL)
    problem = method.client.problems(round_of(method).sampler.users(0), 0, method.server.synthetic)[0]
    user = method.client.private.user[problem.batch.users]
    got = method.client.item_views(problem, user)
    noise = uniform_views(user, problem.batch.users, method.client.view_seed(0), method.config.eta)
    for b in range(problem.batch.size):
        for view in (0, 1):
            rows = method.public.item[problem.items[b]].clone().requires_grad_(True)
            u = (user[b] + noise[view][b]).unsqueeze(0)
            vectors = rows[torch.cat([problem.pos_slot[b], problem.neg_slot[b].reshape(-1)])]
            scores = env.backbone.score(u, vectors.unsqueeze(0), method.public.net)[0]
            P = problem.pos_slot.shape[1]
            pos, neg = scores[:P], scores[P:].reshape(P, -1)
            keep = problem.batch.pos_mask[b]
            loss = (F.softplus(-pos)[keep].sum() + F.softplus(neg)[keep].sum())  # Eq. 1, summed
            (grad,) = torch.autograd.grad(loss, rows)
            want = optimizer_first_step(grad, method.config.optimizer) * problem.item_mask[b].unsqueeze(-1)
            assert torch.allclose(got[view][b], want, atol=1e-6)


@pytest.mark.parametrize("extra", [[], ["method=rcl4fedrec", "method.hot_items=10"], ["method=simgcl"],
                                   ["method=union"],
                                   ["method.uniformity_alpha=0.3", "sim.local_epochs=2"]],
                         ids=["cl4fedrec", "rcl4fedrec", "simgcl", "union", "poc-two-steps"])
def test_the_vectorized_client_step_equals_one_client_at_a_time(extra):
    method, env = make_method(CL + extra)
    users = round_of(method).sampler.users(0)
    together = {}
    for problem in method.client.problems(users, 0, method.server.synthetic):
        result = method.client.step(problem)
        for b, user in enumerate(problem.batch.users.tolist()):
            together[user] = (result.user[b], result.loss[b], {k: v[b] for k, v in result.uploads.dense.items()})
    for user in users[:5].tolist():
        (problem,) = method.client.problems(torch.tensor([user]), 0, method.server.synthetic)
        alone = method.client.step(problem)
        assert torch.allclose(alone.user[0], together[user][0], atol=1e-6)
        assert alone.loss[0].item() == pytest.approx(together[user][1].item(), rel=1e-5)
        for name, delta in alone.uploads.dense.items():
            assert torch.allclose(delta[0], together[user][2][name], atol=1e-6)


def test_without_contrastive_terms_cl4fedrec_is_fedavg():
    common = NCF + ["method.optimizer.name=adam", "method.optimizer.lr=0.01", "method.num_negatives=4",
                    "method.loss_reduction=sum", "method.optimizer.user_lr=null", "defense=mean"]
    cl, _ = make_method(["method=cl4fedrec", "method.user_cl=none", "method.item_cl=none"] + common)
    plain, _ = make_method(["method=fedavg"] + common)
    for r in range(3):
        round_of(cl).train_round(r)
        round_of(plain).train_round(r)
    assert torch.allclose(cl.public.item, plain.public.item, atol=1e-6)
    assert torch.allclose(cl.client.private.user, plain.client.private.user, atol=1e-6)


def test_contrastive_terms_change_the_training():
    plain, _ = make_method(CL + ["method.user_cl=none", "method.item_cl=none"])
    cl, _ = make_method(CL)
    round_of(plain).train_round(0)
    round_of(cl).train_round(0)
    assert not torch.allclose(cl.public.item, plain.public.item)


# -- the server ------------------------------------------------------------------------------------

def test_synthetic_items_are_distinct_and_drawn_by_popularity():
    popularity = torch.tensor([1000, 1000, 1, 1, 1, 1, 1, 1, 0, 0])
    items = draw_synthetic_items(popularity, 200, 3, "popularity", torch.Generator().manual_seed(0))
    assert items.shape == (200, 3)
    assert all(len(set(row.tolist())) == 3 for row in items)
    assert not torch.isin(items, torch.tensor([8, 9])).any()  # never an item nobody interacted with
    assert (items < 2).sum(1).float().mean() > 1.9  # the two popular items are in almost every set
    uniform = draw_synthetic_items(popularity, 200, 3, "uniform", torch.Generator().manual_seed(0))
    assert torch.isin(uniform, torch.tensor([8, 9])).any()


def test_the_synthetic_fit_minimises_eq5_on_frozen_public_parameters():
    method, env = make_method(CL + ["method.synthetic_fit_steps=200", "method.synthetic_fit_lr=0.05"])
    item, net = method.public.item.clone(), {k: v.clone() for k, v in method.public.net.items()}
    n_neg = method.config.num_negatives

    def expected_loss(rows):  # Eq. 5's BCE with its uniform negatives in expectation, per synthetic user
        own = env.backbone.score(rows, method.public.item[method.server.synthetic_items], method.public.net)  # [S,N]
        every = env.backbone.score(rows, method.public.item.expand(rows.shape[0], -1, -1), method.public.net)
        return float((F.softplus(-own).mean(1) + n_neg * F.softplus(every).mean(1)).mean())

    method.server.synthetic = torch.randn(method.server.synthetic.shape, generator=torch.Generator().manual_seed(0))
    before = expected_loss(method.server.synthetic)
    method.server.fit_synthetic_users()
    assert torch.equal(item, method.public.item) and all(torch.equal(net[k], v) for k, v in method.public.net.items())
    assert expected_loss(method.server.synthetic) < before - 0.05


def test_regularizer_loss_on_a_hand_computed_example():
    hot = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    normal = torch.tensor([[1.0, 1.0], [-3.0, 0.0]])
    tau = 0.5
    want = 0.0
    for h in hot:
        want += math.log(sum(math.exp(cos(h, n) / tau) for n in normal)) - 1 / tau
    assert regularizer_loss(hot, normal, tau).item() == pytest.approx(want, rel=1e-6)


def test_calibration_moves_only_hot_and_sampled_rows_and_lowers_eq14():
    method, env = make_method(["method=rcl4fedrec", "method.hot_items=5", "method.reg_sample=20",
                               "method.reg_steps=20", "method.reg_lr=0.01"] + CL[1:])
    before = method.public.item.clone()
    metrics = method.server.calibrate(0)
    moved = (method.public.item != before).any(1)
    assert moved[method.server.hot].all() and int(moved.sum()) == 25
    assert metrics["regularizer_loss_after"] < metrics["regularizer_loss_before"]
    hot = set(method.server.hot.tolist())
    assert hot == set(torch.argsort(method.server.popularity, descending=True, stable=True)[:5].tolist())


def test_by_default_every_normal_item_is_regularized_every_epoch():
    """reg_sample 0 (the default): V_sp is the whole normal set, so no epoch can leave a target out of Eq. 14."""
    method, env = make_method(["method=rcl4fedrec", "method.hot_items=5", "method.reg_lr=0.01"] + CL[1:])
    assert method.config.reg_sample == 0
    for epoch in range(2):
        before = method.public.item.clone()
        method.server.calibrate(epoch)
        assert (method.public.item != before).any(1).all()  # hot and every normal row moved


def test_an_epoch_end_runs_the_regularizer_and_refits_the_synthetic_users():
    method, env = make_method(["method=rcl4fedrec", "method.hot_items=10"] + CL[1:])
    rounds = round_of(method)
    metrics = {}
    for r in range(rounds.rounds_per_epoch()):
        metrics = rounds.train_round(r).extra
    expected = {"regularizer_loss_before", "regularizer_loss_after", "synthetic_fit_loss", "item_uniformity"}
    assert expected <= set(metrics)
    assert method.server.synthetic_fits == 2  # at the start and after epoch 1


def test_server_side_work_reads_public_parameters_only():
    method, env = make_method(["method=rcl4fedrec", "method.hot_items=10"] + CL[1:])
    saved = (env.train, method.client.private)
    env.train, method.client.private = Poison("ClientStore"), Poison("PrivateParams")
    try:
        method.server.calibrate(0)
        method.server.fit_synthetic_users()
        exchange = method.exchange(torch.arange(4), 0, None)
    finally:
        env.train, method.client.private = saved
    private_storage = method.client.private.user.untyped_storage().data_ptr()
    assert exchange.sent.untyped_storage().data_ptr() != private_storage
    assert exchange.bytes_down == 6 * method.client.private.user.shape[1] * 4
    assert not any(obj is env.train or obj is method.client.private for obj in reachable(method.server))


def test_checkpoint_state_restores_the_synthetic_users():
    method, _ = make_method(CL)
    round_of(method).train_round(0)
    state = method.state_dict()
    other, _ = make_method(CL + ["sim.seed=5"])
    other.load_state_dict(state)
    assert torch.equal(other.server.synthetic, method.server.synthetic)
    assert other.server.synthetic_fits == method.server.synthetic_fits


@pytest.mark.parametrize("override, field", [
    ("method.tau=0", "tau"), ("method.eta=-1", "eta"), ("method.user_cl=views", "user_cl"),
    ("method.item_cl=graph", "item_cl"), ("method.synthetic_users=0", "synthetic_users"),
    ("method.synthetic_items=500", "synthetic_items"), ("method.lambda_user=-0.5", "lambda_user"),
    ("method.synthetic_sampling=zipf", "synthetic_sampling"), ("method.item_view_lr=0", "item_view_lr"),
    ("method.item_cl=union", "item_cl"),  # UNION's views belong to method=union
])
def test_bad_values_are_named(override, field):
    with pytest.raises(ConfigError, match=field):
        make_method(CL + [override])


def test_union_needs_negatives():
    with pytest.raises(ConfigError, match="num_negatives"):
        make_method(["method=union", "method.num_negatives=0"] + CL[1:])


@pytest.mark.parametrize("override, field", [("method.hot_items=80", "hot_items"), ("method.reg_steps=0", "reg_steps"),
                                             ("method.reg_sample=-1", "reg_sample")])
def test_bad_regularizer_values_are_named(override, field):
    with pytest.raises(ConfigError, match=field):
        make_method(["method=rcl4fedrec", "method.hot_items=10"] + CL[1:] + [override])
