"""MLflow's client in a second process (``fedrun.track.recorder``, issue #66): the same record as in-process, every
store error raised by the call that caused it, the run's signals left to the main process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from fedrun.errors import ConfigError, FedrunError
from fedrun.store.calls import TrackingError
from fedrun.track.mlflow import Mlflow, MlflowConfig
from fedrun.track.recorder import Recorder, RecorderGone, portable

ROUNDS = 130  # × 2 values: past flush_every (200) once, then a remainder sent by finish


@pytest.fixture(scope="module")
def recorder():  # one process for the tests that leave it running: each pays MLflow's import once
    recorder = Recorder()
    yield recorder
    recorder.close()


def record(tracker, tmp_path: Path, experiment: str) -> dict:
    """One run's calls, as the run loop and ``fedrun.app.experiment`` make them; what the calls returned."""
    tracker.start(experiment, "method=fedavg · seed=1", {"method": "fedavg", "sim.seed": 1},
                  {"fedrun.method": "fedavg"})
    tracker.log_dataset("synthetic", "0123abcd", "/data/synthetic", {"users": 60})
    for step in range(ROUNDS):
        tracker.log_metrics({"train_loss": 1.0 / (step + 1), "valid_ndcg_at_10": step / 1000}, step=step)
    tracker.set_tags({"fedrun.below_floor": "true"})
    artifact = tmp_path / f"{experiment}.md"
    artifact.write_text("| metric | test |\n")
    tracker.log_artifact(artifact)
    tracker.log_table({"metric": ["ndcg_at_10"], "test": [0.05]}, "results_table.json")
    history = tracker.metric_history(["train_loss"])
    tracker.finish("FINISHED")
    return {"history": history, "link": tracker.link()}


def stored(uri: str, experiment: str) -> dict:
    client = MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    histories = {key: [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, key)]
                 for key in run.data.metrics}
    return {"status": run.info.status, "params": run.data.params, "metrics": run.data.metrics,
            "histories": histories, "artifacts": sorted(a.path for a in client.list_artifacts(run.info.run_id)),
            "tags": {k: v for k, v in run.data.tags.items() if not k.startswith(("fedrun.owner", "mlflow.log-model"))},
            "inputs": [(d.dataset.name, d.dataset.digest) for d in run.inputs.dataset_inputs]}


def test_a_run_recorded_through_the_recorder_is_the_run_recorded_in_process(recorder, tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    local = record(Mlflow(MlflowConfig(uri=uri)), tmp_path, "in-process")
    remote = record(recorder.tracker(MlflowConfig(uri=uri)), tmp_path, "recorder")
    assert remote["history"] == local["history"] and len(remote["history"]["train_loss"]) == ROUNDS
    assert remote["link"].startswith("MLflow run ") and uri[len("sqlite:///"):] in remote["link"]
    by_process, by_recorder = stored(uri, "in-process"), stored(uri, "recorder")
    by_recorder["artifacts"] = [a.replace("recorder", "in-process") for a in by_recorder["artifacts"]]
    assert by_recorder == by_process and by_recorder["status"] == "FINISHED"


def test_metrics_keep_the_time_they_were_logged_not_the_time_they_were_sent(recorder, tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = recorder.tracker(MlflowConfig(uri=uri))
    tracker.start("timed", "run", {}, {})
    logged = time.time()
    tracker.log_metrics({"train_loss": 0.5}, step=0)
    time.sleep(0.3)
    tracker.finish("FINISHED")  # sends the buffer
    client = MlflowClient(uri)
    (metric,) = client.get_metric_history(tracker.run_id, "train/loss")
    assert metric.timestamp / 1000 < logged + 0.2


def test_an_error_in_the_recorder_is_raised_by_the_call_that_caused_it(recorder, tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with pytest.raises(ConfigError) as in_process:
        Mlflow(MlflowConfig(uri=uri)).fetch_checkpoint("no-such-run")
    with pytest.raises(ConfigError) as through_recorder:
        recorder.tracker(MlflowConfig(uri=uri)).fetch_checkpoint("no-such-run")
    assert str(through_recorder.value) == str(in_process.value) and through_recorder.value.field == "sim.resume"


def test_an_answer_whose_wait_a_ctrl_c_cut_short_is_skipped_by_the_next_call(recorder, tmp_path, monkeypatch):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = recorder.tracker(MlflowConfig(uri=uri))
    tracker.start("cut-short", "run", {}, {})
    waiting = recorder.connection.poll

    def interrupted(timeout=None):
        monkeypatch.setattr(recorder.connection, "poll", waiting)
        raise KeyboardInterrupt

    monkeypatch.setattr(recorder.connection, "poll", interrupted)
    with pytest.raises(KeyboardInterrupt):
        tracker.set_tags({"fedrun.below_floor": "true"})  # answered None, never read
    assert tracker.link().startswith("MLflow run")  # its own answer, not the skipped one
    tracker.finish("KILLED", "SIGINT")
    run = MlflowClient(uri).get_run(tracker.run_id)
    assert run.info.status == "KILLED" and run.data.tags["fedrun.below_floor"] == "true"  # the cut call still ran


def test_an_error_that_cannot_travel_arrives_as_its_message():
    class Unpicklable(FedrunError):
        def __init__(self, what, why):
            super().__init__(f"{what}: {why}")

    try:
        raise Unpicklable("store", "gone")
    except Unpicklable as err:
        arrived = portable(err)
    assert type(arrived) is TrackingError and str(arrived) == "store: gone"

    def failing_in_the_store():
        raise ValueError(lambda: None)  # a lambda inside: no way to send it whole

    try:
        failing_in_the_store()
    except Exception as err:
        arrived = portable(err)
    assert type(arrived) is RuntimeError and "failing_in_the_store" in str(arrived)  # the error's own traceback,
    assert "pickl" not in str(arrived).lower()  # not the pickling failure's
    assert portable(ConfigError("sim.resume", "x", "a path")).field == "sim.resume"


def test_the_recorder_leaves_ctrl_c_and_sigterm_to_the_run_and_ends_with_it(tmp_path):
    recorder = Recorder()
    tracker = recorder.tracker(MlflowConfig(uri=f"sqlite:///{tmp_path / 'mlflow.db'}"))
    tracker.start("signals", "run", {}, {})  # the process is past its imports
    for sig in (signal.SIGINT, signal.SIGTERM):
        recorder.process.send_signal(sig)
    time.sleep(0.2)
    tracker.finish("KILLED", "SIGINT")  # what the main process does once the run has stopped
    recorder.close()
    assert recorder.process.returncode == 0
    assert MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}").get_run(tracker.run_id).info.status == "KILLED"


def test_a_recorder_that_died_is_one_named_error_and_an_unused_one_ends_at_once(tmp_path):
    dead = Recorder()
    dead.process.kill()
    dead.process.wait()
    with pytest.raises(RecorderGone, match=r"recorder process ended \(exit status -9\) during 'open'"):
        dead.tracker(MlflowConfig(uri=f"sqlite:///{tmp_path / 'mlflow.db'}")).start("gone", "run", {}, {})
    dead.close()
    unused = Recorder()
    started = time.perf_counter()
    unused.close()  # killed, not waited for through MLflow's import
    assert unused.process.returncode is not None and time.perf_counter() - started < 5


CLI_RUN = ["dataset=synthetic", "dataset.n_users=60", "dataset.n_items=80", "dataset.mean_length=8",
           "sim.clients_per_round=16", "sim.progress=false"]


def runs(uri: str) -> list:
    client = MlflowClient(uri)
    return client.search_runs([e.experiment_id for e in client.search_experiments()])


def test_a_single_run_from_the_command_line_records_without_importing_mlflow_itself(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "fedrun", *CLI_RUN, "sim.epochs=1",
                           f"track.uri={uri}"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    out, err = done.stdout, done.stderr
    imported = {line.split("|")[-1].strip() for line in err.splitlines() if line.startswith("import time:")}
    assert "torch" in imported and "mlflow" not in imported, err[-2000:]
    (run,) = runs(uri)
    assert run.info.status == "FINISHED" and "valid/ndcg_at_10" in run.data.metrics and "MLflow run" in out


def test_ctrl_c_on_the_command_line_marks_the_run_killed_through_the_recorder(tmp_path):
    """The terminal sends Ctrl-C to the whole process group: the recorder ignores it and records the stop."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    log = tmp_path / "output.log"
    with open(log, "w") as output:
        run = subprocess.Popen([sys.executable, "-m", "fedrun", *CLI_RUN, "sim.epochs=100000", f"track.uri={uri}"],
                               cwd=tmp_path, stdout=output, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.monotonic() + 120
            while " epoch 1/" not in log.read_text() and run.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            os.killpg(run.pid, signal.SIGINT)
            run.wait(timeout=120)
        finally:
            if run.poll() is None:
                os.killpg(run.pid, signal.SIGKILL)
    assert run.returncode == 130, log.read_text()[-2000:]
    (recorded,) = runs(uri)
    assert recorded.info.status == "KILLED" and "SIGINT" in recorded.data.tags["fedrun.failure_reason"]


@pytest.mark.parametrize("overrides, rank, expected", [
    ([], "0", True), (["track.process=false"], "0", False), (["track=none"], "0", False), ([], "1", False)])
def test_the_command_line_records_from_a_process_for_mlflow_on_rank_0_unless_told_not_to(overrides, rank, expected):
    from fedrun.app.cli import records_from_a_process
    from tests.conftest import compose_cfg

    assert records_from_a_process(compose_cfg(["dataset=synthetic", *overrides]).track, rank) is expected


@pytest.mark.parametrize("argv, expected", [
    (["method=fedcl"], True), (["-m", "sim.seed=1,2"], False), (["--cfg", "job"], False), (["track=none"], False),
    (["track.process=false"], False), (["--multirun", "x=1"], False), (["--info=config"], False)])
def test_the_entry_point_starts_the_recorder_only_for_what_may_be_a_single_recorded_run(argv, expected, monkeypatch):
    from fedrun.app.entry import may_record_from_a_process

    monkeypatch.delenv("RANK", raising=False)
    assert may_record_from_a_process(argv) is expected
    monkeypatch.setenv("RANK", "1")
    assert may_record_from_a_process(argv) is False


def test_a_recorder_no_run_used_is_discarded(monkeypatch):
    from fedrun.track import recorder as module

    monkeypatch.setattr(module, "_recorder", None)
    module.prestart()
    started = module._recorder
    assert started is not None
    module.discard()
    assert module._recorder is None and started.process.poll() is not None
