"""MLflow tracking: parallel runs on a fresh embedded store."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest
from mlflow.tracking import MlflowClient

from fedrun.store.calls import TrackingError, store_call

OPEN_AND_START = """
import sys
from fedrun.track.mlflow import Mlflow, MlflowConfig
tracker = Mlflow(MlflowConfig(uri=sys.argv[1], experiment="parallel"))
tracker.start("parallel", "run " + sys.argv[2], {"job": sys.argv[2]}, {})
tracker.finish("FINISHED")
"""


def test_runs_started_together_on_a_fresh_sqlite_store_all_land(tmp_path):
    """Each process opening a new store migrates its schema; unserialized, one dies on 'duplicate column'."""
    uri = f"sqlite:///{tmp_path / 'fresh' / 'mlflow.db'}"
    jobs = [subprocess.Popen([sys.executable, "-c", OPEN_AND_START, uri, str(job)], stderr=subprocess.PIPE, text=True)
            for job in range(4)]
    errors = [job.communicate()[1] for job in jobs]
    assert [job.returncode for job in jobs] == [0] * 4, "\n".join(errors)
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("parallel").experiment_id])
    assert sorted(run.data.params["job"] for run in runs) == ["0", "1", "2", "3"]
    assert {run.info.status for run in runs} == {"FINISHED"}


@pytest.mark.parametrize("case", ["no server", "not a database", "no folder", "unknown scheme", "full disk",
                                  "no driver", "no database server"])
def test_a_broken_tracking_store_is_one_named_line_before_any_data_is_read(case, tmp_path, monkeypatch):
    """A server that does not answer, a file that is not a SQLite database, a folder that cannot exist, a database
    whose driver is missing or that does not answer: refused within seconds by name (MLflow's client retried a
    dead server for minutes; a missing PostgreSQL driver failed after the data had loaded), the password hidden."""
    import socket
    import time

    from fedrun.app.plan import plan
    from fedrun.errors import ConfigError
    from tests.conftest import SMALL, compose_cfg

    if case == "no server":
        with socket.socket() as probe:  # a port nothing listens on
            probe.bind(("127.0.0.1", 0))
            uri = f"http://127.0.0.1:{probe.getsockname()[1]}"
    elif case == "not a database":
        (tmp_path / "bad.db").write_text("not sqlite")
        uri = f"sqlite:///{tmp_path / 'bad.db'}"
    elif case == "no folder":
        (tmp_path / "file").write_text("")
        uri = f"sqlite:///{tmp_path / 'file' / 'below' / 'mlflow.db'}"  # a folder under a file
    elif case == "unknown scheme":  # MLflow's own error came after the data was loaded, at run creation
        uri = "ftp://127.0.0.1/store"
    elif case == "no driver":
        uri = "postgresql+pg8000://fedrun:secret@127.0.0.1/mlflow"  # pg8000: a driver fedrun does not install
    elif case == "no database server":
        pytest.importorskip("psycopg", reason="PostgreSQL's driver: `make install` installs it (fedrun[tracking])")
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            uri = f"postgresql://fedrun:secret@127.0.0.1:{probe.getsockname()[1]}/mlflow"
    else:  # the store's disk has no room: creating the run failed with "'NoneType' object has no attribute"
        import shutil
        from types import SimpleNamespace

        uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
        full = SimpleNamespace(total=10 << 30, used=10 << 30, free=4096)  # what shutil.disk_usage reports
        monkeypatch.setattr(shutil, "disk_usage", lambda path: full)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("FEDRUN_DATA_DIR", str(tmp_path / "no-data-here"))
    started = time.perf_counter()
    with pytest.raises(ConfigError) as refused:
        plan(compose_cfg(SMALL + ["track=mlflow"]))
    assert refused.value.field == "MLFLOW_TRACKING_URI" and uri.replace("secret", "***") in str(refused.value)
    assert "secret" not in str(refused.value)
    assert ("no module 'pg8000'" in str(refused.value)) == (case == "no driver")
    assert time.perf_counter() - started < 10


@pytest.mark.parametrize("override,field", [("track.experiment=" + "x" * 257, "track.experiment"),
                                            ("experiment_name=" + "y" * 300, "experiment_name")])
def test_an_experiment_name_the_store_cannot_hold_is_refused_before_any_data_is_read(override, field, tmp_path,
                                                                                      monkeypatch):
    """MLflow keeps 256 characters of a name: a longer one failed at run creation, after the data was loaded,
    as "'NoneType' object has no attribute 'experiment_id'"."""
    from fedrun.app.plan import plan
    from fedrun.errors import ConfigError
    from tests.conftest import SMALL, compose_cfg

    monkeypatch.setenv("FEDRUN_DATA_DIR", str(tmp_path / "no-data-here"))
    with pytest.raises(ConfigError) as refused:
        plan(compose_cfg([o for o in SMALL if o != "track=none"] + ["track=mlflow", override]))
    assert refused.value.field == field


START_AND_DIE = """
import os, signal, sys
from fedrun.track.mlflow import Mlflow, MlflowConfig
tracker = Mlflow(MlflowConfig(uri=sys.argv[1]))
tracker.start("abandoned", "killed run", {}, {})
os.kill(os.getpid(), signal.SIGKILL)  # no chance to record its end
"""


def test_a_run_whose_process_was_killed_is_marked_killed_by_the_next_run_with_the_reason(tmp_path, caplog):
    """SIGKILL (or a machine suspended without its processes) left the run RUNNING for ever; the next run in
    the experiment on this machine ends it, naming the process and how to resume."""
    from fedrun.store.liveness import PID, owner_of
    from fedrun.track.mlflow import Mlflow, MlflowConfig

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    died = subprocess.run([sys.executable, "-c", START_AND_DIE, uri], capture_output=True, text=True)
    assert died.returncode == -9, died.stderr
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("abandoned").experiment_id
    [killed] = client.search_runs([experiment])
    assert killed.info.status == "RUNNING"
    tracker = Mlflow(MlflowConfig(uri=uri))
    with caplog.at_level("WARNING", logger="fedrun"):
        tracker.start("abandoned", "next run", {}, {})
    killed = client.get_run(killed.info.run_id)
    reason = killed.data.tags["fedrun.failure_reason"]
    assert killed.info.status == "KILLED"
    assert f"process {owner_of(killed.data.tags)[PID]}" in reason and "no checkpoint" in reason
    assert "'killed run'" in caplog.text and "marked KILLED" in caplog.text
    assert client.get_run(tracker.run_id).info.status == "RUNNING"  # the new run itself is left alone
    tracker.finish("FINISHED")


def test_fedrun_report_judges_liveness_and_lists_a_killed_run_as_unfinished_with_its_reason(tmp_path, capsys):
    """No run followed the killed one: the report itself finds its process gone, marks it KILLED and says why."""
    from fedrun.app.report import main as report

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    died = subprocess.run([sys.executable, "-c", START_AND_DIE, uri], capture_output=True, text=True)
    assert died.returncode == -9, died.stderr
    report(["abandoned", "--uri", uri, "--out", str(tmp_path / "reports")])
    client = MlflowClient(uri)
    [killed] = [run for run in client.search_runs([client.get_experiment_by_name("abandoned").experiment_id])
                if run.data.tags.get("fedrun.kind") != "report"]
    assert killed.info.status == "KILLED" and "found by fedrun-report" in killed.data.tags["fedrun.failure_reason"]
    assert "KILLED: abandoned: its process" in capsys.readouterr().out


def test_only_runs_whose_process_is_certainly_gone_are_judged():
    """A live owner, one on another machine or container, or a run without owner tags stays RUNNING; a restarted
    machine or a pid now held by another process means the owner is gone."""
    import os

    from fedrun.store.liveness import BOOT, HOST, OWNER, PID, PID_NS, STARTED, gone_reason, owner, owner_tags

    here = owner()
    if not here[PID_NS] or not here[STARTED]:
        pytest.skip("no /proc on this system: owners are never judged")
    assert set(owner_tags()) == {OWNER}  # one tag out of the reader's way
    assert gone_reason(owner_tags()) is None and gone_reason(here) is None  # this very process (a run before OWNER)
    gone = owner_tags(int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                                         capture_output=True, text=True).stdout))
    assert "is gone" in gone_reason(gone)
    assert gone_reason({}) is None  # a run from before owners were recorded
    assert gone_reason({**here, HOST: here[HOST] + "-elsewhere"}) is None
    assert gone_reason({**here, PID_NS: "pid:[1]"}) is None  # another container
    assert "restarted" in gone_reason({**here, BOOT: "another-boot"})
    assert "another process" in gone_reason({**here, STARTED: str(int(here[STARTED]) + 1)})
    free_pid = max(int(p) for p in os.listdir("/proc") if p.isdigit()) + 10_000
    assert "is gone" in gone_reason({**here, PID: str(free_pid)})


def test_a_sweep_run_is_owned_by_the_hydra_parent_and_ended_once_that_process_is_gone(tmp_path):
    """The sweep's own run is created by its first job; its owner is the Hydra parent recorded in the sweep
    folder, so it is judged by that process (alive: left alone; gone: KILLED), not by the job that created it."""
    import json

    from fedrun.store.liveness import SWEEP_OWNER, owner_tags
    from fedrun.track.mlflow import Mlflow, MlflowConfig

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    parents = {}
    for name, owner_pid in [("alive", None), ("gone", int(finished.stdout))]:
        sweep_dir = tmp_path / name
        sweep_dir.mkdir()
        owner = owner_tags(owner_pid)
        (sweep_dir / SWEEP_OWNER).write_text(json.dumps(owner))
        parents[name] = Mlflow(MlflowConfig(uri=uri)).sweep_parent("sweeps", str(sweep_dir), [f"name={name}"])
    client = MlflowClient(uri)
    assert json.loads(client.get_run(parents["gone"]).data.tags["fedrun.owner"])["fedrun.owner.pid"] == \
        finished.stdout.strip()
    Mlflow(MlflowConfig(uri=uri)).start("sweeps", "a job", {}, {})
    assert client.get_run(parents["alive"]).info.status == "RUNNING"
    gone = client.get_run(parents["gone"])
    assert gone.info.status == "KILLED" and "is gone" in gone.data.tags["fedrun.failure_reason"]


def test_a_store_that_fails_while_tidying_others_runs_does_not_stop_this_one(tmp_path, caplog):
    """Judging the runs left RUNNING is housekeeping: its failure is one warning, and the new run is created."""
    from fedrun.track.mlflow import Mlflow, MlflowConfig

    tracker = Mlflow(MlflowConfig(uri=f"sqlite:///{tmp_path / 'mlflow.db'}"))
    client = tracker._client()

    def broken(*args, **kwargs):
        raise RuntimeError("search failed: the artifact store does not answer")

    client.search_runs = broken
    with caplog.at_level("WARNING", logger="fedrun"):
        tracker.start("tidy", "this run", {}, {})
    assert "Could not check this experiment's runs left RUNNING: search failed" in caplog.text
    assert MlflowClient(tracker.uri).get_run(tracker.run_id).info.status == "RUNNING"


def _copy_cut_short_by_an_abort():
    """What MLflow's artifact copy did under a second SIGINT: the abort lands mid-copy, and the copy's
    clean-up then fails on the file it was writing."""
    try:
        raise KeyboardInterrupt("second SIGINT")
    finally:
        raise OSError(9, "Bad file descriptor")


def test_an_abort_inside_a_store_call_stays_an_abort_not_a_store_failure():
    """Seen under load in `test_second_interrupt_aborts_at_once_without_traceback`: the OSError left behind by
    an aborted copy was reported as a failing store (exit 2) instead of the abort (exit 130 / 143)."""
    with pytest.raises(KeyboardInterrupt, match="second SIGINT"):
        with store_call("sqlite:///x.db", "storing the checkpoint"):
            _copy_cut_short_by_an_abort()
    with pytest.raises(TrackingError, match="storing the checkpoint: .*Bad file descriptor"):
        with store_call("sqlite:///x.db", "storing the checkpoint"):
            raise OSError(9, "Bad file descriptor")


def test_a_second_ctrl_c_inside_a_store_read_still_marks_the_run_killed(tmp_path, monkeypatch):
    """The double Ctrl-C of `test_second_interrupt_aborts_at_once_without_traceback`, made deterministic: the
    abort lands while SQLAlchemy processes the rows of MLflow's get_run (inside log_checkpoint), where it
    landed under load. Its cursor stayed open and held SQLite's lock, so marking the run KILLED waited 20 s
    and failed with "database is locked"."""
    import sqlalchemy.orm.loading as loading

    from fedrun.track.mlflow import Mlflow, MlflowConfig

    uri = f"sqlite:///{tmp_path / 'store.db'}"
    tracker = Mlflow(MlflowConfig(uri=uri, experiment="aborted"))
    tracker.start("aborted", "run", {"seed": 1}, {})
    checkpoint = tmp_path / "checkpoint.pt"
    checkpoint.write_bytes(b"state")

    def second_ctrl_c(*args, **kwargs):
        raise KeyboardInterrupt("second SIGINT")

    monkeypatch.setattr(loading, "_instance_processor", second_ctrl_c)
    try:
        tracker.log_checkpoint(checkpoint)
        pytest.fail("the abort did not reach the caller")
    except KeyboardInterrupt:  # as `experiment.run` handles it: the abort, and what it holds, still alive
        monkeypatch.undo()
        try:
            tracker.finish("KILLED", "aborted by a second interrupt")
        except KeyboardInterrupt as echo:  # the store's failure, passed off as the abort: said, not re-raised
            pytest.fail(f"marking the run KILLED failed: {echo!r}")
    run = MlflowClient(uri).get_run(tracker.run_id)
    assert run.info.status == "KILLED"


@pytest.mark.parametrize("uri, waits", [("sqlite:///store.db", True), ("http://127.0.0.1:5000", False)])
def test_a_ctrl_c_inside_a_local_store_call_waits_for_the_call_to_end(uri, waits):
    """The root of the lock above: the abort no longer lands inside a SQLite call, it is delivered as the call
    ends. A tracking server's call may wait out a long timeout, so there Ctrl-C acts at once."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    call_ended = False
    try:
        with pytest.raises(KeyboardInterrupt):
            with store_call(uri, "reading the run"):
                signal.raise_signal(signal.SIGINT)
                call_ended = True
    finally:
        signal.signal(signal.SIGINT, previous)
    assert call_ended == waits


def test_a_store_that_fails_while_reopening_a_run_is_one_named_line_not_a_fresh_run(tmp_path):
    """Resuming reopens the checkpoint's run. A store that fails there (here: locked) is said as the store's
    failure; only a run the store does not hold any more makes the continuation a new run."""
    import sqlite3

    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import INTERNAL_ERROR, RESOURCE_DOES_NOT_EXIST

    from fedrun.track.mlflow import Mlflow, MlflowConfig

    tracker = Mlflow(MlflowConfig(uri=f"sqlite:///{tmp_path / 'store.db'}", experiment="resumed"))

    class Store:
        def __init__(self, failure):
            self.failure = failure

        def get_run(self, run_id):
            raise self.failure

    tracker.client = Store(sqlite3.OperationalError("database is locked"))
    with pytest.raises(TrackingError, match="reopening the run to resume it: database is locked. Nothing was"):
        tracker.resume("0123")
    tracker.client = Store(MlflowException("(sqlite3.OperationalError) disk I/O error", error_code=INTERNAL_ERROR))
    with pytest.raises(TrackingError, match="reopening the run"):
        tracker.resume("0123")
    tracker.client = Store(MlflowException("Run with id=0123 not found", error_code=RESOURCE_DOES_NOT_EXIST))
    assert tracker.resume("0123") is False


def test_a_resumed_run_keeps_its_earlier_stops_as_history_not_as_its_failure_reason(tmp_path):
    """An interrupted run that is resumed and finishes must not still read "stopped by SIGTERM" in MLflow or in
    fedrun-report's list of runs that did not finish: each stop's reason moves to ``fedrun.earlier_stops``."""
    from fedrun.track.mlflow import Mlflow, MlflowConfig

    uri = f"sqlite:///{tmp_path / 'store.db'}"
    tracker = Mlflow(MlflowConfig(uri=uri, experiment="stopped"))
    tracker.start("stopped", "run", {}, {})
    run_id = tracker._run_id
    for round_index in (3, 7):
        tracker.finish("KILLED", f"stopped by SIGTERM after round {round_index}")
        assert Mlflow(MlflowConfig(uri=uri)).resume(run_id)
    tracker.finish("FINISHED")
    record = MlflowClient(uri).get_run(run_id)
    assert record.info.status == "FINISHED"
    assert "fedrun.failure_reason" not in record.data.tags
    assert record.data.tags["fedrun.earlier_stops"] == ("stopped by SIGTERM after round 3\n"
                                                        "stopped by SIGTERM after round 7")


def test_an_experiment_deleted_in_the_store_is_refused_by_name_with_how_to_restore_it(tmp_path):
    """MLflow keeps a deleted experiment's name and refused the run with "must be in the 'active' state"."""
    from fedrun.errors import ConfigError
    from fedrun.track.mlflow import Mlflow, MlflowConfig

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    client.delete_experiment(client.create_experiment("gone"))
    with pytest.raises(ConfigError, match=r"experiment_name='gone'.*mlflow experiments restore --experiment-id"):
        Mlflow(MlflowConfig(uri=uri)).start("gone", "run", {}, {})
