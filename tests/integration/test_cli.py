"""The installed ``fedrun`` command: clean errors, a real run, a multirun sweep, the report."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from mlflow.tracking import MlflowClient

from fedrun.store.liveness import PID, owner_of
from tests.conftest import needs_data

FEDRUN = shutil.which("fedrun") or str(Path(sys.executable).parent / "fedrun")
REPORT = shutil.which("fedrun-report") or str(Path(sys.executable).parent / "fedrun-report")
QUICK = ["dataset=synthetic", "dataset.n_users=80", "dataset.n_items=100", "sim.epochs=1", "sim.progress=false",
         "sim.clients_per_round=32"]


def fedrun(*args):
    return subprocess.run([FEDRUN, *args], capture_output=True, text=True, timeout=300)


def test_bad_value_exits_2_with_one_paragraph_and_no_traceback():
    result = fedrun("sim.clients_per_round=-3", "track=none")
    assert result.returncode == 2
    assert "sim.clients_per_round=-3 is not allowed: expected an integer >= 1" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_unknown_option_lists_the_available_ones():
    result = fedrun("method=nope")
    assert result.returncode == 2  # a config error like any other (Hydra's own exit status is 1)
    assert result.stderr.startswith("fedrun: error: method='nope' is not allowed") and "fedavg" in result.stderr
    assert "Traceback" not in result.stderr and "HYDRA_FULL_ERROR" not in result.stderr  # one line, before Hydra
    result = fedrun("-m", "method=fedavg,central", "--cfg", "job")  # Hydra's own flag check: one line too
    assert result.returncode == 2 and result.stderr.startswith("fedrun: error: Only one of")
    assert "drop -m" in result.stderr


def test_hydra_syntax_errors_exit_2_too():
    for bad in ("sim.seed=[1,", "+nonsense", "method=fedavg,central"):  # the last: a sweep without -m
        result = fedrun(bad, "track=none")
        assert result.returncode == 2, (bad, result.stderr)
        assert "Traceback" not in result.stderr


def test_run_prints_table_and_mlflow_link():
    result = fedrun(*QUICK, "track.experiment=cli")
    assert result.returncode == 0, result.stderr
    assert "| ndcg_at_10" in result.stdout and "#/experiments/" in result.stdout


def jobs_and_parent(client, experiment):
    """The sweep's job runs and its parent run(s)."""
    runs = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    return ([r for r in runs if r.data.tags.get("fedrun.kind") != "sweep"],
            [r for r in runs if r.data.tags.get("fedrun.kind") == "sweep"])


def test_multirun_sweep_records_every_job_and_report_summarizes(tmp_path):
    result = fedrun("-m", *QUICK, "method=pop,fedavg", "sim.seed=1,2", "track.experiment=sweep")
    assert result.returncode == 0, result.stderr
    client = MlflowClient()
    runs, (parent,) = jobs_and_parent(client, "sweep")
    assert len(runs) == 4 and {r.info.status for r in runs} == {"FINISHED"}
    assert len({r.data.tags["fedrun.sweep"] for r in runs}) == 1
    # the sweep is one parent run holding its command line, each job its child
    assert {r.data.tags["mlflow.parentRunId"] for r in runs} == {parent.info.run_id}
    assert parent.info.status == "FINISHED" and "method=pop,fedavg" in parent.data.params["overrides"]
    # the parent's row in the runs table shows the dataset its runs trained on
    assert [i.dataset.name for i in parent.inputs.dataset_inputs] == ["synthetic"]
    # the sweep's own report: printed at its end and logged on the parent, one row per method over 2 seeds
    logged = {a.path for a in client.list_artifacts(parent.info.run_id, "report")}
    assert {"report/report.md", "report/report.csv"} <= logged
    table = Path(client.download_artifacts(parent.info.run_id, "report/report.md", str(tmp_path))).read_text()
    assert "| fedavg " in table and "| pop " in table and "| 2 " in table and table.split("\n", 1)[0] in result.stdout
    report = subprocess.run([REPORT, "sweep", "--out", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert report.returncode == 0, report.stderr
    assert "| fedavg" in report.stdout and "| pop" in report.stdout


def test_failed_job_in_a_sweep_does_not_stop_the_others():
    result = fedrun("-m", *QUICK, "method=pop", "sim.local_epochs=1,0", "track.experiment=sweep2")
    assert result.returncode == 1, result.stderr  # the sweep ran to its end, and says that a job failed
    assert "sim.local_epochs=0 is not allowed" in result.stderr
    assert "fedrun: 1 job(s) of the sweep failed (1)" in result.stderr.splitlines()[-1]
    client = MlflowClient()
    runs, (parent,) = jobs_and_parent(client, "sweep2")
    assert sorted(r.info.status for r in runs) == ["FAILED", "FINISHED"]
    assert {r.data.tags["mlflow.parentRunId"] for r in runs} == {parent.info.run_id}  # the failed job too
    (failed,) = [r for r in runs if r.info.status == "FAILED"]
    assert "sim.local_epochs=0 is not allowed" in failed.data.tags["fedrun.failure_reason"]


def test_parallel_joblib_jobs_share_one_sqlite_store():
    result = fedrun("-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", *QUICK, "method=pop,fedavg",
                    "sim.seed=1,2", "track.experiment=parallel")
    assert result.returncode == 0, result.stderr
    client = MlflowClient()
    runs, (parent,) = jobs_and_parent(client, "parallel")  # one parent, though two jobs started together
    assert len(runs) == 4 and {r.info.status for r in runs} == {"FINISHED"}
    assert {r.data.tags["mlflow.parentRunId"] for r in runs} == {parent.info.run_id}
    # the sweep's run is owned by the Hydra parent process, not by the worker that happened to create it
    assert owner_of(parent.data.tags)[PID] not in {owner_of(r.data.tags)[PID] for r in runs}


def test_two_sweeps_started_in_the_same_second_keep_their_own_folders():
    """Hydra names a sweep's folder after the second it started: two sweeps launched together shared one
    folder, and with it one checkpoint per job number and one stop marker (stopping one stopped both). Both
    sweeps here ask for the same folder, as two launched in the same second do; the second gets ``-2``."""
    same = "hydra.sweep.dir=${fedrun_claim:outputs/multirun/twin}"
    commands = [[FEDRUN, "-m", *QUICK, "method=pop", "sim.seed=1,2", same, f"track.experiment={name}"]
                for name in ("twin-a", "twin-b")]
    sweeps = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for c in commands]
    for sweep in sweeps:
        _, err = sweep.communicate(timeout=300)
        assert sweep.returncode == 0, err
    folders = {Path("outputs/multirun/twin"), Path("outputs/multirun/twin-2")}
    assert all((folder / job / "config.yaml").is_file() for folder in folders for job in ("0", "1"))
    client = MlflowClient()
    tags = set()
    for name in ("twin-a", "twin-b"):
        runs, (parent,) = jobs_and_parent(client, name)
        assert len(runs) == 2 and {r.data.tags["mlflow.parentRunId"] for r in runs} == {parent.info.run_id}
        tags |= {r.data.tags["fedrun.sweep"] for r in runs}
    assert len(tags) == 2  # each sweep's jobs under its own parent, from its own folder


def test_a_sweep_whose_tracking_server_is_down_says_so_and_its_folder_keeps_every_outcome(tmp_path):
    """Issue #68 (2): with the store unreachable every job fails in one named line, each outcome is in the sweep
    folder, the sweep exits 1 naming the failed jobs, and ``fedrun-report --folder`` reports them without a store."""
    folder = tmp_path / "sweep"
    result = fedrun("-m", *QUICK, "method=pop", "sim.seed=1,2", "track=mlflow", "track.uri=http://127.0.0.1:9",
                    f"hydra.sweep.dir={folder}")
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert "2 job(s) of the sweep failed (0, 1)" in result.stderr and f"--folder {folder}" in result.stderr
    report = subprocess.run([REPORT, "--folder", str(folder)], capture_output=True, text=True, timeout=120)
    assert report.returncode == 0, report.stderr
    assert "2 jobs (2 failed)" in report.stdout and report.stdout.count("a tracking server that answers") == 2


@needs_data
def test_a_search_optimises_validation_and_its_summary_picks_the_best_trial(tmp_path):
    """+experiment=tune/<method>: Optuna proposes the trials, each run hands it its validation objective, and
    ``python -m fedrun.app.tuning`` names the trial with the best validation and the command that reruns it."""
    import pandas as pd

    from fedrun.app import tuning
    from fedrun.store import metric_names

    result = fedrun("-m", "+experiment=tune/fedavg", "hydra.sweeper.n_trials=3", "sim.epochs=2", "sim.progress=false")
    assert result.returncode == 0, result.stderr
    client = MlflowClient()
    runs, (parent,) = jobs_and_parent(client, "tune-fedavg")
    assert len(runs) == 3 and {r.info.status for r in runs} == {"FINISHED"}
    assert len({r.data.params["method.optimizer.lr"] for r in runs}) == 3  # three proposals, not one run thrice
    objective = {r.info.run_id: metric_names.run_metrics(r)["best_valid_ndcg_at_10"] for r in runs}
    best = max(objective, key=objective.get)
    assert f"Best value: {objective[best]}" in result.stdout + result.stderr  # what Optuna was told
    assert tuning.main(["tune/fedavg", "--out", str(tmp_path)]) == 0
    (row,) = pd.read_csv(tmp_path / "searches.csv").itertuples()
    assert row.best_run == best and row.trials == 3 and row.best_valid == objective[best]
    lr = next(r.data.params["method.optimizer.lr"] for r in runs if r.info.run_id == best)
    assert f"method.optimizer.lr={lr}" in row.command and row.command.startswith(
        "fedrun -m +experiment=leaderboard/tuned method=fedavg")
    assert len(pd.read_csv(tmp_path / "tune-fedavg-trials.csv")) == 3
