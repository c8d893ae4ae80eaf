"""PerFedRec++ Figures 3 and 4 from a preset's runs (``+experiment=perfedrecpp/table4`` or ``fig3``): the
training loss and the validation NDCG@20 per epoch, mean over seeds, one line per row — and the claim
the figures carry, tested over paired seeds: pre-training reaches its best validation NDCG@20 in fewer
epochs (paper, Yelp: ≈250 vs ≈300 rounds of 256 clients).

    python -m fedrun.app.perfedrecpp_curves [--experiment perfedrecpp-table4] [--out \
        docs/reproductions/perfedrecpp]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
from mlflow.tracking import MlflowClient

from fedrun.report.table import markdown
from fedrun.store import metric_names
from fedrun.store.runs import default_uri

VALID, LOSS = "valid_ndcg_at_20", "train_loss"


def histories(client: MlflowClient, experiment: str) -> pd.DataFrame:
    """One row per (finished run, metric, epoch): row, seed, metric, epoch, value (the loss averaged per epoch)."""
    found = client.get_experiment_by_name(experiment)
    if found is None:
        raise SystemExit(f"no MLflow experiment {experiment!r} at {default_uri()}")
    rows = []
    for run in client.search_runs([found.experiment_id], "attributes.status = 'FINISHED'", max_results=10_000):
        params = run.data.params
        row = str(params.get("row", run.data.tags.get("fedrun.row", "?"))).split("/")[-1]
        valid = metric_names.history(client, run, VALID)
        if not valid:
            continue
        per_epoch = min(p.step for p in valid)  # the first validation ends epoch 1
        for point in valid:
            rows.append({"row": row, "seed": int(params.get("sim.seed", 0)), "metric": VALID,
                         "epoch": point.step // per_epoch, "value": point.value})
        for point in metric_names.history(client, run, LOSS):
            rows.append({"row": row, "seed": int(params.get("sim.seed", 0)), "metric": LOSS,
                         "epoch": epoch_of_round(point.step, per_epoch), "value": point.value})
    frame = pd.DataFrame(rows)
    if frame.empty:
        return frame
    return frame.groupby(["row", "seed", "metric", "epoch"], as_index=False)["value"].mean()


def epoch_of_round(round_index: int, per_epoch: int) -> int:
    """The epoch (from 1) that round ``round_index`` (from 0) belongs to; validation after round r has
    step r + 1, so a validation step s ends epoch s // per_epoch."""
    return round_index // per_epoch + 1


def epochs_to_best(frame: pd.DataFrame) -> pd.DataFrame:
    """Per row and seed: the epoch of the best validation NDCG@20 and that value."""
    valid = frame[frame.metric == VALID]
    best = valid.loc[valid.groupby(["row", "seed"])["value"].idxmax()]
    return best.rename(columns={"epoch": "best_epoch", "value": "best_valid_ndcg_at_20"})[
        ["row", "seed", "best_epoch", "best_valid_ndcg_at_20"]]


def plot(frame: pd.DataFrame, path: Path) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for axis, metric, label in ((axes[0], LOSS, "training loss (Fig. 3)"),
                                (axes[1], VALID, "validation NDCG@20 (Fig. 4)")):
        part = frame[frame.metric == metric].groupby(["row", "epoch"])["value"].mean().reset_index()
        for row, curve in part.groupby("row"):
            axis.plot(curve.epoch, curve.value, label=row)
        axis.set_xlabel("epoch (all clients once)")
        axis.set_title(label)
        axis.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiment", default="perfedrecpp-table4")
    parser.add_argument("--rows", nargs="*", default=["perfedrec", "perfedrecpp"])
    parser.add_argument("--out", default="docs/reproductions/perfedrecpp")
    args = parser.parse_args()
    frame = histories(MlflowClient(default_uri()), args.experiment)
    frame = frame[frame.row.isin(args.rows)] if not frame.empty else frame
    if frame.empty:
        raise SystemExit(f"no finished run of rows {args.rows} with {VALID} in {args.experiment}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out / "fig3-fig4-curves.csv", index=False)
    plot(frame, out / "fig3-fig4.png")
    best = epochs_to_best(frame).sort_values(["row", "seed"])
    print(markdown(list(best.columns), [[str(v) if not isinstance(v, float) else f"{v:.4f}" for v in r]
                                        for r in best.itertuples(index=False)]))
    print(f"\nwrote {out / 'fig3-fig4.png'} and {out / 'fig3-fig4-curves.csv'}")


if __name__ == "__main__":
    main()
