"""Where each rule breaks, over every seed of the regime map (issue #62): from the committed per-slice CSVs that
``fedrun.app.regime_map`` writes (one slice = one backbone × attack × seed, named
``robustness-regimes[-mf]-<attack>-s<seed>.csv``), for each rule, backbone, attack and seed, the smallest share of the
target row's uploads held by attackers at which the rule lets the target through (final ER@5 above ``--threshold``),
and the largest share at which it still held. A held share above the breaking one marks a rule that is not monotone
in the share on that seed (HiCS's 5 % cells).

    python -m fedrun.app.breaking_points [--folder docs/reproductions/attacks/regimes] [--threshold 0.5]
        [--out docs/reproductions/attacks/regimes/breaking-points]

Writes ``<out>.csv`` (one row per rule × backbone × attack × seed) and ``<out>.md`` (one row per rule and backbone,
one column per attack: the breaking share of each seed, or "holds" where no cell broke).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pandas as pd

from fedrun.report.table import markdown

SLICE = re.compile(r"^robustness-regimes(?P<mf>-mf)?-(?P<attack>[a-z_]+)-s(?P<seed>\d+)$")
# each rule's display name; the undefended rule is the NCF slices' sum and the MF slices' mean, and each backbone
# has its own norm bound (τ at the 99th percentile of its benign target-row uploads: 1e-5 on NCF, .17 on MF)
RULES = {"sum": "none (sum)", "mean": "none (mean)", "median": "median", "trimmed_mean": "trimmed mean",
         "krum": "Krum", "multi_krum": "Multi-Krum", "robustness/norm_bound_tau1e-5": "norm bound (τ 1e-5)",
         "robustness/norm_bound_mf": "norm bound (τ .17)", "robustness/hics_q99": "HiCS q99"}
ATTACKS = {"ahum": "A-hum", "ara": "A-ra", "psmu": "PSMU", "fedrecattack": "FedRecAttack"}


def slices(folder: Path) -> pd.DataFrame:
    """Every committed slice's cells, with its backbone, attack (the slice's name) and seed."""
    frames = []
    for path in sorted(folder.glob("robustness-regimes*-s*.csv")):
        named = SLICE.match(path.stem)
        if named is None:
            continue
        cells = pd.read_csv(path)
        cells["backbone"] = "MF" if named["mf"] else "NCF"
        cells["slice_attack"], cells["seed"] = named["attack"], int(named["seed"])
        frames.append(cells)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def breaking_points(cells: pd.DataFrame, threshold: float = 0.5) -> pd.DataFrame:
    """One row per rule × backbone × attack × seed: the cells run, the smallest breaking share (NaN: it held in every
    cell) with its fraction and negatives, and the largest share at which the rule held."""
    rows = []
    for (defense, backbone, attack, seed), group in cells.groupby(["defense", "backbone", "slice_attack", "seed"]):
        broke, held = group[group["final"] > threshold], group[group["final"] <= threshold]
        first = broke.loc[broke["share"].idxmin()] if len(broke) else None
        rows.append({"defense": defense, "backbone": backbone, "attack": attack, "seed": seed, "cells": len(group),
                     "breaks_at_share": first["share"] if first is not None else float("nan"),
                     "breaks_at_fraction": first["fraction"] if first is not None else float("nan"),
                     "breaks_at_negatives": first["negatives"] if first is not None else float("nan"),
                     "held_up_to_share": held["share"].max() if len(held) else float("nan")})
    return pd.DataFrame(rows)


def _cell(points: pd.DataFrame) -> str:
    """One attack's breaking shares over its seeds: ``.08 (1 %, 4) · .08 · .08``, with "holds" where nothing broke
    and a mark where the rule held above its breaking share; how many cells a partial slice has."""
    parts = []
    for row in points.sort_values("seed").itertuples():
        if pd.isna(row.breaks_at_share):
            text = "holds"
        else:
            text = f"{row.breaks_at_share:.2f} ({row.breaks_at_fraction * 100:g} %, {int(row.breaks_at_negatives)})"
            if row.held_up_to_share > row.breaks_at_share:
                text += f", held at {row.held_up_to_share:.2f}"
        parts.append(f"s{row.seed}: {text}" + ("" if row.cells == 8 else f" [{row.cells} of 8 cells]"))
    return "; ".join(parts)


def render(points: pd.DataFrame, threshold: float) -> str:
    attacks = [a for a in ATTACKS if a in set(points["attack"])]
    header = ["rule", "backbone", *(ATTACKS[a] for a in attacks)]
    body = []
    for defense, name in RULES.items():
        for backbone in ("NCF", "MF"):
            mine = points[(points["defense"] == defense) & (points["backbone"] == backbone)]
            if len(mine):
                body.append([name, backbone, *(_cell(mine[mine["attack"] == a]) or "—" for a in attacks)])
    return (f"Where each rule first lets the target through (final ER@5 > {threshold:g}): per seed, the attackers' "
            "share of the target row's uploads in the first cell that broke (its malicious fraction and negatives "
            "per positive), \"held at\" where a cell with a larger share held, \"holds\" where no cell broke; "
            "generated by `python -m fedrun.app.breaking_points` from the slices' CSVs.\n\n"
            + markdown(header, body) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=Path, default=Path("docs/reproductions/attacks/regimes"))
    parser.add_argument("--threshold", type=float, default=0.5)
    parser.add_argument("--out", type=Path, default=None, help="default: <folder>/breaking-points")
    args = parser.parse_args(argv)
    cells = slices(args.folder)
    if cells.empty:
        parser.error(f"no slice CSV (robustness-regimes[-mf]-<attack>-s<seed>.csv) in {args.folder}")
    points = breaking_points(cells, args.threshold)
    out = args.out or args.folder / "breaking-points"
    points.to_csv(out.with_suffix(".csv"), index=False)
    text = render(points, args.threshold)
    out.with_suffix(".md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
