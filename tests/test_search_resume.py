"""A search resumed from an earlier sweep (fedrun.sim.search): the recorded trials are read from the store in an
unbroken run from trial 0 (FINISHED with an objective, or FAILED), the latest sweep of a chain wins, the replay
answers exactly the recorded proposals and launches the rest under their own job numbers, and every way of naming
the wrong sweep is refused by name before anything runs."""

from __future__ import annotations

import math

import pytest
from hydra.core.utils import JobReturn, JobStatus
from mlflow.tracking import MlflowClient
from omegaconf import OmegaConf

from fedrun.app.tuning import search_sweeps
from fedrun.errors import ConfigError
from fedrun.sim import search
from fedrun.sim.sweep import OVERRIDES
from fedrun.store.runs import RESUMES, RESUMES_FILE

COMMAND = "+experiment=tune/fedavg sim.epochs=1"


def proposal(lr: float) -> tuple[str, ...]:
    return (f"method.optimizer.lr={lr}", *COMMAND.split())


def make_sweep(root, name: str, resumes: str | None = None):
    folder = root / name
    folder.mkdir(parents=True)
    (folder / OVERRIDES).write_text(COMMAND)
    if resumes is not None:
        (folder / RESUMES_FILE).write_text(resumes)
    return folder


def record(client, experiment: str, folder, job: int, lr: float, status: str = "FINISHED", told: str | None = None,
           tags=None, params=None, metrics=None) -> None:
    """One trial of ``folder``: its overrides file (as Hydra writes it), what it told its sweeper, and its run."""
    hydra_dir = folder / str(job) / ".hydra"
    hydra_dir.mkdir(parents=True)
    OmegaConf.save(OmegaConf.create(list(proposal(lr))), hydra_dir / "overrides.yaml")
    if told is not None:
        (folder / str(job) / search.TOLD).write_text(told)
    run = client.create_run(experiment, tags={"fedrun.sweep": str(folder), "fedrun.job": str(job), **(tags or {})})
    for key, value in (params or {}).items():
        client.log_param(run.info.run_id, key, value)
    for key, value in (metrics or {}).items():
        client.log_metric(run.info.run_id, key, value)
    client.set_terminated(run.info.run_id, status)


@pytest.fixture
def client():
    return MlflowClient()


def test_the_record_is_the_unbroken_run_of_ended_trials_from_trial_0(tmp_path, client):
    experiment = client.create_experiment("tune-x")
    first = make_sweep(tmp_path, "A")
    record(client, experiment, first, 0, 0.1, told="0.25")
    record(client, experiment, first, 1, 0.2, status="FAILED")
    record(client, experiment, first, 2, 0.3, params={"sim.keep_best": "True", "eval.monitor": "ndcg_at_10"},
           metrics={"valid/best_ndcg_at_10": 0.125})  # a run from before the objective's tag: its best validation
    record(client, experiment, first, 3, 0.4, status="KILLED")  # stopped: it and everything after it run again
    record(client, experiment, first, 4, 0.5, told="0.5")
    recorded = search.recorded_trials(first, client)
    assert sorted(recorded) == [0, 1, 2]
    assert [recorded[j].objective for j in range(3)] == [0.25, None, 0.125]
    assert recorded[0].overrides == proposal(0.1) and recorded[0].sweep == first


def test_a_trial_stopped_with_a_checkpoint_goes_on_from_it_after_the_ended_ones(tmp_path, client):
    experiment = client.create_experiment("tune-x")
    first = make_sweep(tmp_path, "A")
    checkpoint = first / "1" / "checkpoint.pt"
    record(client, experiment, first, 0, 0.1, told="0.25")
    record(client, experiment, first, 1, 0.2, status="KILLED",
           tags={"fedrun.failure_reason": f"stopped by SIGINT after round 90; resume with sim.resume={checkpoint}"})
    record(client, experiment, first, 2, 0.3, told="0.5")  # after the stop: runs again
    assert sorted(search.recorded_trials(first, client)) == [0]  # the checkpoint is gone: trial 1 starts over
    checkpoint.write_bytes(b"state")
    recorded = search.recorded_trials(first, client)
    assert sorted(recorded) == [0, 1] and recorded[0].ended
    assert not recorded[1].ended and recorded[1].checkpoint == str(checkpoint)


def test_a_chain_of_resumed_sweeps_is_read_from_its_first_and_the_latest_record_of_a_job_wins(tmp_path, client):
    experiment = client.create_experiment("tune-x")
    first = make_sweep(tmp_path, "A")
    record(client, experiment, first, 0, 0.1, told="0.25")
    record(client, experiment, first, 1, 0.2, status="KILLED")
    second = make_sweep(tmp_path, "B", resumes=str(first))
    record(client, experiment, second, 1, 0.2, told="0.75")  # the stopped trial, run again
    record(client, experiment, second, 2, 0.3, told="0.5")
    recorded = search.recorded_trials(second, client)
    assert {j: (t.objective, t.sweep.name) for j, t in recorded.items()} == {
        0: (0.25, "A"), 1: (0.75, "B"), 2: (0.5, "B")}
    (first / RESUMES_FILE).write_text(str(second))
    with pytest.raises(ConfigError, match="without a loop"):
        search.recorded_trials(second, client)


class CountingLauncher:
    def __init__(self):
        self.calls = []

    def launch(self, job_overrides, initial_job_idx):
        self.calls.append((list(job_overrides), initial_job_idx))
        return [JobReturn(overrides=list(o), status=JobStatus.COMPLETED, _return_value=9.0) for o in job_overrides]


def test_the_replay_answers_recorded_trials_and_launches_the_rest_under_their_job_numbers(tmp_path):
    recorded = {0: search.RecordedTrial(0, proposal(0.1), 0.25, tmp_path),
                1: search.RecordedTrial(1, proposal(0.2), None, tmp_path)}
    inner = CountingLauncher()
    launcher = search.ReplayLauncher(inner, recorded)
    returns = launcher.launch([proposal(0.1), proposal(0.2), proposal(0.3)], initial_job_idx=0)
    assert [r.return_value for r in returns] == [0.25, None, 9.0]  # None: the sweeper tells it failed, as before
    assert inner.calls == [([list(proposal(0.3))], 2)]
    assert launcher.launch([proposal(0.4)], initial_job_idx=3)[0].return_value == 9.0
    assert inner.calls[-1] == ([list(proposal(0.4))], 3)


def test_the_stopped_trial_is_launched_to_go_on_from_its_checkpoint(tmp_path):
    recorded = {0: search.RecordedTrial(0, proposal(0.1), 0.25, tmp_path),
                1: search.RecordedTrial(1, proposal(0.2), None, tmp_path, checkpoint="/c/checkpoint.pt")}
    inner = CountingLauncher()
    returns = search.ReplayLauncher(inner, recorded).launch([proposal(0.1), proposal(0.2)], initial_job_idx=0)
    assert [r.return_value for r in returns] == [0.25, 9.0]
    assert inner.calls == [([[*proposal(0.2), "sim.resume=/c/checkpoint.pt"]], 1)]
    with pytest.raises(search.SearchDiverged, match="proposes trial 1"):
        search.ReplayLauncher(inner, recorded).launch([proposal(0.1), proposal(0.7)], initial_job_idx=0)


def test_a_proposal_other_than_the_record_stops_the_search_by_name(tmp_path):
    launcher = search.ReplayLauncher(CountingLauncher(), {0: search.RecordedTrial(0, proposal(0.1), 0.25, tmp_path)})
    with pytest.raises(search.SearchDiverged, match="proposes trial 0 as `method.optimizer.lr=0.7 .*ran it as "
                                                    "`method.optimizer.lr=0.1"):
        launcher.launch([proposal(0.7)], initial_job_idx=0)


def config(tmp_path, command: str = COMMAND) -> OmegaConf:
    return OmegaConf.create({"hydra": {"overrides": {"task": command.split()},
                                       "sweep": {"dir": str(tmp_path / "new")},
                                       "sweeper": {"_target_": search.OPTUNA}}})


@pytest.mark.parametrize("case, expected", [
    ("missing", "expected the folder of a fedrun sweep .*no such folder"),
    ("not a sweep", "expected the folder of a fedrun sweep .*that folder is not one"),
    ("another command", "it ran `\\+experiment=tune/fedavg sim.epochs=1`, this one is `.* sim.epochs=2`"),
    ("itself", "an earlier sweep's folder, not this one's"),
])
def test_the_wrong_sweep_to_resume_is_refused_before_anything_runs(tmp_path, capsys, case, expected):
    earlier = make_sweep(tmp_path, "A")
    cfg = config(tmp_path)
    if case == "missing":
        earlier = tmp_path / "nope"
    elif case == "not a sweep":
        (earlier / OVERRIDES).unlink()
    elif case == "another command":
        cfg = config(tmp_path, "+experiment=tune/fedavg sim.epochs=2")
    else:
        cfg.hydra.sweep.dir = str(earlier)
    with pytest.raises(SystemExit) as exit_:
        search.ResumeSearch(str(earlier)).on_multirun_start(cfg)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("fedrun: error: hydra.callbacks.resume_search.sweep=") and "Traceback" not in err
    assert __import__("re").search(expected, err)


def test_only_a_search_can_be_resumed(tmp_path, capsys):
    earlier = make_sweep(tmp_path, "A")
    cfg = config(tmp_path)
    cfg.hydra.sweeper._target_ = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"
    with pytest.raises(SystemExit):
        search.ResumeSearch(str(earlier)).on_multirun_start(cfg)
    assert "hydra/sweeper='BasicSweeper' is not allowed: expected the Optuna sweeper" in capsys.readouterr().err


def test_without_a_sweep_to_resume_the_callback_does_nothing(tmp_path):
    search.ResumeSearch(None).on_multirun_start(config(tmp_path))
    assert not (tmp_path / "new").exists()


def test_a_search_that_spanned_sessions_is_read_as_one_from_its_first_sweep(client):
    """fedrun.app.tuning: the latest sweep's run names the folder it resumed, and so on back to the first."""
    experiment = client.create_experiment("tune-x")
    parents = []
    for folder, resumes in (("A", None), ("B", "A"), ("C", "B")):
        run = client.create_run(experiment, tags={"fedrun.kind": "sweep", "fedrun.sweep": folder,
                                                  **({RESUMES: resumes} if resumes else {})})
        parents.append(run.info.run_id)
    assert search_sweeps(client, experiment, parents[2]) == parents
    assert search_sweeps(client, experiment, parents[0]) == parents[:1]


def test_a_failed_trial_tells_a_search_the_worst_value_of_its_direction():
    """So that TPE learns to avoid a refused or diverging setting instead of proposing beside it again."""
    optuna = {"_target_": search.OPTUNA, "direction": "maximize"}
    assert search.failed_trial_value(OmegaConf.create(optuna)) == -math.inf
    assert search.failed_trial_value(OmegaConf.create({**optuna, "direction": "Direction.minimize"})) == math.inf
    basic = {"_target_": "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"}
    assert search.failed_trial_value(OmegaConf.create(basic)) is None


def test_a_trial_is_replayed_with_the_value_it_told_its_sweeper(tmp_path, client):
    experiment = client.create_experiment("tune-x")
    first = make_sweep(tmp_path, "A")
    record(client, experiment, first, 0, 0.1, status="FAILED", told="-inf")  # the worst value (since session 63)
    record(client, experiment, first, 1, 0.2, status="FAILED")  # from before: told "failed"
    record(client, experiment, first, 2, 0.3, told="0.5",  # the file is what the sampler was told, before any metric
           params={"sim.keep_best": "True", "eval.monitor": "ndcg_at_10"}, metrics={"valid/best_ndcg_at_10": 0.25})
    recorded = search.recorded_trials(first, client)
    assert [recorded[j].objective for j in range(3)] == [-math.inf, None, 0.5]  # 1: told "failed", as before


def test_a_saved_record_resumes_the_search_without_its_store(tmp_path, client):
    """save_record flattens a chain into one folder of ended trials; replayed from it, a store that never saw the
    search gives the same record (the stopped trial is left out: without its checkpoint it runs again)."""
    experiment = client.create_experiment("tune-x")
    first = make_sweep(tmp_path, "A")
    record(client, experiment, first, 0, 0.1, told="0.25")
    record(client, experiment, first, 1, 0.2, status="FAILED")  # from before TOLD: told "failed"
    record(client, experiment, first, 2, 0.3, status="KILLED")
    second = make_sweep(tmp_path, "B", resumes=str(first))
    record(client, experiment, second, 2, 0.3, status="FAILED", told="-inf")
    record(client, experiment, second, 3, 0.4, status="KILLED")  # stopped: not saved
    saved = tmp_path / "docs" / "sweeps" / "tune-x"
    assert search.save_record(second, saved, client) == 3
    assert search.sweep_command(saved) == COMMAND.split() and not (saved / RESUMES_FILE).exists()
    empty = MlflowClient(f"sqlite:///{tmp_path / 'elsewhere.db'}")  # another machine's store
    recorded = search.recorded_trials(saved, empty)
    assert {j: (t.overrides, t.objective, t.ended) for j, t in recorded.items()} == {
        0: (proposal(0.1), 0.25, True), 1: (proposal(0.2), None, True), 2: (proposal(0.3), -math.inf, True)}
    third = make_sweep(tmp_path, "C", resumes=str(saved))  # resumed from the record; trial 3 ended this time
    record(client, experiment, third, 3, 0.4, told="0.5")
    assert search.save_record(third, saved, client) == 4  # the record it resumed, rewritten in place
    assert [t.objective for t in search.recorded_trials(saved, empty).values()] == [0.25, None, -math.inf, 0.5]


def test_tuning_keeps_a_stopped_searchs_record_and_drops_a_finished_ones(tmp_path, client, monkeypatch):
    from fedrun.app.tuning import keep_record, resumed_elsewhere

    monkeypatch.chdir(tmp_path)
    experiment = client.create_experiment("tune-x")
    first = make_sweep(tmp_path, "A")
    record(client, experiment, first, 0, 0.1, told="0.25")
    parent = client.create_run(experiment, tags={"fedrun.kind": "sweep", "fedrun.sweep": "A"}).info.run_id
    client.set_terminated(parent, "KILLED")
    dest = tmp_path / "docs" / "sweeps" / "tune-x"
    said = keep_record(client, parent, dest)
    assert said.endswith(f"1 ended trial(s); resume it on any machine with\nfedrun -m {COMMAND} {search.FIELD}={dest}")
    assert (dest / "0" / search.TOLD).read_text() == "0.25" and not resumed_elsewhere(client, parent)
    resumed = client.create_run(experiment, tags={"fedrun.kind": "sweep", "fedrun.sweep": "B",
                                                  RESUMES: str(dest)}).info.run_id
    client.set_terminated(resumed, "FINISHED")
    assert resumed_elsewhere(client, resumed)
    assert "removed" in keep_record(client, resumed, dest) and not dest.exists()
    gone = client.create_run(experiment, tags={"fedrun.kind": "sweep", "fedrun.sweep": "Z"}).info.run_id
    client.set_terminated(gone, "KILLED")
    assert "folder Z is not on this machine" in keep_record(client, gone, dest)
