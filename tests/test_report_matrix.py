"""The robustness matrix report: cells averaged over seeds, the utility drop against the no-attack
run under the server's own rule, refused combinations shown as n/a, and the heatmap written."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fedrun.app.report import matrix_refusals
from fedrun.core.paths import config_dir
from fedrun.errors import ConfigError
from fedrun.report import matrix

PRESET = "robustness/matrix"
NO_REFUSALS = lambda preset, axes: {}  # noqa: E731 - every cell accepted (the check itself is tested below)


def runs() -> pd.DataFrame:
    rows = []
    for seed, (er, recall) in enumerate([(0.9, 0.020), (0.7, 0.018)], start=1):
        rows += [
            {"param:choices.row": "robustness/none", "param:choices.defense": "sum", "param:sim.seed": seed,
             "metric:test_recall_at_20": 0.022 + 0.002 * seed},
            {"param:choices.row": "robustness/a_hum", "param:choices.defense": "sum", "param:sim.seed": seed,
             "metric:test_recall_at_20": recall, "metric:test_er_at_5": er},
            {"param:choices.row": "robustness/a_hum", "param:choices.defense": "robustness/hics_q99",
             "param:sim.seed": seed,
             "metric:test_recall_at_20": 0.024, "metric:test_er_at_5": 0.0},
        ]
    return pd.DataFrame(rows)


def test_the_matrix_averages_seeds_and_measures_the_drop_against_no_attack(tmp_path, monkeypatch):
    refused = {("robustness/eb", "krum"): "attack='eb' refused"}
    text, files = matrix.render(runs(), PRESET, Path(config_dir()), tmp_path, lambda preset, axes: refused)
    assert [f.name for f in files] == ["matrix.png", "matrix.csv"] and all(f.stat().st_size for f in files)
    table = pd.read_csv(tmp_path / "matrix.csv").set_index(["row", "defense"])
    assert table.loc[("a_hum", "sum"), "test_er_at_5"] == pytest.approx(0.8)
    baseline = np.mean([0.024, 0.026])  # no attack under the server's sum
    assert table.loc[("a_hum", "sum"), "utility_drop_pct"] == pytest.approx(100 * (1 - 0.019 / baseline))
    assert table.loc[("a_hum", "hics_q99"), "utility_drop_pct"] == pytest.approx(100 * (1 - 0.024 / baseline))
    assert table.loc[("eb", "krum"), "refused"] == "attack='eb' refused" and table.loc[("eb", "krum"), "runs"] == 0
    assert "0.800 ± 0.141 (2)" in text and "n/a" in text
    assert "eb × krum: attack='eb' refused" in text


@pytest.mark.parametrize("preset,plain,refused_rows", [
    (PRESET, "sum", set()), ("robustness/matrix_mf", "mean", set()),
    ("robustness/matrix_fedcl", "mean", {"robustness/eb", "robustness/ra"}),  # they train like a benign client
])
def test_every_cell_of_the_shipped_matrices_is_accepted_before_any_data_is_read(preset, plain, refused_rows,
                                                                                tmp_path, monkeypatch):
    """Every cell runs, or is refused by the declared capabilities with the reason its n/a cell shows. The matrix
    with refusals is checked cell by cell; the others (every cell accepted) row by row under the server's own rule
    and defense by defense under one attack, 14 compositions of their 56."""
    monkeypatch.setenv("FEDRUN_DATA_DIR", str(tmp_path / "no-data-here"))
    axes = matrix.Axes.of(preset, Path(config_dir()))
    assert len(axes.rows) == 7 and axes.columns[0] == plain and "robustness/hics_q99" in axes.columns
    if refused_rows:
        refusals = matrix_refusals(preset, axes)
        assert set(refusals) == {(row, column) for row in refused_rows for column in axes.columns}
    else:
        refusals = {**matrix_refusals(preset, matrix.Axes(axes.rows, axes.columns[:1])),
                    **matrix_refusals(preset, matrix.Axes(["robustness/a_hum"], axes.columns))}
        assert refusals == {}
    assert all("needs no client_step for method=fedcl" in reason for reason in refusals.values())


def test_a_matrix_reports_the_utility_its_preset_names(tmp_path, monkeypatch):
    """MF's matrix measures utility on its validation carve (its test split sits at the floor at 10 epochs)."""
    assert matrix.utility_metric(PRESET, Path(config_dir())) == "test_recall_at_20"
    assert matrix.utility_metric("robustness/matrix_mf", Path(config_dir())) == "valid_recall_at_20"
    frame = runs().rename(columns={"metric:test_recall_at_20": "metric:valid_recall_at_20"})
    text, _ = matrix.render(frame, PRESET, Path(config_dir()), tmp_path, NO_REFUSALS, utility="valid_recall_at_20")
    assert "## valid_recall_at_20 drop against no attack under sum" in text
    with pytest.raises(ConfigError, match="matrix.utility"):  # a name the runs never logged: said, not an empty map
        matrix.render(runs(), PRESET, Path(config_dir()), tmp_path, NO_REFUSALS, utility="valid_recal_at_20")


def test_the_peak_exposure_over_each_run_gets_its_own_panel_and_table(tmp_path, monkeypatch):
    """An attack that exposes its target mid-training and fades shows at its peak, not only at its end."""
    frame = runs()
    frame["metric:test_er_at_5_peak"] = frame["metric:test_er_at_5"].where(frame["metric:test_er_at_5"].isna(), 1.0)
    text, files = matrix.render(frame, PRESET, Path(config_dir()), tmp_path, NO_REFUSALS)
    table = pd.read_csv(tmp_path / "matrix.csv").set_index(["row", "defense"])
    assert table.loc[("a_hum", "sum"), "test_er_at_5_peak"] == 1.0
    assert table.loc[("a_hum", "sum"), "test_er_at_5"] == pytest.approx(0.8)
    assert "## test_er_at_5, peak over each run's evaluations" in text and "1.000 ± 0.000 (2)" in text
    without, _ = matrix.render(runs(), PRESET, Path(config_dir()), tmp_path, NO_REFUSALS)  # runs that never recorded it
    assert "peak over" not in without


def test_the_report_reads_each_exposure_metric_over_the_whole_run(tmp_path):
    from mlflow.tracking import MlflowClient

    from fedrun.app.report import collect

    client = MlflowClient(f"sqlite:///{tmp_path / 'store.db'}")
    exp_id = client.create_experiment("exposure")
    run_id = client.create_run(exp_id).info.run_id
    for step, value in enumerate([0.6, 0.3, 0.0]):  # in at the start, gone by the end
        client.log_metric(run_id, "test_er_at_5", value, step=step)
        client.log_metric(run_id, "test_er_at_5_item7", value, step=step)  # per target: not summarised
    client.log_metric(run_id, "test_recall_at_20", 0.02, step=2)
    (row,) = collect(client, exp_id).to_dict("records")
    assert row["metric:test_er_at_5"] == 0.0
    assert row["metric:test_er_at_5_peak"] == 0.6 and row["metric:test_er_at_5_mean"] == pytest.approx(0.3)
    assert "metric:test_er_at_5_item7_peak" not in row and "metric:test_recall_at_20_peak" not in row


def test_a_run_refused_before_training_does_not_hide_the_matrix(tmp_path, monkeypatch):
    """A refused cell's run logged no params (its preset reads "None"); the report still knows the preset."""
    from fedrun.app import report as cli

    monkeypatch.setattr(cli, "matrix_refusals", lambda preset, axes: {})
    frame = runs().assign(status="FINISHED", reason="", start_time=1, **{"param:choices.experiment": PRESET})
    frame["run_id"] = [f"r{i}" for i in range(len(frame))]
    refused = {"run_id": "refused", "status": "FAILED", "start_time": 2,
               "reason": "ConfigError: attack='eb' is not allowed"}
    frame = pd.concat([frame, pd.DataFrame([refused])], ignore_index=True)
    text, files = cli.render(frame, "matrix", ["test_recall_at_20"], tmp_path)
    assert "## Robustness matrix: test_er_at_5" in text and tmp_path / "matrix.png" in files
    assert "attack='eb' is not allowed" in text  # and the refused run is listed with its reason


def test_one_row_under_two_attacks_is_two_variants_in_the_claims():
    """rCL4FedRec Fig. 4 runs the same row under A-hum and PSMU: each seed once per attack, not twice per row, and
    once both rows ran under both attacks, each variant is paired only with the other row under the same attack."""
    from fedrun.app.report import variant_columns
    from fedrun.report.paper import claim_tests, order_claims

    rows = []
    for seed in (1, 2, 3):
        for attack, er in (("a_hum", 0.0), ("psmu", 0.5)):
            rows.append({"param:choices.dataset": "ml-1m", "param:choices.backbone": "ncf",
                         "param:choices.row": "rcl4fedrec/rcl4fedrec", "param:choices.attack": attack,
                         "param:sim.seed": seed, "metric:test_er_at_5": er + 0.01 * seed})
        rows.append({"param:choices.dataset": "ml-1m", "param:choices.backbone": "ncf",
                     "param:choices.row": "rcl4fedrec/cl4fedrec", "param:choices.attack": "psmu",
                     "param:sim.seed": seed, "metric:test_er_at_5": 1.0})
    done = pd.DataFrame(rows)
    header, claims = order_claims(done, {"claims": ["rcl4fedrec < cl4fedrec"], "metrics": ["test_er_at_5"]},
                                  variant_columns(done))
    assert [c[2] for c in claims] == ["rcl4fedrec (choices.attack=a_hum) < cl4fedrec",  # cl4fedrec's one attack
                                      "rcl4fedrec (choices.attack=psmu) < cl4fedrec"]
    assert all(str(c[3]) == "3" for c in claims)  # three paired seeds each
    both = pd.concat([done, done[done["param:choices.row"] == "rcl4fedrec/cl4fedrec"].assign(
        **{"param:choices.attack": "a_hum", "metric:test_er_at_5": 0.9})], ignore_index=True)
    _, claims = order_claims(both, {"claims": ["rcl4fedrec < cl4fedrec"], "metrics": ["test_er_at_5"]},
                             variant_columns(both))
    assert [c[2] for c in claims] == ["rcl4fedrec (choices.attack=a_hum) < cl4fedrec (choices.attack=a_hum)",
                                      "rcl4fedrec (choices.attack=psmu) < cl4fedrec (choices.attack=psmu)"]
    assert [c[4:6] for c in claims] == [["0.0200", "0.9000"], ["0.5200", "1.0000"]]
    _, tests = claim_tests(both, {"best_row": "rcl4fedrec", "metrics": ["test_er_at_5"]}, variant_columns(both))
    assert [t[2] for t in tests] == ["cl4fedrec (choices.attack=a_hum) vs rcl4fedrec (choices.attack=a_hum)",
                                     "cl4fedrec (choices.attack=psmu) vs rcl4fedrec (choices.attack=psmu)"]


def test_runs_that_did_not_finish_are_listed_once_per_reason():
    """A sweep's refused combinations share one reason: one line with their count and ids, and the run that died
    for another reason keeps a line of its own, in order of first appearance."""
    import pandas as pd

    from fedrun.app.report import unfinished_lines

    refused = "ConfigError: attack='eb' is not allowed"
    failed = pd.DataFrame({"run_id": ["a", "b", "c", "d"], "status": ["FAILED", "KILLED", "FAILED", "FAILED"],
                           "reason": [refused, "abandoned: its process is gone", refused, None]})
    assert unfinished_lines(failed) == [f"- 2 runs FAILED: {refused} (a, c)",
                                        "- b KILLED: abandoned: its process is gone",
                                        "- d FAILED: no reason recorded"]


def test_a_run_stopped_and_resumed_under_new_params_is_listed_as_continued_not_as_a_failure():
    import pandas as pd

    from fedrun.app.report import continued_reasons, unfinished_lines

    frame = pd.DataFrame({"run_id": ["a", "b", "c"], "status": ["KILLED", "FINISHED", "FAILED"],
                          "reason": ["interrupted", "", "diverged"], "resumed_from": ["", "a", ""]})
    failed = frame[frame["status"] != "FINISHED"]
    assert unfinished_lines(continued_reasons(failed, frame)) == [
        "- a KILLED: stopped, then resumed as run b, which carries its results", "- c FAILED: diverged"]
    assert unfinished_lines(continued_reasons(failed, frame.drop(columns="resumed_from"))) == [
        "- a KILLED: interrupted", "- c FAILED: diverged"]


def test_where_a_run_was_recorded_does_not_split_its_row():
    """Two seeds of one setting, one logged to another tracking URI: one row (track.* changes no number)."""
    from fedrun.app.report import group_columns

    runs = pd.DataFrame([{"param:choices.method": "lightfr", "param:sim.seed": "1", "param:method.targets": "code",
                          "param:track.uri": "None"},
                         {"param:choices.method": "lightfr", "param:sim.seed": "2", "param:method.targets": "code",
                          "param:track.uri": "sqlite:////elsewhere/mlflow.db"},
                         {"param:choices.method": "lightfr", "param:sim.seed": "1", "param:method.targets": "scaled",
                          "param:track.uri": "None"}])
    assert group_columns(runs) == ["param:choices.method", "param:method.targets"]
