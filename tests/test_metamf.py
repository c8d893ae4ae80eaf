"""MetaMF: the server's back-propagation of the clients' uploads equals each client's loss
differentiated end to end through the meta network (a per-client loop), pair and full-catalogue
scores agree, uploads follow MetaMF's schema, the server phase sees uploads only, and bad settings
are named."""

from __future__ import annotations

import pytest
import torch

from fedrun.errors import ConfigError
from fedrun.kernels.guards import UploadError
from fedrun.method.federated import ClientResult
from fedrun.method.metamf import generate, head, left_rows, predict
from fedrun.types import RoundContext, Uploads
from tests.conftest import make_method, round_of, unpack
from tests.test_privacy_boundary import server_phase_calls

METAMF = ["method=metamf", "backbone=metamf/pmf", "backbone.dim=8", "dataset.ratings=true",
          "dataset.split.protocol=random_ratio", "dataset.split.valid=false", "method.hidden=16",
          "method.memory=8", "method.user_dim=4", "method.item_factors=3", "method.chunk_rows=7"]


def end_to_end_gradients(method, users: torch.Tensor) -> dict[str, torch.Tensor]:
    """One client at a time: its mean squared error through the whole meta network (no split between
    client and server), differentiated w.r.t. every server weight, averaged over the clients."""
    env, net = method.env, method.public.net
    dim, s = env.backbone.config.dim, method.config.item_factors
    total = {name: torch.zeros_like(t) for name, t in net.items()}
    for user in users.tolist():
        start, end = env.train.indptr[user], env.train.indptr[user + 1]
        items, ratings = env.train.items[start:end], env.train.ratings[start:end]
        params = {name: t.detach().clone().requires_grad_(True) for name, t in net.items()}
        gen = generate(params, torch.tensor([user]), dim, s)
        left = head(params, "items.left", gen["h_items"]).view(1, env.n_items, s)[:, items]  # [1, P, s]
        loss = ((predict(gen, left) - ratings) ** 2).mean()
        for name, grad in zip(params, torch.autograd.grad(loss, list(params.values()), allow_unused=True)):
            if grad is not None:
                total[name] += grad
    return {name: g / users.numel() for name, g in total.items()}


def test_server_backprop_of_uploads_equals_end_to_end_gradients():
    method, _ = make_method(METAMF)
    users = round_of(method).sampler.users(0)
    problems = method.client.problems(users, 0)
    uploads = Uploads.concat([method.client.step(p).uploads for p in problems])
    senders = torch.cat([p.batch.users for p in problems])
    aggregate = method.server.aggregate(uploads, senders, round_of(method).defense,
                                        RoundContext(0, 0, senders.numel()))
    want = end_to_end_gradients(method, senders)
    assert aggregate.items.numel() == 0  # no shared item table
    for name, grad in want.items():
        torch.testing.assert_close(-aggregate.dense[name], grad, rtol=1e-4, atol=1e-6, msg=name)
    assert want["items.left.w"].abs().sum() > 0 and want["user_embedding"][senders].abs().sum() > 0


def test_pair_scores_equal_full_catalogue_scores():
    method, env = make_method(METAMF)
    round_of(method).train_round(0)
    users = torch.tensor([0, 3, 3, 7])
    full = method.score_users(users)  # [4, m]
    items = torch.tensor([5, 0, 11, env.n_items - 1])
    torch.testing.assert_close(method.score_pairs(users, items), full[torch.arange(4), items], rtol=1e-5, atol=1e-6)


def test_training_lowers_the_loss():
    method, _ = make_method(METAMF + ["sim.clients_per_round=all", "method.server_optimizer.lr=0.01"])
    losses = [round_of(method).train_round(r).loss for r in range(30)]
    assert losses[-1] < 0.5 * losses[0]


def test_traffic_is_the_generated_model_down_and_its_gradients_up():
    method, env = make_method(METAMF)
    stats = round_of(method).train_round(0)
    f, s, h, m = 8, 3, 2, env.n_items
    assert stats.bytes_down == 4 * (m * s + s * f + f * h + h + h + 1)
    rated = float(env.train.sizes(round_of(method).sampler.users(0)).double().mean())
    assert stats.bytes_up == pytest.approx(rated * (4 + 4 * s) + 4 * (s * f + f * h + h + h + 1))


def test_uploads_outside_metamf_schema_are_refused():
    method, _ = make_method(METAMF)
    honest = method.client.step

    def leaky(problem):
        uploads, user, loss = unpack(honest(problem))
        dense = {**uploads.dense, "ratings": problem.batch.ratings}
        return ClientResult(Uploads(uploads.n_clients, uploads.row_client, uploads.row_item, uploads.row_delta,
                                    dense), user, loss)

    method.client.step = leaky
    with pytest.raises(UploadError, match=r"undeclared fields \['ratings'\]"):
        round_of(method).train_round(0)


def test_server_phase_sees_uploads_only():
    """The back-propagation through the meta network and the server step run with client data poisoned."""
    method, env = make_method(METAMF)
    assert server_phase_calls(method, env) == ["aggregate", "server.step"]


@pytest.mark.parametrize("override,field", [
    (["backbone.dim=6"], "backbone.dim"),
    (["method.item_factors=0"], "method.item_factors"),
    (["backbone=mf", "dataset.ratings=false"], "backbone"),
    (["privacy=ldp", "privacy.targets=[item_rows]"], "privacy"),
])
def test_bad_settings_are_named(override, field):
    with pytest.raises(ConfigError, match=field):
        make_method(METAMF + override)


def test_dense_and_gathered_row_generation_agree_in_value_and_gradient():
    method, env = make_method(METAMF)
    net = {name: t.detach().clone().requires_grad_(True) for name, t in method.public.net.items()}
    gen = generate(net, torch.tensor([4, 1, 9]), 8, 3)
    owner = torch.tensor([2, 0, 0, 1, 2, 1, 0])  # unsorted, repeated owners
    items = torch.tensor([5, 1, 7, 5, 0, env.n_items - 1, 3])
    results = []
    for dense in (True, False):
        rows = left_rows(net, gen["h_items"], owner, items, 3, chunk=2, dense=dense)
        grads = torch.autograd.grad(rows.pow(2).sum(), [net["items.left.w"], net["user_embedding"]],
                                    retain_graph=True)
        results.append((rows.detach(), grads))
    torch.testing.assert_close(results[0][0], results[1][0], rtol=1e-5, atol=1e-6)
    for a, b in zip(results[0][1], results[1][1]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
