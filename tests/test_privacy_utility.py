"""fedrun/app/privacy_utility.py: utility against ε per dataset and curve, ε = ∞ from the privacy=none runs,
and the
preset's commands compose (each method in its paper's setting, the protected upload named)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from fedrun.app.privacy_utility import main, points
from tests.conftest import compose_cfg


def runs(method: str, eps: float | None, values: list[float], metric: str = "ndcg_at_10") -> list[dict]:
    return [{"run_id": f"{method}{eps}{seed}", "status": "FINISHED", "start_time": seed, "reason": "",
             "param:choices.method": method, "param:choices.backbone": "mf", "param:choices.dataset": "ml-100k",
             "param:choices.privacy": "none" if eps is None else "ldp", "param:privacy.epsilon": eps,
             "param:privacy.targets": None if eps is None else "['item_rows']", "param:sim.seed": str(seed),
             f"metric:test_{metric}": value, f"metric:floor_{metric}": .04} for seed, value in enumerate(values, 1)]


def test_points_average_seeds_per_epsilon_with_infinity_from_no_privacy():
    diverged = [{**run, "status": "FAILED", "metric:test_ndcg_at_10": None, "metric:floor_ndcg_at_10": None}
                for run in runs("fedavg", .5, [0.0])]
    frame = pd.DataFrame(runs("fedavg", 1.0, [.02, .04]) + runs("fedavg", 8.0, [.05]) + runs("fedavg", None, [.06])
                         + diverged)
    table = points(frame)
    assert list(table["epsilon"]) == [.5, 1.0, 8.0, math.inf]
    assert table.loc[1, "mean"] == pytest.approx(.03) and table.loc[1, "runs"] == 2
    assert table.loc[0, "runs"] == 0 and table.loc[0, "failed"] == 1  # a diverged point stays on the curve
    assert table.loc[1, "protects"] == "['item_rows']" and table.loc[3, "protects"] == ""


def test_a_laplace_scale_set_directly_is_placed_at_its_per_coordinate_epsilon_on_its_datasets_metric():
    """FedGNN's family sets λ (privacy.scale) and an L∞ clip δ: its point is ε = 2δ/λ per coordinate; a dataset
    whose runs log Recall@20 is measured by it; a preset's row names the curve."""
    graph = [{**run, "param:choices.dataset": "yelp-perfedrec", "param:privacy.scale": scale,
              "param:privacy.clip": .5, "param:privacy.epsilon": 4.0, "param:choices.privacy": privacy}
             for scale, privacy, value in ((.1, "perfedrecpp/ldp", .02), (.05, "perfedrecpp/ldp", .03),
                                           (None, "none", .04))
             for run in runs("fedgnn", 1.0, [value], metric="recall_at_20")]
    fedmf = [{**run, "run_id": "fedmf", "param:choices.row": "perfedrecpp/fedmf"} for run in graph[:1]]
    table = points(pd.DataFrame(graph + fedmf + runs("fedavg", 1.0, [.02])))
    assert set(table["curve"]) == {"fedgnn / mf", "fedmf / mf", "fedavg / mf"}
    table = table[table["curve"] != "fedmf / mf"].reset_index(drop=True)
    yelp = table[table["dataset"] == "yelp-perfedrec"]
    assert list(yelp["epsilon"]) == [10.0, 20.0, math.inf] and set(yelp["metric"]) == {"recall_at_20"}
    assert list(yelp["unit"]) == ["per coordinate", "per coordinate", ""]
    assert list(yelp["mean"]) == pytest.approx([.02, .03, .04])
    assert list(table.loc[table["dataset"] == "ml-100k", "metric"]) == ["ndcg_at_10"]


def test_a_datasets_utility_is_the_metric_its_runs_monitored():
    """Runs that name eval.monitor are measured by it, even where older runs logged no floor (rCL4FedRec's ML-1M
    runs of before the floor): they used to read as "every run failed"."""
    older = [{**run, "param:choices.dataset": "ml-1m", "param:eval.monitor": "recall_at_20",
              "metric:floor_recall_at_20": None} for run in runs("original", None, [.023], metric="recall_at_20")]
    newer = [{**run, "param:choices.dataset": "ml-1m", "param:eval.monitor": "recall_at_20"}
             for run in runs("original", 2.0, [.035], metric="recall_at_20")]
    table = points(pd.DataFrame(older + newer + runs("fedavg", 1.0, [.02])))
    ml1m = table[table["dataset"] == "ml-1m"]
    assert set(ml1m["metric"]) == {"recall_at_20"} and list(ml1m["mean"]) == pytest.approx([.035, .023])
    assert list(table.loc[table["dataset"] == "ml-100k", "metric"]) == ["ndcg_at_10"]  # auto: as before


def test_main_draws_the_curves_from_a_ledger(tmp_path):
    ledger = tmp_path / "runs.csv"
    validated = [{**run, "metric:valid_ndcg_at_10": .05} for run in runs("fedavg", 1.0, [.02])]
    pd.DataFrame(validated + runs("fedavg", None, [.06])).to_csv(ledger, index=False)
    assert main(["--experiment", "nothing-here", "--ledger", str(ledger), "--out", str(tmp_path)]) == 0
    text = (tmp_path / "table.md").read_text()
    assert "| ∞ " in text and "nothing" in text and "ndcg_at_10 0.0200" in text and "0.0500 (n = 1)" in text
    assert (tmp_path / "privacy-utility.png").stat().st_size > 10_000
    assert (tmp_path / "privacy-utility-valid.png").stat().st_size > 10_000


def test_each_point_carries_the_tested_models_validation_utility_and_its_floor():
    """The best validation where the run kept that model, else the last one; its floor where the runs logged it."""
    kept = [{**run, "metric:best_valid_ndcg_at_10": .09, "metric:valid_ndcg_at_10": .05,
             "metric:floor_valid_ndcg_at_10": .07} for run in runs("fedavg", 1.0, [.02])]
    last = [{**run, "metric:valid_ndcg_at_10": value}
            for run, value in zip(runs("fedavg", 8.0, [.03, .04]), (.06, .08))]
    table = points(pd.DataFrame(kept + last + runs("fedavg", None, [.05])))
    assert list(table["valid_mean"][:2]) == pytest.approx([.09, .07]) and pd.isna(table.loc[2, "valid_mean"])
    assert table.loc[0, "valid_floor"] == pytest.approx(.07) and pd.isna(table.loc[1, "valid_floor"])
    assert table.loc[1, "valid_std"] == pytest.approx(0.0141421, rel=1e-4)


@pytest.mark.parametrize("overrides,targets", [(["method=fedcl", "privacy=ldp"], ["user_embedding"]),
                                               (["method=fedavg", "privacy=item_rows/ldp"], ["item_rows"]),
                                               (["method=fedrec", "dataset=filmtrust", "privacy=item_rows/ldp"],
                                                ["item_rows"])])
def test_the_presets_commands_compose(overrides, targets):
    cfg = compose_cfg(["+experiment=privacy_utility", *overrides])
    bare = compose_cfg([o for o in overrides if not o.startswith("privacy=")] + ["dataset=ml-100k"] *
                       (not any(o.startswith("dataset=") for o in overrides)))
    assert list(cfg.privacy.targets) == targets and cfg.experiment_name == "privacy-utility"
    assert cfg.choices.backbone == bare.choices.backbone and cfg.choices.dataset == bare.choices.dataset
