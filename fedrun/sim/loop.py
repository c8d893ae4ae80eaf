"""The run loop: rounds → per-round metrics → periodic validation (early stopping, best model) →
checkpoints → final test."""

from __future__ import annotations

import logging
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, cast

from tqdm import tqdm

from fedrun.eval.base import Evaluator
from fedrun.kernels.config import SimConfig
from fedrun.kernels.guards import NumericalError, check_model
from fedrun.method.base import Method
from fedrun.sim.checkpoint import RunnerState, snapshot
from fedrun.sim.round import FederatedRound
from fedrun.sim.signals import Interrupted, graceful_stop
from fedrun.sim.trainer import Trainer
from fedrun.track.base import Tracker

__all__ = ["Interrupted", "NumericalError", "RunResult", "log_final", "run_loop", "total_rounds"]
log = logging.getLogger("fedrun")


@dataclass
class RunResult:
    test: dict[str, float]
    valid: dict[str, float] = field(default_factory=dict)  # of the tested model (the best one under sim.keep_best)
    rounds: int = 0
    train_seconds: float = 0.0
    eval_seconds: float = 0.0
    # what the run's record still needs once the results are safe (``log_final``): the test metrics, the timings and
    # the selection at the last step, and the tags learned at the test (``fedrun.collapsed``)
    final_metrics: dict[str, float] = field(default_factory=dict)
    final_tags: dict[str, str] = field(default_factory=dict)
    # what a sweeper optimises (``fedrun.app.cli``): eval.monitor on the validation part for the tested model (the best
    # validation under sim.keep_best), None where the run validated nothing — never a test metric
    objective: float | None = None


def log_final(tracker: Tracker, result: RunResult) -> None:
    """Record what the test produced (``RunResult.final_metrics`` / ``final_tags``) at the run's last step — after
    the results are on the terminal and in a local file, so a failing store cannot lose them."""
    tracker.log_metrics(result.final_metrics, step=result.rounds)
    if result.final_tags:
        tracker.set_tags(result.final_tags)


def total_rounds(trainer: Trainer, sim: SimConfig) -> int:
    rounds = trainer.rounds_per_epoch() * sim.epochs
    return rounds if sim.max_rounds is None else min(rounds, sim.max_rounds)


SaveFn = Callable[[RunnerState], Path]


def run_loop(trainer: Trainer, evaluator: Evaluator, tracker: Tracker, sim: SimConfig, label: str,
             state: RunnerState | None = None, save: SaveFn | None = None, stop_file: Path | None = None,
             valid_floor: float | None = None) -> RunResult:
    """Rounds ``state.next_round`` … end of ``trainer`` (a method's rounds). ``save(state)`` writes a
    checkpoint (every ``sim.checkpoint_every`` rounds and when a stop signal arrives). ``valid_floor``: the
    floor's ``eval.monitor`` on the validation part, shown beside each validation in the log."""
    state = state or RunnerState()
    method = trainer.method
    per_epoch = trainer.rounds_per_epoch()
    n_rounds = total_rounds(trainer, sim)
    has_valid = evaluator.split.valid is not None
    show_bar = bar_wanted(sim.progress, sys.stderr)
    bar = tqdm(total=n_rounds, initial=state.next_round, desc=label, disable=not show_bar,
               dynamic_ncols=True, unit="round")
    # epoch losses; without the bar, one log line per epoch
    pace = _Pace(state.next_round, n_rounds, per_epoch, valid_floor, state.train_seconds,
                 sim.eval_every if has_valid else 0)
    with graceful_stop(stop_file) as stop:
        while state.next_round < n_rounds and not _patience_spent(state, sim):
            round_index = state.next_round
            started = time.perf_counter()
            stats = trainer.train_round(round_index)
            state.train_seconds += time.perf_counter() - started
            if not math.isfinite(stats.loss):
                raise NumericalError(
                    f"The training loss became {stats.loss} in round {round_index} ({type(method).__name__}). "
                    "Lower the learning rate (method.optimizer.lr) or check the data.")
            # "epoch" at every step a record is logged (step / rounds per epoch: the epochs done after that many
            # rounds): an x axis all of a sweep's curves share in MLflow's charts, central runs (a round is an
            # epoch) and federated ones (many rounds per epoch) alike
            tracker.log_metrics({"train_loss": stats.loss, "bytes_up_per_client": stats.bytes_up,
                                 "bytes_down_per_client": stats.bytes_down, "epoch": round_index / per_epoch,
                                 **stats.extra}, step=round_index)
            pace.losses.append(stats.loss)
            epoch, epoch_done = (round_index + 1) // per_epoch, (round_index + 1) % per_epoch == 0
            validated = has_valid and sim.eval_every and epoch_done and epoch % sim.eval_every == 0
            if validated:
                started = time.perf_counter()
                state.valid = evaluator.evaluate(method, "valid")
                pace.validation_seconds.append(time.perf_counter() - started)
                state.eval_seconds += pace.validation_seconds[-1]
                tracker.log_metrics({**{f"valid_{k}": v for k, v in state.valid.items()}, "epoch": epoch},
                                    step=round_index + 1)
                if sim.selects_on_validation:
                    _track_best(state, method, evaluator, sim.keep_best, round_index + 1)
            if sim.test_every and epoch_done and epoch % sim.test_every == 0 and round_index + 1 < n_rounds:
                started = time.perf_counter()
                curve = evaluator.evaluate(method, "test")  # a learning curve: logged, never used to select
                state.eval_seconds += time.perf_counter() - started
                tracker.log_metrics({**{f"test_{k}": v for k, v in curve.items()}, "epoch": epoch},
                                    step=round_index + 1)
            state.next_round = round_index + 1
            _progress(bar, epoch, stats.loss, state.valid, evaluator.monitor)
            if epoch_done:
                pace.close_epoch(state, evaluator.monitor if validated else None, log_it=not show_bar)
            if save is not None and (stop.requested or (sim.checkpoint_every and
                                                        state.next_round % sim.checkpoint_every == 0)):
                path = save(state)
                if stop.requested:
                    raise Interrupted(cast(str, stop.signal), state.next_round, path)
            elif stop.requested:
                raise Interrupted(cast(str, stop.signal), state.next_round, None)
    bar.close()
    noisy_updates = isinstance(trainer, FederatedRound) and "item_rows" in trainer.privacy.targets
    pace.check_rise(tracker, noisy_updates)
    rounds = state.next_round
    selection = _select_tested_model(state, method, evaluator, sim, per_epoch) if sim.selects_on_validation else {}
    check_model(method.state_dict(), rounds)  # never score a diverged model
    started = time.perf_counter()
    test = evaluator.evaluate(method, "test")
    state.eval_seconds += time.perf_counter() - started
    tags = {}
    if evaluator.collapsed(method):
        log.warning("the tested model scores every item the same for every sampled user (a collapsed model, e.g. "
                    "dead ReLUs after too large a step): its ranking metrics are 0 by the tie rule; lower the "
                    "learning rate or check the initialisation")
        tags["fedrun.collapsed"] = "true"
    per_round = state.train_seconds / max(rounds, 1)
    final = {**{f"test_{k}": v for k, v in test.items()}, "train_seconds": state.train_seconds,
             "eval_seconds": state.eval_seconds, "seconds_per_round": per_round,
             "seconds_per_epoch": per_round * per_epoch, **selection}
    tested_valid = state.best_valid_metrics if sim.keep_best and state.best_state is not None else state.valid
    return RunResult(test, tested_valid, rounds, state.train_seconds, state.eval_seconds, final, tags,
                     tested_valid.get(evaluator.monitor))


def _track_best(state: RunnerState, method: Method, evaluator: Evaluator, keep_best: bool, rounds_done: int) -> None:
    """After a validation: remember it (and, for sim.keep_best, the model) when eval.monitor improved."""
    monitor = evaluator.monitor
    value = state.valid[monitor]
    if evaluator.improves(value, state.best_valid, monitor):
        state.best_valid, state.best_round, state.stale = value, rounds_done, 0
        state.best_valid_metrics = dict(state.valid)
        state.best_state = snapshot(method.state_dict()) if keep_best else None
    else:
        state.stale += 1


def _patience_spent(state: RunnerState, sim: SimConfig) -> bool:
    return sim.patience is not None and state.stale >= sim.patience


def _select_tested_model(state: RunnerState, method: Method, evaluator: Evaluator, sim: SimConfig,
                         per_epoch: int) -> dict[str, float]:
    """Load the best validated model for sim.keep_best; say where training stopped and why."""
    per_epoch = max(per_epoch, 1)  # a method that trains nothing (popularity: 0 rounds) is its own only model
    monitor, best_epoch = evaluator.monitor, state.best_round / per_epoch
    if _patience_spent(state, sim):
        log.info("Early stop after epoch %g: valid %s has not improved for %d validations (best %.4f at epoch %g).",
                 state.next_round / per_epoch, monitor, sim.patience, state.best_valid, best_epoch)
    if sim.keep_best and state.best_state is not None:
        method.load_state_dict(state.best_state)
        log.info("Testing the model of epoch %g (best valid %s %.4f).", best_epoch, monitor, state.best_valid)
    chosen = {"rounds_trained": float(state.next_round), "best_valid_round": float(state.best_round)}
    return chosen if state.best_valid is None else {**chosen, f"best_valid_{monitor}": state.best_valid}


class _Pace:
    """Each epoch's mean training loss, and the progress a run without its bar (``sim.progress=false``: batch
    jobs, sweeps) reports in its log, one line per epoch: that loss, the validation just taken (with the
    validation floor and the best so far), the training time per epoch and what is left.

    What is left is the training rate times the rounds left plus the mean validation times the validations
    left: one rate over both read a resumed run's first validation, taken a few hundred rounds in, as if
    every round cost that much (a FedCL run resumed mid-epoch said 7.5 h left, for about 2.5 h)."""

    RISE = 10.0  # a last epoch's loss this many times the lowest epoch's: the training diverged

    def __init__(self, first_round: int, n_rounds: int, per_epoch: int, valid_floor: float | None = None,
                 train_seconds: float = 0.0, eval_every: int = 0):
        self.first_round, self.n_rounds, self.per_epoch = first_round, n_rounds, per_epoch
        self.valid_floor, self.eval_every = valid_floor, eval_every
        self.train_seconds_before = train_seconds  # a resumed run's training time before this process
        self.validation_seconds: list[float] = []  # each validation this process took
        self.losses: list[float] = []  # the current epoch's round losses
        self.epoch_losses: list[float] = []  # the mean of each epoch this process ran

    def close_epoch(self, state: RunnerState, monitor: str | None, log_it: bool) -> None:
        self.epoch_losses.append(sum(self.losses) / len(self.losses))
        self.losses.clear()
        if not log_it:
            return
        done = state.next_round - self.first_round  # rounds this process ran (a resumed run starts later)
        seconds_per_round = (state.train_seconds - self.train_seconds_before) / max(done, 1)
        epochs = math.ceil(self.n_rounds / self.per_epoch)
        line = f"epoch {state.next_round // self.per_epoch}/{epochs}: loss {self.epoch_losses[-1]:.4f}"
        if monitor is not None:
            line += f", valid {monitor} {state.valid[monitor]:.4f}"
            notes = [] if self.valid_floor is None else [f"floor {self.valid_floor:.4f}"]
            if state.best_valid is not None:
                notes.append(f"best {state.best_valid:.4f}, epoch {state.best_round / self.per_epoch:g}")
            line += f" ({'; '.join(notes)})" if notes else ""
        left = (self.n_rounds - state.next_round) * seconds_per_round + self._validations_left(state) * (
            sum(self.validation_seconds) / len(self.validation_seconds) if self.validation_seconds else 0.0)
        log.info("%s; %s per epoch, %s left", line, _duration(seconds_per_round * self.per_epoch), _duration(left))

    def _validations_left(self, state: RunnerState) -> int:
        if not self.eval_every:
            return 0
        epoch, epochs = state.next_round // self.per_epoch, self.n_rounds // self.per_epoch
        return epochs // self.eval_every - epoch // self.eval_every

    def check_rise(self, tracker: Tracker, noisy_updates: bool = False) -> None:
        """A training loss that ended ``RISE`` times above its lowest epoch is said in one line and tagged
        (``fedrun.loss_rose``): finite, so the run does not fail, but its last model is not a trained one, and a
        model chosen on validation (sim.keep_best) comes from before the divergence.

        ``noisy_updates``: the run's privacy mechanism adds noise to every model update (``item_rows``). That
        noise accumulates in the rows it reaches, and the line names it beside the step size: FedMF under
        FedGNN's LDP ends with a training loss that grows with the noise scale, .23 / .81 / 3.2 / 13.6 at
        λ 0 / .05 / .1 / .2 (Yelp, 3 seeds each; ``docs/results/privacy-utility.md``)."""
        if len(self.epoch_losses) < 2:
            return
        lowest, last = min(self.epoch_losses), self.epoch_losses[-1]
        if lowest > 0 and last >= self.RISE * lowest:
            at = self.epoch_losses.index(lowest) + 1
            cause = "lower the learning rate (method.optimizer.lr)"
            if noisy_updates:
                cause += (", or add less privacy noise (a larger privacy.epsilon, a smaller privacy.scale): the noise "
                          "added to every model update accumulates in the model")
            log.warning("the training loss rose from %.4g (epoch %d of this run) to %.4g in its last epoch: training "
                        "diverged; %s", lowest, at, last, cause)
            tracker.set_tags({"fedrun.loss_rose": f"{lowest:.4g} -> {last:.4g}"})


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def bar_wanted(progress: bool, stream) -> bool:
    """The progress bar only where someone watches: ``sim.progress`` and a terminal. Written to a file or a
    pipe (a sweep's log, CI) it would be thousands of carriage-return frames; the run logs a line per epoch."""
    return bool(progress) and hasattr(stream, "isatty") and stream.isatty()


def _progress(bar: tqdm, epoch: int, loss: float, valid: dict[str, float], monitor: str) -> None:
    postfix = {"epoch": epoch, "loss": f"{loss:.4f}"}
    shown = monitor if monitor in valid else next(iter(valid), None)
    if shown:
        postfix[shown] = f"{valid[shown]:.4f}"
    bar.set_postfix(postfix, refresh=False)
    bar.update()
