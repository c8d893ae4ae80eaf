"""A launcher error after a stop ends the sweep as a stop (one line, the runs it lost marked KILLED, exit 130 /
143); without a stop it passes through untouched (fedrun.sweep.guard_launcher)."""

from __future__ import annotations

import pytest

from fedrun import sweep
from fedrun.track import mlflow as track


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
