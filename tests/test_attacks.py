"""Attacks: each attack's uploads against a per-client reference loop of the published algorithm,
target choice, ER@K against brute force (with eligibility), bad input refused by name, and the
attack raising the target's exposure end to end."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fedrun.app import experiment
from fedrun.app.build import parse_config
from fedrun.app.plan import plan
from fedrun.attack._targets import choose_targets
from fedrun.attack.a_hum import AHum
from fedrun.attack.a_ra import ARA
from fedrun.attack.base import AttackSetup
from fedrun.attack.config import AHumConfig, ARAConfig, AttackConfig
from fedrun.backbone.base import Backbone
from fedrun.backbone.mf import MF
from fedrun.backbone.ncf import NCF
from fedrun.data.interactions import Interactions
from fedrun.errors import ConfigError
from fedrun.eval.exposure import exposure
from fedrun.types import RoundContext
from tests.conftest import SMALL, compose_cfg, needs_data


def ncf_view(seed: int = 0):
    backbone = NCF(parse_config(NCF.Config, {"dim": 8, "layers": [8, 8]}, "backbone"))
    _, public = backbone.init_params(30, 20, torch.Generator().manual_seed(seed))
    public.item.mul_(10)  # scores far from 0, so the mining has something to do
    return backbone, public


def attack_on(cls, config, backbone, targets=(3, 7), n_users=400):
    attack = cls(config)
    attack.setup(AttackSetup(backbone, n_users, 0.5, 0.05, torch.tensor(targets), seed=11, device=torch.device("cpu")))
    return attack


def reference_upload(backbone, public, users, targets, lr):
    """One malicious client, one synthetic user at a time: mean over users of Σ_t BCE(score, 1),
    differentiated w.r.t. the target rows and the shared weights (one copy)."""
    rows = public.item[targets].clone().requires_grad_(True)
    net = {k: v.clone().requires_grad_(True) for k, v in public.net.items()}
    loss = 0
    for u in users:
        score = backbone.score(u.unsqueeze(0), rows.unsqueeze(0), net)[0]  # [T]
        loss = loss + F.softplus(-score).sum() / len(users)
    grads = torch.autograd.grad(loss, [rows, *net.values()])
    return -lr * grads[0], {k: -lr * g for k, g in zip(net, grads[1:])}


@pytest.mark.parametrize("cls,config", [(ARA, ARAConfig(fraction=0.01, synthetic_users=4, participation="every_round")),
                                        (AHum, AHumConfig(fraction=0.01, synthetic_users=4, mining_steps=5,
                                                          mining_lr=None, participation="every_round"))])
def test_uploads_equal_a_per_client_reference_loop(cls, config):
    backbone, public = ncf_view()
    attack = attack_on(cls, config, backbone)
    assert attack.n_clients == 4  # int(400 × 0.01)
    ctx = RoundContext(0, 0, 16)
    uploads = attack.craft(public, ctx)
    targets = attack.targets
    assert uploads.n_clients == 4 and uploads.row_item.tolist() == [3, 7] * 4
    for client in range(4):
        users = attack.drawn(torch.tensor([client]), ctx)[0]  # this round's synthetic users [s, du]
        if cls is AHum:  # mined one user at a time, model frozen
            mined = []
            for u in users:
                u = u.clone()
                for _ in range(config.mining_steps):
                    u.requires_grad_(True)
                    score = backbone.score(u.unsqueeze(0), public.item[targets].unsqueeze(0), public.net)
                    (g,) = torch.autograd.grad(F.softplus(score).sum(), u)
                    u = (u - 0.05 * g).detach()
                mined.append(u)
            assert not torch.allclose(torch.stack(mined), users)
            users = torch.stack(mined)
        rows, dense = reference_upload(backbone, public, users, targets, 0.05)
        mine = uploads.row_client == client
        torch.testing.assert_close(uploads.row_delta[mine], rows, rtol=1e-4, atol=1e-7)
        for name, value in dense.items():
            torch.testing.assert_close(uploads.dense[name][client], value, rtol=1e-4, atol=1e-7)


def test_mining_makes_the_synthetic_users_dislike_the_target():
    backbone, public = ncf_view()
    attack = attack_on(AHum, AHumConfig(fraction=0.01, mining_steps=30), backbone)
    clients, ctx = torch.arange(attack.n_clients), RoundContext(3, 0, 16)
    width = attack.users.shape[-1]
    users = attack.drawn(clients, ctx).reshape(-1, width)
    rows = public.item[attack.targets].expand(users.shape[0], -1, -1)
    before = attack.target_scores(users, rows, public.net)
    after = attack.target_scores(attack.synthetic(public, clients, ctx).reshape(-1, width), rows, public.net)
    assert float(after.mean()) < float(before.mean())


def linear_in_user_backbones() -> list[type]:
    import importlib
    import pkgutil

    import fedrun.backbone

    for module in pkgutil.iter_modules(fedrun.backbone.__path__):  # every backbone class defined
        importlib.import_module(f"fedrun.backbone.{module.name}")
    found, todo = [], [Backbone]
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        found += [cls] if cls.linear_in_user else []
    return sorted(set(found), key=lambda c: c.__name__)


@pytest.mark.parametrize("cls", linear_in_user_backbones(), ids=lambda c: c.__name__)
def test_a_closed_form_user_gradient_equals_autograd(cls):
    """Every backbone that declares its score linear in the user row gives Σ_l w_l ∂score_l/∂u exactly."""
    torch.manual_seed(0)
    assert cls.score is MF.score  # the closed form is MF's; a subclass with its own score must declare anew
    user, item, weight = torch.randn(5, 8), torch.randn(5, 3, 8), torch.rand(5, 3)
    graph_user = user.clone().requires_grad_(True)
    (expected,) = torch.autograd.grad((weight * MF.score(None, graph_user, item, {})).sum(), graph_user)
    torch.testing.assert_close(cls.user_score_grad(None, user, item, {}, weight), expected)


def test_a_hums_mining_in_closed_form_equals_the_autograd_steps():
    backbone = MF(parse_config(MF.Config, {"dim": 8}, "backbone"))
    _, public = backbone.init_params(30, 20, torch.Generator().manual_seed(0))
    public.item.mul_(10)
    attack = attack_on(AHum, AHumConfig(fraction=0.01, mining_steps=30), backbone)
    clients, ctx = torch.arange(attack.n_clients), RoundContext(0, 0, 16)
    closed = attack.synthetic(public, clients, ctx)
    backbone.linear_in_user = False  # this instance differentiates its score instead
    torch.testing.assert_close(closed, attack.synthetic(public, clients, ctx), rtol=1e-5, atol=1e-6)
    assert not torch.allclose(closed, attack.drawn(clients, ctx))


def test_synthetic_users_are_fresh_for_every_upload_as_the_code_or_kept_once():
    """The A-hum code re-initialises its synthetic users before every upload (``per_upload``, the default); ``once``
    keeps the set-up draw. Either is the same for the same seed and round, whichever clients join."""
    backbone, _ = ncf_view()
    fresh = attack_on(ARA, ARAConfig(fraction=0.01), backbone)
    again = attack_on(ARA, ARAConfig(fraction=0.01), backbone)
    kept = attack_on(ARA, ARAConfig(fraction=0.01, synthetic_draw="once"), backbone)
    everyone, round_3, round_4 = torch.arange(fresh.n_clients), RoundContext(3, 0, 16), RoundContext(4, 0, 16)
    assert not torch.equal(fresh.drawn(everyone, round_3), fresh.drawn(everyone, round_4))
    torch.testing.assert_close(fresh.drawn(everyone, round_3), again.drawn(everyone, round_3), rtol=0, atol=0)
    torch.testing.assert_close(fresh.drawn(everyone[2:], round_3), fresh.drawn(everyone, round_3)[2:], rtol=0, atol=0)
    torch.testing.assert_close(kept.drawn(everyone, round_3), kept.drawn(everyone, round_4), rtol=0, atol=0)
    assert abs(float(fresh.drawn(everyone, round_3).std()) - 0.01) < 0.003  # N(0, σ²), σ = init_std


def test_sampled_participation_draws_from_the_attack_seed():
    backbone, public = ncf_view()
    attack = attack_on(ARA, ARAConfig(fraction=0.1, participation="sampled"), backbone)
    joined = [attack.joining(RoundContext(r, 0, 16)) for r in range(20)]
    assert 0.3 < np.mean([j.numel() / attack.n_clients for j in joined]) < 0.7  # share 0.5
    assert torch.equal(joined[3], attack.joining(RoundContext(3, 0, 16)))


def interactions(user, item, n_users, n_items):
    return Interactions(np.array(user), np.array(item), n_users, n_items)


class FakeSplit:
    def __init__(self, train, test, valid=None):
        self.train, self.test, self.valid, self.n_items = train, test, valid, train.n_items


def test_targets_least_popular_random_and_explicit():
    train = interactions([0, 0, 1, 1, 2], [0, 1, 0, 2, 0], 3, 6)
    test = interactions([0, 2], [3, 1], 3, 6)  # counts: 0→3, 1→2, 2→1, 3→1, 4→0, 5→0
    split = FakeSplit(train, test)
    assert choose_targets(AttackConfig(n_targets=2), split).tolist() == [2, 3]  # items that occur, fewest first
    first = choose_targets(AttackConfig(targets="random", n_targets=2, target_seed=5), split)
    assert first.tolist() == choose_targets(AttackConfig(targets="random", n_targets=2, target_seed=5), split).tolist()
    assert set(first.tolist()) <= {0, 1, 2, 3}
    assert choose_targets(AttackConfig(targets="explicit", target_ids=[5]), split).tolist() == [5]
    with pytest.raises(ConfigError, match="attack.target_ids"):
        choose_targets(AttackConfig(targets="explicit", target_ids=[6]), split)
    with pytest.raises(ConfigError, match="attack.n_targets"):
        choose_targets(AttackConfig(n_targets=5), split)


def test_least_popular_counts_the_validation_part_too():
    """A validation share carved from train must not make an item look rarer than it is (the target is the
    least popular item of the whole data, as in the A-hum code)."""
    train = interactions([0, 1, 2], [0, 0, 1], 3, 3)
    valid = interactions([0, 1], [1, 1], 3, 3)  # item 1's other interactions sit in validation
    test = interactions([2, 0], [2, 2], 3, 3)  # counts over all parts: 0→2, 1→3, 2→2
    assert choose_targets(AttackConfig(n_targets=1), FakeSplit(train, test, valid)).tolist() == [0]
    assert choose_targets(AttackConfig(n_targets=1), FakeSplit(train, test)).tolist() == [1]  # without it: item 1


def test_a_run_without_an_attack_can_watch_the_least_popular_item():
    """eval.watch=least_popular (the robustness matrix's no-attack row): ER@K of the item the attack rows
    target, with no attack; the default watches nothing without an attack."""
    watching = experiment.build_run(compose_cfg(SMALL + ["eval.watch=least_popular"]))
    split = watching.plan.dataset.load()
    split_items = torch.cat([torch.as_tensor(np.asarray(p.item)) for p in (split.train, split.valid, split.test)
                             if p is not None])
    counts = torch.bincount(split_items, minlength=int(split_items.max()) + 1)
    target = int(watching.evaluator.targets[0])
    assert counts[target] == counts[counts > 0].min()
    assert "er_at_5" in watching.evaluator.evaluate(watching.method, "test")
    plain = experiment.build_run(compose_cfg(SMALL))
    assert plain.evaluator.targets is None and "er_at_5" not in plain.evaluator.evaluate(plain.method, "test")
    with pytest.raises(ConfigError, match="watch"):
        experiment.build_run(compose_cfg(SMALL + ["eval.watch=everything"]))


class FixedScores:
    def __init__(self, scores):
        self.scores = scores

    def score_users(self, users, history=()):
        return self.scores[users].clone()


def test_exposure_equals_brute_force_with_eligibility():
    from fedrun.data.client_store import ClientStore

    gen = np.random.default_rng(0)
    n_users, n_items = 40, 30
    train = interactions(*zip(*[(u, i) for u in range(n_users) for i in gen.choice(n_items, 5, replace=False)]),
                         n_users, n_items)
    test = interactions(list(range(n_users)), gen.integers(0, n_items, n_users).tolist(), n_users, n_items)
    scores = torch.tensor(gen.integers(0, 6, (n_users, n_items)), dtype=torch.float32)  # many ties
    stores = {"train": ClientStore.from_interactions(train, torch.device("cpu")),
              "test": ClientStore.from_interactions(test, torch.device("cpu"))}
    targets = torch.tensor([4, 11])
    got = exposure(FixedScores(scores), stores, [], targets, [1, 5], memory_mb=1)
    known = {(u, i) for u, i in zip(train.user, train.item)} | {(u, i) for u, i in zip(test.user, test.item)}
    for t in targets.tolist():
        er = {1: [], 5: []}
        for u in range(n_users):
            if (u, t) in known:
                continue  # not eligible
            row = scores[u].clone()
            row[[i for (v, i) in known if v == u]] = float("-inf")
            rank = int((row >= row[t]).sum()) - 1
            for k in er:
                er[k].append(rank < k)
        for k in er:
            assert got[f"er_at_{k}_item{t}"] == pytest.approx(np.mean(er[k]))
    assert got["er_at_5"] == pytest.approx(np.mean([got["er_at_5_item4"], got["er_at_5_item11"]]))


@pytest.mark.parametrize("overrides,field", [
    (["attack=a_ra", "attack.fraction=0"], "attack.fraction"),
    (["attack=a_hum", "attack.fraction=1"], "attack.fraction"),
    (["attack=a_hum", "attack.mining_steps=-1"], "attack.mining_steps"),
    (["attack=a_ra", "attack.targets=explicit"], "attack.target_ids"),
    (["attack=a_ra", "attack.participation=often"], "attack.participation"),
    (["attack=psmu", "attack.n_alternatives=0"], "attack.n_alternatives"),
    (["attack=psmu", "attack.fit_lr=-1"], "attack.fit_lr"),
    (["attack=a_hum", "method=fcf", "dataset.ratings=true", "backbone=pmf", "backbone.loss=mse"], "attack"),
])
def test_bad_attack_settings_are_refused_before_any_data_is_read(overrides, field, tmp_path, monkeypatch):
    monkeypatch.setenv("FEDRUN_DATA_DIR", str(tmp_path / "nothing"))
    with pytest.raises(ConfigError) as refused:
        plan(compose_cfg(SMALL + overrides))
    assert refused.value.field == field


def test_a_target_outside_the_catalogue_is_refused_before_training():
    cfg = compose_cfg(SMALL + ["attack=a_ra", "attack.targets=explicit", "attack.target_ids=[80]"])
    with pytest.raises(ConfigError, match=r"attack.target_ids=\[80\] .* item ids in \[0, 80\)"):
        experiment.build_run(cfg)


@needs_data
@pytest.mark.integration
def test_a_ra_raises_the_targets_exposure_end_to_end():
    """FedAvg-NCF on ml-100k for 1 epoch: 5% A-ra clients (47) put the least popular item into almost
    every eligible user's top 5; with a negligible step (the same run otherwise) it stays out."""
    base = ["dataset=ml-100k", "backbone=ncf", "track=none", "sim.progress=false", "sim.epochs=1", "eval.er_ks=[5]",
            "attack=a_ra", "attack.fraction=0.05", "attack.participation=every_round",  # the stress setting
            "method.optimizer.lr=0.3"]  # the benign step it was calibrated at (FedAvg's own; NCF's default is 3)
    clean = experiment.run(compose_cfg(base + ["attack.lr=1e-9"]))
    attacked = experiment.run(compose_cfg(base + ["attack.lr=2.0"]))  # ER@5 .08 at lr .5 after one epoch, 1.0 here
    assert clean.test["er_at_5"] < 0.05 and attacked.test["er_at_5"] > 0.5
    assert "hr_at_10" in attacked.test  # the benign metrics stay beside the exposure


@pytest.mark.parametrize("attack", ["eb", "ra"])
def test_fake_clients_are_ordinary_clients_on_fabricated_data(attack):
    """A round with EB / RA clients equals the per-client oracle loop run over the benign clients and
    the fake ones (their own rows, their fabricated positives, negatives drawn as a benign client's)."""
    from fedrun.data.negatives import sample_batch_negatives
    from fedrun.testing.fedavg_loop import clients_of, fedavg_round
    from fedrun.types import ClientBatch

    cfg = compose_cfg(SMALL + ["backbone=ncf", "sim.fast_path=off", f"attack={attack}", "attack.fraction=0.05",
                               "attack.participation=every_round"]  # every fake client in both rounds
                      + (["attack.items_limit=6"] if attack == "ra" else []))
    built = experiment.build_run(cfg)
    method, rounds, fake = built.method, built.trainer, built.plan.attack
    n_users = method.env.n_users
    for r in range(2):
        users = rounds.sampler.users(r)
        benign = clients_of(method.client.problems(users, r))
        pos = fake.items
        batch = ClientBatch(n_users + torch.arange(fake.n_clients, device=pos.device), pos,
                            torch.ones_like(pos, dtype=torch.bool), None)
        negatives = sample_batch_negatives(batch.users, pos, batch.pos_mask, method.client.num_negatives,
                                           method.env.n_items,
                                           method.client.negative_seed(r))
        fakes = [(n_users + m, pos[m], negatives[m], None) for m in range(fake.n_clients)]
        table = torch.cat([method.client.private.user, fake.user]).clone()
        public = method.public.clone()
        fedavg_round(method.env.backbone, table, public, benign + fakes, method.config.optimizer, 1,
                     reduction=method.config.loss_reduction)
        rounds.train_round(r)
        torch.testing.assert_close(method.public.item, public.item, rtol=1e-4, atol=1e-6)
        torch.testing.assert_close(fake.user, table[n_users:], rtol=1e-4, atol=1e-6)  # kept on the fake clients
    if attack == "eb":
        assert (fake.items.cpu() == built.evaluator.targets.cpu()).all()
    else:
        assert fake.items.shape == (fake.n_clients, 6)
        assert (fake.items[:, 0].cpu() == built.evaluator.targets[0].cpu()).all()
        assert all(len(set(row.tolist())) == 6 for row in fake.items)


def test_fake_client_attacks_need_a_method_that_offers_its_client_step():
    with pytest.raises(ConfigError, match=r"attack='eb' .* method=fedcl: the method offers a malicious client "
                                          r"model_view only"):
        plan(compose_cfg(SMALL + ["attack=eb", "method=fedcl"]))


def psmu_reference(attack, backbone, public, clients):
    """PSMU one malicious client and one synthetic user at a time: fit to the profile, pick the
    alternatives, then the client's mean over users of Σ_t Σ_j −log σ(ŝ(u, t) − ŝ(u, j)), differentiated
    w.r.t. the whole item table and the shared weights (one copy per client)."""
    config, out = attack.config, []
    labels = torch.cat([torch.ones(config.profile_size), torch.zeros(config.profile_size)])
    targets = attack.targets.tolist()
    for c in clients:
        table = public.item.clone().requires_grad_(True)
        net = {k: v.clone().requires_grad_(True) for k, v in public.net.items()}
        loss = 0
        for u in range(config.synthetic_users):
            user = attack.users[c, u].clone()
            items = torch.cat([attack.profile[c, u], attack.negatives[c, u]])
            for _ in range(config.fit_steps):
                user.requires_grad_(True)
                fit = F.binary_cross_entropy_with_logits(backbone.score(user[None], public.item[items][None],
                                                                        public.net)[0], labels)
                (g,) = torch.autograd.grad(fit, user)
                user = (user - config.fit_lr * g).detach()
            scores = backbone.score_full(user[None], public.item, public.net)[0].clone()
            scores[targets] = -torch.inf
            rivals = scores.topk(config.n_alternatives).indices
            s = backbone.score(user[None], table[torch.cat([attack.targets, rivals])][None], net)[0]
            pushed = F.softplus(s[len(targets):][None, :] - s[:len(targets)][:, None]).sum()
            loss = loss + pushed / config.synthetic_users
        grads = torch.autograd.grad(loss, [table, *net.values()])
        out.append((-attack.lr * grads[0], {k: -attack.lr * g for k, g in zip(net, grads[1:])}))
    return out


def test_psmu_uploads_equal_a_per_client_reference_loop():
    from fedrun.attack.config import PSMUConfig
    from fedrun.attack.psmu import PSMU

    backbone, public = ncf_view()
    config = PSMUConfig(fraction=0.01, synthetic_users=3, profile_size=4, fit_steps=3, fit_lr=0.05, n_alternatives=3,
                        participation="every_round")
    attack = PSMU(config)
    attack.setup(AttackSetup(backbone, 400, 0.5, 0.05, torch.tensor([3, 7]), seed=11, device=torch.device("cpu"),
                             n_items=20))
    users0 = attack.users.clone()
    probe = PSMU(config)
    probe.setup(AttackSetup(backbone, 400, 0.5, 0.05, torch.tensor([3, 7]), seed=11, device=torch.device("cpu"),
                            n_items=20))
    uploads = attack.craft(public, RoundContext(0, 0, 16))
    assert torch.equal(probe.users, users0)  # the same seed draws the same users and profiles
    expected = psmu_reference(probe, backbone, public, range(attack.n_clients))
    for c, (rows, dense) in enumerate(expected):
        mine = uploads.row_client == c
        touched = torch.nonzero(rows.abs().sum(1)).squeeze(1)
        assert set(uploads.row_item[mine].tolist()) >= set(touched.tolist()) | {3, 7}
        torch.testing.assert_close(uploads.row_delta[mine], rows[uploads.row_item[mine]], rtol=1e-4, atol=1e-7)
        for k in dense:
            torch.testing.assert_close(uploads.dense[k][c], dense[k], rtol=1e-4, atol=1e-7)
    assert not torch.equal(attack.users, users0)  # the fitted users are kept for the next round
    assert not set(attack.profile.reshape(-1).tolist()) & {3, 7}  # profiles never hold a target


def test_target_row_record_counts_uploaders_and_each_rules_push():
    """The target row's record (fedrun/defense/diagnostics.py, behind scripts/investigations/target_row_uploads.py):
    8 benign clients push the target row down a little, 2 malicious ones push it up; the median over the 10 is
    benign, the sum is the attack's, the trimmed mean (β .1: one value cut per side) keeps one of the two."""
    from fedrun.defense.diagnostics import target_row_record as record
    from fedrun.types import Uploads

    small = 1e-3
    deltas = torch.tensor([[-small, 0.0]] * 8 + [[1.0, 0.0], [1.0, 0.0]] + [[0.0, 5.0]])
    uploads = Uploads(10, torch.tensor([*range(10), 0]), torch.tensor([7] * 10 + [2]), deltas)
    got = record(uploads, RoundContext(3, 0, 8), target=7)
    assert (got["benign uploaders"], got["malicious uploaders"]) == (8, 2)
    assert got["malicious cosine"] == pytest.approx(1.0)
    assert got["cos(malicious mean, benign mean)"] == pytest.approx(-1)
    assert got["push sum"] == pytest.approx(2 - 8 * small)
    assert got["push median"] == pytest.approx(-10 * small)  # the median of eight -s and two 1s, times 10 uploaders
    assert got["push trimmed mean"] == pytest.approx(10 * (1 - 7 * small) / 8)  # one -s and one 1 cut
    assert got["benign row norm q0.5"] == pytest.approx(small)  # the benign rows: three of norm s, one of norm 5


def test_per_epoch_participation_is_the_reference_codes_schedule():
    """Issue #62: ``per_epoch`` (the default) is the A-hum code's schedule: every epoch the benign and malicious
    clients are shuffled together and dealt ``per_round`` at a time, so each malicious client joins exactly once
    per epoch, in a round that varies from epoch to epoch, and the schedule is a function of the attack's seed."""
    backbone, _ = ncf_view()

    def schedule(seed, epochs=6, n_benign=100, per_round=16, rounds=7):
        attack = ARA(ARAConfig(fraction=0.02))  # 8 malicious clients among 400 users
        attack.setup(AttackSetup(backbone, 400, per_round / n_benign, 0.05, torch.tensor([3]), seed=seed,
                                 device=torch.device("cpu"), schedule=(n_benign, per_round, rounds)))
        assert attack.config.participation == "per_epoch"
        joined = [[attack.joining(RoundContext(e * rounds + k, e, per_round)).tolist() for k in range(rounds)]
                  for e in range(epochs)]
        return attack.n_clients, joined

    n_malicious, joined = schedule(seed=11)
    for epoch in joined:  # exactly once per epoch
        assert sorted(sum(epoch, [])) == list(range(n_malicious))
    rounds_of = {m: {k for epoch in joined for k, ids in enumerate(epoch) if m in ids} for m in range(n_malicious)}
    assert any(len(rounds) > 1 for rounds in rounds_of.values())  # shuffled anew each epoch, not a fixed round
    assert len(set().union(*rounds_of.values())) > 3  # spread over the epoch, not bunched at its start
    assert schedule(seed=11)[1] == joined and schedule(seed=12)[1] != joined


def test_target_uploads_count_the_watched_rows_as_a_brute_force_count():
    """The round's per-round record of the targets' uploads against a count over every uploaded row."""
    from fedrun.defense.diagnostics import target_uploads
    from fedrun.types import Uploads

    gen = torch.Generator().manual_seed(5)
    targets = torch.tensor([2, 9])

    def uploads(n_clients, n_rows):
        return Uploads(n_clients, torch.randint(0, n_clients, (n_rows,), generator=gen),
                       torch.randint(0, 12, (n_rows,), generator=gen), torch.randn(n_rows, 4, generator=gen), {},
                       torch.ones(n_clients))

    benign, crafted = uploads(10, 80), uploads(3, 9)
    record = target_uploads(benign, crafted, targets)
    count_benign = sum(1 for item in benign.row_item.tolist() if item in (2, 9))
    count_malicious = sum(1 for item in crafted.row_item.tolist() if item in (2, 9))
    assert record["target_uploads_benign"] == count_benign and record["target_uploads_malicious"] == count_malicious
    assert record["target_share_malicious"] == pytest.approx(count_malicious / (count_benign + count_malicious))
    alone = target_uploads(benign, None, targets)
    assert alone["target_uploads_malicious"] == 0 and alone["target_share_malicious"] == 0.0
    assert "target_share_malicious" not in target_uploads(benign, None, torch.tensor([99]))  # nobody sent them


def test_an_attacked_round_reports_the_attackers_share_of_the_target_rows():
    cfg = compose_cfg(SMALL + ["backbone=ncf", "attack=a_hum", "attack.fraction=0.05",
                               "attack.participation=every_round", "sim.clients_per_round=32"])
    built = experiment.build_run(cfg)
    stats = built.trainer.train_round(0)
    assert stats.extra["target_uploads_malicious"] == built.plan.attack.n_clients  # one target row each
    share = stats.extra["target_share_malicious"]
    assert share == stats.extra["target_uploads_malicious"] / (stats.extra["target_uploads_malicious"]
                                                                  + stats.extra["target_uploads_benign"])


@pytest.mark.parametrize("overrides,why", [
    (["attack=a_ra", "attack.fraction=0.001"], r"at least 1/60 .* is no malicious client"),  # int(60 × .001) = 0
])
def test_an_attacker_count_that_changes_the_threat_is_refused_before_training(overrides, why):
    """Issue #62: a fraction that gives no malicious client was silently raised to one."""
    with pytest.raises(ConfigError, match=why) as refused:
        experiment.build_run(compose_cfg(SMALL + overrides))
    assert refused.value.field == "attack.fraction"


def test_the_regime_map_averages_each_cell_over_its_seeds():
    """The regime map's cells (fedrun.app.regime_map) against a hand count."""
    import pandas as pd

    from fedrun.app.regime_map import attack_markdown, regime_table

    runs = pd.DataFrame([
        {"attack": "a_hum", "fraction": 0.05, "negatives": 1, "defense": "median", "seed": 1, "final": 1.0,
         "peak": 1.0, "share": 0.4},
        {"attack": "a_hum", "fraction": 0.05, "negatives": 1, "defense": "median", "seed": 2, "final": 0.5,
         "peak": 0.75, "share": 0.2},
        {"attack": "a_hum", "fraction": 0.001, "negatives": 4, "defense": "median", "seed": 1, "final": 0.0,
         "peak": 0.0, "share": 0.03},
    ])
    table = regime_table(runs)
    cell = table[(table["fraction"] == 0.05)].iloc[0]
    assert (cell["final"], cell["peak"], cell["share"], cell["seeds"]) == (0.75, 0.875, pytest.approx(0.3), 2)
    text = " ".join(attack_markdown(table, "a_hum").split())  # the cells without their padding
    assert "| 5.0% | 1 | 0.300 | 0.750 (0.875) |" in text and "| 0.1% | 4 | 0.030 | 0.000 (0.000) |" in text


def test_a_merged_regime_map_keeps_the_committed_cells_the_store_lacks():
    """--merge: a one-seed slice run in two stores is one table; the store's run wins where both have the cell."""
    import pandas as pd

    from fedrun.app.regime_map import kept_cells, regime_table

    def run(fraction, defense, final, seed=2):
        return {"attack": "fedrecattack", "fraction": fraction, "negatives": 1, "defense": defense, "seed": seed,
                "final": final, "peak": final, "share": 0.1}

    earlier = regime_table(pd.DataFrame([run(0.05, "median", 0.25), run(0.05, "sum", 1.0)]))
    runs = pd.DataFrame([run(0.05, "median", 0.75), run(0.1, "sum", 0.5)])
    merged = regime_table(pd.concat([runs, kept_cells(earlier, runs)], ignore_index=True))
    assert list(zip(merged["fraction"], merged["defense"], merged["final"], merged["seeds"])) == [
        (0.05, "median", 0.75, 1), (0.05, "sum", 1.0, 1), (0.1, "sum", 0.5, 1)]
    with pytest.raises(SystemExit, match="only a one-seed slice merges"):
        kept_cells(earlier, pd.concat([runs, pd.DataFrame([run(0.1, "sum", 0.5, seed=3)])]))
    two_seeds = regime_table(pd.DataFrame([run(0.05, "sum", 1.0), run(0.05, "sum", 0.0, seed=3)]))
    with pytest.raises(SystemExit, match=r"mean over 2 seeds; only a one-seed table merges"):
        kept_cells(two_seeds, runs)


def test_a_synthetic_draw_that_is_not_one_is_refused_by_name():
    from fedrun.attack.config import PSMUConfig

    with pytest.raises(ConfigError, match="synthetic_draw='sometimes'.*per_upload, once"):
        ARAConfig(synthetic_draw="sometimes")
    with pytest.raises(ConfigError, match="synthetic_draw='per_upload'.*once: PSMU's users are drawn once"):
        PSMUConfig(synthetic_draw="per_upload")
