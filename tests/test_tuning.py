"""The tuned leaderboard's searches (+experiment=tune/<method>): every preset declares a space Optuna can read over
keys its method has, all share the board's protocol and one stopping rule, and fedrun/app/tuning.py picks each
search's best trial by validation alone."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra_plugins.hydra_optuna_sweeper._impl import create_optuna_distribution_from_override
from omegaconf import OmegaConf

from fedrun.app.experiment import run
from fedrun.app.tuning import Search, at_edge, best_trial, read_search, search_presets, summarise
from fedrun.errors import ConfigError
from tests.conftest import compose_cfg

SEARCHES = search_presets()
RATING = [s for s in SEARCHES if s.startswith("tune/rating/")]
MISSING = object()


def test_there_are_searches():
    assert {"tune/fedavg", "tune/central", "tune/fedcl", "tune/cl4fedrec", "tune/rcl4fedrec"} <= set(SEARCHES)
    assert {"tune/rating/fedrec", "tune/rating/fedrecpp", "tune/rating/central"} <= set(RATING)
    assert not {"tune/common", "tune/budget", "tune/rating/common"} & set(SEARCHES)  # shared parts, no space


@pytest.mark.parametrize("preset", SEARCHES)
def test_each_search_is_over_keys_its_method_has_in_a_space_optuna_reads(preset):
    search = read_search(preset)
    cfg = compose_cfg([f"+experiment={preset}"])
    assert preset.endswith(f"/{cfg.choices.method}") and search.experiment == "tune-" + preset[5:].replace("/", "-")
    assert search.maximize == (preset not in RATING) and search.board == ("rating" if preset in RATING else "ranking")
    assert search.space, "a search with nothing to search"
    parser = OverridesParser.create()
    for key, space in search.space.items():
        assert OmegaConf.select(cfg, key, default=MISSING) is not MISSING, f"{preset}: {key} is not a config key"
        override = parser.parse_override(f"{key}={space}")
        assert override.is_sweep_override(), f"{preset}: {key}={space} searches nothing"
        create_optuna_distribution_from_override(override)  # raises on a space Optuna cannot sample


@pytest.mark.parametrize("preset", SEARCHES)
def test_every_search_runs_the_boards_protocol_and_its_stopping_rule(preset):
    cfg = compose_cfg([f"+experiment={preset}"])
    rating = preset in RATING
    board = compose_cfg([f"+experiment=leaderboard/tuned{'_rating' if rating else ''}",
                         f"method={cfg.choices.method}", f"backbone={cfg.choices.backbone}"])
    assert cfg.choices.dataset == "ml-100k"
    if rating:  # GroupLens' fold u1, a tenth of it for validation, errors of the predicted ratings
        assert cfg.dataset.split.protocol == "predefined" and cfg.dataset.split.valid_ratio == 0.1
        assert cfg.eval.kind == "rating" and cfg.eval.monitor == "rmse" and cfg.backbone.loss == "mse"
    else:
        assert cfg.dataset.split.protocol == "loo"
        assert cfg.eval.kind == "ranking" and cfg.eval.monitor == "ndcg_at_10"
    assert OmegaConf.to_container(cfg.dataset) == OmegaConf.to_container(board.dataset)
    rule = ("epochs", "max_rounds", "eval_every", "patience", "keep_best")
    assert {k: cfg.sim[k] for k in rule} == {k: board.sim[k] for k in rule} == {
        "epochs": 40, "max_rounds": None, "eval_every": 1, "patience": 5, "keep_best": True}
    assert OmegaConf.to_container(cfg.method) == OmegaConf.to_container(board.method)  # the defaults, before search


def test_a_preset_that_is_no_search_is_refused_by_name():
    for preset in ("leaderboard", "tune/common", "tune/budget", "tune/rating/common", "tune/nope"):
        with pytest.raises(ConfigError, match="a search preset: one of .*tune/fedavg"):
            read_search(preset)


def test_a_search_on_another_dataset_names_it_in_its_experiment_and_its_board_command():
    """``--dataset ml-1m``: the searches ran with ``dataset=ml-1m experiment_name=tune-<method>-ml-1m``; each best
    setting's command runs the board on ml-1m into its own experiment, never into the ml-100k board's."""
    search = read_search("tune/fedavg", "ml-1m")
    assert (search.experiment, search.dataset, search.method) == ("tune-fedavg-ml-1m", "ml-1m", "fedavg")
    assert read_search("tune/rating/fedrec", "ml-1m").experiment == "tune-rating-fedrec-ml-1m"
    elsewhere = Search(**{**SEARCH.__dict__, "dataset": "ml-1m"})
    row = summarise(elsewhere, trials([("FINISHED", 0.12, 0.01, 0.5)]))
    assert row["command"] == ("fedrun -m +experiment=leaderboard/tuned method=x backbone=mf dataset=ml-1m "
                              "experiment_name=leaderboard-tuned-ml-1m method.optimizer.lr=0.5")
    rating = Search(**{**elsewhere.__dict__, "board": "rating"})
    assert "experiment_name=leaderboard-tuned-rating-ml-1m " in summarise(rating, trials([("FINISHED", 1, 1, .5)]))[
        "command"]
    with pytest.raises(ConfigError, match="--dataset.*nope.*a dataset option: one of .*ml-1m"):
        read_search("tune/fedavg", "nope")


SEARCH = Search("tune/x", "tune-x", "x", "mf", "ranking", "ndcg_at_10", True,
                {"method.optimizer.lr": "interval(0.1, 1)"}, {"method.optimizer.lr": "0.3"})


def trials(rows):
    return pd.DataFrame([{"run_id": f"r{i}", "status": status, "metric:best_valid_ndcg_at_10": valid,
                          "metric:test_ndcg_at_10": test, "metric:floor_valid_ndcg_at_10": 0.05,
                          "param:method.optimizer.lr": str(lr)} for i, (status, valid, test, lr) in enumerate(rows)])


def test_the_best_trial_is_the_best_validation_of_a_finished_trial():
    frame = trials([("FINISHED", 0.10, 0.30, 0.2), ("FINISHED", 0.12, 0.01, 0.5), ("FAILED", 0.50, 0.50, 0.9),
                    ("FINISHED", math.nan, 0.9, 0.7)])
    assert best_trial(SEARCH, frame)["run_id"] == "r1"  # not the best test (r0), not a failed trial (r2)
    lower = Search(**{**SEARCH.__dict__, "maximize": False})
    assert best_trial(lower, frame)["run_id"] == "r0"
    row = summarise(SEARCH, frame)
    assert (row["trials"], row["failed"], row["best_valid"], row["best_run"]) == (3, 1, 0.12, "r1")
    assert row["setting"] == "method.optimizer.lr=0.5"
    assert row["command"] == "fedrun -m +experiment=leaderboard/tuned method=x backbone=mf method.optimizer.lr=0.5"
    rating = Search(**{**SEARCH.__dict__, "board": "rating"})
    assert summarise(rating, frame)["command"].startswith("fedrun -m +experiment=leaderboard/tuned_rating method=x ")


def test_a_setting_the_searchs_command_line_fixed_runs_on_the_board_too():
    """A search run with ``backbone.neighbors=20`` beside its space (graphs on ml-1m) tested that model: the board's
    command carries it. Result-neutral settings (``sim.threads``) and those the board sets itself (the seed) stay
    out, and a value the preset already has (``5e-05`` logged as ``5.0e-05``) is no change."""
    config = {"method.optimizer.lr": "0.3", "backbone.neighbors": "0", "backbone.l2": "5e-05", "sim.threads": "2",
              "sim.seed": "1", "dataset.split.seed": "0"}
    search = Search(**{**SEARCH.__dict__, "config": config})
    frame = trials([("FINISHED", 0.12, 0.01, 0.5)]).assign(**{
        "param:backbone.neighbors": "20", "param:backbone.l2": "5.0e-05", "param:sim.threads": "1",
        "param:sim.seed": "1", "param:dataset.split.seed": "3"})
    assert summarise(search, frame)["command"] == ("fedrun -m +experiment=leaderboard/tuned method=x backbone=mf "
                                                   "backbone.neighbors=20 dataset.split.seed=3 "
                                                   "method.optimizer.lr=0.5")
    assert "neighbors" not in summarise(SEARCH, frame)["command"]  # no config read: nothing to compare with


def test_a_search_without_a_finished_trial_has_no_best():
    row = summarise(SEARCH, trials([("FAILED", math.nan, math.nan, 0.2)]))
    assert math.isnan(row["best_valid"]) and row["command"] == "" and row["failed"] == 1
    assert math.isnan(summarise(SEARCH, pd.DataFrame())["best_valid"])


@pytest.mark.parametrize("preset", SEARCHES)
def test_each_search_runs_one_round_on_small_data(preset):
    tiny = ["dataset=synthetic", "dataset.n_users=60", "dataset.n_items=80", "dataset.mean_length=8",
            "dataset.split.protocol=loo", "sim.max_rounds=1", "sim.clients_per_round=8", "sim.progress=false",
            "track=none"]
    cfg = compose_cfg([f"+experiment={preset}", *tiny])
    if cfg.backbone.get("loss") == "mse":  # a rating model's search: ratings, the board's split on small data
        tiny += ["dataset.ratings=true", "dataset.split.protocol=random_ratio", "dataset.split.valid_ratio=0.1"]
    for key, small in (("n_clusters", 4), ("hot_items", 10)):  # FedCL's clusters, rCL4FedRec's hot items: < 80 items
        if key in cfg.method:
            tiny.append(f"method.{key}={small}")
    cfg = compose_cfg([f"+experiment={preset}", *tiny])
    result = run(cfg)
    assert result.rounds == 1 and result.test


def test_a_search_is_its_experiments_latest_finished_sweep():
    """A sweep stopped midway (its parent KILLED) is no search's record: the one before it that finished is."""
    from mlflow.tracking import MlflowClient

    from fedrun.app.tuning import latest_sweep

    client = MlflowClient()
    assert latest_sweep(client, "tune-nothing") is None
    experiment = client.create_experiment("tune-x")
    sweeps = []
    for start, status in ((1000, "FINISHED"), (2000, "KILLED")):
        run = client.create_run(experiment, start_time=start, tags={"fedrun.kind": "sweep"})
        client.set_terminated(run.info.run_id, status)
        sweeps.append(run.info.run_id)
    client.create_run(experiment, start_time=3000)  # a trial, no sweep
    assert latest_sweep(client, "tune-x") == (experiment, sweeps[0])
    client.set_terminated(sweeps[0], "FAILED")  # no finished sweep at all: the latest one
    assert latest_sweep(client, "tune-x") == (experiment, sweeps[1])


def test_a_best_value_at_the_edge_of_its_space_is_flagged():
    """Within 5 % of an interval's ends (of its logarithm's for tag(log, ...)), or a numeric choice's extreme: the
    space should grow before that setting is trusted."""
    assert at_edge("interval(0.5, 1.0)", "0.99") and at_edge("interval(0.5, 1.0)", "0.51")
    assert not at_edge("interval(0.5, 1.0)", "0.9")
    assert at_edge("tag(log, interval(0.001, 1.0))", "0.0012") and not at_edge("tag(log, interval(0.001, 1.0))", "0.02")
    assert at_edge("choice(4, 8, 16)", "4") and at_edge("choice(4, 8, 16)", "16")
    assert not at_edge("choice(4, 8, 16)", "8")
    assert not at_edge("choice(0.1, 0.2)", "0.2")  # two options have no inside


def test_summarising_some_searches_again_keeps_the_other_searches_rows(tmp_path):
    from fedrun.app.tuning import with_earlier_searches

    path = tmp_path / "searches.csv"
    pd.DataFrame({"experiment": ["tune-a", "tune-b", "tune-c"], "best_valid": [1.0, 2.0, float("nan")],
                  "setting": ["x=1", "y=2", None]}).to_csv(path, index=False)
    again = pd.DataFrame({"experiment": ["tune-b", "tune-d"], "best_valid": [3.0, 4.0], "setting": ["y=3", "z=4"]})
    merged = with_earlier_searches(again, path)
    assert list(merged["experiment"]) == ["tune-a", "tune-b", "tune-c", "tune-d"]  # the earlier order, new last
    assert list(merged["best_valid"][:2]) == [1.0, 3.0] and list(merged["setting"]) == ["x=1", "y=3", "", "z=4"]
    assert with_earlier_searches(again, tmp_path / "none.csv").equals(again)
