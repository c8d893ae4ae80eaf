"""PrivRec: the vectorized Reptile step equals a per-client loop, each client's whole update is
clipped to S, the server's Gaussian noise has σ = zS on the sum, clients adapt before ranking, and
bad settings are named."""

from __future__ import annotations

import pytest
import torch

from fedrun.errors import ConfigError
from fedrun.kernels.batching import local_problem
from fedrun.method.privrec import USER_INIT, clip_clients
from fedrun.types import RoundContext, Uploads
from tests.conftest import CPU_ORACLE, make_method, round_of, unpack
from tests.test_privacy_boundary import server_phase_calls

PRIVREC = ["method=privrec", "backbone=pmf", "backbone.dim=4", "backbone.init_std=0.1", "dataset.ratings=true",
           "dataset.split.protocol=random_ratio", "dataset.split.valid=false"]


def reptile_loop(method, users: torch.Tensor) -> dict[int, tuple[torch.Tensor, dict[int, torch.Tensor]]]:
    """One client at a time, plain SGD by hand on its min-max scaled ratings: user → (u₀ delta,
    {item: row delta}), before clipping."""
    env, config = method.env, method.config
    lam, lr = env.backbone.config.l2, config.optimizer.lr
    out = {}
    for user in users.tolist():
        start, end = env.train.indptr[user], env.train.indptr[user + 1]
        items, ratings = env.train.items[start:end], method.scale(env.train.ratings[start:end])
        u0 = method.public.net[USER_INIT].detach().clone()
        u, v = u0.clone().requires_grad_(True), method.public.item[items].detach().clone().requires_grad_(True)
        for _ in range(config.local_steps):
            loss = ((v @ u - ratings) ** 2).mean()
            if lam:
                loss = loss + lam * ((u ** 2).sum() + (v ** 2).sum(1).mean())
            gu, gv = torch.autograd.grad(loss, [u, v])
            with torch.no_grad():
                u -= lr * gu
                v -= lr * gv
        delta_v = (v - method.public.item[items]).detach()
        out[user] = ((u - u0).detach(), {int(i): delta_v[k] for k, i in enumerate(items.tolist())})
    return out


def test_client_step_equals_a_per_client_reptile_loop():
    method, _ = make_method(PRIVREC + ["method.clip=1e9", "method.optimizer.lr=0.3"])
    users = round_of(method).sampler.users(0)
    problems = method.client.problems(users, 0)
    want = reptile_loop(method, torch.cat([p.batch.users for p in problems]))
    for problem in problems:
        uploads, new_user, _ = unpack(method.client.step(problem))
        for c, user in enumerate(problem.batch.users.tolist()):
            user_delta, rows = want[user]
            torch.testing.assert_close(uploads.dense[USER_INIT][c], user_delta, rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(new_user[c], method.public.net[USER_INIT] + user_delta, rtol=1e-5, atol=1e-6)
            mine = uploads.row_client == c
            assert sorted(uploads.row_item[mine].tolist()) == sorted(rows)
            for item, delta in zip(uploads.row_item[mine].tolist(), uploads.row_delta[mine]):
                torch.testing.assert_close(delta, rows[item], rtol=1e-5, atol=1e-6)


def test_each_clients_whole_update_is_clipped_jointly():
    gen = torch.Generator().manual_seed(0)
    client = torch.tensor([0, 0, 1, 2, 2, 2])
    uploads = Uploads(3, client, torch.tensor([1, 2, 1, 0, 1, 2]), 3 * torch.randn(6, 4, generator=gen),
                      {USER_INIT: torch.randn(3, 4, generator=gen)})
    uploads.row_delta[client == 1] *= 1e-3  # client 1 stays inside the bound
    uploads.dense[USER_INIT][1] *= 1e-3
    clipped, norm = clip_clients(uploads, bound=2.0)
    for c in range(3):
        before = torch.cat([uploads.row_delta[client == c].ravel(), uploads.dense[USER_INIT][c]])
        after = torch.cat([clipped.row_delta[client == c].ravel(), clipped.dense[USER_INIT][c]])
        torch.testing.assert_close(norm[c], before.norm())
        assert after.norm() <= 2.0 + 1e-5
        if before.norm() <= 2.0:
            assert torch.equal(after, before)
        else:  # the direction is kept: one scale for the whole update
            torch.testing.assert_close(after, before * 2.0 / before.norm())


def test_server_noise_has_sigma_zs_on_the_sum():
    method, env = make_method(PRIVREC + ["method.noise=0.5", "method.clip=4", CPU_ORACLE])
    n, d = 10, 4
    silent = Uploads(n, torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long), torch.zeros(0, d),
                     {USER_INIT: torch.zeros(n, d)})
    exact_sum = round_of(method).defense.exact_sum(silent)
    aggregate = method.server.noisy_mean(exact_sum, RoundContext(0, 0, n))
    noise = aggregate.item_delta * n  # the noise on the sum
    assert noise.shape == (env.n_items, d) and torch.equal(aggregate.items, torch.arange(env.n_items))
    assert abs(noise.std().item() - 2.0) < 0.15 and abs(noise.mean().item()) < 0.15  # σ = zS = 2, 320 draws
    again = method.server.noisy_mean(exact_sum, RoundContext(0, 0, n))
    assert torch.equal(again.item_delta, aggregate.item_delta)  # seeded per round
    assert not torch.equal(method.server.noisy_mean(exact_sum, RoundContext(1, 0, n)).item_delta,
                           aggregate.item_delta)


def test_without_noise_the_server_applies_the_mean_clipped_update():
    method, _ = make_method(PRIVREC + ["method.noise=0", "method.clip=0.05"])
    item0, init0 = method.public.item.clone(), method.public.net[USER_INIT].clone()
    users = round_of(method).sampler.users(0)
    parts = [method.client.step(p).uploads for p in method.client.problems(users, 0)]
    uploads = Uploads.concat(parts)
    method.server.public.item.copy_(item0)
    expected = item0.clone().index_add_(0, uploads.row_item, uploads.row_delta / users.numel())
    round_of(method).train_round(0)
    torch.testing.assert_close(method.public.item, expected)
    torch.testing.assert_close(method.public.net[USER_INIT], init0 + uploads.dense[USER_INIT].mean(0))


def test_clients_adapt_before_ranking_and_learn_without_noise():
    method, env = make_method(PRIVREC + ["method.noise=0", "method.optimizer.lr=0.3", "sim.clients_per_round=all"])
    losses = [round_of(method).train_round(r).loss for r in range(15)]
    assert losses[-1] < 0.5 * losses[0]
    prepared = []
    adapt_all = method.prepare_ranking
    method.prepare_ranking = lambda: (prepared.append(method.server_steps), adapt_all())
    with torch.no_grad():
        method.client.private.user.zero_()  # whatever the rounds left on the clients
    users = env.clients_with_data()
    scores = method.score_pairs(users, torch.zeros_like(users))
    problem = local_problem(env.train.client_batch(users[:5]), None, env.n_items)
    client = method.client
    torch.testing.assert_close(client.private.user[users[:5]], client.adapt(problem).user)  # k steps from θ
    assert torch.isfinite(scores).all()
    method.score_users(users)
    assert prepared == [15]  # once per server step, not once per scoring call
    round_of(method).train_round(15)
    method.score_users(users[:3])
    assert prepared == [15, 16]


@pytest.mark.parametrize("override,field", [
    (["privacy=ldp", "privacy.targets=[item_rows]"], "privacy"),
    (["backbone=mf", "dataset.ratings=false"], "backbone"),
    (["method.clip=0"], "method.clip"),
    (["method.noise=-1"], "method.noise"),
    (["method.local_steps=0"], "method.local_steps"),
    (["method.delta=1"], "method.delta"),
])
def test_bad_settings_are_named(override, field):
    with pytest.raises(ConfigError, match=field):
        make_method(PRIVREC + override)


def test_server_phase_sees_uploads_only():
    """The noisy aggregation and the server step run with client data and private rows poisoned."""
    method, env = make_method(PRIVREC)
    assert server_phase_calls(method, env) == ["aggregate", "server.step"]


def test_the_accountant_takes_the_best_renyi_order_in_closed_form():
    """ε = min over α of kα/(2z²) + log(1/δ)/(α − 1), against a fine grid of orders; no release costs nothing."""
    import math

    from fedrun.privacy.accountant import gaussian_epsilon

    for releases, z, delta in [(1, 1.0, 1e-5), (20, 1.0, 1e-5), (300, 4.0, 1e-6), (5, 0.5, 1e-3)]:
        grid = min(releases * a / (2 * z * z) + math.log(1 / delta) / (a - 1) for a in
                   (1 + 10 ** (e / 2000) for e in range(-8000, 8000)))
        assert gaussian_epsilon(releases, z, delta) == pytest.approx(grid, rel=1e-6)
    assert gaussian_epsilon(0, 1.0, 1e-5) == 0.0 and gaussian_epsilon(3, 0.0, 1e-5) == math.inf
    assert gaussian_epsilon(10, 1.0, 1e-5) < gaussian_epsilon(11, 1.0, 1e-5)


def test_privrec_accounts_each_clients_rounds_and_keeps_the_count_in_its_checkpoint():
    from fedrun.privacy.accountant import gaussian_epsilon

    noisy = PRIVREC + ["method.noise=2", "method.clip=0.01", "method.delta=1e-6", "sim.clients_per_round=all"]
    method, _ = make_method(noisy)
    stats = [round_of(method).train_round(r).extra for r in range(3)]
    assert [s["dp_epsilon_spent_max"] for s in stats] == [gaussian_epsilon(r + 1, 2.0, 1e-6) for r in range(3)]
    assert stats[-1]["dp_delta"] == 1e-6
    restored, _ = make_method(noisy)
    restored.load_state_dict(method.state_dict())
    releases = restored.ledgers["dp_releases"]
    assert torch.equal(releases, method.ledgers["dp_releases"]) and int(releases.max()) == 3
    quiet, _ = make_method(PRIVREC + ["method.noise=0", "sim.clients_per_round=all"])
    assert "dp_epsilon_spent_max" not in round_of(quiet).train_round(0).extra
