"""A search stopped after 3 of its 5 trials and resumed (hydra.callbacks.resume_search.sweep) runs the trials an
uninterrupted 5-trial search runs — the same proposals, the sampler's model-based ones included — replays the first
three without training them, and reads as one search in fedrun.app.tuning; resumed from its saved record on a
machine whose store never saw it, it runs the same trials again."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from mlflow.tracking import MlflowClient

from fedrun.app.tuning import search_sweeps
from fedrun.sim.search import save_record
from tests.integration.test_cli import FEDRUN, QUICK

SEARCH = ["-m", "+experiment=tune/fedavg", *QUICK, "experiment_name=tune-resume",
          "hydra.sweeper.sampler.n_startup_trials=2"]  # trials 2-4 are TPE's: they depend on the trials before


def sweep(folder: str, trials: int, *extra: str, env: dict[str, str] | None = None) -> list[str]:
    result = subprocess.run([FEDRUN, *SEARCH, f"hydra.sweeper.n_trials={trials}", f"hydra.sweep.dir={folder}",
                             *extra], capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    return re.findall(r"#(\d+) : (method\.optimizer\.lr=\S+ method\.optimizer\.user_lr=\S+ backbone\.l2=\S+)",
                      result.stdout + result.stderr)


def test_a_resumed_search_runs_the_trials_an_uninterrupted_one_runs():
    whole = sweep("outputs/multirun/whole", 5)
    first = sweep("outputs/multirun/first", 3)
    rest = sweep("outputs/multirun/rest", 5, "hydra.callbacks.resume_search.sweep=outputs/multirun/first")
    assert [job for job, _ in whole] == ["0", "1", "2", "3", "4"]
    assert first + rest == whole  # launched: 0-2 by the first sweep, only 3-4 by the resumed one
    client = MlflowClient()
    experiment = client.get_experiment_by_name("tune-resume").experiment_id
    parents = {run.data.tags["fedrun.sweep"]: run.info.run_id for run in client.search_runs(
        [experiment], "tags.`fedrun.kind` = 'sweep'")}
    assert search_sweeps(client, experiment, parents["outputs/multirun/rest"]) == [
        parents["outputs/multirun/first"], parents["outputs/multirun/rest"]]
    assert save_record(Path("outputs/multirun/first"), Path("record"), client) == 3
    elsewhere = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{Path('elsewhere.db').resolve()}"}
    again = sweep("outputs/multirun/again", 5, "hydra.callbacks.resume_search.sweep=record", env=elsewhere)
    assert first + again == whole
