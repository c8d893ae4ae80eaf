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

A launcher that runs its jobs under processes of its own can lose a job to the same signal: the terminal's
Ctrl-C reaches submitit's local controllers, which print a traceback and kill their job a second later, and
the launcher then raises in the parent. So submitit's controllers are started with SIGINT ignored (the
parent and the jobs still get it), and after a stop any error a launcher raises ends the sweep as a stop
does: one line, the runs left RUNNING marked KILLED with the reason (``guard_launcher``).
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from pathlib import Path
from typing import Any, Callable

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from fedrun.store.liveness import SWEEP_OWNER, owner_tags
from fedrun.store.runs import RESUMES_FILE

STOP_MARKER = ".fedrun-stop"
FAILED_JOBS = ".fedrun-failed"  # in a sweep's folder: one file per failed job, holding its reason
NOTHING_TO_OPTIMISE = "No trials are completed yet"  # Optuna's error once no trial returned a value
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


def record_failed_job(sweep_dir: str | Path, job: int, reason: str) -> None:
    """Note that job ``job`` of the sweep failed (its run, where the store took it, is FAILED with ``reason``)."""
    folder = Path(sweep_dir) / FAILED_JOBS
    folder.mkdir(parents=True, exist_ok=True)
    (folder / str(job)).write_text(reason)


def failed_jobs(sweep_dir: str | Path) -> dict[int, str]:
    """The sweep's failed jobs: job number → reason."""
    folder = Path(sweep_dir) / FAILED_JOBS
    return {int(p.name): p.read_text() for p in folder.iterdir() if p.name.isdigit()} if folder.is_dir() else {}


def launched_jobs(sweep_dir: str | Path) -> set[int]:
    """The job numbers the sweep launched: its numbered job folders."""
    folder = Path(sweep_dir)
    return {int(p.name) for p in folder.iterdir() if p.name.isdigit() and p.is_dir()} if folder.is_dir() else set()


def exit_stopped(sweep_dir: str | Path, name: str) -> None:
    """End the sweep's run KILLED, say how to resume, and exit 130 (SIGINT) or 143 (SIGTERM)."""
    from fedrun.errors import FedrunError
    from fedrun.store.runs import end_sweep_parents

    try:
        end_sweep_parents(sweep_dir, "KILLED")
    except FedrunError as err:
        print(f"fedrun: could not end the sweep's run: {err}", file=sys.stderr)
    print(f"fedrun: the sweep was stopped by {name}; resume a stopped job with its sim.resume path "
          "(in its run's failure reason).", file=sys.stderr)
    sys.exit(130 if name == "SIGINT" else 143)


_current_sweep: dict[str, str | Path | None] = {"dir": None}  # the sweep a guarded launcher is running


def guard_launcher(target: str, sweep_dir: str | Path) -> None:
    """Wrap the launcher class ``target`` (``hydra.launcher._target_``) so that an error it raises after a stop
    was requested ends the sweep as stopped (above) instead of as a traceback; other errors pass through."""
    _guard(target, "launch", sweep_dir, _launcher_lost_jobs)
    if "submitit" in target:
        controllers_ignore_sigint()


def guard_sweeper(target: str, sweep_dir: str | Path) -> None:
    """Wrap the sweeper class ``target`` (``hydra.sweeper._target_``) so that a sweeper that gives up because its
    jobs failed ends the sweep as failed jobs end it (``report_failed_jobs``), with its run FAILED: Optuna's raises
    ``No trials are completed yet`` once every trial failed, which left a traceback and the sweep's run RUNNING.
    After a stop the same error ends the sweep as stopped (``exit_stopped``). An error with neither a failed job
    nor a stop behind it passes through."""
    _guard(target, "sweep", sweep_dir, _sweeper_gave_up)


def _guard(target: str, method: str, sweep_dir: str | Path, on_error: Callable[[Exception, Any], None]) -> None:
    """Wrap ``method`` of the class ``target`` once: an error it raises goes to ``on_error(error, sweep folder)``,
    which ends the process or returns to let the error pass through."""
    from hydra.utils import get_class

    _current_sweep["dir"] = sweep_dir
    cls = get_class(target)
    original = getattr(cls, method)
    if getattr(original, "fedrun_guarded", False):
        return

    def guarded(self, *args, **kwargs):
        try:
            return original(self, *args, **kwargs)
        except Exception as err:
            on_error(err, _current_sweep["dir"])
            raise

    guarded.fedrun_guarded = True  # type: ignore[attr-defined]
    setattr(cls, method, guarded)


def _launcher_lost_jobs(err: Exception, sweep_dir: Any) -> None:
    name = stop_requested(marker(sweep_dir))
    if name is None:
        return
    from fedrun.errors import FedrunError
    from fedrun.store.runs import end_orphaned_jobs

    reason = (f"stopped by {name}: the launcher ended this job's process before the run recorded its end "
              f"({type(err).__name__}); resume from its checkpoint if it wrote one")
    try:
        ended = end_orphaned_jobs(sweep_dir, reason)
    except FedrunError as store_err:
        ended, reason = 0, f"{reason}; could not mark its run: {store_err}"
    print(f"fedrun: the launcher lost {ended} running job(s) to the {name} ({type(err).__name__}); their "
          "runs are marked KILLED with the reason.", file=sys.stderr)
    exit_stopped(sweep_dir, name)


def exit_refused(sweep_dir: str | Path, err: Exception) -> None:
    """End the sweep on a refused setting of its own (not a job's: say a resumed search that proposes another
    trial than the record, ``fedrun.sim.search``): one line, its run (where a job made one) FAILED, exit 2."""
    from fedrun.errors import FedrunError
    from fedrun.store.runs import end_sweep_parents

    try:
        end_sweep_parents(sweep_dir, "FAILED", first_line(str(err)))
    except FedrunError as store_err:
        print(f"fedrun: could not end the sweep's run: {store_err}", file=sys.stderr)
    print(f"fedrun: error: {err}", file=sys.stderr)
    sys.exit(2)


def _sweeper_gave_up(err: Exception, sweep_dir: Any) -> None:
    from fedrun.errors import FedrunError

    name = stop_requested(marker(sweep_dir))
    if name is not None:  # the stopped jobs returned no value, and a search cannot pick a best one
        exit_stopped(sweep_dir, name)
    if isinstance(err, FedrunError) and sweep_dir is not None:
        exit_refused(sweep_dir, err)
    failed = failed_jobs(sweep_dir) if sweep_dir is not None else {}
    if not failed and sweep_dir is not None and NOTHING_TO_OPTIMISE in str(err):
        exit_refused(sweep_dir, FedrunError(
            f"the sweeper gave up ({type(err).__name__}: {err}): no trial returned a value to optimise, so every run "
            "ended without a validation; give a search runs that validate (sim.eval_every within sim.epochs and "
            "sim.max_rounds)"))
    if not failed:
        return
    from fedrun.store.runs import end_sweep_parents

    first = min(failed)
    try:
        end_sweep_parents(sweep_dir, "FAILED", f"the sweeper gave up after {len(failed)} failed job(s): "
                                               f"{type(err).__name__}: {err} Job {first}: {first_line(failed[first])}")
    except FedrunError as store_err:
        print(f"fedrun: could not end the sweep's run: {store_err}", file=sys.stderr)
    print(f"fedrun: the sweeper gave up ({type(err).__name__}: {err}).", file=sys.stderr)
    report_failed_jobs(sweep_dir, failed)
    sys.exit(1)


def report_failed_jobs(sweep_dir: str | Path, failed: dict[int, str]) -> None:
    """One line for a sweep's failed jobs: how many, which, the first one's reason, where each outcome is."""
    first = min(failed)
    print(f"fedrun: {len(failed)} job(s) of the sweep failed ({', '.join(map(str, sorted(failed)))}); each run the "
          f"store took is FAILED with its reason. Job {first}: {first_line(failed[first])}. Every job's "
          f"outcome, with no store: fedrun-report --folder {sweep_dir}", file=sys.stderr)


def first_line(reason: str) -> str:
    """A failed job's reason as one sentence without its closing full stop (the caller ends it)."""
    return reason.splitlines()[0].rstrip(".") if reason else "no reason recorded"


def controllers_ignore_sigint() -> None:
    """Start submitit's local job controllers with SIGINT ignored (a disposition a child inherits through exec),
    so that a Ctrl-C reaches the Hydra parent and the jobs, which stop at a round boundary, and not the
    controllers, which would kill the jobs mid-round. The jobs set their own SIGINT handler when they start."""
    try:
        from submitit.local import local
    except ImportError:  # the slurm executor only
        return
    start = local.start_controller
    if getattr(start, "fedrun_guarded", False):
        return

    def start_ignoring_sigint(*args, **kwargs):
        if threading.current_thread() is not threading.main_thread():
            return start(*args, **kwargs)
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            return start(*args, **kwargs)
        finally:
            signal.signal(signal.SIGINT, previous)

    start_ignoring_sigint.fedrun_guarded = True
    local.start_controller = start_ignoring_sigint


class StopOnSignal(Callback):
    """The Hydra parent's side of a sweep stop (registered in ``conf/config.yaml``)."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = config.hydra.sweep.dir
        Path(sweep_dir).mkdir(parents=True, exist_ok=True)
        (Path(sweep_dir) / OVERRIDES).write_text(" ".join(config.hydra.overrides.task))
        (Path(sweep_dir) / SWEEP_OWNER).write_text(json.dumps(owner_tags()))
        guard_launcher(config.hydra.launcher._target_, sweep_dir)
        guard_sweeper(config.hydra.sweeper._target_, sweep_dir)
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
        from fedrun.store.runs import end_sweep_parents

        name = stop_requested(marker(config.hydra.sweep.dir))
        if name is not None:
            exit_stopped(config.hydra.sweep.dir, name)
        failed = failed_jobs(config.hydra.sweep.dir)
        launched = launched_jobs(config.hydra.sweep.dir)
        try:  # a sweep whose every job failed (a search whose every setting was refused) is itself FAILED
            resumed = (Path(config.hydra.sweep.dir) / RESUMES_FILE).exists()  # its replayed trials ended well
            if failed and launched <= set(failed) and not resumed:
                first = min(failed)
                end_sweep_parents(config.hydra.sweep.dir, "FAILED",
                                  f"every job failed ({len(failed)}). Job {first}: {first_line(failed[first])}")
            else:
                end_sweep_parents(config.hydra.sweep.dir, "FINISHED")
        except FedrunError as err:
            print(f"fedrun: could not end the sweep's run: {err}", file=sys.stderr)
        if failed:  # after the report (Hydra ends the callbacks in reverse order): a script sees the failure
            report_failed_jobs(config.hydra.sweep.dir, failed)
            sys.exit(1)

