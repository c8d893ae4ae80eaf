"""Stopping a sweep without losing a run (``fedrun -m``, any launcher).

A stop is a marker file in the sweep folder (``STOP_MARKER``), holding the signal's name:
  - a job that is stopped by a signal writes it; the Hydra parent writes it on the first SIGINT /
    SIGTERM it receives itself (``StopOnSignal``), and keeps waiting for its jobs;
  - every running job checks it at each round boundary, as it checks for its own signals, and stops
    there: a checkpoint, the run marked KILLED with its resume path;
  - a job that starts after it skips itself before recording anything;
  - at the end the parent exits 130 (SIGINT) or 143 (SIGTERM).
So a pool launcher (joblib) never has to kill a worker in the middle of a round: before, the first job
to stop made the pool terminate the others, leaving their runs RUNNING and without a checkpoint.
A second signal to the parent still aborts at once.
"""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

STOP_MARKER = ".fedrun-stop"
OVERRIDES = ".fedrun-overrides"  # the sweep's command line, for the sweep's own run (``sweep_parent``)


def marker(sweep_dir: str | Path | None) -> Path | None:
    return None if sweep_dir is None else Path(sweep_dir) / STOP_MARKER


def request_stop(sweep_dir: str | Path | None, signal_name: str) -> None:
    """Ask every job of the sweep to stop at its next round boundary (the first request wins)."""
    path = marker(sweep_dir)
    if path is not None and not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(signal_name)


def stop_requested(path: Path | None) -> str | None:
    """The signal name a stop was requested with, or None."""
    if path is None or not path.exists():
        return None
    try:
        return path.read_text().strip() or "SIGTERM"
    except OSError:
        return "SIGTERM"


class StopOnSignal(Callback):
    """The Hydra parent's side of a sweep stop (registered in ``conf/config.yaml``)."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = config.hydra.sweep.dir
        Path(sweep_dir).mkdir(parents=True, exist_ok=True)
        (Path(sweep_dir) / OVERRIDES).write_text(" ".join(config.hydra.overrides.task))
        if threading.current_thread() is not threading.main_thread():
            return

        def handler(signum, frame):
            name = signal.Signals(signum).name
            request_stop(sweep_dir, name)
            print(f"\nfedrun: {name} received: the sweep stops; running jobs stop after their round and "
                  "write a checkpoint, queued jobs are skipped (send it again to abort now).",
                  file=sys.stderr, flush=True)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)

        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, handler)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from fedrun.errors import FedrunError
        from fedrun.track.mlflow import end_sweep_parents

        name = stop_requested(marker(config.hydra.sweep.dir))
        try:
            end_sweep_parents(config.hydra.sweep.dir, "FINISHED" if name is None else "KILLED")
        except FedrunError as err:
            print(f"fedrun: could not end the sweep's run: {err}", file=sys.stderr)
        if name is not None:
            print(f"fedrun: the sweep was stopped by {name}; resume a stopped job with its sim.resume path "
                  "(in its run's failure reason).", file=sys.stderr)
            sys.exit(130 if name == "SIGINT" else 143)

