"""Privacy, utility and measured leakage in one picture per method family (issue #65): for each LDP budget, the test
utility of the audited runs and what the honest-but-curious server's attack recovered in the same runs (``audit=server``
changes no training number, so both come from one run), each beside its baseline.

Panels (each family's protected upload and the attack that reads it):
  - **FedCL** (GRU4Rec, ml-100k): LDP ε on the uploaded user embedding; the server ranks the catalogue with it and
    guesses the held-out next item (recall@20 against popularity and chance);
  - **FedAvg-MF** (ml-100k, 20 epochs, the privacy-utility runs' budget): LDP ε on every uploaded item row; the
    server reads each row's membership from its sign (attack 4's precision against the ids alone);
  - **FedGNN** (Yelp, Table 4's setting): the Laplace scale λ of the shared embedding, at ε = 2δ/λ per coordinate;
    the server ranks the catalogue with the shared vector and guesses the training items.
ε = ∞ is the run without noise (FedGNN: the L∞ clip alone, λ = 1e-6), drawn at the right edge.

    python -m fedrun.app.privacy_leakage --ledger docs/results/privacy-leakage/privacy-leakage-runs.csv \
        --ledger docs/results/privacy-leakage/privacy-membership-runs.csv \
        --ledger docs/results/privacy-leakage/privacy-leakage-graph-runs.csv --out docs/results/privacy-leakage
→ ``<out>/privacy-utility-leakage.png`` and ``<out>/privacy-utility-leakage.md``.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

from fedrun.app.privacy_utility import epsilon
from fedrun.app.report import drop_reruns
from fedrun.report import ledger
from fedrun.report.table import markdown, mean_std

CLEAR_SCALE = 1e-6  # FedGNN's λ for "no noise": its privacy=none also drops the clip, and then diverges


@dataclass(frozen=True)
class Panel:
    title: str
    select: Callable[[pd.DataFrame], pd.Series]  # the family's runs in the frame
    utility: str  # test metric
    leakage: str  # audit metric: what the attack recovered
    leakage_label: str
    baselines: tuple[tuple[str, str], ...]  # (audit metric, label): what a guess without the upload gets


def param(frame: pd.DataFrame, name: str) -> pd.Series:
    return frame.get(f"param:{name}", pd.Series("", index=frame.index)).astype(str)


def is_clear(frame: pd.DataFrame) -> pd.Series:
    return param(frame, "choices.privacy") == "none"


PANELS = (
    Panel("FedCL (GRU4Rec), ml-100k: LDP on the shared user embedding",
          lambda f: (param(f, "choices.method") == "fedcl") & (param(f, "choices.dataset") == "ml-100k"),
          "ndcg_at_10", "audit_shared_heldout_recall_at_20", "held-out item guessed from the vector (recall@20)",
          (("audit_shared_heldout_popularity_recall_at_20", "popularity"), ("audit_shared_random_recall_at_20",
                                                                             "random"))),
    Panel("FedAvg-MF, ml-100k, 20 epochs: LDP on the uploaded item rows",
          lambda f: ((param(f, "choices.method") == "fedavg") & (param(f, "choices.backbone") == "mf")
                     & (param(f, "sim.epochs") == "20")
                     & (is_clear(f) | param(f, "privacy.targets").str.contains("item_rows"))
                     & f.get("metric:audit_sign_precision", pd.Series(index=f.index, dtype=float)).notna()),
          "ndcg_at_10", "audit_sign_precision", "items told from negatives by the rows' signs (precision)",
          (("audit_round_precision", "ids alone"),)),
    Panel("FedGNN, Yelp (Table 4's setting): LDP λ on the shared embedding",
          lambda f: (param(f, "choices.row") == "perfedrecpp/fedgnn") & f.get(
              "metric:audit_shared_recall_at_20", pd.Series(index=f.index, dtype=float)).notna(),
          "recall_at_20", "audit_shared_recall_at_20", "training items guessed from the vector (recall@20)",
          (("audit_shared_popularity_recall_at_20", "popularity"),)),
)


def budget(row: pd.Series) -> float:
    """ε of the run's upload (per coordinate where λ is set); ∞ without noise, or at the clip-only λ."""
    if pd.to_numeric(row.get("param:privacy.scale"), errors="coerce") == CLEAR_SCALE:
        return math.inf
    return epsilon(row)[0]


def points(frame: pd.DataFrame, panel: Panel) -> pd.DataFrame:
    """One row per ε: utility, leakage and baselines, mean and std over the finished seeds."""
    runs = frame[panel.select(frame) & (frame["status"] == "FINISHED")].copy()
    if runs.empty:
        return pd.DataFrame()
    runs["epsilon"] = [budget(row) for _, row in runs.iterrows()]
    columns = [f"metric:test_{panel.utility}", f"metric:{panel.leakage}",
               *(f"metric:{metric}" for metric, _ in panel.baselines)]
    for column in columns:
        if column not in runs:
            runs[column] = float("nan")
    grouped = runs.groupby("epsilon")[columns]
    out = grouped.mean().add_suffix(" mean").join(grouped.std().add_suffix(" std"))
    out["seeds"] = grouped.size()
    return out.reset_index().sort_values("epsilon")


def table(frame: pd.DataFrame, panel: Panel) -> str:
    found = points(frame, panel)
    if found.empty:
        return ""
    header = ["ε", f"test {panel.utility}", panel.leakage_label, *(label for _, label in panel.baselines), "seeds"]
    rows = []
    for _, point in found.iterrows():
        cells = ["∞ (no noise)" if math.isinf(point["epsilon"]) else f"{point['epsilon']:g}"]
        for column in (f"metric:test_{panel.utility}", f"metric:{panel.leakage}"):
            cells.append(mean_std(point[column + " mean"], point[column + " std"], int(point["seeds"])))
        cells += [f"{point[f'metric:{metric} mean']:.4f}" for metric, _ in panel.baselines]
        rows.append([*cells, str(int(point["seeds"]))])
    return f"### {panel.title}\n\n{markdown(header, rows)}\n"


def draw(frame: pd.DataFrame, out: Path) -> Path:
    figure, axes = plt.subplots(1, len(PANELS), figsize=(6 * len(PANELS), 4.2))
    for axis, panel in zip(axes, PANELS):
        found = points(frame, panel)
        axis.set_title(panel.title, fontsize=9)
        if found.empty:
            continue
        finite = found[~found["epsilon"].isin([math.inf])]
        edge = (finite["epsilon"].max() * 4) if len(finite) else 1.0
        x = found["epsilon"].where(~found["epsilon"].isin([math.inf]), edge)
        column = f"metric:test_{panel.utility}"
        axis.errorbar(x, found[column + " mean"], yerr=found[column + " std"].fillna(0), color="tab:blue",
                      marker="o", label=f"test {panel.utility} (utility)")
        axis.set_xscale("log")
        unit = "ε per coordinate" if "λ" in panel.title else "ε per upload"
        axis.set_xlabel(f"{unit}  (right edge: no noise)")
        axis.set_ylabel(f"test {panel.utility}", color="tab:blue")
        leak = axis.twinx()
        column = f"metric:{panel.leakage}"
        leak.errorbar(x, found[column + " mean"], yerr=found[column + " std"].fillna(0), color="tab:red",
                      marker="s", label=panel.leakage_label)
        for (metric, label), style in zip(panel.baselines, (":", "--")):
            leak.plot(x, found[f"metric:{metric} mean"], color="tab:red", linestyle=style, alpha=0.6,
                      label=f"{label} (baseline)")
        leak.set_ylabel("leakage", color="tab:red")
        leak.set_ylim(bottom=0)
        lines = axis.get_legend_handles_labels()[0] + leak.get_legend_handles_labels()[0]
        labels = axis.get_legend_handles_labels()[1] + leak.get_legend_handles_labels()[1]
        axis.legend(lines, labels, fontsize=7, loc="best", framealpha=0.6)
    figure.tight_layout()
    path = out / "privacy-utility-leakage.png"
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ledger", type=Path, action="append", required=True, help="audited runs (repeatable)")
    parser.add_argument("--out", type=Path, default=Path("docs/results/privacy-leakage"))
    args = parser.parse_args(argv)
    frame, _ = drop_reruns(pd.concat([ledger.read(path) for path in args.ledger], ignore_index=True))
    args.out.mkdir(parents=True, exist_ok=True)
    text = "# Privacy, utility and measured leakage (mean ± std over seeds)\n\n" + "\n".join(
        table(frame, panel) for panel in PANELS)
    (args.out / "privacy-utility-leakage.md").write_text(text)
    print(text)
    print(f"written: {draw(frame, args.out)}, {args.out / 'privacy-utility-leakage.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
