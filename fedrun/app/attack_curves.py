"""Per-epoch curves of an attack preset's runs (``fedrun -m +experiment=attacks/ahum_code``): test ER@K of
the target and the benign utility metrics per epoch, mean ± std over seeds, one line per attack — PNG,
CSV and a Markdown table of the final epoch.

    python -m fedrun.app.attack_curves [--experiment attacks-ahum-code] [--out docs/reproductions/attacks]

``--by PARAM`` draws one line per value of a swept parameter instead of per attack, and ``--metrics``
names the curves, e.g. rCL4FedRec's Fig. 3 (ER@5 per epoch for each α, read at each epoch's evaluation):

    python -m fedrun.app.attack_curves --experiment rcl4fedrec-fig3 --by method.uniformity_alpha \
        --metrics valid_er_at_5 valid_recall_at_20 item_uniformity --out docs/reproductions/rcl4fedrec/fig3
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
from mlflow.tracking import MlflowClient

from fedrun.report.table import markdown, mean_std
from fedrun.store import metric_names
from fedrun.store.runs import default_uri

PLOTTED = ["test_er_at_5", "test_er_at_20", "test_recall_at_20", "test_ndcg_at_20"]  # of the default METRICS
METRICS = ["test_er_at_5", "test_er_at_10", "test_er_at_20", "test_er_at_30", "test_recall_at_20",
           "test_precision_at_20", "test_ndcg_at_20"]


def histories(client: MlflowClient, experiment_id: str, metrics: list[str], by: str | None = None) -> pd.DataFrame:
    """One row per (run, metric, step) of the finished runs: attack (or ``by=value``), defense, dataset, seed,
    epoch, value."""
    rows = []
    for run in client.search_runs([experiment_id], "attributes.status = 'FINISHED'", max_results=10_000):
        tags, params = run.data.tags, run.data.params
        if by is not None and by not in params:
            continue  # a run of the experiment that did not sweep this parameter
        line = f"{by}={params[by]}" if by is not None else tags.get("fedrun.attack", "none")
        points = {metric: metric_names.history(client, run, metric) for metric in metrics}
        steps = [p.step for history in points.values() for p in history]
        per_epoch = max(1, min(steps)) if steps else 1  # the first curve point is the end of epoch 1
        for metric, history in points.items():
            for point in history:
                rows.append({"attack": line, "defense": tags.get("fedrun.defense", ""),
                             "dataset": tags.get("fedrun.dataset", ""), "seed": int(params.get("sim.seed", 0)),
                             "metric": metric, "epoch": point.step // per_epoch, "value": point.value})
    return pd.DataFrame(rows)


def summary(frame: pd.DataFrame) -> pd.DataFrame:
    keys = ["dataset", "defense", "attack", "metric", "epoch"]
    out = frame.groupby(keys)["value"].agg(["mean", "std", "count"]).reset_index()
    return out.sort_values(keys)


def plot(table: pd.DataFrame, path: Path, title: str, shown: list[str]) -> None:
    fig, axes = plt.subplots(1, len(shown), figsize=(4.2 * len(shown), 3.6), squeeze=False)
    for ax, metric in zip(axes[0], shown):
        for attack, part in table[table["metric"] == metric].groupby("attack"):
            ax.errorbar(part["epoch"], part["mean"], yerr=part["std"].fillna(0), capsize=2, label=attack)
        ax.set_title(metric.replace("test_", ""))
        ax.set_xlabel("epoch")
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def final_table(table: pd.DataFrame, metrics: list[str]) -> str:
    last = table[table["epoch"] == table["epoch"].max()]
    header = ["dataset", "defense", "attack", "seeds", *[m.replace("test_", "") for m in metrics]]
    rows = []
    for (dataset, defense, attack), part in last.groupby(["dataset", "defense", "attack"]):
        values = {r.metric: mean_std(r.mean, r.std, int(r.count)) for r in part.itertuples()}
        rows.append([dataset, defense, attack, str(int(part["count"].max())), *[values.get(m, "") for m in metrics]])
    return markdown(header, rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiment", default="attacks-ahum-code")
    parser.add_argument("--uri", default=None)
    parser.add_argument("--out", default="docs/reproductions/attacks")
    parser.add_argument("--by", default=None, help="one line per value of this run parameter (default: the attack)")
    parser.add_argument("--metrics", nargs="+", default=METRICS, help="per-epoch metrics to read")
    args = parser.parse_args()
    client = MlflowClient(args.uri or default_uri())
    experiment = client.get_experiment_by_name(args.experiment)
    if experiment is None:
        raise SystemExit(f"no experiment named {args.experiment!r}: run its preset first")
    table = summary(histories(client, experiment.experiment_id, args.metrics, args.by))
    if table.empty:
        raise SystemExit(f"{args.experiment}: no finished run has a history of {', '.join(args.metrics)}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / f"{args.experiment}-curves.csv", index=False)
    shown = PLOTTED if args.metrics == METRICS else args.metrics
    for (dataset, defense), part in table.groupby(["dataset", "defense"]):
        plot(part, out / f"{args.experiment}-{dataset}-{defense}.png",
             f"{args.experiment}: {dataset}, defense={defense}", shown)
    text = final_table(table, args.metrics)
    (out / f"{args.experiment}-final.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
