"""FedRec++ Figure 2 from the runs of ``fedrun -m +experiment=fedrecpp/fig2``: MAE and RMSE of
FedRec and FedRec++ against ρ for each number of clients per iteration c, mean over folds.

    python scripts/figures/fedrecpp_figures.py [--experiment fedrecpp-fig2] [--out docs/reproductions]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
from mlflow.tracking import MlflowClient

from fedrun.app.report import collect
from fedrun.store.runs import default_uri


def curves(frame: pd.DataFrame) -> pd.DataFrame:
    """Finished runs → one row per (c, method, ρ): mean and std of test MAE / RMSE over folds."""
    done = frame[frame["status"] == "FINISHED"].copy()
    row = done["param:choices.row"].str.split("/").str[-1]  # fedrec_rho2 / fedrecpp_rho2
    done["method"] = row.str.split("_").str[0]
    done["rho"] = row.str.extract(r"rho(\d+)")[0].astype(int)
    done["c"] = done["param:sim.clients_per_round"].astype(int)
    grouped = done.groupby(["c", "method", "rho"])
    out = grouped[["metric:test_mae", "metric:test_rmse"]].agg(["mean", "std", "count"])
    out.columns = [f"{m.split(':')[1]}_{s}" for m, s in out.columns]
    return out.reset_index()


def plot(table: pd.DataFrame, path: Path) -> None:
    cs = sorted(table["c"].unique())
    fig, axes = plt.subplots(2, len(cs), figsize=(4 * len(cs), 6), sharey="row", squeeze=False)
    for col, c in enumerate(cs):
        for row, metric in enumerate(("test_mae", "test_rmse")):
            ax = axes[row][col]
            for method, style in (("fedrec", "o-"), ("fedrecpp", "s--")):
                part = table[(table["c"] == c) & (table["method"] == method)].sort_values("rho")
                if method == "fedrecpp":  # FedRec++ at ρ = 0 is FedRec at ρ = 0
                    base = table[(table["c"] == c) & (table["method"] == "fedrec") & (table["rho"] == 0)]
                    part = pd.concat([base.assign(method="fedrecpp"), part])
                ax.errorbar(part["rho"], part[f"{metric}_mean"], yerr=part[f"{metric}_std"], fmt=style,
                            capsize=3, label={"fedrec": "FedRec", "fedrecpp": "FedRec++"}[method])
            ax.set_title(f"c = {c}")
            ax.set_xlabel("ρ")
            ax.set_ylabel(metric.replace("test_", "").upper())
            ax.set_xticks(sorted(table["rho"].unique()))
            ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiment", default="fedrecpp-fig2")
    parser.add_argument("--uri", default=None)
    parser.add_argument("--out", default="docs/reproductions")
    args = parser.parse_args()
    client = MlflowClient(args.uri or default_uri())
    experiment = client.get_experiment_by_name(args.experiment)
    if experiment is None:
        raise SystemExit(f"no experiment named {args.experiment!r}: run fedrun -m +experiment=fedrecpp/fig2 first")
    table = curves(collect(client, experiment.experiment_id))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / "fedrecpp-fig2.csv", index=False)
    plot(table, out / "fedrecpp-fig2.png")
    print(table.to_string(index=False))
    print(f"written: {out / 'fedrecpp-fig2.csv'}, {out / 'fedrecpp-fig2.png'}")


if __name__ == "__main__":
    main()
