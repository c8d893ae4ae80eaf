"""FCF: the vectorized round against a per-client loop that builds each client's dense [m, f]
upload (Eq. 4, 6, 7), learning on synthetic data, and bad settings named."""

from __future__ import annotations

import pytest
import torch

from fedrun.app.experiment import run
from fedrun.errors import ConfigError
from tests.conftest import CPU_ORACLE, SMALL, compose_cfg, make_method, round_of

FCF = ["method=fcf", "backbone=pmf", "backbone.dim=6", "backbone.l2=0.05", "dataset.ratings=true",
       "dataset.split.protocol=random_ratio", "dataset.split.valid=false"]


def oracle_round(method, users):
    """Each client alone, in float64: dense confidences, x_u = (YᵀC^uY + λI)⁻¹YᵀC^u p(u), and the
    dense upload f(u, i) = c_ui (p_ui − x_uᵀy_i) x_u for every item; the server sums them."""
    Y = method.public.item.double()
    lam, alpha = method.env.backbone.config.l2, method.config.alpha
    store = method.env.train
    total = torch.zeros_like(Y)
    xs, losses = [], []
    for u in users.tolist():
        start, end = int(store.indptr[u]), int(store.indptr[u + 1])
        items = store.items[start:end]
        conf = torch.ones(Y.shape[0], dtype=torch.float64)
        pref = torch.zeros(Y.shape[0], dtype=torch.float64)
        conf[items] = 1 + alpha * method.scale(store.ratings[start:end]).double()
        pref[items] = 1.0
        lhs = Y.T @ (conf[:, None] * Y) + lam * torch.eye(Y.shape[1], dtype=torch.float64)
        x = torch.linalg.solve(lhs, Y.T @ (conf * pref))
        residual = pref - Y @ x
        total += (conf * residual)[:, None] * x[None, :]  # f(u, i) for all i
        xs.append(x)
        losses.append(float((conf * residual.pow(2)).sum() + lam * x.pow(2).sum()))
    return 2 * total, torch.stack(xs), torch.tensor(losses, dtype=torch.float64)


def test_round_equals_the_sum_of_dense_per_client_uploads():
    method, env = make_method(FCF + ["sim.buckets=3", CPU_ORACLE])
    users = round_of(method).sampler.users(0)
    expected_sum, expected_user, expected_loss = oracle_round(method, users)
    fast = method.fast_round(users, 0, None, round_of(method).defense)
    assert torch.equal(fast.aggregate.items, torch.arange(env.n_items))
    torch.testing.assert_close(fast.aggregate.item_delta.double(), expected_sum, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(method.client.private.user[users].double(), expected_user, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(fast.losses.sort().values.double(), expected_loss.sort().values, rtol=1e-4, atol=1e-4)


def test_server_adds_the_item_regulariser():
    method, env = make_method(FCF + ["method.server_optimizer.name=sgd", "method.server_optimizer.lr=0.1"])
    before = method.public.item.clone()
    users = round_of(method).sampler.users(0)
    fast = method.fast_round(users, 0, None, round_of(method).defense)
    method.server.step(fast.aggregate, None)
    expected = before + 0.1 * (fast.aggregate.item_delta - 2 * 0.05 * before)  # Y − γ ∂J/∂Y (Eq. 7)
    torch.testing.assert_close(method.public.item, expected)


def test_fcf_learns_and_counts_dense_traffic():
    method, env = make_method(FCF + ["method.server_optimizer.lr=0.05"])
    losses = [round_of(method).train_round(t) for t in range(30)]
    assert losses[-1].loss < 0.8 * losses[0].loss
    item_bytes = env.n_items * 6 * 4  # the dense [m, f] float32 matrix each way
    assert losses[-1].bytes_up == item_bytes and losses[-1].bytes_down == item_bytes
    cfg = compose_cfg(SMALL + FCF + ["sim.max_rounds=30", "sim.epochs=30", "eval.kind=ranking",
                                     "method.server_optimizer.lr=0.05"])
    assert run(cfg).test["hr_at_10"] > 0.3  # random ranking: 10/80 = 0.125


@pytest.mark.parametrize("overrides,field", [
    (["backbone=mf"], "backbone"),
    (["privacy=ldp", "privacy.targets=[item_rows]"], "privacy"),
    (["method.alpha=-1"], "method.alpha"),
])
def test_bad_settings_are_named(overrides, field):
    with pytest.raises(ConfigError) as err:
        make_method(FCF + overrides)
    assert err.value.field == field


def test_popularity_ranks_sampled_candidates_by_counts():
    """Pop's rating prediction (the mean) ties every pair; sampled ranking must use its counts."""
    cfg = compose_cfg(SMALL + ["method=pop", "eval=sampled", "eval.num_negatives=19", "eval.ks=[5,10]",
                               "eval.ties=pessimistic", "eval.kind=ranking"])
    assert run(cfg).test["hr_at_10"] > 0.3  # ties broken against the target gave 0 (random: 0.5)
    method, env = make_method(["method=pop"])
    users, items = torch.tensor([0, 1, 2]), torch.tensor([5, 6, 7])
    torch.testing.assert_close(method.rank_pairs(users, items), method.score_users(users)[torch.arange(3), items])
