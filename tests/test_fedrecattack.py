"""FedRecAttack: the known sample, the poisoning gradient and the clients' split of it against
per-pair and per-client reference loops of the authors' algorithm, the fit, bad input, and the
attack raising the target's exposure end to end."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedrun.app import experiment
from fedrun.app.build import parse_config
from fedrun.app.plan import plan
from fedrun.attack._known import sample_known
from fedrun.attack.base import AttackSetup
from fedrun.attack.config import FedRecAttackConfig
from fedrun.attack.fedrecattack import MASKED, FedRecAttack
from fedrun.backbone.mf import MF
from fedrun.data.interactions import Interactions
from fedrun.errors import ConfigError
from fedrun.types import RoundContext
from tests.conftest import SMALL, compose_cfg, needs_data

N_USERS, N_ITEMS = 40, 30


def train_interactions(seed: int = 0) -> Interactions:
    rng = np.random.default_rng(seed)
    keys = np.unique(rng.integers(0, N_USERS * N_ITEMS, 500))
    return Interactions(keys // N_ITEMS, keys % N_ITEMS, N_USERS, N_ITEMS)


def attack_with(targets=(3, 7), known_fraction=0.3, **fields):
    backbone = MF(parse_config(MF.Config, {"dim": 4}, "backbone"))
    _, public = backbone.init_params(N_USERS, N_ITEMS, torch.Generator().manual_seed(1))
    config = FedRecAttackConfig(fraction=0.1, items_limit=8, known_fraction=known_fraction, **fields)
    attack = FedRecAttack(config)
    known = sample_known(train_interactions(), known_fraction, seed=5)
    attack.setup(AttackSetup(backbone, N_USERS, 0.5, 0.05, torch.tensor(targets), seed=11,
                             device=torch.device("cpu"), n_items=N_ITEMS, known=known))
    return attack, public


def test_the_known_sample_is_a_seeded_share_of_the_training_pairs():
    train = train_interactions()
    known = sample_known(train, 0.1, seed=5)
    pairs = set(zip(train.user.tolist(), train.item.tolist()))
    got = list(zip(known.user.tolist(), known.item.tolist()))
    assert len(got) == int(len(train) * 0.1) and len(set(got)) == len(got) and set(got) <= pairs
    again = sample_known(train, 0.1, seed=5)
    assert torch.equal(again.user, known.user) and torch.equal(again.item, known.item)
    assert not torch.equal(sample_known(train, 0.1, seed=6).keys, known.keys)
    user, item = torch.randint(N_USERS, (200,)), torch.randint(N_ITEMS, (200,))
    expected = [(u, i) in set(got) for u, i in zip(user.tolist(), item.tolist())]
    assert known.contains(user, item).tolist() == expected


def reference_gradient(users, item, known, targets, top_k):
    """The authors' center, one user and one target at a time (MF scores)."""
    known_set = set(zip(known.user.tolist(), known.item.tolist()))
    table = item.clone().requires_grad_(True)
    loss = 0
    for u in range(users.shape[0]):
        scores = users[u] @ item.T
        for i in range(item.shape[0]):
            if (u, i) in known_set or i in targets:
                scores[i] = MASKED
        top = scores.topk(top_k).indices.tolist()
        for t in targets:
            if (u, t) in known_set:
                continue
            rival = top.pop()
            gap = users[u] @ table[rival] - users[u] @ table[t]
            loss = loss + (gap if gap >= 0 else torch.exp(gap) - 1)
    return torch.autograd.grad(loss, table)[0]


def test_the_poisoning_gradient_equals_a_per_pair_reference_loop():
    attack, public = attack_with(targets=(3, 7, 20), top_k=5)
    attack.users.data.normal_(0, 1, generator=torch.Generator().manual_seed(2))
    got = attack.poison_gradient(public.item, public.net)
    expected = reference_gradient(attack.users.detach(), public.item, attack.known, [3, 7, 20], 5)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    assert got[[3, 7, 20]].norm(dim=1).gt(0).all()  # the targets are pushed up


def test_the_clients_split_g_as_the_codes_sequential_subtraction():
    """Each client in round order reads what is left of G on its rows, clips them to grad_limit and
    subtracts what it sent (noise off); a row some clients share is spent grad_limit at a time."""
    attack, _ = attack_with(noise_var=0.0, grad_limit=0.5)
    gradient = torch.randn(N_ITEMS, 4, generator=torch.Generator().manual_seed(3)) * 0.6
    gradient[3] *= 5  # the shared target row outlasts a few clients
    attack.gradient = gradient.clone()
    sets = torch.stack([torch.tensor([3, 1, 2, 9]), torch.tensor([3, 2, 5, 6]), torch.tensor([3, 0, 9, 2])])
    got = attack.split_among(sets, RoundContext(0, 0, 8))
    left, expected = gradient.clone(), []
    for rows in sets:
        sent = left[rows].clone()
        norm = sent.norm(dim=1, keepdim=True)
        too_large = norm[:, 0] > 0.5
        sent[too_large] /= norm[too_large] / 0.5
        left[rows] -= sent
        expected.append(sent)
    torch.testing.assert_close(got, torch.cat(expected), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(attack.gradient, left, rtol=1e-5, atol=1e-6)


def test_uploads_carry_the_targets_and_items_drawn_by_gradient_norm():
    attack, public = attack_with(participation="every_round")
    uploads = attack.craft(public, RoundContext(0, 0, 8))
    M, L = attack.n_clients, attack.config.items_limit
    assert M == 4 and uploads.n_clients == M and uploads.row_item.numel() == M * L
    sets = uploads.row_item.view(M, L)
    assert (sets[:, :2] == torch.tensor([3, 7])).all()
    assert all(len(set(row.tolist())) == L for row in sets)  # distinct rows per client
    norms = (uploads.row_delta / -attack.lr).norm(dim=1)
    assert norms.max() <= attack.config.grad_limit + 1e-3  # clipped (plus the 1e-7-variance noise)


def test_fitting_the_approximated_users_lowers_their_bpr_loss():
    attack, public = attack_with(known_fraction=0.8, attack_lr=0.05)
    public.item.mul_(10)  # items far apart, so the users have something to fit
    losses = [attack.fit_users(public.item, public.net) for _ in range(30)]
    assert losses[-1] < 0.8 * losses[0]


def test_the_attacker_sees_the_known_sample_only():
    """The setup hands the attack a KnownInteractions (pairs) — no split, client store or uploads."""
    attack, _ = attack_with()
    known = attack.known
    assert set(vars(known)) == {"user", "item", "n_users", "n_items"}
    assert "known_interactions" in FedRecAttack.needs and "client_step" not in FedRecAttack.needs


@pytest.mark.parametrize("overrides,field", [
    (["attack.known_fraction=0"], "attack.known_fraction"),
    (["attack.grad_limit=-1"], "attack.grad_limit"),
    (["attack.items_limit=0"], "attack.items_limit"),
])
def test_bad_fedrecattack_settings_are_refused_before_any_data_is_read(overrides, field, tmp_path, monkeypatch):
    monkeypatch.setenv("FEDRUN_DATA_DIR", str(tmp_path / "nothing"))
    with pytest.raises(ConfigError) as refused:
        plan(compose_cfg(SMALL + ["attack=fedrecattack"] + overrides))
    assert refused.value.field == field


def test_an_items_limit_beyond_the_catalogue_is_refused_before_training():
    cfg = compose_cfg(SMALL + ["attack=fedrecattack", "attack.items_limit=500"])
    with pytest.raises(ConfigError, match=r"attack.items_limit=500"):
        experiment.build_run(cfg)


@needs_data
@pytest.mark.integration
def test_fedrecattack_raises_the_targets_exposure_end_to_end():
    """FedAvg-MF on ml-100k for 3 epochs: 5% FedRecAttack clients put a random item into most eligible
    users' top 5; with a negligible step (the same run otherwise) it stays out."""
    base = ["dataset=ml-100k", "backbone=mf", "track=none", "sim.progress=false", "sim.epochs=3", "eval.er_ks=[5]",
            "attack=fedrecattack"]
    clean = experiment.run(compose_cfg(base + ["attack.lr=1e-9"]))
    attacked = experiment.run(compose_cfg(base))
    assert clean.test["er_at_5"] < 0.05 and attacked.test["er_at_5"] > 0.5
