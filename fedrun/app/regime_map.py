"""Where each robust rule breaks: the regime map of ``fedrun -m +experiment=robustness/regimes`` (issue #62). One
cell per (attack, share of malicious clients, negatives per positive, rule): the target's final and peak ER@5 over
the seeds, and the attackers' share of the target row's uploads in the rounds they join (the weight a per-row rule
sees) — a CSV, a Markdown table per attack and the report's heatmaps (final and peak ER@5) per attack.

    python -m fedrun.app.regime_map [--experiment robustness-regimes] [--out docs/reproductions/attacks/regimes]
        [--merge]

``--merge`` keeps the cells of the committed table (``<out>/<experiment>.csv``) that the store has no run for: a
slice whose cells ran on several machines, or in sessions whose stores did not survive, is one table. Only a
one-seed table can be merged, since a mean over seeds cannot be split back into its runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd
from mlflow.tracking import MlflowClient

from fedrun.report.matrix import Axes, heatmap
from fedrun.report.table import markdown
from fedrun.store import metric_names
from fedrun.store.runs import default_uri

EXPOSURE, SHARE = "test_er_at_5", "target_share_malicious"
CELL = ["attack", "fraction", "negatives", "defense"]


def cells(client: MlflowClient, experiment_id: str) -> pd.DataFrame:
    """One row per finished run: its cell (``CELL``), seed, final and peak ER@5, and the mean attackers' share of
    the target row's uploads over the rounds they joined (0 when they never uploaded it)."""
    rows = []
    for run in client.search_runs([experiment_id], "attributes.status = 'FINISHED'", max_results=10_000):
        params, tags = run.data.params, run.data.tags
        exposure = [m.value for m in metric_names.history(client, run, EXPOSURE)]
        joined = [m.value for m in metric_names.history(client, run, SHARE) if m.value > 0]
        if not exposure:
            continue
        final = metric_names.run_metrics(run).get(EXPOSURE, exposure[-1])
        rows.append({"attack": tags.get("fedrun.attack", "none"), "fraction": float(params["attack.fraction"]),
                     "negatives": int(params["method.num_negatives"]), "defense": tags.get("fedrun.defense", ""),
                     "seed": int(params.get("sim.seed", 0)), "final": final,
                     "peak": max(exposure), "share": sum(joined) / len(joined) if joined else 0.0})
    return pd.DataFrame(rows)


def kept_cells(earlier: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """The cells of an earlier one-seed table that ``runs`` lacks, as runs of the seed ``runs`` holds (a one-seed
    table's cell is its one run). Refused by name when either side holds more than one seed."""
    seeds = runs["seed"].unique()
    if len(seeds) != 1:
        raise SystemExit(f"--merge: the store holds seeds {sorted(seeds.tolist())}; only a one-seed slice merges")
    several = earlier[earlier["seeds"] != 1]
    if not several.empty:
        cell = several.iloc[0]
        raise SystemExit(f"--merge: the committed cell {tuple(cell[CELL])} is a mean over {cell['seeds']} seeds; "
                         "only a one-seed table merges")
    ran = set(runs[CELL].itertuples(index=False, name=None))
    missing = [key not in ran for key in earlier[CELL].itertuples(index=False, name=None)]
    kept = earlier[missing].drop(columns="seeds").assign(seed=int(seeds[0]))
    return kept[list(runs.columns)]


def regime_table(runs: pd.DataFrame) -> pd.DataFrame:
    """The cells' means over seeds (and how many seeds each has)."""
    grouped = runs.groupby(CELL)
    table = grouped[["final", "peak", "share"]].mean()
    table["seeds"] = grouped["seed"].nunique()
    return table.reset_index().sort_values(CELL)


def attack_markdown(table: pd.DataFrame, attack: str) -> str:
    """Rows (share of malicious clients, negatives) × columns (rule): final ER@5 (peak) and the attackers' share."""
    part = table[table["attack"] == attack]
    defenses = sorted(part["defense"].unique())
    rows = []
    for (fraction, negatives), line in part.groupby(["fraction", "negatives"]):
        by_rule = {r.defense: f"{r.final:.3f} ({r.peak:.3f})" for r in line.itertuples()}
        share = line["share"].mean()
        rows.append([f"{fraction:.1%}", str(negatives), f"{share:.3f}", *[by_rule.get(d, "") for d in defenses]])
    return markdown(["malicious", "negatives", "attackers' share of target uploads", *defenses], rows)


def regime_label(fraction: float, negatives: int) -> str:
    return f"{fraction:.1%}, {negatives} neg."


def draw(runs: pd.DataFrame, attack: str, path: Path) -> None:
    """The report's heatmaps (``fedrun.report.matrix.heatmap``) with regimes as rows and rules as columns: final and
    peak ER@5, each cell the mean over its seeds."""
    part = runs[runs["attack"] == attack].sort_values(["fraction", "negatives"])
    regimes = part[["fraction", "negatives"]].drop_duplicates()
    axes = Axes([regime_label(f, n) for f, n in regimes.itertuples(index=False)], sorted(part["defense"].unique()))
    groups = part.groupby(["fraction", "negatives", "defense"])
    panels = [(f"{name} ER@5", {(regime_label(f, n), d): group[name].to_numpy() for (f, n, d), group in groups},
               "Reds", (0.0, 1.0), ".2f") for name in ("final", "peak")]
    heatmap(path, panels, {}, axes, f"{attack}: ER@5 by share of malicious clients, negatives and rule")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiment", default="robustness-regimes")
    parser.add_argument("--uri", default=None)
    parser.add_argument("--out", default="docs/reproductions/attacks/regimes")
    parser.add_argument("--merge", action="store_true",
                        help="keep the committed table's cells that the store has no run for (one-seed slices)")
    args = parser.parse_args()
    client = MlflowClient(args.uri or default_uri())
    experiment = client.get_experiment_by_name(args.experiment)
    if experiment is None:
        raise SystemExit(f"no experiment named {args.experiment!r}: run its preset first")
    runs = cells(client, experiment.experiment_id)
    if runs.empty:
        raise SystemExit(f"{args.experiment}: no finished run has a history of {EXPOSURE}")
    out = Path(args.out)
    if args.merge and (out / f"{args.experiment}.csv").exists():
        kept = kept_cells(pd.read_csv(out / f"{args.experiment}.csv"), runs)
        print(f"--merge: kept {len(kept)} committed cells the store has no run for")
        runs = pd.concat([runs, kept], ignore_index=True)
    table = regime_table(runs)
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / f"{args.experiment}.csv", index=False)
    texts = []
    for attack in sorted(table["attack"].unique()):
        draw(runs, attack, out / f"{args.experiment}-{attack}.png")
        texts.append(f"### {attack}: final ER@5 (peak)\n\n{attack_markdown(table, attack)}\n")
    (out / f"{args.experiment}.md").write_text("\n".join(texts))
    print("\n".join(texts))


if __name__ == "__main__":
    main()
