"""Checkpoint → resume gives exactly the uninterrupted run (in process; the kill tests are in integration/)."""

from __future__ import annotations

import logging

import pytest
import torch
from mlflow.tracking import MlflowClient
from omegaconf import OmegaConf

from fedrun.app import experiment
from fedrun.errors import ConfigError, DataError
from fedrun.sim import checkpoint
from tests.conftest import SMALL, compose_cfg

CASES = {
    "fedavg-mf-adam-server": ["method=fedavg", "method.server_optimizer.name=adam", "method.server_optimizer.lr=0.05"],
    "fedavg-ncf-local-adam": ["method=fedavg", "backbone=ncf", "method.optimizer.name=adam",
                              "method.optimizer.lr=0.01", "sim.local_epochs=2"],
    "central-ncf": ["method=central", "backbone=ncf"],
    "fedavg-keep-best": ["method=fedavg", "method.optimizer.lr=0.5", "sim.keep_best=true", "sim.patience=2"],
    # k-means centres in the state (a numpy array once made every PerFedRec checkpoint unreadable)
    "perfedrec-clusters": ["method=perfedrec", "method.clusters=3", "privacy=none", "backbone.dim=8",
                           "sim.clients_per_round=20"],
}


def run(overrides):
    return experiment.run(compose_cfg(SMALL + ["sim.epochs=3", "track=mlflow", *overrides]))


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_resume_from_checkpoint_equals_uninterrupted_run(case, tmp_path):
    overrides = CASES[case]
    full = run(overrides + ["track.experiment=full"])
    stop_at = 5 if case != "central-ncf" else 1
    run(overrides + ["track.experiment=parts", f"sim.max_rounds={stop_at}", f"sim.checkpoint_every={stop_at}",
                     f"sim.checkpoint_dir={tmp_path}"])
    saved = checkpoint.load(tmp_path / "checkpoint.pt")
    assert saved["runner"].next_round == stop_at
    resumed = run(overrides + ["track.experiment=parts", f"sim.resume={tmp_path / 'checkpoint.pt'}",
                               f"sim.checkpoint_dir={tmp_path / 'again'}"])
    assert resumed.test == full.test
    assert resumed.valid == full.valid
    client = MlflowClient()
    first, continued = sorted(client.search_runs([client.get_experiment_by_name("parts").experiment_id]),
                              key=lambda r: r.info.start_time)  # the part ran to its max_rounds: a finished run
    assert first.info.status == continued.info.status == "FINISHED"
    assert continued.data.tags["fedrun.resumed_from"] == first.info.run_id


def test_resume_by_mlflow_run_id_never_reopens_a_finished_run(tmp_path):
    """Continuing a FINISHED run to more rounds is a new run linked to it: the finished record keeps its
    params and final metrics, and the continuation is recorded under what it really ran."""
    run(["track.experiment=byid", "sim.max_rounds=4", "sim.checkpoint_every=2", f"sim.checkpoint_dir={tmp_path}"])
    client = MlflowClient()
    experiment = client.get_experiment_by_name("byid").experiment_id
    (record,) = client.search_runs([experiment])
    assert [a.path for a in client.list_artifacts(record.info.run_id, "checkpoint")] == ["checkpoint/checkpoint.pt"]
    before = record.data.metrics
    resumed = run(["track.experiment=byid", f"sim.resume={record.info.run_id}", "sim.max_rounds=6"])
    assert resumed.rounds == 6
    runs = {r.info.run_id: r for r in client.search_runs([experiment])}
    assert len(runs) == 2
    original = runs[record.info.run_id]
    assert original.info.status == "FINISHED" and original.data.params["sim.max_rounds"] == "4"
    assert original.data.metrics == before  # untouched
    (continued,) = [r for r in runs.values() if r.info.run_id != record.info.run_id]
    assert continued.data.params["sim.max_rounds"] == "6"
    assert continued.data.tags["fedrun.resumed_from"] == record.info.run_id


def test_a_resume_that_changes_a_recorded_param_is_recorded_under_the_new_value(tmp_path):
    """An interrupted run resumed with more epochs would otherwise keep `sim.epochs=2` beside 3 epochs of
    numbers: the continuation becomes a new run with the params it really ran."""
    run(["track.experiment=longer", "sim.epochs=2", "sim.max_rounds=3", "sim.checkpoint_every=3",
         f"sim.checkpoint_dir={tmp_path}"])
    run(["track.experiment=longer", "sim.epochs=3", "sim.max_rounds=5", f"sim.resume={tmp_path / 'checkpoint.pt'}",
         f"sim.checkpoint_dir={tmp_path / 'again'}"])
    client = MlflowClient()
    runs = client.search_runs([client.get_experiment_by_name("longer").experiment_id])
    assert sorted(r.data.params["sim.epochs"] for r in runs) == ["2", "3"]
    (continued,) = [r for r in runs if r.data.params["sim.epochs"] == "3"]
    assert continued.data.tags["fedrun.resumed_from"] in {r.info.run_id for r in runs}


def test_resume_refuses_a_different_config(tmp_path):
    run(["sim.max_rounds=2", "sim.checkpoint_every=2", f"sim.checkpoint_dir={tmp_path}"])
    with pytest.raises(ConfigError, match=r"sim.resume=.*these differ: method.optimizer.lr \(0.3 → 0.5\)"):
        run(["method.optimizer.lr=0.5", f"sim.resume={tmp_path / 'checkpoint.pt'}"])


def test_a_checkpoint_older_than_a_setting_resumes_with_that_setting_named(tmp_path, caplog):
    """A key fedrun gained after the checkpoint was written (eval.watch, session 30) is no difference to refuse
    on; the resume names it and the value it runs with. A key the checkpoint has with another value still is."""
    run(["sim.max_rounds=2", "sim.checkpoint_every=2", f"sim.checkpoint_dir={tmp_path}"])
    path = tmp_path / "checkpoint.pt"
    saved = checkpoint.load(path)
    older = OmegaConf.create(saved["config"])
    del older.eval["watch"]
    checkpoint.save(path, saved["method"], saved["runner"], OmegaConf.to_yaml(older), saved["run_id"])
    with caplog.at_level(logging.WARNING, logger="fedrun"):
        result = run([f"sim.resume={path}"])
    assert result.test and "the checkpoint predates eval.watch: the run resumes with eval.watch='attack'" in caplog.text
    with pytest.raises(ConfigError, match=r"these differ: method.optimizer.lr \(0.3 → 0.5\)"):
        run(["method.optimizer.lr=0.5", f"sim.resume={path}"])


def test_a_checkpoint_config_is_compared_as_written_never_resolved(tmp_path, monkeypatch):
    """Issue #68: a crafted checkpoint whose config holds resolvers is refused without evaluating them: the
    folder ``${fedrun_claim:…}`` names is not created, ``${oc.env:…}`` is not read into the error."""
    run(["sim.max_rounds=2", "sim.checkpoint_every=2", f"sim.checkpoint_dir={tmp_path}"])
    path = tmp_path / "checkpoint.pt"
    saved = checkpoint.load(path)
    crafted = OmegaConf.create(saved["config"])
    claimed = tmp_path / "claimed-by-the-checkpoint"
    monkeypatch.setenv("FEDRUN_TEST_SECRET", "s3cr3t-value")
    crafted.dataset.name = "${oc.env:FEDRUN_TEST_SECRET}"
    crafted.sim.checkpoint_dir = f"${{fedrun_claim:{claimed}}}"
    checkpoint.save(path, saved["method"], saved["runner"], OmegaConf.to_yaml(crafted), saved["run_id"])
    with pytest.raises(ConfigError, match=r"these differ: dataset.name \('\$\{oc.env:FEDRUN_TEST_SECRET\}' →") as err:
        run([f"sim.resume={path}"])
    assert "s3cr3t-value" not in str(err.value)
    assert not claimed.exists()


def test_corrupt_or_missing_checkpoint_is_a_clean_error(tmp_path):
    bad = tmp_path / "broken.pt"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(DataError, match="cannot be read"):
        run([f"sim.resume={bad}"])
    with pytest.raises(DataError, match="does not exist"):
        run([f"sim.resume={tmp_path / 'nope.pt'}"])


def test_checkpoint_write_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "checkpoint.pt"
    checkpoint.save(path, {"x": torch.ones(2)}, checkpoint.RunnerState(3), "a: 1", None)

    def crash(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", crash)
    with pytest.raises(checkpoint.CheckpointError, match=r"Could not write the checkpoint .*checkpoint.pt: disk full"):
        checkpoint.save(path, {"x": torch.zeros(2)}, checkpoint.RunnerState(9), "a: 1", None)
    assert checkpoint.load(path)["runner"].next_round == 3  # the old checkpoint is intact
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.pt"]  # no temporary file left


def test_a_full_disk_names_its_cause_and_leaves_nothing_half_written(tmp_path, monkeypatch):
    """torch wraps a failed write (ENOSPC) in a RuntimeError; the error names the path and the cause."""
    import errno

    def full(payload, handle):
        handle.write(b"partial")
        raise RuntimeError("[enforce fail at inline_container.cc] . PytorchStreamWriter failed writing file "
                           "data/0: file write failed") from OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", full)
    with pytest.raises(checkpoint.CheckpointError, match="No space left on device"):
        checkpoint.save(tmp_path / "checkpoint.pt", {}, checkpoint.RunnerState(1), "a: 1", None)
    assert list(tmp_path.iterdir()) == []


def test_an_interrupt_during_the_write_removes_the_temporary_file(tmp_path, monkeypatch):
    def interrupted(payload, handle):
        handle.write(b"partial")
        raise KeyboardInterrupt("second SIGTERM")

    monkeypatch.setattr(torch, "save", interrupted)
    with pytest.raises(KeyboardInterrupt):
        checkpoint.save(tmp_path / "checkpoint.pt", {}, checkpoint.RunnerState(1), "a: 1", None)
    assert list(tmp_path.iterdir()) == []


def test_a_checkpoint_that_cannot_be_written_fails_the_run_with_its_reason(tmp_path, monkeypatch):
    def crash(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(torch, "save", crash)
    with pytest.raises(checkpoint.CheckpointError):
        run(["track.experiment=full-disk", "sim.max_rounds=2", "sim.checkpoint_every=1",
             f"sim.checkpoint_dir={tmp_path}"])
    client = MlflowClient()
    (record,) = client.search_runs([client.get_experiment_by_name("full-disk").experiment_id])
    assert record.info.status == "FAILED"
    assert "No space left on device" in record.data.tags["fedrun.failure_reason"]


def test_unusable_checkpoint_dir_is_a_config_error_before_training(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(ConfigError, match=r"sim.checkpoint_dir=.*a folder that can be created"):
        run([f"sim.checkpoint_dir={blocker / 'sub'}"])


def test_a_checkpoint_is_written_only_after_the_metrics_before_it_are_in_the_store(tmp_path, monkeypatch):
    """After a SIGKILL the run resumes from its last checkpoint: the history up to that round must already
    be stored, even though metrics are buffered (here: flush_every far above the run's values)."""
    seen = []
    real_save = checkpoint.save

    def watched(path, method_state, runner, config_yaml, run_id):
        history = MlflowClient().get_metric_history(run_id, "train/loss")
        seen.append((runner.next_round, len(history)))
        return real_save(path, method_state, runner, config_yaml, run_id)

    monkeypatch.setattr(checkpoint, "save", watched)
    run(["track.experiment=flushed", "track.flush_every=100000", "sim.max_rounds=4", "sim.checkpoint_every=2",
         f"sim.checkpoint_dir={tmp_path}"])
    assert seen == [(2, 2), (4, 4)]


@pytest.mark.parametrize("damage", ["no runner", "extra runner field", "missing runner field", "method not a dict"])
def test_a_checkpoint_with_missing_or_extra_fields_is_a_clean_error(damage, tmp_path):
    path = tmp_path / "checkpoint.pt"
    checkpoint.save(path, {"x": torch.ones(2)}, checkpoint.RunnerState(3), "a: 1", None)
    payload = torch.load(path, weights_only=True)
    if damage == "no runner":
        del payload["runner"]
    elif damage == "extra runner field":
        payload["runner"]["surprise"] = 1
    elif damage == "missing runner field":
        payload["runner"].pop("next_round")
    else:
        payload["method"] = [1, 2]
    torch.save(payload, path)
    with pytest.raises(DataError, match="not a complete fedrun checkpoint"):
        checkpoint.load(path)


def test_a_state_that_could_not_be_read_back_is_refused_when_saved(tmp_path):
    state = {"clusters": {"centers": __import__("numpy").zeros((2, 3))}, "item": torch.zeros(2)}
    with pytest.raises(TypeError, match=r"checkpoint\.method\.clusters\.centers is a numpy\.ndarray"):
        checkpoint.save(tmp_path / "checkpoint.pt", state, checkpoint.RunnerState(), "", None)
    assert not list(tmp_path.iterdir())  # nothing written
    numpy_float = checkpoint.RunnerState(valid={"ndcg": __import__("numpy").float64(1)})  # a float, yet not loadable
    with pytest.raises(TypeError, match=r"checkpoint\.runner\.valid\.ndcg is a numpy\.float64"):
        checkpoint.save(tmp_path / "checkpoint.pt", {}, numpy_float, "", None)
