"""LightFR: DCD bit updates against a per-client, per-bit loop, the two server rules on hand-worked
cases, Hamming search (Faiss and torch agree), communication accounting, learning on real data,
and bad settings named."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedrun.app.experiment import run
from fedrun.backbone.base import PublicParams
from fedrun.errors import ConfigError
from fedrun.method.lightfr import DCDWeights, LightFRServer, dcd_codes
from fedrun.retrieval.hamming import hamming_distances, pack_codes, top_k_hamming
from fedrun.retrieval.search import faiss_available
from fedrun.types import Aggregate, RoundContext
from tests.conftest import CPU_ORACLE, SMALL, compose_cfg, make_method, needs_data, round_of, unpack

LIGHTFR = ["method=lightfr", "backbone=binary-mf", "backbone.dim=16", "dataset.ratings=true",
           "dataset.split.protocol=random_ratio", "dataset.split.valid=false"]
FILMTRUST = ["dataset=filmtrust", "dataset.variant=lightfr", "dataset.split.protocol=predefined", "method=lightfr",
             "backbone=binary-mf", "eval=sampled", "eval.num_negatives=49", "sim.clients_per_round=0.6",
             "sim.sampling=independent", "track=none", "sim.progress=false"]


def oracle_dcd(code, partners, targets, self_weight, balance, max_sweeps):
    """Eq. 9–10 for one code, written bit by bit and item by item in float64."""
    code = code.double().clone()
    for _ in range(max_sweeps):
        changed = False
        for k in range(code.numel()):
            star = 0.0
            for partner, target in zip(partners.double(), targets.double()):
                star += (target - float(code @ partner)) * float(partner[k])
            star += self_weight * float(code[k]) - balance * float(code.sum() - code[k])
            new = 1.0 if star > 0 else -1.0 if star < 0 else float(code[k])
            changed |= new != float(code[k])
            code[k] = new
        if not changed:
            break
    return code


def oracle_targets(ratings, scale, bits, variant):
    """Code-unit targets written out: R = f(2r − 1) on min-max scaled ratings; the authors' code
    truncates R to an integer and trains only the ratings with R > 0 → (targets, kept) [P]."""
    scaled = (ratings.double() - scale.low) / (scale.high - scale.low)
    target = bits * (2 * scaled - 1)
    if variant == "scaled":
        return target, torch.ones_like(target, dtype=torch.bool)
    target = torch.trunc(target)
    return target, target > 0


@pytest.mark.parametrize("rule,aggregation,stay,targets,count", [
    ("code", "grad", "clients", "scaled", "rated"), ("code", "grad", "raters", "scaled", "rated"),
    ("paper", "grad", "clients", "scaled", "rated"), ("code", "para", "clients", "scaled", "rated"),
    ("paper", "para", "clients", "scaled", "rated"), ("code", "grad", "clients", "code", "rated"),
    ("code", "grad", "clients", "code", "trained"), ("code", "para", "clients", "code", "rated")])
def test_client_step_matches_per_client_per_bit_loop(rule, aggregation, stay, targets, count):
    # λ large enough under the code's rule that the user's stay term 2λ|Ω_u| decides bits (and so its count)
    balance = 3.0 if rule == "code" and targets == "code" else 0.002
    overrides = LIGHTFR + [f"method.rule={rule}", f"method.aggregation={aggregation}", f"method.balance={balance}",
                           f"method.item_stay={stay}", f"method.targets={targets}", f"method.stay_count={count}"]
    method, env = make_method(overrides)
    problem = method.client.problems(round_of(method).sampler.users(0), 0)[0]
    uploads, new_user, _ = unpack(method.client.step(problem))
    w = method.weights
    batch = problem.batch
    expected_rows = {}
    for b, u in enumerate(batch.users.tolist()):
        target, kept = oracle_targets(batch.ratings[b][batch.pos_mask[b]], method.scale, 16, targets)
        items, target = batch.pos[b][batch.pos_mask[b]][kept], target[kept].float()
        D = method.public.item[items]
        omega = items.numel() if count == "trained" else int(batch.pos_mask[b].sum())  # |Ω_u| of the stay term
        code = oracle_dcd(method.client.private.user[u], D, target, w.user_self * omega, w.balance, 10)
        assert torch.equal(new_user[b].double(), code), f"client {u}"
        for j, i in enumerate(items.tolist()):
            if aggregation == "grad":  # Eq. 12
                row = (target[j] - float(code @ D[j].double())) * code + w.item_self * D[j].double()
            else:  # Eq. 11: the item copy's own DCD against the one user code
                row = oracle_dcd(D[j], code[None].float(), target[j:j + 1], w.item_self, w.balance, 10)
            expected_rows[(b, i)] = row
    got = {(int(c), int(i)): r.double() for c, i, r in zip(uploads.row_client, uploads.row_item, uploads.row_delta)}
    assert got.keys() == expected_rows.keys()
    for key, row in expected_rows.items():
        torch.testing.assert_close(got[key], row, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("alpha", [1.0, 1.2])
def test_dcd_stops_when_no_bit_changes_and_lowers_the_loss(alpha):
    """With α ≥ 1 (α = 1: the exact coordinate minimiser; α = 2λ = 1.2: the code rule) every flip
    lowers the squared loss, so the sweeps end at a fixed point."""
    gen = torch.Generator().manual_seed(3)
    codes = torch.randn(5, 16, generator=gen).sign()
    partners = torch.randn(5, 7, 16, generator=gen).sign()
    target = torch.randint(-16, 17, (5, 7), generator=gen).float()
    mask = torch.ones(5, 7, dtype=torch.bool)
    before = ((target - torch.einsum("nf,npf->np", codes, partners)) ** 2).sum(1)
    self_weight = torch.full((5,), alpha * 7)
    new, score, sweeps = dcd_codes(codes, partners, target, mask, self_weight, 0.0, 50)
    assert sweeps < 50
    again, _, more = dcd_codes(new, partners, target, mask, self_weight, 0.0, 50)
    assert torch.equal(again, new) and more == 1  # a fixed point: one sweep, no change
    after = ((target - score) ** 2).sum(1)
    assert (after <= before).all() and (after < before).any()
    torch.testing.assert_close(score, torch.einsum("nf,npf->np", new, partners))


def test_agg_grad_hand_computed():
    """Eq. 16 in code units, bits in order: d*_ik = Σ Δd + γ c d_ik − β Σ_{k'≠k} d_ik'."""
    item = torch.tensor([[1.0, 1.0, -1.0, 1.0], [-1.0, 1.0, 1.0, 1.0], [1.0, -1.0, 1.0, -1.0]])
    server = LightFRServer(PublicParams(item.clone()), DCDWeights(0, 0, 0.0, 1.0), "grad")
    summed = torch.tensor([[-5.0, 1.0, 3.0, -2.0], [0.0, -0.5, 0.0, 0.0]])  # Σ_u Δd for items 0 and 2
    server.step(Aggregate(torch.tensor([0, 2]), summed), RoundContext(0, 0, n_clients=2))
    # item 0: −5+2 <0 → −1; 1+2 >0 → 1; 3−2 >0 → 1; −2+2 = 0 → keep 1.  item 1: untouched, stays.
    # item 2: 0+2 → 1; −0.5−2 → −1; 0+2 → 1; 0−2 → −1.
    expected = torch.tensor([[-1.0, 1.0, 1.0, 1.0], [-1.0, 1.0, 1.0, 1.0], [1.0, -1.0, 1.0, -1.0]])
    assert torch.equal(server.public.item, expected)

    balanced = LightFRServer(PublicParams(torch.tensor([[1.0, 1.0, 1.0, -1.0]])), DCDWeights(0, 0, 1.0, 0.0), "grad")
    balanced.step(Aggregate(torch.tensor([0]), torch.tensor([[0.5, 0.5, 0.5, 0.5]])), RoundContext(0, 0, 1))
    # bit 0: 0.5 − (1+1−1) = −0.5 → −1; bit 1: 0.5 − (−1+1−1) = 1.5 → 1;
    # bit 2: 0.5 − (−1+1−1) = 1.5 → 1; bit 3: 0.5 − (−1+1+1) = −0.5 → −1 (sequential: sees bit 0 = −1)
    assert balanced.public.item.tolist() == [[-1.0, 1.0, 1.0, -1.0]]


def test_agg_para_is_a_majority_vote_that_keeps_ties():
    item = torch.tensor([[1.0, -1.0, 1.0], [1.0, 1.0, 1.0]])
    server = LightFRServer(PublicParams(item.clone()), DCDWeights(1, 1, 0.0, 0.0), "para")
    votes = torch.tensor([[-3.0, 0.0, 1.0]])  # Σ_u D^u_0 over three and two uploaders
    server.step(Aggregate(torch.tensor([0]), votes), RoundContext(0, 0, 5))
    assert server.public.item.tolist() == [[-1.0, -1.0, 1.0], [1.0, 1.0, 1.0]]


@pytest.mark.parametrize("aggregation,residual_bytes", [("para", 0), ("grad", 4)])
def test_uploads_are_signs_and_communication_is_counted_in_bits(aggregation, residual_bytes):
    method, env = make_method(LIGHTFR + [f"method.aggregation={aggregation}", "sim.clients_per_round=8"])
    stats = round_of(method).train_round(0)
    f, m = env.backbone.config.dim, env.n_items
    users = round_of(method).sampler.users(0)
    batch = env.train.client_batch(users)
    rated = (batch.pos_mask & method.client.trains(batch.ratings)).sum(1).double().mean()  # rows each client sends
    assert rated < env.train.sizes(users).double().mean()  # targets=code: ratings at or under the midpoint stay home
    assert stats.bytes_down == m * f / 8
    assert stats.bytes_up == pytest.approx(float(rated) * (4 + f / 8 + residual_bytes))
    if aggregation == "para":
        uploads, _, _ = unpack(method.client.step(method.client.problems(users, 1)[0]))
        assert set(uploads.row_delta.unique().tolist()) <= {-1.0, 1.0}
    assert 0 <= stats.extra["item_bits_flipped"] <= 1 and stats.extra["dcd_sweeps_user"] >= 1


def test_random_packed_codes_round_trip_through_hamming_distance():
    gen = torch.Generator().manual_seed(0)
    users, items = torch.randn(6, 64, generator=gen).sign(), torch.randn(50, 64, generator=gen).sign()
    distances = hamming_distances(pack_codes(users), pack_codes(items))
    assert torch.equal(distances.long(), ((64 - users @ items.T) / 2).long())


@pytest.mark.parametrize("n_items,bits,k", [(500, 64, 10), (3000, 16, 25), (40, 8, 40)])
def test_faiss_and_torch_hamming_search_agree(n_items, bits, k):
    if not faiss_available():
        pytest.skip("faiss not installed")
    gen = torch.Generator().manual_seed(n_items)
    users, items = torch.randn(30, bits, generator=gen).sign(), torch.randn(n_items, bits, generator=gen).sign()
    d_faiss, i_faiss = top_k_hamming(pack_codes(users), pack_codes(items), k, engine="faiss")
    d_torch, i_torch = top_k_hamming(pack_codes(users), pack_codes(items), k, engine="torch")
    assert torch.equal(d_faiss, d_torch) and torch.equal(i_faiss, i_torch)  # ties included (16 bits: many)
    brute = ((bits - users @ items.T) / 2).long()  # the same order by (distance, id)
    key = brute * n_items + torch.arange(n_items)
    assert torch.equal(i_torch, key.sort(dim=1).values[:, :k] % n_items)


@pytest.mark.parametrize("overrides,field", [
    (["backbone=mf"], "backbone"),
    (["dataset.ratings=false", "backbone.loss=mse"], "dataset"),
    (["privacy=ldp"], "privacy"),
    (["method.rule=both"], "method.rule"),
    (["method.aggregation=mean"], "method.aggregation"),
    (["backbone.dim=12"], "backbone.dim"),
    (["backbone.l2=0.01"], "backbone.l2"),
    (["method.rule=paper", "method.item_stay=raters"], "method.item_stay"),
    (["method.aggregation=para", "method.item_stay=raters"], "method.item_stay"),
    (["method.targets=positive"], "method.targets"),
])
def test_bad_settings_are_named(overrides, field):
    with pytest.raises(ConfigError) as err:
        make_method(LIGHTFR + overrides)
    assert err.value.field.startswith(field)


@needs_data
def test_lightfr_learns_on_filmtrust_and_is_reproducible():
    """10 rounds on the authors' FilmTrust split: HR@10 among 49 sampled negatives (pessimistic ties)
    far above the 0.2 of a random ranking, and the same numbers twice."""
    results = [run(compose_cfg(FILMTRUST + ["sim.epochs=10", "sim.max_rounds=10", "sim.eval_every=0"]))
               for _ in range(2)]
    assert results[0].test["hr_at_10"] > 0.6
    assert results[0].test == results[1].test


def test_zero_rounds_evaluates_the_initial_codes():
    """``sim.max_rounds=0`` (Table 7's Random row): no training, the random codes are tested."""
    result = run(compose_cfg([*SMALL, *LIGHTFR, "sim.max_rounds=0", "eval.kind=ranking"]))
    assert result.rounds == 0 and result.train_seconds == 0 and set(result.test) >= {"hr_at_10", "ndcg_at_10"}


def eq19_code(code, item_codes, ratings01):
    """Eq. 19 as printed, in the paper's units: b*_uk = Σ_i (1/f)(r_ui − 1/2 − (1/2f) d_ik̄ᵀb_uk̄) d_ik,
    bits in order, swept until none changes (a zero b* keeps the bit)."""
    code, f = code.double().clone(), code.numel()
    for _ in range(10):
        changed = False
        for k in range(f):
            star = 0.0
            for d, r in zip(item_codes.double(), ratings01.double()):
                rest = float(code @ d - code[k] * d[k])  # d_ik̄ᵀ b_uk̄
                star += (float(r) - 0.5 - rest / (2 * f)) * float(d[k]) / f
            new = 1.0 if star > 1e-12 else -1.0 if star < -1e-12 else float(code[k])
            changed |= new != float(code[k])
            code[k] = new
        if not changed:
            break
    return code


def test_cold_start_clients_never_train_and_fit_codes_by_eq19():
    """Eq. 19 as printed fits every rating (targets=scaled); targets=code's selection is the client step's test."""
    method, env = make_method(LIGHTFR + ["method.targets=scaled", "method.cold_users=0.25", "sim.clients_per_round=0.5",
                                         "sim.sampling=independent"])
    cold = torch.nonzero(method.cold).squeeze(1)
    assert cold.numel() == round(0.25 * env.clients_with_data().numel())
    initial = method.client.private.user[cold].clone()
    for r in range(4):
        assert not method.cold[round_of(method).sampler.users(r)].any()  # never sampled
        round_of(method).train_round(r)
    assert torch.equal(method.client.private.user[cold], initial)  # untouched by training
    method.score_users(cold)  # ranking triggers Eq. 19 on the cold clients
    for u in cold.tolist():
        start, end = env.train.indptr[u], env.train.indptr[u + 1]
        items, ratings = env.train.items[start:end], env.train.ratings[start:end]
        want = eq19_code(initial[cold.tolist().index(u)], method.public.item[items], method.scale(ratings))
        assert torch.equal(method.client.private.user[u].double(), want), f"cold client {u}"
    warm = torch.nonzero(~method.cold).squeeze(1)
    assert not torch.equal(method.client.private.user[cold], initial)  # they did fit codes
    assert method.client.private.user[warm].abs().eq(1).all()


def test_cold_users_must_leave_clients_on_both_sides():
    with pytest.raises(ConfigError, match="cold_users"):
        make_method(LIGHTFR + ["method.cold_users=1.0"])
    with pytest.raises(ConfigError, match="cold_users"):
        make_method(LIGHTFR + ["method.cold_users=0.001"])


def eq21_codes(item_code, rater_codes, ratings01, max_rounds=10):
    """Eq. 21 as printed for one new item: every round, d*_ik = Σ_u (1/f)(r_ui − 1/2 − (1/2f) b_uk̄ᵀd_ik̄) b_uk
    from the current d_i for all bits, d_ik = sign(d*_ik) (0 keeps the bit), until no bit changes."""
    code, f = item_code.double().clone(), item_code.numel()
    for _ in range(max_rounds):
        star = torch.zeros(f, dtype=torch.float64)
        for b, r in zip(rater_codes.double(), ratings01.double()):
            rest = float(b @ code) - b * code  # b_uk̄ᵀd_ik̄ for every k
            star += (float(r) - 0.5 - rest / (2 * f)) * b / f
        new = torch.where(star > 1e-12, 1.0, torch.where(star < -1e-12, -1.0, code))
        if torch.equal(new, code):
            break
        code = new
    return code


def test_cold_start_items_are_withheld_and_coded_by_eq21():
    method, env = make_method(LIGHTFR + ["method.targets=scaled", "method.cold_items=0.2", "sim.clients_per_round=0.5",
                                         "sim.sampling=independent", "method.cold_users=0.1", CPU_ORACLE])
    cold = torch.nonzero(method.cold_item).squeeze(1)
    assert cold.numel() == round(0.2 * int((torch.bincount(env.train.items, minlength=env.n_items) > 0).sum()))
    initial = method.public.item[cold].clone()
    honest = method.client.step

    def watched(problem):
        result = honest(problem)
        assert not method.cold_item[result.uploads.row_item].any()  # a cold item's rating never leaves a client
        return result

    method.client.step = watched
    for r in range(4):
        round_of(method).train_round(r)
    assert torch.equal(method.public.item[cold], initial)  # no upload, the stay term keeps the bits
    trained_users = method.client.private.user.clone()
    method.score_users(torch.arange(3))  # ranking triggers Eq. 21, then Eq. 19
    for i in cold.tolist():
        raters, ratings = [], []
        for u in torch.nonzero(~method.cold & (env.train.sizes() > 0)).squeeze(1).tolist():
            start, end = env.train.indptr[u], env.train.indptr[u + 1]
            hit = env.train.items[start:end] == i
            if hit.any():
                raters.append(trained_users[u])
                ratings.append(method.scale(env.train.ratings[start:end][hit])[0])
        want = eq21_codes(initial[cold.tolist().index(i)], torch.stack(raters), torch.stack(ratings))
        assert torch.equal(method.public.item[i].double(), want), f"cold item {i}"
    assert not torch.equal(method.public.item[cold], initial)


def test_random_codes_hr_matches_a_simulation():
    """The tie-rule bounds in the LightFR notes (fedrun/eval/random_codes.py) against Monte Carlo."""
    from fedrun.eval.random_codes import random_codes_hr

    exact = random_codes_hr(bits=16, negatives=19, k=5)
    rng = np.random.default_rng(0)
    similarity = rng.binomial(16, 0.5, size=(200_000, 20))  # column 0: the test item
    above = (similarity[:, 1:] > similarity[:, :1]).sum(1)
    tied = (similarity[:, 1:] == similarity[:, :1]).sum(1)
    place = above + np.floor(rng.random(len(above)) * (tied + 1))  # uniform among its ties
    simulated = {"pessimistic": (above + tied < 5).mean(), "optimistic": (above < 5).mean(),
                 "random": (place < 5).mean()}
    for rule in exact:
        assert exact[rule] == pytest.approx(simulated[rule], abs=0.004)
    assert exact["random"] == pytest.approx(5 / 20, abs=1e-9)  # symmetry: a uniform position
