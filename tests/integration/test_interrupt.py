"""A real fedrun process killed mid-run (SIGKILL) or stopped (SIGTERM) and resumed ends with
exactly the metrics of an uninterrupted run."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest
from mlflow.tracking import MlflowClient

from tests.integration.test_cli import FEDRUN

LONG = ["dataset=synthetic", "dataset.n_users=600", "dataset.n_items=300", "dataset.mean_length=10",
        "sim.clients_per_round=8", "sim.epochs=2", "sim.eval_every=1", "sim.progress=false",
        "sim.checkpoint_every=10", "method.optimizer.name=adam", "method.optimizer.lr=0.01"]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """One MLflow store for the module (the baseline is shared by its tests)."""
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"


def env_for(store):
    return {**os.environ, "MLFLOW_TRACKING_URI": store}


def final_metrics(store: str, experiment: str) -> tuple[dict[str, float], list]:
    client = MlflowClient(store)
    runs = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    (record,) = runs
    return {k: v for k, v in record.data.metrics.items() if k.startswith("test/")}, runs


@pytest.fixture(scope="module")
def baseline(tmp_path_factory, store):
    out = subprocess.run([FEDRUN, *LONG, "track.experiment=baseline",
                          f"hydra.run.dir={tmp_path_factory.mktemp('base')}"],
                         capture_output=True, text=True, timeout=600, env=env_for(store))
    assert out.returncode == 0, out.stderr
    metrics, _ = final_metrics(store, "baseline")
    assert metrics
    return metrics


def start_and_stop(store, tmp_path, experiment, how):
    run_dir = tmp_path / "run"
    process = subprocess.Popen([FEDRUN, *LONG, f"track.experiment={experiment}", f"hydra.run.dir={run_dir}"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env_for(store))
    checkpoint = run_dir / "checkpoint.pt"
    deadline = time.time() + 120
    while not checkpoint.exists() and process.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    assert process.poll() is None, "the run ended before it could be interrupted"
    process.send_signal(how)
    _, stderr = process.communicate(timeout=120)
    return process.returncode, stderr, checkpoint


def resume(store, tmp_path, experiment, checkpoint):
    out = subprocess.run([FEDRUN, *LONG, f"track.experiment={experiment}", f"sim.resume={checkpoint}",
                          f"hydra.run.dir={tmp_path / 'resumed'}"], capture_output=True, text=True, timeout=600,
                         env=env_for(store))
    assert out.returncode == 0, out.stderr


def test_sigkill_mid_run_then_resume_matches_uninterrupted(baseline, store, tmp_path):
    code, _, checkpoint = start_and_stop(store, tmp_path, "killed", signal.SIGKILL)
    assert code == -signal.SIGKILL
    resume(store, tmp_path, "killed", checkpoint)
    metrics, runs = final_metrics(store, "killed")
    assert metrics == baseline
    assert runs[0].info.status == "FINISHED"


def test_sigterm_stops_at_round_boundary_marks_killed_and_resumes(baseline, store, tmp_path):
    code, stderr, checkpoint = start_and_stop(store, tmp_path, "stopped", signal.SIGTERM)
    assert code == 143
    assert "SIGTERM received: stopping after this round" in stderr and "Traceback" not in stderr
    _, runs = final_metrics(store, "stopped")
    assert runs[0].info.status == "KILLED"
    reason = runs[0].data.tags["fedrun.failure_reason"]
    assert reason.startswith("stopped by SIGTERM after round") and "sim.resume=" in reason
    resume(store, tmp_path, "stopped", checkpoint)
    metrics, runs = final_metrics(store, "stopped")
    assert metrics == baseline and runs[0].info.status == "FINISHED"


@pytest.mark.parametrize("how, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"])
def test_second_interrupt_aborts_at_once_without_traceback(store, tmp_path, how, code):
    """A second signal of either kind stops at once: the run is still marked KILLED (a second SIGTERM used to
    kill the process outright, leaving the run RUNNING and a half-written checkpoint)."""
    run_dir = tmp_path / "run"
    process = subprocess.Popen([FEDRUN, *LONG, f"track.experiment=aborted-{how.name}", f"hydra.run.dir={run_dir}"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env_for(store))
    deadline = time.time() + 120
    while not (run_dir / "checkpoint.pt").exists() and process.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    process.send_signal(how)
    time.sleep(0.05)
    process.send_signal(how)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == code, stderr
    assert "Traceback" not in stderr
    _, runs = final_metrics(store, f"aborted-{how.name}")
    assert runs[0].info.status == "KILLED"
    assert not list(run_dir.glob(".*.tmp"))


@pytest.mark.parametrize("launcher", ["joblib", "basic"])
def test_a_stopped_sweep_leaves_no_run_unrecorded(store, tmp_path, launcher):
    """SIGTERM to the sweep's parent only: every running job stops at its round boundary with a checkpoint and
    its run KILLED (a pool launcher used to kill the other workers mid-round, leaving their runs RUNNING);
    queued jobs are skipped without a record; the sweep exits 143."""
    sweep_dir = tmp_path / "sweep"
    jobs = ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "sim.threads=1"] if launcher == "joblib" else []
    process = subprocess.Popen([FEDRUN, "-m", *LONG, "sim.epochs=20", "sim.seed=1,2,3,4",
                                f"track.experiment=sweep-{launcher}", f"hydra.sweep.dir={sweep_dir}", *jobs],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env_for(store))
    deadline = time.time() + 180
    while not list(sweep_dir.glob("*/checkpoint.pt")) and process.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert process.poll() is None, "the sweep ended before it could be stopped"
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 143, stderr
    assert "Traceback" not in stderr
    client = MlflowClient(store)
    every = client.search_runs([client.get_experiment_by_name(f"sweep-{launcher}").experiment_id])
    runs = [r for r in every if r.data.tags.get("fedrun.kind") != "sweep"]
    (parent,) = [r for r in every if r.data.tags.get("fedrun.kind") == "sweep"]
    assert parent.info.status == "KILLED"  # the sweep's own run ends as its jobs did
    assert runs and all(r.info.status == "KILLED" for r in runs), [r.info.status for r in runs]
    assert all("sim.resume=" in r.data.tags["fedrun.failure_reason"] for r in runs)
    assert len(runs) < 4  # the queued jobs were skipped, not run


def test_ctrl_c_to_a_submitit_local_sweep_loses_no_run(store, tmp_path):
    """A terminal's Ctrl-C (SIGINT to the whole process group) on a submitit_local sweep: submitit's controllers
    used to get it too, print a KeyboardInterrupt traceback each and kill their job a second later (its run left
    RUNNING), and the parent died in UncompletedJobError with the sweep's run RUNNING. Now the controllers ignore
    SIGINT, every job stops at its round boundary with a checkpoint, and the sweep exits 130."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher", reason="hydra-submitit-launcher not installed")
    sweep_dir = tmp_path / "sweep"
    process = subprocess.Popen([FEDRUN, "-m", "hydra/launcher=submitit_local", *LONG, "sim.epochs=20",
                                "sim.seed=1,2", "sim.threads=1", "track.experiment=sweep-submitit",
                                f"hydra.sweep.dir={sweep_dir}"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env_for(store),
                               start_new_session=True)  # its own process group, as a terminal's job
    deadline = time.time() + 180
    while len(list(sweep_dir.glob("*/checkpoint.pt"))) < 2 and process.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert process.poll() is None, "the sweep ended before it could be stopped"
    os.killpg(process.pid, signal.SIGINT)
    stdout, stderr = process.communicate(timeout=300)
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr + stdout
    client = MlflowClient(store)
    every = client.search_runs([client.get_experiment_by_name("sweep-submitit").experiment_id])
    runs = [r for r in every if r.data.tags.get("fedrun.kind") != "sweep"]
    (parent,) = [r for r in every if r.data.tags.get("fedrun.kind") == "sweep"]
    assert parent.info.status == "KILLED" and len(runs) == 2
    assert all(r.info.status == "KILLED" and "sim.resume=" in r.data.tags["fedrun.failure_reason"] for r in runs)
