"""Checkpoints: the whole simulation state, written atomically.

Every random stream is derived from (seed, stream, step) — the init, each epoch's client
permutation, each round's negatives and noise — so the round counter *is* the RNG state:
a resumed run redraws exactly what the uninterrupted run would have drawn.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from fedrun.errors import DataError, FedrunError

VERSION = 1


class CheckpointError(FedrunError):
    """The checkpoint could not be written (disk full, no permission): the run stops with this reason."""


@dataclass
class RunnerState:
    """What the run loop needs to continue: rounds done, last validation, wall times, and the
    best validation so far (``sim.patience``, ``sim.keep_best``)."""

    next_round: int = 0
    valid: dict[str, float] = field(default_factory=dict)
    train_seconds: float = 0.0
    eval_seconds: float = 0.0
    best_valid: float | None = None  # best eval.monitor so far
    best_round: int = 0  # rounds done when it was reached
    stale: int = 0  # validations since then without improvement
    best_state: dict[str, Any] | None = None  # the method's state then (sim.keep_best), cloned
    best_valid_metrics: dict[str, float] = field(default_factory=dict)  # every validation metric then


def snapshot(state: Any) -> Any:
    """A copy of a nested state (dicts, lists, tuples of tensors and plain values) that later
    in-place updates of the live tensors do not change."""
    if isinstance(state, torch.Tensor):
        return state.detach().clone()
    if isinstance(state, dict):
        return {key: snapshot(value) for key, value in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(snapshot(value) for value in state)
    return state


def save(path: Path, method_state: dict[str, Any], runner: RunnerState, config_yaml: str, run_id: str | None) -> None:
    """Write to a temporary file in the same folder, fsync, then rename over ``path``. On any failure
    (a full disk, a second interrupt mid-write) the temporary file is removed and ``path`` keeps the
    previous checkpoint; a failure to write is a ``CheckpointError`` naming the path and the cause."""
    payload = {"version": VERSION, "method": method_state, "runner": runner.__dict__, "config": config_yaml,
               "run_id": run_id}
    _check_loadable(payload, "checkpoint")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as handle:
            torch.save(payload, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as err:
        tmp.unlink(missing_ok=True)
        cause = _os_error(err)
        if cause is None:
            raise
        raise CheckpointError(f"Could not write the checkpoint {path}: {cause.strerror or cause} "
                              f"(sim.checkpoint_dir chooses another place). The previous checkpoint, if any, "
                              f"is unchanged.") from None


PLAIN = (int, float, str, bool, type(None))  # exactly these: a numpy float is a float, but not loadable


def _check_loadable(state: Any, where: str) -> None:
    """Refuse, at save time, a state that ``load`` could not read back (weights_only refuses numpy
    arrays and other objects): a method's state_dict must hold tensors and plain values only."""
    if isinstance(state, dict):
        for key, value in state.items():
            _check_loadable(value, f"{where}.{key}")
    elif isinstance(state, (list, tuple)):
        for index, value in enumerate(state):
            _check_loadable(value, f"{where}[{index}]")
    elif not isinstance(state, torch.Tensor) and type(state) not in PLAIN:
        raise TypeError(f"{where} is a {type(state).__module__}.{type(state).__qualname__}; a checkpoint holds "
                        f"tensors and plain values only (its state_dict must convert it), or it cannot be resumed")


def _os_error(err: BaseException) -> OSError | None:
    """The OSError behind ``err`` (torch wraps a failed write in a RuntimeError), or None."""
    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, OSError):
            return seen
        seen = seen.__cause__ or seen.__context__
    if isinstance(err, RuntimeError) and ("write" in str(err) or "file" in str(err)):
        return OSError(str(err).splitlines()[0])
    return None


def load(path: Path) -> dict[str, Any]:
    if not path.exists():
        raise DataError(f"Checkpoint {path} does not exist (sim.resume takes a checkpoint path or an MLflow run id).")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises many types for a truncated or foreign file
        raise DataError(f"Checkpoint {path} cannot be read: it is truncated or not a fedrun checkpoint "
                        f"({type(err).__name__}).") from None
    if not isinstance(payload, dict) or payload.get("version") != VERSION:
        raise DataError(f"{path} is not a fedrun checkpoint of version {VERSION}.")
    missing = sorted({"method", "runner", "config", "run_id"} - payload.keys())
    runner = payload.get("runner")
    fields = {f.name for f in dataclasses.fields(RunnerState)}
    if missing or not isinstance(runner, dict) or set(runner) != fields or not isinstance(payload["method"], dict):
        wrong = missing or sorted(set(runner or {}) ^ fields) or ["method"]
        raise DataError(f"Checkpoint {path} is not a complete fedrun checkpoint (missing or unexpected: "
                        f"{', '.join(wrong)}); resume from another checkpoint or start the run again.")
    payload["runner"] = RunnerState(**runner)
    return payload
