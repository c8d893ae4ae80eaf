"""The paper scripts run end to end on small real data: a figure preset's sweep is drawn by
scripts/figures/paper_figures.py, and scripts/figures/lightfr_costs.py measures the bytes the methods exchange.
(Timings are never asserted.)"""

from __future__ import annotations

import csv
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from tests.conftest import needs_data

ROOT = Path(__file__).resolve().parents[2]
FEDRUN = shutil.which("fedrun") or str(Path(sys.executable).parent / "fedrun")
pytestmark = [pytest.mark.integration, needs_data]


def script(name: str, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / name), *args], capture_output=True, text=True,
                          timeout=timeout)


def test_figure_preset_sweep_is_drawn(tmp_path):
    sweep = subprocess.run([FEDRUN, "-m", "+experiment=lightfr/fig4", "setup=lightfr/filmtrust", "backbone.dim=8,16",
                            "sim.seed=1", "sim.max_rounds=1", "sim.progress=false"],
                           capture_output=True, text=True, timeout=600)
    assert sweep.returncode == 0, sweep.stderr[-3000:]
    drawn = script("figures/paper_figures.py", "lightfr/fig4", "--out", str(tmp_path))
    assert drawn.returncode == 0, drawn.stderr[-3000:]
    assert (tmp_path / "fig4.png").stat().st_size > 0
    with open(tmp_path / "fig4.csv") as handle:
        points = list(csv.DictReader(handle))
    assert sorted(p["x"] for p in points) == ["16", "8"]  # one point per swept code length
    assert all(p["dataset"] == "filmtrust" and p["test_hr_at_10_count"] == "1" for p in points)  # one seed each


def paper_figures():
    """The figure command's module (``python -m fedrun.app.paper_figures``)."""
    from fedrun.app import paper_figures as module

    return module


def test_figure_script_names_a_missing_preset():
    figures = paper_figures()
    with pytest.raises(SystemExit, match="no figure preset 'lightfr/fig99'"):
        figures.figure_settings("lightfr/fig99")
    with pytest.raises(SystemExit, match="not a figure preset"):
        figures.figure_settings("lightfr/table5")
    assert figures.figure_settings("lightfr/fig6") == ("sim.clients_per_round", None, figures.METRICS)
    assert figures.figure_settings("fedcl/fig6") == ("privacy.epsilon", "4.0", figures.METRICS)
    assert figures.figure_settings("rcl4fedrec/fig5") == ("method.synthetic_users", "60",
                                                          ("test_recall_at_20", "test_ndcg_at_20"))


def test_paired_comparison_against_the_papers_setting():
    """Per seed both ran: x − reference, and the paired t-test (the reference matched as a number)."""
    figures = paper_figures()
    hr = {("4", "1"): .10, ("4", "2"): .12, ("4", "3"): .11, ("8", "1"): .12, ("8", "2"): .13, ("8", "3"): .14,
          ("1", "1"): .09}
    runs = pd.DataFrame([{"status": "FINISHED", "param:privacy.epsilon": eps, "param:sim.seed": seed,
                          "param:choices.backbone": "fedcl/gru4rec", "param:choices.dataset": "ml-1m",
                          "metric:test_hr_at_10": value, "metric:test_ndcg_at_10": value / 2}
                         for (eps, seed), value in hr.items()])
    table = figures.paired(runs, "privacy.epsilon", "4.0").set_index("x")
    assert table.loc["8", "seeds"] == 3 and table.loc["8", "test_hr_at_10_diff"] == pytest.approx(.02)
    expected = stats.ttest_rel([.12, .13, .14], [.10, .12, .11]).pvalue
    assert table.loc["8", "test_hr_at_10_p"] == pytest.approx(expected)
    assert table.loc["1", "seeds"] == 1 and np.isnan(table.loc["1", "test_hr_at_10_p"])  # one seed: no test


def test_lightfr_costs_count_the_exchanged_bytes(tmp_path):
    result = script("figures/lightfr_costs.py", "--setup", "lightfr/filmtrust", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    with open(tmp_path / "costs-filmtrust.csv") as handle:
        rows = {r["row"]: r for r in csv.DictReader(handle)}
    m = int(rows["lightfr"]["items"])
    assert float(rows["lightfr"]["storage_bytes"]) == (m + 1) * 64 / 8  # packed 64-bit codes, user + items
    assert float(rows["lightfr"]["download_bytes"]) == m * 64 / 8  # the packed item matrix
    assert float(rows["fcf"]["download_bytes"]) == float(rows["fcf"]["upload_bytes"]) == m * 32 * 4  # dense float32
    assert float(rows["lightfr"]["paper_storage_bytes"]) == (1 + m) * 64  # Table 6 as printed: (1 + m) × f
    assert "lightfr_share_storage" in (tmp_path / "costs-filmtrust.md").read_text()
    assert (tmp_path / "costs-filmtrust.png").stat().st_size > 0  # Fig. 3


@pytest.mark.parametrize("kind,rule", [("clients", "Eq. 19"), ("items", "Eq. 21")])
def test_lightfr_cold_start_codes_beat_random_codes(kind, rule):
    result = script("investigations/lightfr_cold_start.py", "--setup", "lightfr/filmtrust", "--kind", kind,
                    "--cold", "0.2", "--seeds", "1", "--rounds", "10")
    assert result.returncode == 0, result.stderr[-3000:]
    rows = {line.split("|")[1].strip(): float(line.split("|")[2].split("±")[0])
            for line in result.stdout.splitlines() if line.startswith(("| cold", "| trained"))}
    assert set(rows) == {f"cold {kind}, {rule} codes", f"cold {kind}, random codes", f"trained {kind}"}
    assert rows[f"cold {kind}, {rule} codes"] > rows[f"cold {kind}, random codes"] + 0.1  # HR@10


def test_item_embeddings_draws_fig2_from_checkpoints(tmp_path):
    """scripts/figures/item_embeddings.py projects each checkpoint's item table and reports Eq. 12 beside it."""
    data = "dataset=synthetic dataset.n_users=60 dataset.n_items=80 dataset.mean_length=8 sim.clients_per_round=16"
    for name in ("plain", "cl"):
        method = ["method=fedavg"] if name == "plain" else ["method=cl4fedrec", "backbone=ncf",
                                                             "method.synthetic_users=4", "method.synthetic_items=5"]
        out = subprocess.run([FEDRUN, *data.split(), *method, "track=none", "sim.progress=false", "sim.epochs=1",
                              "sim.checkpoint_every=1", f"hydra.run.dir={tmp_path / name}"],
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
    done = script("figures/item_embeddings.py", f"A={tmp_path / 'plain' / 'checkpoint.pt'}",
                  f"B={tmp_path / 'cl' / 'checkpoint.pt'}", "--data", data, "--hot", "10",
                  "--out", str(tmp_path / "fig2"))
    assert done.returncode == 0, done.stderr
    rows = list(csv.DictReader(open(tmp_path / "fig2" / "fig2.csv")))
    assert [r["model"] for r in rows] == ["A", "B"] and all(0 < float(r["item_uniformity"]) for r in rows)
    assert (tmp_path / "fig2" / "fig2.png").stat().st_size > 1000
