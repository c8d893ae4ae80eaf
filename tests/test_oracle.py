"""The vectorized FedAvg must equal the plain per-client loop, and the FedSGD fast path the general path."""

from __future__ import annotations

import pytest
import torch

from fedrun.testing.fedavg_loop import clients_of, fedavg_round
from tests.conftest import make_method, round_of

ROUNDS = 3


def check_rounds(overrides, weighting="uniform"):
    """Each round, the oracle starts from the simulator's state and both must end equal.

    (Comparing from a shared state each round, not only after all rounds: Adam turns
    1e-8 differences in near-zero gradients into ±lr steps, so trajectories of two exact
    implementations drift apart over rounds by float noise alone.)
    """
    method, env = make_method(["method=fedavg", "sim.fast_path=off", "sim.buckets=3", "sim.min_bucket_clients=1",
                               "sim.clients_per_round=16", f"defense.weighting={weighting}", *overrides])
    start = method.public.item.clone()
    for r in range(ROUNDS):
        user_table, public = method.client.private.user.clone(), method.public.clone()
        problems = method.client.problems(round_of(method).sampler.users(r), r)
        fedavg_round(env.backbone, user_table, public, clients_of(problems), method.config.optimizer,
                     env.sim.local_epochs, weighting, method.config.loss_reduction)
        round_of(method).train_round(r)
        torch.testing.assert_close(method.public.item, public.item, rtol=1e-4, atol=1e-6)
        for name in public.net:
            torch.testing.assert_close(method.public.net[name], public.net[name], rtol=1e-4, atol=1e-6)
        torch.testing.assert_close(method.client.private.user, user_table, rtol=1e-4, atol=1e-6)
    assert (method.public.item - start).abs().max() > 1e-3  # the model did move


CASES = [
    ("mf", "sgd", 1, ["method.optimizer.lr=0.5"]),
    ("mf", "adam", 3, ["method.optimizer.lr=0.01"]),
    ("mf", "sgd", 3, ["method.optimizer.lr=0.5", "method.optimizer.momentum=0.9", "method.num_negatives=2"]),
    ("ncf", "sgd", 1, ["method.optimizer.lr=0.5"]),
    ("ncf", "sgd", 3, ["method.optimizer.lr=0.5", "method.optimizer.weight_decay=0.01"]),
    ("ncf", "adam", 3, ["method.optimizer.lr=0.01"]),
    ("ncf", "adam", 1, ["method.optimizer.lr=0.01", "backbone.variant=mlp", "backbone.loss=bpr"]),
    ("ncf", "adam", 1, ["method.optimizer.lr=0.01", "backbone.variant=gmf", "backbone.loss=bpr"]),
    ("pmf", "sgd", 3, ["method.optimizer.lr=0.01", "dataset.ratings=true"]),  # (0.05 diverges: rows past 1e18)
    ("pmf", "sgd", 2, ["method.optimizer.lr=0.05", "dataset.ratings=true", "backbone.l2=0.05"]),
    ("mf", "adam", 2, ["method.optimizer.lr=0.01", "backbone.l2=0.01", "method.num_negatives=3"]),
    # the balanced reduction (item rows step per example) and a user-row lr of its own
    ("mf", "sgd", 1, ["method.optimizer.lr=0.1", "method.loss_reduction=balanced", "method.optimizer.user_lr=2"]),
    ("mf", "sgd", 3, ["method.optimizer.lr=0.05", "method.loss_reduction=balanced", "method.optimizer.momentum=0.9",
                      "backbone.l2=0.01"]),
    ("ncf", "sgd", 2, ["method.optimizer.lr=0.05", "method.loss_reduction=balanced", "method.optimizer.user_lr=1"]),
    ("mf", "adam", 1, ["method.optimizer.lr=0.01", "method.loss_reduction=balanced", "method.optimizer.user_lr=0.05"]),
]


@pytest.fixture
def float64_for_adam(request):
    """Adam divides by |g| + 1e-8. Gradients that are mathematically zero or tiny (the head
    bias under BPR cancels in s+ - s-; dead-ReLU biases) are float32 summation noise, which
    Adam turns into ±lr steps, so two exact implementations differ by noise alone. In
    float64 that noise sits far below eps; Adam cases run there, SGD cases in float32."""
    previous = torch.get_default_dtype()
    if request.node.callspec.params["opt"] == "adam":
        torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


@pytest.mark.parametrize("backbone,opt,epochs,extra", CASES)
def test_vectorized_fedavg_matches_per_client_loop(backbone, opt, epochs, extra, float64_for_adam):
    check_rounds([f"backbone={backbone}", f"method.optimizer.name={opt}", f"sim.local_epochs={epochs}", *extra])


def test_data_size_weighting_matches_loop():
    check_rounds(["backbone=mf", "method.optimizer.lr=0.5"], weighting="data_size")


@pytest.mark.parametrize("backbone", ["mf", "ncf", "pmf-l2", "mf-balanced"])
@pytest.mark.parametrize("defense", ["mean", "mean_data_size", "sum"])
def test_fedsgd_fast_path_equals_general_path(backbone, defense):
    extra = ["defense=mean", "defense.weighting=data_size"] if defense == "mean_data_size" else [f"defense={defense}"]
    if backbone == "mf-balanced":
        backbone, extra = "mf", extra + ["method.loss_reduction=balanced", "method.optimizer.user_lr=3",
                                         "backbone.l2=0.01"]
    if backbone == "pmf-l2":
        backbone, extra = "pmf", extra + ["backbone.l2=0.05", "dataset.ratings=true"]
    common = [f"backbone={backbone}", "method.optimizer.lr=0.5", "sim.clients_per_round=16", "sim.buckets=3",
              "sim.min_bucket_clients=1", *extra]
    fast, _ = make_method(common)
    slow, _ = make_method(common + ["sim.fast_path=off"])
    assert round_of(fast).uses_fast_path and not round_of(slow).uses_fast_path
    for r in range(4):
        loss_fast, loss_slow = round_of(fast).train_round(r).loss, round_of(slow).train_round(r).loss
        assert loss_fast == pytest.approx(loss_slow, rel=1e-5)
    torch.testing.assert_close(fast.public.item, slow.public.item, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(fast.client.private.user, slow.client.private.user, rtol=1e-4, atol=1e-6)
    for name in fast.public.net:
        torch.testing.assert_close(fast.public.net[name], slow.public.net[name], rtol=1e-4, atol=1e-6)


def test_fast_path_is_refused_when_not_exact():
    assert not round_of(make_method(["method.optimizer.name=adam"])[0]).uses_fast_path
    assert not round_of(make_method(["sim.local_epochs=2"])[0]).uses_fast_path
    assert not round_of(make_method(["method.optimizer.momentum=0.5"])[0]).uses_fast_path
