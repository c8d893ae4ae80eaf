"""A launcher error after a stop ends the sweep as a stop (one line, the runs it lost marked KILLED, exit 130 /
143); without a stop it passes through untouched (fedrun.sim.sweep.guard_launcher)."""

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
