"""Where each rule breaks over the regime map's seeds (fedrun.app.breaking_points): the smallest attacker share of
the target row's uploads whose cell let the target through, the largest share that held, read from the slices'
CSVs by their names (backbone, attack, seed)."""

from __future__ import annotations

import math

import pandas as pd

from fedrun.app.breaking_points import breaking_points, main, slices

HEADER = "attack,fraction,negatives,defense,final,peak,share,seeds\n"


def write_slice(folder, name: str, rows: list[tuple]) -> None:
    lines = [f"a_hum,{f},{n},{d},{final},{final},{share},1" for f, n, d, final, share in rows]
    (folder / f"{name}.csv").write_text(HEADER + "\n".join(lines) + "\n")


def test_the_breaking_share_is_the_smallest_share_that_broke_and_a_larger_one_that_held_is_named(tmp_path):
    write_slice(tmp_path, "robustness-regimes-ahum-s2", [
        (0.01, 1, "median", 0.0, 0.24), (0.05, 4, "median", 1.0, 0.28), (0.05, 1, "median", 0.2, 0.58),
        (0.1, 1, "median", 1.0, 0.73), (0.1, 1, "krum", 0.1, 0.73)])
    write_slice(tmp_path, "robustness-regimes-mf-ahum-s1", [(0.1, 1, "median", 0.0, 0.7)])
    (tmp_path / "robustness-regimes-ahum-s2-runs.csv").write_text("not a slice\n")  # a ledger: not read
    cells = slices(tmp_path)
    assert set(zip(cells["backbone"], cells["seed"])) == {("NCF", 2), ("MF", 1)}
    points = breaking_points(cells).set_index(["defense", "backbone"])
    median = points.loc[("median", "NCF")]
    assert (median["breaks_at_share"], median["breaks_at_fraction"], median["breaks_at_negatives"]) == (0.28, 0.05, 4)
    assert median["held_up_to_share"] == 0.58 and median["cells"] == 4
    assert math.isnan(points.loc[("krum", "NCF")]["breaks_at_share"])  # held everywhere
    assert math.isnan(points.loc[("median", "MF")]["breaks_at_share"])


def test_the_table_shows_each_seed_and_marks_a_partial_slice(tmp_path, capsys):
    write_slice(tmp_path, "robustness-regimes-ahum-s1", [(0.05, 4, "median", 1.0, 0.27)])
    assert main(["--folder", str(tmp_path)]) == 0
    text = (tmp_path / "breaking-points.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| median"))
    assert [cell.strip() for cell in row.split("|")[1:-1]] == ["median", "NCF", "s1: 0.27 (5 %, 4) [1 of 8 cells]"]
    assert len(pd.read_csv(tmp_path / "breaking-points.csv")) == 1
