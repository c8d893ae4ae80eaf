"""A launcher error after a stop ends the sweep as a stop (one line, the runs it lost marked KILLED, exit 130 /
143); without a stop it passes through untouched (fedrun.sim.sweep.guard_launcher). A sweeper that gives up
because its jobs failed ends the sweep as failed jobs do, its run FAILED (guard_sweeper)."""

from __future__ import annotations

import pytest

from fedrun.sim import sweep
from fedrun.store import runs as track


class LosingLauncher:
    def launch(self, job_overrides, initial_job_idx):
        raise RuntimeError("job 7 has not produced any output (state: INTERRUPTED)")


def test_an_error_after_a_stop_ends_the_sweep_as_stopped(tmp_path, monkeypatch, capsys):
    ended = {}
    monkeypatch.setattr(track, "end_orphaned_jobs", lambda sweep_dir, reason: ended.setdefault("reason", reason) and 1)
    monkeypatch.setattr(track, "end_sweep_parents", lambda sweep_dir, status: ended.setdefault("parent", status))
    sweep.guard_launcher(f"{__name__}.LosingLauncher", tmp_path)
    sweep.request_stop(tmp_path, "SIGINT")
    with pytest.raises(SystemExit) as exit_:
        LosingLauncher().launch([], 0)
    assert exit_.value.code == 130 and ended["parent"] == "KILLED"
    assert ended["reason"].startswith("stopped by SIGINT: the launcher ended this job's process")
    err = capsys.readouterr().err
    assert "lost 1 running job(s) to the SIGINT (RuntimeError)" in err and "Traceback" not in err


class GivingUpSweeper:
    def sweep(self, arguments):
        raise ValueError("No trials are completed yet.")


def test_a_sweeper_giving_up_after_failed_jobs_ends_the_sweep_failed_in_one_line(tmp_path, monkeypatch, capsys):
    ended = {}
    monkeypatch.setattr(track, "end_sweep_parents",
                        lambda sweep_dir, status, reason=None: ended.update(status=status, reason=reason))
    sweep.guard_sweeper(f"{__name__}.GivingUpSweeper", tmp_path)
    sweep.record_failed_job(tmp_path, 0, "dataset='ml-1m' is not allowed: expected a dataset with ratings.")
    sweep.record_failed_job(tmp_path, 1, "dataset='ml-1m' is not allowed: expected a dataset with ratings.")
    with pytest.raises(SystemExit) as exit_:
        GivingUpSweeper().sweep([])
    assert exit_.value.code == 1 and ended["status"] == "FAILED"
    assert ended["reason"].startswith("the sweeper gave up after 2 failed job(s): ValueError: No trials")
    err = capsys.readouterr().err
    assert "2 job(s) of the sweep failed (0, 1)" in err and "Traceback" not in err
    assert "expected a dataset with ratings. Every job's outcome" in err  # one full stop


def test_a_sweeper_giving_up_after_a_stop_ends_the_sweep_as_stopped(tmp_path, monkeypatch, capsys):
    ended = {}
    monkeypatch.setattr(track, "end_sweep_parents", lambda sweep_dir, status, reason=None: ended.update(status=status))
    sweep.guard_sweeper(f"{__name__}.GivingUpSweeper", tmp_path)
    sweep.request_stop(tmp_path, "SIGINT")
    with pytest.raises(SystemExit) as exit_:
        GivingUpSweeper().sweep([])
    assert exit_.value.code == 130 and ended["status"] == "KILLED"
    err = capsys.readouterr().err
    assert "the sweep was stopped by SIGINT" in err and "Traceback" not in err


class BrokenSweeper:
    def sweep(self, arguments):
        raise KeyError("sampler")


def test_a_sweeper_error_without_failed_jobs_passes_through(tmp_path):
    sweep.guard_sweeper(f"{__name__}.BrokenSweeper", tmp_path / "elsewhere")
    with pytest.raises(KeyError, match="sampler"):
        BrokenSweeper().sweep([])


def test_an_error_without_a_stop_passes_through(tmp_path):
    sweep.guard_launcher(f"{__name__}.LosingLauncher", tmp_path / "elsewhere")
    with pytest.raises(RuntimeError, match="job 7"):
        LosingLauncher().launch([], 0)


def test_orphaned_jobs_of_a_sweep_are_marked_killed_with_the_reason(tmp_path):
    """The store side: a child run a launcher left RUNNING is ended KILLED with the reason; a finished child and
    the parent itself are left as they are."""
    import json

    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'store.db'}"
    client = MlflowClient(uri)
    experiment = client.create_experiment("sweep")
    parent = client.create_run(experiment).info.run_id
    lost, done = (client.create_run(experiment, tags={"mlflow.parentRunId": parent}).info.run_id for _ in range(2))
    client.set_terminated(done, status="FINISHED")
    (tmp_path / track.SWEEP_PARENTS).write_text(json.dumps({"sweep": {"uri": uri, "run_id": parent}}))
    assert track.end_orphaned_jobs(tmp_path, "stopped by SIGINT: lost") == 1
    assert client.get_run(lost).info.status == "KILLED"
    assert client.get_run(lost).data.tags["fedrun.failure_reason"] == "stopped by SIGINT: lost"
    assert client.get_run(done).info.status == "FINISHED" and client.get_run(parent).info.status == "RUNNING"


def test_a_sweep_folder_tells_each_jobs_outcome_without_a_store(tmp_path):
    """Finished (its results table), failed (its reason), or neither (killed before it could say so)."""
    from fedrun.app.report import DEFAULT_METRICS
    from fedrun.app.sweep_folder import folder_report
    from fedrun.sim.sweep import record_failed_job

    for job, seed in enumerate((1, 2, 3)):
        (tmp_path / str(job) / ".hydra").mkdir(parents=True)
        (tmp_path / str(job) / ".hydra" / "overrides.yaml").write_text(f"- method=pop\n- sim.seed={seed}\n")
    (tmp_path / "0" / "last_run.md").write_text("# pop\n\n| metric | test | floor |\n|---|---|---|\n"
                                                "| hr_at_10 | 0.1234 | 0.1234 |\n")
    record_failed_job(tmp_path, 1, "sim.local_epochs=0 is not allowed\nmore")
    text = folder_report(tmp_path, DEFAULT_METRICS)
    assert "3 jobs (1 finished, 1 failed, 1 unknown)" in text and "Common to every job: method=pop" in text
    assert "| 0   | sim.seed=1 | FINISHED | hr_at_10 0.1234" in text
    assert "| 1   | sim.seed=2 | FAILED   | sim.local_epochs=0 is not allowed " in text
    assert "| 2   | sim.seed=3 | UNKNOWN  | no outcome recorded" in text


def test_a_search_whose_runs_validated_nothing_ends_in_one_line_that_says_so(tmp_path, monkeypatch, capsys):
    """Every trial returned None (no validation within the run): Optuna has nothing to optimise and gives up."""
    ended = {}
    monkeypatch.setattr(track, "end_sweep_parents",
                        lambda sweep_dir, status, reason=None: ended.update(status=status, reason=reason))
    sweep.guard_sweeper(f"{__name__}.GivingUpSweeper", tmp_path)
    with pytest.raises(SystemExit) as exit_:
        GivingUpSweeper().sweep([])
    assert exit_.value.code == 2 and ended["status"] == "FAILED"
    err = capsys.readouterr().err
    assert "no trial returned a value to optimise" in err and "sim.eval_every" in err and "Traceback" not in err


@pytest.mark.parametrize("jobs, status", [((0, 1), "FAILED"), ((0, 1, 2), "FINISHED")])
def test_a_sweep_whose_every_job_failed_is_failed_itself(tmp_path, monkeypatch, capsys, jobs, status):
    from omegaconf import OmegaConf

    ended = {}
    monkeypatch.setattr(track, "end_sweep_parents",
                        lambda sweep_dir, status, reason=None: ended.update(status=status, reason=reason))
    for job in jobs:
        (tmp_path / str(job)).mkdir()
    for job in (0, 1):
        sweep.record_failed_job(tmp_path, job, "backbone.l2=0.001 is not allowed: expected a value under 0.0005.")
    with pytest.raises(SystemExit) as exit_:
        sweep.StopOnSignal().on_multirun_end(OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path)}}}))
    assert exit_.value.code == 1 and ended["status"] == status
    if status == "FAILED":
        assert ended["reason"] == "every job failed (2). Job 0: backbone.l2=0.001 is not allowed: expected a value " \
                                  "under 0.0005"
    assert "2 job(s) of the sweep failed (0, 1)" in capsys.readouterr().err
