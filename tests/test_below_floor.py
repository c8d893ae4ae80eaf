"""The generated list of result rows at or below their floor (issue #63): current with the committed ledgers, every
row explained; and the generator's listing, matching and staleness on a small repository of its own."""

from __future__ import annotations

from pathlib import Path

from fedrun.app import below_floor

ROOT = Path(__file__).resolve().parents[1]


def test_the_committed_list_is_current_and_every_row_in_it_is_explained():
    assert below_floor.check(ROOT) == []


def write_ledger(path: Path, rows: list[tuple[str, int, float]]) -> None:
    """rows: (method, seed, test HR@10) with a popularity floor of .05."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ["run_id,status,start_time,reason,param:choices.method,param:choices.backbone,param:choices.dataset,"
             "param:sim.seed,metric:test_hr_at_10,metric:floor_hr_at_10"]
    lines += [f"{m}{s},FINISHED,{s},,{m},mf,ml-100k,{s},{hr},0.05" for m, s, hr in rows]
    path.write_text("\n".join(lines) + "\n")


def test_rows_at_the_floor_are_listed_with_their_explanation_and_a_changed_ledger_makes_the_list_stale(tmp_path):
    ledger = tmp_path / "docs/reproductions/toy/toy-runs.csv"
    write_ledger(ledger, [("good", 1, 0.09), ("good", 2, 0.08), ("poor", 1, 0.04), ("poor", 2, 0.05),
                          ("lost", 1, 0.01)])
    (tmp_path / "docs/results").mkdir(parents=True)
    (tmp_path / below_floor.EXPLAINED).write_text(
        "- ledger: docs/reproductions/toy/*-runs.csv\n  where: {method: poor}\n  see: docs/toy.md\n  why: measured\n")
    assert below_floor.main(["--root", str(tmp_path)]) == 1  # "lost" has no explanation
    text = (tmp_path / below_floor.LISTING).read_text()
    assert "3 rows" not in text and "2 rows." in text
    assert "method poor" in text and "[docs/toy.md](../../docs/toy.md): measured" in text
    assert "method lost" in text and below_floor.UNEXPLAINED in text and "method good" not in text
    assert any("no explanation" in p for p in below_floor.check(tmp_path))
    (tmp_path / below_floor.EXPLAINED).write_text(
        "- ledger: docs/reproductions/toy/*-runs.csv\n  see: docs/toy.md\n  why: measured\n")
    assert below_floor.main(["--root", str(tmp_path)]) == 0 and below_floor.check(tmp_path) == []
    write_ledger(ledger, [("poor", 1, 0.04)])
    assert any("stale" in p for p in below_floor.check(tmp_path))
