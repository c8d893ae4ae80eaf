"""``fedrun``: the Hydra app. Compose the config → validate and build → run → report.

A user error (bad value, missing data file, ...) prints one paragraph and exits with
status 2; in a multirun the failed job is recorded, the sweep goes on, and it exits 1 at its end.
"""

from __future__ import annotations

import os
import signal
import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from fedrun.app import composition_errors, preflight
from fedrun.core import outdir
from fedrun.core.choices import check_group_choices
from fedrun.core.paths import config_dir
from fedrun.core.plugins import search_path_override
from fedrun.errors import ConfigError, FedrunError
from fedrun.sim import launchers
from fedrun.sim.search import failed_trial_value, tell_sweeper
from fedrun.sim.signals import AbortedBeforeStart, Interrupted
from fedrun.sim.sweep import marker, record_failed_job, request_stop, stop_requested

outdir.register()  # at import: a launcher's worker process unpickles the app from this module
launchers.register()


def _app(cfg: DictConfig) -> float | None:
    global _task_started
    _task_started = True
    from fedrun.track.recorder import end

    try:
        return _task(cfg)
    finally:
        end()  # the run is over: its recorder too (a later run in this process starts its own)


def _task(cfg: DictConfig) -> float | None:
    hydra_cfg = HydraConfig.get()
    multirun = hydra_cfg.mode == RunMode.MULTIRUN
    sweep = hydra_cfg.sweep.dir if multirun else None
    stopped = stop_requested(marker(sweep))
    if stopped is not None:
        print(f"fedrun: the sweep was stopped by {stopped}; job {hydra_cfg.job.num} skipped (nothing recorded).",
              file=sys.stderr)
        return None
    try:
        refuse_early(cfg, sweep, hydra_cfg.job.num if multirun else None)
        prestart_recorder(cfg, multirun)
        set_threads(cfg.sim.get("threads"), hydra_cfg.launcher.get("n_jobs") if multirun else None)
        from fedrun.app import experiment

        result = experiment.run(cfg, sweep=sweep, job=hydra_cfg.job.num if multirun else None)
    except Interrupted as err:
        print(f"\nfedrun: {err}", file=sys.stderr)
        if multirun:  # the sweep's other jobs stop at their next round boundary; queued ones are skipped
            request_stop(sweep, err.signal_name)
            return None
        for sig in (signal.SIGINT, signal.SIGTERM):  # stopped cleanly: a further signal must not cut the exit
            signal.signal(sig, signal.SIG_IGN)
        sys.exit(130 if err.signal_name == "SIGINT" else 143)
    except AbortedBeforeStart:
        print("\nfedrun: interrupted before the run started; nothing was recorded.", file=sys.stderr)
        sys.exit(130)
    except KeyboardInterrupt as err:
        print("\nfedrun: aborted by a second interrupt; the run is marked KILLED (the last periodic "
              "checkpoint, if any, can be resumed).", file=sys.stderr)
        sys.exit(143 if "SIGTERM" in str(err) else 130)
    except FedrunError as err:
        print(f"\nfedrun: error: {err}", file=sys.stderr)
        if multirun:
            record_failed_job(str(sweep), hydra_cfg.job.num, str(err))  # the sweep exits 1 at its end
            # recorded as FAILED; the sweep continues with the next job, and a search learns to avoid its setting
            return tell_sweeper(failed_trial_value(hydra_cfg.sweeper))
        sys.exit(2)
    # a sweeper (hydra/sweeper=optuna) optimises validation, never the test
    return tell_sweeper(result.objective) if multirun else result.objective


def refuse_early(cfg: DictConfig, sweep: str | None, job: int | None) -> None:
    """A refused value is answered before torch loads (``fedrun.app.preflight``); a sweep's refused job is still
    recorded FAILED with its reason, as every job that fails before it starts is (its report lists it)."""
    try:
        preflight.check_config(cfg)
    except FedrunError as err:
        if sweep is not None:
            from fedrun.app.experiment import record_failure

            record_failure(cfg, err, sweep, job)
        raise


def prestart_recorder(cfg: DictConfig, multirun: bool) -> None:
    """A single run that records to MLflow has MLflow's client in a second process, started by the entry point
    before Hydra loaded or else now, before torch loads here (``fedrun.track.recorder``: MLflow's import, ~3.5 s,
    overlaps torch's and the data's); ``track.process=false`` records in this process. Rank 0 only: the other ranks
    of a distributed run record nothing. Any other run ends a recorder the entry point started."""
    from fedrun.track.recorder import discard, prestart

    if not multirun and records_from_a_process(cfg.track, os.environ.get("RANK", "0")):
        prestart()
    else:
        discard()


def records_from_a_process(track: DictConfig, rank: str) -> bool:
    return track.get("_target_") == "fedrun.track.mlflow.Mlflow" and track.get("process") is True and rank == "0"


def set_threads(threads: int | None, parallel_jobs: int | None) -> None:
    """Parallel sweep jobs each default to cores / n_jobs threads (oversubscribed OpenMP
    threads spin against each other: a small round measured 18× slower)."""
    import os

    import torch

    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise ConfigError("sim.threads", threads, "null or an integer >= 1")  # before torch sees it
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if threads is not None and threads > cores:  # torch.set_num_threads(100000) raised a MemoryError traceback
        raise ConfigError("sim.threads", threads, f"at most the {cores} cores this process may use (null: all)")
    if parallel_jobs is not None and parallel_jobs < 0:  # joblib: -1 = one job per core, -2 = all but one, ...
        parallel_jobs = max(1, cores + 1 + parallel_jobs)
    if threads is None and parallel_jobs and parallel_jobs > 1:
        threads = max(1, cores // parallel_jobs)
    if threads:
        torch.set_num_threads(threads)
        _set_faiss_threads(threads)


def _set_faiss_threads(threads: int) -> None:
    """faiss (retrieval, k-means pre-aggregation) runs OpenMP threads of its own: the same budget."""
    from fedrun.retrieval.search import faiss_available
    if faiss_available():
        import faiss
        faiss.omp_set_num_threads(threads)


_task_started = False  # whether Hydra got as far as calling the app (else its own error was the config's)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "info":  # fedrun info [group=option]: no Hydra app, no data
        from fedrun.app.info import main as info

        sys.exit(info(sys.argv[2:]))
    try:
        launchers.check_launcher(sys.argv[1:])
        outdir.check_output_folders(sys.argv[1:])
        check_group_choices(sys.argv[1:])
        sys.argv += search_path_override(sys.argv[1:])  # the plugins' options (fedrun.core.plugins)
    except FedrunError as err:
        print(f"fedrun: error: {err}", file=sys.stderr)
        sys.exit(2)
    full_error = os.environ.get("HYDRA_FULL_ERROR")  # set by the user: Hydra's traceback, as they asked
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra raises what it cannot compose instead of printing it
    try:
        hydra.main(config_path=config_dir(), config_name="config", version_base="1.3")(_app)()
    except ValueError as err:  # Hydra's own flag check (-m with --cfg): one line, not its traceback
        if _task_started or "can be specified" not in str(err):
            raise
        print(f"fedrun: error: {err} (--cfg shows one run's config: drop -m)", file=sys.stderr)
        sys.exit(2)
    except Exception as err:  # a config Hydra cannot compose: worded as fedrun's errors are (a misspelt key)
        if _task_started or full_error:
            raise
        print(f"fedrun: error: {composition_errors.describe(err)}", file=sys.stderr)
        sys.exit(2)
    except SystemExit as exit_:
        # Hydra reports a config it cannot compose (unknown option, bad override syntax) itself and exits 1;
        # that is a user error like any other, so it exits 2. Once the app ran, its own codes stand.
        if exit_.code == 1 and not _task_started:
            sys.exit(2)
        raise


if __name__ == "__main__":
    main()
