"""The run loop: rounds → per-round metrics → periodic validation → final test."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from tqdm import tqdm

from fedrun.errors import FedrunError
from fedrun.eval.base import Evaluator
from fedrun.method.base import Method
from fedrun.sim.config import SimConfig
from fedrun.track.base import Tracker


class NumericalError(FedrunError):
    """Training produced a non-finite value."""


@dataclass
class RunResult:
    test: dict[str, float]
    valid: dict[str, float] = field(default_factory=dict)
    rounds: int = 0
    train_seconds: float = 0.0
    eval_seconds: float = 0.0


def total_rounds(method: Method, sim: SimConfig) -> int:
    rounds = method.rounds_per_epoch() * sim.epochs
    return rounds if sim.max_rounds is None else min(rounds, sim.max_rounds)


def run_loop(method: Method, evaluator: Evaluator, tracker: Tracker, sim: SimConfig, label: str) -> RunResult:
    per_epoch = method.rounds_per_epoch()
    n_rounds = total_rounds(method, sim)
    has_valid = evaluator.split.valid is not None
    result = RunResult(test={}, rounds=n_rounds)
    monitor = evaluator.config.monitor
    bar = tqdm(total=n_rounds, desc=label, disable=not sim.progress, dynamic_ncols=True, unit="round")
    for round_index in range(n_rounds):
        started = time.perf_counter()
        stats = method.train_round(round_index)
        result.train_seconds += time.perf_counter() - started
        if not math.isfinite(stats.loss):
            raise NumericalError(
                f"The training loss became {stats.loss} in round {round_index} ({type(method).__name__}). "
                "Lower the learning rate (method.optimizer.lr) or check the data.")
        tracker.log_metrics({"train_loss": stats.loss, "bytes_up_per_client": stats.bytes_up,
                             "bytes_down_per_client": stats.bytes_down, **stats.extra}, step=round_index)
        epoch_done = (round_index + 1) % per_epoch == 0
        epoch = (round_index + 1) // per_epoch
        if has_valid and sim.eval_every and epoch_done and epoch % sim.eval_every == 0:
            started = time.perf_counter()
            result.valid = evaluator.evaluate(method, "valid")
            result.eval_seconds += time.perf_counter() - started
            tracker.log_metrics({f"valid_{k}": v for k, v in result.valid.items()}, step=round_index + 1)
        postfix = {"epoch": epoch, "loss": f"{stats.loss:.4f}"}
        shown = monitor if monitor in result.valid else next(iter(result.valid), None)
        if shown:
            postfix[shown] = f"{result.valid[shown]:.4f}"
        bar.set_postfix(postfix, refresh=False)
        bar.update()
    bar.close()
    started = time.perf_counter()
    result.test = evaluator.evaluate(method, "test")
    result.eval_seconds += time.perf_counter() - started
    tracker.log_metrics({f"test_{k}": v for k, v in result.test.items()}, step=n_rounds)
    tracker.log_metrics({"train_seconds": result.train_seconds, "eval_seconds": result.eval_seconds,
                         "seconds_per_round": result.train_seconds / max(n_rounds, 1)}, step=n_rounds)
    return result
