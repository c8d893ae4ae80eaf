"""FedRec / FedRec++: the vectorized round against a per-client loop, the denoising arithmetic,
losslessness on real data, the anonymous channel, the server's view, and bad settings."""

from __future__ import annotations

import inspect
from dataclasses import fields

import pytest
import torch

from fedrun.core.seeding import derive_seed
from fedrun.data.negatives import sample_unrated
from fedrun.defense.config import SumConfig
from fedrun.defense.sum import Sum
from fedrun.errors import ConfigError
from fedrun.method._channel import AnonymousChannel
from fedrun.method.fedrecpp import denoised_mean
from fedrun.types import Aggregate, DenoiserUploads, RelayedRows, Uploads
from tests.conftest import CPU_ORACLE, make_method, needs_data, round_of

RATED = ["backbone=pmf", "dataset.ratings=true", "dataset.split.protocol=random_ratio", "dataset.split.valid=false"]
ML100K = ["dataset=ml-100k", "dataset.split.protocol=predefined", "dataset.split.valid=false", "backbone=pmf",
          "sim.clients_per_round=943", "track=none", "sim.progress=false"]


def test_unrated_samples_are_distinct_unrated_and_independent_of_batching():
    users = torch.tensor([3, 8, 5])
    pos = torch.tensor([[0, 1, 2, 3], [4, 0, 0, 0], [7, 8, 9, 0]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 1, 0]]).bool()
    counts = torch.tensor([6, 2, 0])
    items, valid = sample_unrated(users, pos, mask, counts, 10, seed=7)
    assert valid.sum(1).tolist() == [6, 2, 0]
    for b in range(3):
        drawn = items[b][valid[b]].tolist()
        assert len(set(drawn)) == len(drawn)
        assert not set(drawn) & set(pos[b][mask[b]].tolist())
    for b in range(2):  # alone, in a chunk of one client, a client draws the same items
        alone, _ = sample_unrated(users[b:b + 1], pos[b:b + 1], mask[b:b + 1], counts[b:b + 1], 10, 7, max_elements=10)
        assert alone[0].tolist() == items[b, :int(counts[b])].tolist()


@pytest.mark.parametrize("n_items,count", [(10, 3), (40, 3)], ids=["dense-path", "sequential-path"])
def test_unrated_samples_are_uniform(n_items, count):
    """Each unrated item is drawn with probability count / unrated over many seeds (binomial 4σ band)."""
    pos, mask = torch.tensor([[0, 1, 2, 3]]), torch.ones(1, 4, dtype=torch.bool)
    hits = torch.zeros(n_items)
    trials = 3000
    for seed in range(trials):
        items, _ = sample_unrated(torch.tensor([1]), pos, mask, torch.tensor([count]), n_items, seed)
        assert len(set(items[0].tolist())) == count
        hits[items[0]] += 1
    assert hits[:4].sum() == 0
    p = count / (n_items - 4)
    sigma = (trials * p * (1 - p)) ** 0.5
    assert ((hits[4:] - trials * p).abs() < 4 * sigma).all()


def oracle_round(method, env, round_index: int):
    """FedRec's iteration written per client (Alg. 2, Eq. 1–3, 7) and per item (Eq. 2)."""
    config, lam = method.config, env.backbone.config.l2
    lr = config.lr * config.lr_decay ** round_index
    item, user = method.public.item.clone(), method.client.private.user.clone()
    total, raters = torch.zeros_like(item), torch.zeros(item.shape[0])
    seed = derive_seed(env.sim.seed, "unrated", round_index)
    for u in round_of(method).sampler.users(round_index).tolist():
        start, end = int(env.train.indptr[u]), int(env.train.indptr[u + 1])
        rated, ratings = env.train.items[start:end], env.train.ratings[start:end]
        count = min(int(len(rated) * config.rho), env.n_items - len(rated))
        sampled = sample_unrated(torch.tensor([u]), rated[None], torch.ones(1, len(rated), dtype=torch.bool),
                                 torch.tensor([count]), env.n_items, seed)[0][0, :count]
        p = user[u]
        error = ratings - item[rated] @ p
        new_p = p - lr * (-(error[:, None] * item[rated]).mean(0) + lam * p)  # Eq. 7
        if round_index < config.t_predict:
            virtual = ratings.mean().expand(count)
        else:
            local = p.clone()
            for _ in range(config.t_local):
                e = ratings - item[rated] @ local
                local = local - lr * (-(e[:, None] * item[rated]).mean(0) + lam * local)
            virtual = item[sampled] @ local
        for i, target in zip(torch.cat([rated, sampled]).tolist(), torch.cat([ratings, virtual]).tolist()):
            gradient = (new_p @ item[i] - target) * new_p + lam * item[i]  # Eq. 3
            total[i] -= lr * gradient
            raters[i] += 1
        user[u] = new_p
    touched = raters > 0
    item[touched] += total[touched] / raters[touched, None]  # Eq. 2
    return user, item


@pytest.mark.parametrize("t_predict", [5, 0], ids=["mean-virtual", "predicted-virtual"])
def test_fedrec_round_equals_a_per_client_loop(t_predict):
    method, env = make_method(RATED + ["method=fedrec", "method.rho=1.5", f"method.t_predict={t_predict}",
                                       "method.t_local=3", CPU_ORACLE])
    round_of(method).train_round(0)
    user, item = oracle_round(method, env, 1)
    round_of(method).train_round(1)
    assert torch.allclose(method.client.private.user, user, atol=1e-6)
    assert torch.allclose(method.public.item, item, atol=1e-6)


def test_denoising_arithmetic_on_a_hand_computed_case():
    """Ordinary clients 0, 1 rated item 1 (deltas 1, 3) and sampled items 2, 3 (noise 2, 4); the
    denoiser rated item 1 (delta 5). The server must get item 1's mean (1+3+5)/3 and nothing else."""
    uploads = Uploads(2, torch.tensor([0, 0, 1, 1]), torch.tensor([1, 2, 1, 3]),
                      torch.tensor([[1.0], [2.0], [3.0], [4.0]]))
    relayed = DenoiserUploads(torch.tensor([0, 0, 0]), torch.tensor([1, 2, 3]), torch.tensor([[-5.0], [2.0], [4.0]]),
                              torch.tensor([-1.0, 1.0, 1.0]))
    denoisers = Uploads(1, relayed.denoiser, relayed.item, -relayed.delta, row_count=-relayed.count)
    aggregate = denoised_mean(Sum(SumConfig()).exact_sum(Uploads.concat([uploads, denoisers])))
    assert aggregate.items.tolist() == [1]
    assert aggregate.item_delta.tolist() == [[3.0]]


def test_denoisers_collect_what_the_server_needs():
    """Σ of the denoisers' counts = noise rows they received − ratings they hold themselves (Eq. 9's
    count side, with the denoisers' own ratings subtracted)."""
    method, env = make_method(RATED + ["method=fedrecpp", "method.rho=2", "method.denoisers=3",
                                       "sim.clients_per_round=all"])
    captured = {}
    original = method.client.collect

    def spy(rows, held):
        captured["rows"], captured["relayed"] = rows, original(rows, held)
        return captured["relayed"]

    method.client.collect = spy
    round_of(method).train_round(0)
    rows, relayed = captured["rows"], captured["relayed"]
    clients = env.clients_with_data()
    batch = env.train.client_batch(clients)
    denoiser = method.role[clients] >= 0
    noise = float(method.client.rating.unrated_counts(batch)[~denoiser].sum())
    own = float(env.train.sizes(clients)[denoiser].sum())
    assert rows.item.numel() == noise
    assert set(relayed.denoiser.tolist()) <= {0, 1, 2}
    assert float(relayed.count.sum()) == noise - own


def test_channel_carries_no_sender_and_shuffles():
    assert "sender" not in inspect.signature(AnonymousChannel.send).parameters
    assert [f.name for f in fields(RelayedRows)] == ["denoiser", "item", "delta"]
    channel = AnonymousChannel()
    for sender in range(50):  # each sender posts one row whose item id is its own id
        channel.send(torch.tensor([0]), torch.tensor([sender]), torch.zeros(1, 2))
    rows = channel.deliver(torch.Generator().manual_seed(0), 2, torch.device("cpu"))
    assert sorted(rows.item.tolist()) == list(range(50))
    assert rows.item.tolist() != list(range(50))  # the posting order (who sent first) is gone
    assert channel.deliver(torch.Generator(), 2, torch.device("cpu")).item.numel() == 0


def test_fedrecpp_server_phase_sees_uploads_only():
    """The server-side function receives the two upload types only; poisoning the client store and
    private rows while it runs changes nothing."""
    from tests.test_privacy_boundary import Poison

    method, env = make_method(RATED + ["method=fedrecpp", "method.rho=1", "method.denoisers=2"])
    assert list(inspect.signature(denoised_mean).parameters) == ["aggregate"]
    import fedrun.method.fedrecpp as module

    original = module.denoised_mean

    def poisoned(aggregate):
        saved = (env.train, method.client.private)
        env.train, method.client.private = Poison("ClientStore"), Poison("PrivateParams")
        try:
            assert isinstance(aggregate, Aggregate)
            return original(aggregate)
        finally:
            env.train, method.client.private = saved

    module.denoised_mean = poisoned
    try:
        for r in range(2):
            round_of(method).train_round(r)
    finally:
        module.denoised_mean = original


@needs_data
@pytest.mark.parametrize("extra", [["method.rho=1", "method.denoisers=1"],
                                   ["method.rho=3", "method.denoisers=n/4"],
                                   ["method.rho=2", "method.denoisers=1", "sim.clients_per_round=189",
                                    "sim.sampling=independent"]],
                         ids=["rho1-eta1", "rho3-eta-n/4", "rho2-c0.2n"])
def test_fedrecpp_is_lossless_on_ml100k(extra):
    """FedRec++ with any ρ gives FedRec with ρ = 0 up to summation order; FedRec with ρ > 0 does not."""
    common = ML100K + ["method.t_predict=3", "method.t_local=5"]
    sampling = [o for o in extra if o.startswith("sim.")]
    reference, _ = make_method(common + sampling + ["method=fedrec", "method.rho=0"], base=[])
    lossless, _ = make_method(common + ["method=fedrecpp", *extra], base=[])
    noisy, _ = make_method(common + sampling + ["method=fedrec", "method.rho=2"], base=[])
    for r in range(8):
        for method in (reference, lossless, noisy):
            round_of(method).train_round(r)
    assert torch.allclose(lossless.public.item, reference.public.item, atol=2e-5, rtol=1e-4)
    assert torch.allclose(lossless.client.private.user, reference.client.private.user, atol=2e-5, rtol=1e-4)
    assert (noisy.public.item - reference.public.item).abs().max() > 1e-2


@needs_data
@pytest.mark.parametrize("overrides,field", [
    (RATED + ["method=fedrecpp", "method.denoisers=n/1"], "method.denoisers"),
    (RATED + ["method=fedrecpp", "method.denoisers=many"], "method.denoisers"),
    (RATED + ["method=fedrecpp", "privacy=ldp", "privacy.targets=[item_rows]"], "privacy"),
    (RATED + ["method=fedrecpp", "defense.weighting=data_size"], "defense"),
    (RATED + ["method=fedrec", "method.rho=-1"], "rho"),
    (["method=fedrec"], "backbone"),  # implicit data and a ranking backbone
])
def test_bad_fedrec_settings_are_named_before_training(overrides, field):
    with pytest.raises(ConfigError, match=field):
        make_method(overrides)


@needs_data
@pytest.mark.parametrize("preset,row", [("fedrecpp/table2", "fedrecpp/fedrecpp_rho2"),
                                        ("fedrecpp/table3", "fedrecpp/etan4")])
def test_presets_run_on_ml100k_as_written(preset, row):
    """The presets themselves (every client every round, predefined folds), for two rounds."""
    from fedrun.app.experiment import run
    from tests.conftest import compose_cfg

    cfg = compose_cfg([f"+experiment={preset}", f"row={row}", "sim.max_rounds=2", "track=none", "sim.progress=false"])
    result = run(cfg)
    assert result.rounds == 2 and result.test["mae"] < 4


def test_clients_per_round_all_and_bad_values():
    method, env = make_method(RATED + ["method=fedrec", "sim.clients_per_round=all"])
    assert round_of(method).sampler.users(0).numel() == env.clients_with_data().numel()
    with pytest.raises(ConfigError, match="clients_per_round"):
        make_method(RATED + ["method=fedrec", "sim.clients_per_round=most"])


def test_communication_is_counted_per_role():
    """ρ = 1: an ordinary client sends |I_u| + 2|I'_u| rows (server + its denoiser); the denoisers
    together receive every noise row; η = 0 costs |I_u ∪ I'_u| per client."""
    plain, env = make_method(RATED + ["method=fedrec", "method.rho=1", "sim.clients_per_round=all"])
    stats = round_of(plain).train_round(0).extra
    sizes = env.train.sizes(env.clients_with_data()).double()
    assert stats["comm_vectors_client"] == pytest.approx(float((2 * sizes).mean()))
    method, env = make_method(RATED + ["method=fedrecpp", "method.rho=1", "method.denoisers=2",
                                       "sim.clients_per_round=all"])
    stats = round_of(method).train_round(0).extra
    ordinary = env.train.sizes(env.clients_with_data())[method.role[env.clients_with_data()] < 0].double()
    assert stats["comm_vectors_ordinary"] == pytest.approx(float((3 * ordinary).mean()))
    relayed_rows = float(stats["comm_vectors_denoiser"]) * 2 - float(ordinary.sum())  # η = 2: received = noise
    assert 0 < relayed_rows <= env.n_items * 2  # each denoiser uploads at most one row per item
    assert stats["comm_bytes_client"] > stats["comm_vectors_client"] * 80
