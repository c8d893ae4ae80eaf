"""The report's table as numbers and as LaTeX: one run says n = 1, never a spread of 0; the CSV holds mean, std, n,
floor and the ratio to it as numbers; the LaTeX table is booktabs with escaped names and the floor as a dagger."""

import math

import pandas as pd
import pytest

from fedrun.app.report import latex_table, metric_label, numeric_table, summarize
from fedrun.report.table import latex, latex_escape, spread


def runs() -> pd.DataFrame:
    """Two rows: fedcl_x with three seeds (above its floor .10), fedavg with one seed (under it)."""
    return pd.DataFrame({
        "status": ["FINISHED"] * 4 + ["FAILED"], "param:choices.method": ["fedcl_x"] * 3 + ["fedavg"] * 2,
        "param:sim.seed": ["1", "2", "3", "1", "2"],
        "metric:test_recall_at_20": [0.20, 0.22, 0.24, 0.05, None],
        "metric:floor_recall_at_20": [0.10] * 5,
        "metric:test_rmse": [0.9, 1.0, 1.1, None, None]})


def test_spread_writes_one_run_as_n_1_not_a_zero_spread():
    assert spread([0.25]) == "0.2500 (n = 1)"
    assert spread([0.2, 0.4, float("nan")]) == f"0.3000 ± {math.sqrt(0.02):.4f}"
    assert spread([]) == "" and spread([float("nan")]) == ""


def test_text_table_marks_single_runs_and_floors():
    header, rows = summarize(runs(), ["test_recall_at_20", "test_rmse"])
    assert header == ["method", "runs", "test_recall_at_20", "test_rmse"]
    by_method = {row[0]: row for row in rows}
    assert by_method["fedavg"][1:] == ["1", "0.0500 (n = 1) (≤ floor 0.1000)", ""]
    assert by_method["fedcl_x"][1:] == ["3", "0.2200 ± 0.0200", "1.0000 ± 0.1000"]


def test_numeric_table_holds_numbers():
    table = numeric_table(runs(), ["test_recall_at_20", "test_rmse"])
    fedcl = table.set_index("method").loc["fedcl_x"]
    assert fedcl["test_recall_at_20"] == pytest.approx(0.22) and fedcl["test_recall_at_20_std"] == pytest.approx(0.02)
    assert fedcl["test_recall_at_20_n"] == 3 and fedcl["test_recall_at_20_to_floor"] == pytest.approx(2.2)
    fedavg = table.set_index("method").loc["fedavg"]
    assert math.isnan(fedavg["test_recall_at_20_std"]) and fedavg["test_recall_at_20_n"] == 1  # no measured spread
    assert fedavg["test_rmse_n"] == 0 and math.isnan(fedavg["test_rmse"])
    assert math.isnan(fedcl["test_rmse_floor"])  # no floor logged for it
    assert all(pd.api.types.is_numeric_dtype(table[c]) for c in table.columns if c.startswith("test_"))


def test_latex_table_is_booktabs_with_escaped_names_and_a_dagger_for_the_floor():
    text = latex_table(runs(), ["test_recall_at_20"], "my_exp")
    assert r"\toprule" in text and r"\midrule" in text and r"\bottomrule" in text
    assert r"\caption{my\_exp: mean $\pm$ std over seeds}" in text
    assert r"\begin{tabular}{lrr}" in text  # text column left, numbers right
    assert r"fedcl\_x & 3 & 0.2200 $\pm$ 0.0200 \\" in text
    assert r"fedavg & 1 & 0.0500$^\dagger$ \\" in text  # one run: the value alone
    assert "popularity floor" in text


def test_latex_helpers():
    assert latex_escape("a_b & 50% #1 {x} $") == r"a\_b \& 50\% \#1 \{x\} \$"
    assert latex(["m", "v"], [["a", ""], ["b", "1.0"]]).count(r"\\") == 3  # header + 2 rows
    assert metric_label("test_recall_at_20") == "Recall@20" and metric_label("test_rmse") == "RMSE"
    assert metric_label("best_valid_ndcg_at_10") == "NDCG@10"
