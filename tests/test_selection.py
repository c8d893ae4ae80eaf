"""Validation-based stopping and model selection: sim.patience, sim.keep_best."""

from __future__ import annotations

import pytest
import torch

from fedrun.app import experiment
from fedrun.errors import ConfigError
from fedrun.eval.base import Evaluator
from fedrun.eval.config import EvalConfig
from fedrun.kernels.config import SimConfig
from fedrun.method.base import Method, RoundStats
from fedrun.sim.checkpoint import RunnerState, snapshot
from fedrun.sim.loop import run_loop
from fedrun.sim.trainer import CentralTraining
from fedrun.track.none import NoTracking, NoTrackingConfig
from tests.conftest import SMALL, compose_cfg


class Counter(Method):
    """One round per epoch; its 'model' is the number of rounds trained."""

    def __init__(self):
        self.rounds = torch.zeros(())

    def rounds_per_epoch(self) -> int:
        return 1

    def train_round(self, round_index: int) -> RoundStats:
        self.rounds += 1
        return RoundStats(loss=0.0)

    def state_dict(self) -> dict:
        return {"rounds": self.rounds}

    def load_state_dict(self, state: dict) -> None:
        self.rounds.copy_(state["rounds"])


class Scripted(Evaluator):
    """Validation values follow a script indexed by the rounds trained; the test value is the
    rounds of the model tested, so a test can see which model was tested."""

    def __init__(self, script: list[float], monitor: str = "ndcg_at_10", rating: bool = False):
        self.config = EvalConfig(monitor=monitor)
        self.rating, self.script, self.split = rating, script, type("S", (), {"valid": True})()

    def collapsed(self, method: Counter, sample: int = 64) -> bool:
        return False  # a scripted evaluation has no scores to inspect

    def evaluate(self, method: Counter, part: str) -> dict[str, float]:
        trained = int(method.rounds)
        value = self.script[trained - 1] if part == "valid" else float(trained)
        return {"rmse": value} if self.rating else {"ndcg_at_10": value}


def loop(script, monitor="ndcg_at_10", rating=False, **sim):
    method = Counter()
    result = run_loop(CentralTraining(method), Scripted(script, monitor, rating), NoTracking(NoTrackingConfig()),
                      SimConfig(epochs=len(script), progress=False, **sim), "test")
    return result


def test_patience_stops_after_that_many_validations_without_improvement():
    result = loop([0.1, 0.3, 0.2, 0.25, 0.5, 0.6], patience=2)
    assert result.rounds == 4  # best at round 2; rounds 3 and 4 did not beat it
    assert result.test["ndcg_at_10"] == 4.0  # the last model is tested without keep_best


def test_keep_best_tests_the_best_validated_model():
    result = loop([0.1, 0.3, 0.2, 0.25, 0.29, 0.1], keep_best=True)
    assert result.rounds == 6 and result.test["ndcg_at_10"] == 2.0
    assert result.valid["ndcg_at_10"] == 0.3  # the tested model's validation, beside its test
    assert loop([0.1, 0.3, 0.2, 0.25, 0.29, 0.1]).valid["ndcg_at_10"] == 0.1  # without keep_best: the last


def test_rating_errors_improve_downwards():
    result = loop([0.9, 0.8, 0.85, 0.7, 0.75, 0.76], monitor="rmse", rating=True, patience=2, keep_best=True)
    assert result.rounds == 6 and result.test["rmse"] == 4.0


def test_validation_every_two_epochs_counts_validations_not_epochs():
    result = loop([0.0, 0.5, 0.0, 0.4, 0.0, 0.3, 0.0, 0.9], patience=2, eval_every=2)
    assert result.rounds == 6  # validations at 2 (best), 4, 6


def test_snapshot_does_not_follow_later_in_place_updates():
    live = {"user": torch.zeros(3), "server": {"moments": [torch.ones(2)], "step": 4}}
    copy = snapshot(live)
    live["user"] += 1
    live["server"]["moments"][0].mul_(5)
    assert torch.equal(copy["user"], torch.zeros(3)) and torch.equal(copy["server"]["moments"][0], torch.ones(2))
    assert copy["server"]["step"] == 4


def test_selection_state_survives_a_checkpoint_round_trip(tmp_path):
    from fedrun.sim import checkpoint
    state = RunnerState(next_round=3, best_valid=0.4, best_round=2, stale=1,
                        best_state={"private_user": torch.ones(2, 2), "server": {"step": torch.tensor(2)}})
    checkpoint.save(tmp_path / "c.pt", {}, state, "", None)
    loaded = checkpoint.load(tmp_path / "c.pt")["runner"]
    assert loaded.best_valid == 0.4 and loaded.stale == 1 and torch.equal(loaded.best_state["private_user"],
                                                                           torch.ones(2, 2))


def run(overrides):
    return experiment.run(compose_cfg(SMALL + ["sim.epochs=6", *overrides]))


def test_a_run_with_patience_and_keep_best_tests_the_best_validated_model():
    # seeded synthetic data on which validation peaks after epoch 1 and falls at epoch 2 (FedAvg's mean loss at lr .5)
    step = ["method.optimizer.lr=0.5", "method.optimizer.user_lr=null", "method.loss_reduction=mean"]
    best = run(["sim.patience=1", "sim.keep_best=true", *step])
    last = run(["sim.patience=1", *step])
    assert best.rounds == last.rounds == 2 * 4 < 6 * 4  # stopped after epoch 2 (4 rounds per epoch)
    assert best.test != last.test  # the epoch-1 model, not the epoch-2 one
    assert run(["sim.keep_best=true", *step]).test == best.test  # the same model over 6 epochs


@pytest.mark.parametrize("overrides, field", [
    (["sim.patience=0"], "patience"),
    (["sim.patience=2", "dataset.split.valid=false"], "sim.patience"),
    (["sim.keep_best=true", "sim.eval_every=0"], "sim.keep_best"),
    (["sim.patience=2", "eval.monitor=ndcg_at_7"], "eval.monitor"),
])
def test_selection_needs_validations_and_a_known_monitor(overrides, field):
    with pytest.raises(ConfigError) as error:
        experiment.build_run(compose_cfg(SMALL + overrides))
    assert error.value.field.endswith(field)


@pytest.mark.parametrize("overrides", [
    [],
    ["eval=sampled", "eval.num_negatives=20", "eval.metrics=[hr,ndcg]", "eval.ks=[3,10]"],
    ["backbone=pmf", "dataset.ratings=true", "dataset.split.protocol=random_ratio", "dataset.split.valid_ratio=0.1",
     "method=fedrec"],
])
def test_metric_names_are_the_names_evaluate_returns(overrides):
    built = experiment.build_run(compose_cfg(SMALL + overrides))
    assert sorted(built.evaluator.evaluate(built.method, "valid")) == sorted(built.evaluator.metric_names())


def test_the_sweep_objective_is_validation_of_the_tested_model_never_the_test():
    """What `fedrun -m` hands a sweeper (hydra/sweeper=optuna: +experiment=tune/<method>) to optimise."""
    script = [0.1, 0.3, 0.2, 0.25, 0.29, 0.1]
    assert loop(script, keep_best=True).objective == 0.3  # the best validation: its model is tested
    assert loop(script).objective == 0.1  # without keep_best the last model is tested, and its validation counts
    assert loop(script, eval_every=0).objective is None  # nothing validated: nothing to optimise (not the test)
    assert loop([0.9, 0.8, 0.85], monitor="rmse", rating=True, keep_best=True).objective == 0.8


def test_a_method_that_trains_nothing_runs_under_the_selection_rules():
    """Popularity (0 rounds an epoch) under the tuned board's stopping rule: once a ZeroDivisionError traceback."""

    class Untrained(Counter):
        def rounds_per_epoch(self) -> int:
            return 0

    result = run_loop(CentralTraining(Untrained()), Scripted([0.1]), NoTracking(NoTrackingConfig()),
                      SimConfig(epochs=40, progress=False, patience=5, keep_best=True), "test")
    assert result.rounds == 0 and result.objective is None and result.final_metrics["rounds_trained"] == 0
