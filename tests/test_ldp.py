"""LDP mechanism: the clip bound holds for every norm, and the noise has the scale ε asks for
(statistical tests with fixed seeds)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from fedrun.errors import ConfigError
from fedrun.privacy.config import LDPConfig
from fedrun.privacy.ldp import LDP, clip_rows, noise_scale, sample_noise
from fedrun.types import Uploads

ORDERS = {"l1": 1.0, "l2": 2.0, "linf": math.inf}


@settings(max_examples=60, deadline=None, derandomize=True)
@given(norm=st.sampled_from(list(ORDERS)), bound=st.floats(0.01, 10.0), scale=st.floats(1e-3, 1e3),
       dim=st.integers(1, 64), seed=st.integers(0, 2**16))
def test_clip_bound_holds_and_small_rows_are_untouched(norm, bound, scale, dim, seed):
    rows = torch.randn(32, dim, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * scale
    clipped = clip_rows(rows, norm, bound)
    size = torch.linalg.vector_norm(clipped, ord=ORDERS[norm], dim=1)
    assert (size <= bound * (1 + 1e-9)).all()
    inside = torch.linalg.vector_norm(rows, ord=ORDERS[norm], dim=1) <= bound
    assert torch.equal(clipped[inside], rows[inside])
    # clipping only rescales: the direction is kept
    cos = torch.nn.functional.cosine_similarity(clipped, rows, dim=1)
    assert torch.allclose(cos, torch.ones_like(cos), atol=1e-9)


def test_fedcl_calibration_is_laplace_two_delta_over_epsilon():
    assert noise_scale(LDPConfig(epsilon=4.0, clip=1.0, norm="l1"), dim=64) == pytest.approx(0.5)
    assert noise_scale(LDPConfig(epsilon=1.0, clip=0.5, norm="l1"), dim=64) == pytest.approx(1.0)
    # other norms pay the L1 sensitivity of their ball: √d (L2) and d (L∞)
    assert noise_scale(LDPConfig(epsilon=2.0, clip=1.0, norm="l2"), dim=16) == pytest.approx(2 * 4 / 2)
    assert noise_scale(LDPConfig(epsilon=2.0, clip=1.0, norm="linf"), dim=16) == pytest.approx(2 * 16 / 2)
    gauss = noise_scale(LDPConfig(epsilon=1.0, clip=1.0, norm="l2", mechanism="gaussian", delta=1e-5), dim=8)
    assert gauss == pytest.approx(2 * math.sqrt(2 * math.log(1.25e5)))


@pytest.mark.parametrize("epsilon", [0.5, 4.0, 16.0])
def test_laplace_noise_matches_its_distribution(epsilon):
    mechanism = LDP(LDPConfig(epsilon=epsilon))
    zeros = torch.zeros(4000, 50, dtype=torch.float64)
    noise = mechanism.perturb(zeros, torch.Generator().manual_seed(7)).reshape(-1)
    scale = 2 * 1.0 / epsilon
    assert stats.kstest(noise.numpy(), "laplace", args=(0, scale)).pvalue > 0.01
    assert float(noise.abs().mean()) == pytest.approx(scale, rel=0.02)  # E|X| = b
    # a mis-calibrated scale (off by 10%) is rejected by the same test: the check has power
    assert stats.kstest(noise.numpy(), "laplace", args=(0, 1.1 * scale)).pvalue < 1e-6


def test_laplace_noise_is_finite_at_the_edge_of_the_uniform_draw(monkeypatch):
    """torch.rand can return exactly 0 (2⁻²⁴ in float32), which inversion would turn into −∞."""
    monkeypatch.setattr(torch, "rand", lambda shape, **kwargs: torch.zeros(shape))
    noise = sample_noise(torch.Size([3, 4]), "laplace", 0.5, torch.Generator(), torch.device("cpu"))
    assert torch.isfinite(noise).all()
    assert noise.abs().max() == pytest.approx(0.5 * math.log(2 ** 23), rel=1e-6)  # the largest draw possible


def test_gaussian_noise_matches_its_distribution():
    config = LDPConfig(epsilon=1.0, mechanism="gaussian", norm="l2")
    noise = LDP(config).perturb(torch.zeros(4000, 50, dtype=torch.float64), torch.Generator().manual_seed(3))
    sigma = noise_scale(config, 50)
    assert stats.kstest(noise.reshape(-1).numpy(), "norm", args=(0, sigma)).pvalue > 0.01


def test_perturbed_vectors_are_clipped_plus_zero_mean_noise():
    mechanism = LDP(LDPConfig(epsilon=8.0, clip=1.0))
    vectors = torch.randn(20000, 8, generator=torch.Generator().manual_seed(1), dtype=torch.float64) * 3
    out = mechanism.perturb(vectors, torch.Generator().manual_seed(2))
    clipped = clip_rows(vectors, "l1", 1.0)
    assert float((out - clipped).mean()) == pytest.approx(0.0, abs=0.01)
    assert not torch.equal(out, clipped)


def test_targets_decide_what_is_perturbed():
    gen = torch.Generator().manual_seed(0)
    embedding_only = LDP(LDPConfig())
    uploads = Uploads(2, torch.tensor([0, 1]), torch.tensor([3, 4]), torch.ones(2, 4))
    assert embedding_only.apply(uploads, gen) is uploads
    assert not embedding_only.transforms_uploads
    rows_only = LDP(LDPConfig(targets=["item_rows"]))
    assert rows_only.transforms_uploads
    assert not torch.equal(rows_only.apply(uploads, gen).row_delta, uploads.row_delta)
    vectors = torch.ones(3, 4)
    assert rows_only.privatize_embeddings(vectors, gen) is vectors


@pytest.mark.parametrize("field,value", [("epsilon", 0.0), ("epsilon", -1.0), ("clip", 0.0), ("norm", "l3"),
                                         ("mechanism", "exponential"), ("delta", 1.0), ("targets", ["gradients"])])
def test_bad_ldp_values_are_named(field, value):
    with pytest.raises(ConfigError, match=field):
        LDPConfig(**{field: value})


def test_a_direct_laplace_scale_sets_the_noise_and_the_reported_epsilon():
    """FedGNN / PerFedRec++ give λ and the L∞ clip δ: the noise is Laplace(0, λ) per coordinate and the
    ε of a d-dimensional vector is 2δd/λ (their 2δ/λ is per coordinate)."""
    ldp = LDP(LDPConfig(clip=0.5, norm="linf", scale=0.1, targets=["item_rows"]))
    assert noise_scale(ldp.config, 64) == 0.1
    assert ldp.epsilon_per_upload(64) == pytest.approx(2 * 0.5 * 64 / 0.1)
    gen = torch.Generator().manual_seed(0)
    noisy = ldp.perturb(torch.zeros(20000, 4), gen)
    assert noisy.abs().mean().item() == pytest.approx(0.1, rel=0.03)  # E|Laplace(0, b)| = b
    with pytest.raises(ConfigError, match="scale"):
        LDPConfig(scale=0.1, mechanism="gaussian")
    with pytest.raises(ConfigError, match="scale"):
        LDPConfig(scale=0.0)


def test_the_epsilon_a_client_spends_on_noised_item_rows_adds_up_over_its_rows_and_rounds():
    """Basic composition: each noised row is an ε-LDP release of the same client's data, so a round costs the client
    rows × ε and its rounds add up; checked against the rows its problems hold (one row per item slot)."""
    from tests.conftest import make_method, round_of

    method, env = make_method(["privacy=ldp", "privacy.targets=[item_rows]", "privacy.epsilon=2.0"])
    rounds = round_of(method)
    spent = torch.zeros(env.n_users, dtype=torch.float64)
    for r in range(3):
        users = method.round_users(rounds.sampler, r)
        for problem in method.client.problems(users, r):
            spent.index_add_(0, problem.batch.users, problem.item_mask.sum(1).double() * 2.0)
        round_stats = rounds.train_round(r)
        assert round_stats.extra["epsilon_item_rows_spent_max"] == pytest.approx(float(spent.max()))
    assert round_stats.extra["epsilon_per_item_row"] == 2.0


def test_the_epsilon_a_graph_client_spends_on_its_shared_embedding_counts_registration_and_refreshes():
    """FedGNN's clients share their protected row once at registration and again in every round they join: with
    every client in every round, after round r each has spent (r + 2) × the row's ε (2δd/λ per row, L∞ clip)."""
    from tests.conftest import make_method, round_of

    method, env = make_method(["method=fedgnn", "backbone=lightgcn", "privacy=perfedrecpp/ldp",
                               "sim.clients_per_round=all"])
    per_row = 2 * 0.5 * env.backbone.config.dim / 0.1
    for r in range(2):
        assert round_of(method).train_round(r).extra["epsilon_spent_max"] == pytest.approx((r + 2) * per_row)


@pytest.mark.parametrize("overrides,metric", [
    (["privacy=ldp", "privacy.targets=[item_rows]", "privacy.epsilon=2.0", "sim.clients_per_round=all"],
     "epsilon_item_rows_spent_max"),
    (["method=fedgnn", "backbone=lightgcn", "privacy=perfedrecpp/ldp", "sim.clients_per_round=all"],
     "epsilon_spent_max")])
def test_a_resumed_run_goes_on_spending_from_the_checkpoints_ledger(overrides, metric):
    """The per-client ε ledgers are in the method's state: a run resumed after round 1 reports what the run that
    never stopped reports after round 2, not the spending of round 2 alone."""
    from tests.conftest import make_method, round_of

    whole, _ = make_method(overrides)
    for r in range(2):
        expected = round_of(whole).train_round(r).extra[metric]
    first, _ = make_method(overrides)
    round_of(first).train_round(0)
    resumed, _ = make_method(overrides)
    round_of(resumed)  # the round registers its ledgers, as a run's plan builds it before loading a checkpoint
    resumed.load_state_dict(first.state_dict())
    assert round_of(resumed).train_round(1).extra[metric] == pytest.approx(expected)


def test_the_linf_clip_measures_rows_as_vector_norm_does_to_the_bit():
    """clip_rows's L∞ size is abs().amax(), vector_norm(ord=inf) the reference (50× slower on CPU): same bits."""
    rows = torch.randn(500, 32, generator=torch.Generator().manual_seed(3)) * torch.logspace(-6, 2, 500)[:, None]
    size = torch.linalg.vector_norm(rows, ord=float("inf"), dim=1, keepdim=True)
    expected = rows * torch.clamp(0.05 / size.clamp_min(1e-30), max=1.0)
    assert torch.equal(clip_rows(rows, "linf", 0.05), expected)
