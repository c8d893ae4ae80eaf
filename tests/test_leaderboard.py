"""The leaderboard preset composes every method in its own paper's setting under one protocol, and
fedrun/app/leaderboard.py ranks the methods' runs by NDCG@10 beside the floor, their ε and their costs."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest
from omegaconf import OmegaConf

from fedrun.app.leaderboard import BOARDS, board, main, paper_of, render, with_leakage, with_searches
from fedrun.core.paths import config_dir
from tests.conftest import compose_cfg

PRESET = OmegaConf.load(Path(config_dir()) / "experiment" / "leaderboard.yaml")
METHODS = sorted(path.stem for path in (Path(config_dir()) / "method").glob("*.yaml"))


def test_the_leaderboard_sweeps_every_method():
    """Every option of conf/method/, read by Hydra from the files (no list kept by hand)."""
    assert str(PRESET.hydra.sweeper.params.method).startswith("glob(*)")


@pytest.mark.parametrize("method", METHODS)
def test_each_method_keeps_its_paper_setting_under_the_common_protocol(method):
    bare = compose_cfg([f"method={method}", "dataset=ml-100k"])
    cfg = compose_cfg(["+experiment=leaderboard", f"method={method}"])
    assert cfg.choices.dataset == "ml-100k" and cfg.dataset.split.protocol == "loo"
    assert cfg.choices.eval == "full" and cfg.eval.kind == "ranking" and list(cfg.eval.ks) == [10, 20]
    for group in ("backbone", "privacy", "defense"):  # the paper's setting, as the bare command has it
        assert cfg.choices[group] == bare.choices[group]
    assert OmegaConf.to_container(cfg.sim) == OmegaConf.to_container(bare.sim)
    assert OmegaConf.to_container(cfg.method) == OmegaConf.to_container(bare.method)


def runs(method: str, ndcg: list[float], **params) -> list[dict]:
    return [{"run_id": f"{method}{seed}", "status": "FINISHED", "start_time": seed, "reason": "",
             "param:choices.method": method, "param:choices.backbone": "mf", "param:choices.dataset": "ml-100k",
             "param:choices.privacy": params.get("privacy", "none"), "param:privacy.epsilon": params.get("eps"),
             "param:sim.seed": str(seed), "metric:test_hr_at_10": 2 * value, "metric:test_ndcg_at_10": value,
             "metric:test_hr_at_20": 3 * value, "metric:test_ndcg_at_20": 1.5 * value,
             "metric:bytes_up_per_client": 2048.0, "metric:bytes_down_per_client": 4096.0,
             "metric:seconds_per_epoch": 2.5, "metric:floor_ndcg_at_10": None if method == "pop" else .04}
            for seed, value in enumerate(ndcg, 1)]


def test_board_ranks_by_ndcg_with_the_floor_ratio_and_epsilon():
    frame = pd.DataFrame(runs("pop", [.04]) + runs("fedavg", [.05, .07]) + runs("fedcl", [.08, .08], privacy="ldp",
                                                                                   eps="4.0"))
    table = board(frame)
    assert list(table["method"]) == ["fedcl", "fedavg", "pop"]
    assert table.loc[1, "test_ndcg_at_10"] == pytest.approx(.06) and table.loc[1, "runs"] == 2
    assert list(table["epsilon"]) == ["4.0", "—", "—"]
    text = re.sub(" +", " ", render(table, "ml-100k"))  # the table's column padding squeezed
    assert "| 1 | fedcl | fedcl " in text and "0.0600 ± 0.0141" in text
    assert "| 0.0900 ± 0.0212 | 1.50 | 2.0 | 4.0 | 2.50 |" in text  # fedavg: NDCG@20, .06 / .04, KB up, down, s
    assert "| 0.0600 (n = 1) | 1.00 |" in text  # pop is the floor itself, one run: no spread


def test_runs_of_an_earlier_default_are_set_aside_for_the_latest_setting():
    """rCL4FedRec's V_sp default changed (1,000 → every normal item): the board ranks the new default's runs only.
    A parameter the older runs did not log yet, or one that says how a run executed, changes nothing."""
    old = [{**run, "run_id": f"old{i}", "param:method.reg_sample": "1000", "param:sim.resume": "None"}
           for i, run in enumerate(runs("rcl4fedrec", [.03, .03, .03]))]
    new = [{**run, "run_id": f"new{i}", "start_time": 10 + i, "param:method.reg_sample": "0", "param:eval.watch": "x",
            "param:sim.resume": "/some/checkpoint.pt" if i == 0 else "None"}
           for i, run in enumerate(runs("rcl4fedrec", [.05, .07]))]
    table = board(pd.DataFrame(old + new))
    assert table.loc[0, "runs"] == 2 and table.loc[0, "test_ndcg_at_10"] == pytest.approx(.06)


def test_a_laplace_scale_set_directly_is_shown_as_its_per_coordinate_epsilon():
    frame = pd.DataFrame([{**run, "param:privacy.scale": "0.1", "param:privacy.clip": "0.5"}
                          for run in runs("fedgnn", [.05], privacy="ldp", eps="4.0")])
    assert board(frame).loc[0, "epsilon"] == "10 per coordinate (λ 0.1)"


def test_paper_of_reads_the_methods_setting():
    assert paper_of("fedcl") == "fedcl" and paper_of("fcf") == "lightfr" and paper_of("pop") == "—"


def test_main_writes_the_table_and_figure_from_a_ledger(tmp_path):
    ledger = tmp_path / "runs.csv"
    pd.DataFrame(runs("pop", [.04]) + runs("fedavg", [.05, .07])).to_csv(ledger, index=False)
    leakage = tmp_path / "leakage.csv"
    pd.DataFrame([{**run, "metric:audit_auc": .99, "metric:audit_intersect_precision": .9,
                   "metric:audit_base_rate": .062} for run in runs("fedavg", [.05])]).to_csv(leakage, index=False)
    assert main(["--experiment", "nothing-here", "--ledger", str(ledger), "--out", str(tmp_path),
                 "--leakage", str(leakage)]) == 0
    assert "| fedavg |" in (tmp_path / "table.md").read_text()
    assert "rated set leaked" in (tmp_path / "table.md").read_text()
    assert (tmp_path / "leaderboard.png").stat().st_size > 10_000


def test_the_leakage_ledger_adds_what_the_server_guesses_of_each_methods_rated_set():
    """Issue #65: each method's audited runs (the same commands with audit=server) give its row the rated-set
    attack's AUC and intersect precision beside the base rate, and say when they trained fewer epochs than the
    board's; a method never audited keeps an empty cell. (``main --leakage`` reads the ledger into ``with_leakage``.)"""
    graph = [{**run, "param:sim.epochs": "20"} for run in runs("fedgnn", [.06])]
    table = board(pd.DataFrame(runs("pop", [.04]) + runs("fedavg", [.05, .07]) + runs("fedcl", [.08]) + graph))
    audited = [{**run, "param:choices.audit": "server", "metric:audit_auc": auc, "metric:audit_intersect_precision": .9,
                "metric:audit_base_rate": .062} for run, auc in zip(runs("fedavg", [.05, .07]) + graph, [.99, .97, .9])]
    audited[-1]["param:sim.epochs"] = "1"  # a graph run audited after one epoch of its twenty
    text = re.sub(" +", " ", render(with_leakage(table, pd.DataFrame(audited)), "ml-100k"))
    assert "rated set leaked" in text and "| 0.980, 0.90 / 0.062 [2] |" in text  # same epochs: no note
    assert re.search(r"\| fedcl \|.*\| \|$", text, re.MULTILINE)  # not audited: an empty cell
    assert "| 0.900, 0.90 / 0.062 [1, 1 of 20 epochs] |" in text


def test_the_tuned_board_says_each_methods_search_or_that_it_runs_its_defaults():
    """``--searches`` (fedrun.app.tuning's searches.csv): a searched method shows its trials and its best validation
    beside the floor, and any parameter whose best lies at its space's edge; an unsearched one says so."""
    table = board(pd.DataFrame(runs("pop", [.04]) + runs("fedavg", [.05, .07]) + runs("fedcl", [.08])))
    searches = pd.DataFrame([{"method": "fedavg", "board": "ranking", "trials": 16, "failed": 2,
                              "best_valid": .0644, "valid_floor": .0338, "at_edge": "method.optimizer.lr"},
                             {"method": "fedcl", "board": "rating", "trials": 16, "failed": 0,
                              "best_valid": .9, "valid_floor": .93, "at_edge": ""}])  # the rating board's
    text = re.sub(" +", " ", render(with_searches(table, searches), "ml-100k"))
    assert "search: trials, best valid NDCG@10 / valid floor" in text
    assert "| 16 (2 failed): 0.0644 / 0.0338; at the edge: method.optimizer.lr |" in text
    assert re.search(r"\| fedcl \|.*\| defaults \(no search\) \|$", text, re.MULTILINE)
    assert re.search(r"\| pop \|.*\| — \|$", text, re.MULTILINE)


def test_the_rating_board_ranks_by_rmse_lowest_first_beside_the_bias_floor(tmp_path):
    rating = [{**run, "metric:test_rmse": rmse, "metric:test_mae": rmse * .8, "metric:floor_rmse": .96}
              for run, rmse in zip(runs("fedrec", [0, 0]) + runs("central", [0]), [.95, .97, .91])]
    table = board(pd.DataFrame(rating), BOARDS["rating"])
    assert list(table["method"]) == ["central", "fedrec"] and table.loc[1, "test_rmse"] == pytest.approx(.96)
    text = re.sub(" +", " ", render(table, "ml-100k", BOARDS["rating"]))
    assert "ranked by RMSE" in text and "| RMSE | MAE | RMSE / floor |" in text
    assert "| 0.9100 (n = 1) | 0.7280 (n = 1) | 0.95 |" in text  # central: .91 / .96
    ledger = tmp_path / "runs.csv"
    pd.DataFrame(rating).to_csv(ledger, index=False)
    assert main(["--experiment", "nothing-here", "--ledger", str(ledger), "--out", str(tmp_path),
                 "--board", "rating"]) == 0
    assert "| central |" in (tmp_path / "table-rating.md").read_text()
    assert (tmp_path / "leaderboard-rating.png").stat().st_size > 10_000
