"""Privacy–utility curves from the runs of ``+experiment=privacy_utility`` (the commands are in that preset): test
utility against the LDP budget ε of one upload, one panel per dataset, one line per method and protected upload,
mean ± std over seeds; ε = ∞ is the method's run with ``privacy=none``, drawn at the right edge and joined by a
dotted line → ``<out>/table.md`` and ``<out>/privacy-utility.png`` (docs/results/privacy-utility.md reads them);
``<out>/privacy-utility-valid.png`` draws the tested models' validation utility the same way (beside its floor where
the runs logged one): on a split whose test part is unlike its training part (ML-1M's ``split80-20``) the two can
move in opposite directions under noise.

Utility is the metric a dataset's runs monitored where they name one (Recall@20 for PerFedRec++'s Yelp and
rCL4FedRec's ML-1M), else Recall@20 where every run logged its floor, else NDCG@10, and RMSE on ratings (lower is
better), beside the floor of the same split. A curve is named by its preset row where the runs have one.
Methods that set the Laplace scale λ directly (FedGNN's family: ``privacy.scale``, L∞ clip δ) are placed at their
papers' ε = 2δ/λ per coordinate, which the panel's axis says; one of their uploaded rows then costs d times that.

    python -m fedrun.app.privacy_utility [--ledger docs/results/privacy-utility/privacy-utility-runs.csv]

(the graph family's runs, on Yelp: add ``--experiment privacy-utility-graph`` and ``--borrow`` Table 4's ledger for
its λ .1 runs, as docs/results/privacy-utility.md says; the ledger holds both experiments).
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

from fedrun.app.report import drop_reruns, script_runs
from fedrun.report.table import markdown, mean_std

UTILITY = ["recall_at_20", "ndcg_at_10", "rmse"]  # per dataset, the first every finished run logged a floor of


def utility_of(runs: pd.DataFrame) -> str:
    """The utility metric of one dataset's runs: the metric they all monitored (``eval.monitor``) where they name
    one, else the first of UTILITY whose floor every finished run logged."""
    finished = runs[runs["status"] == "FINISHED"]
    monitors = set(finished.get("param:eval.monitor", pd.Series(dtype=object)).dropna().astype(str)) - {"auto"}
    if len(monitors) == 1 and finished.get(f"metric:test_{next(iter(monitors))}") is not None:
        return next(iter(monitors))
    for metric in UTILITY:
        column = f"metric:floor_{metric}"
        if len(finished) and column in finished and finished[column].notna().all():
            return metric
    return UTILITY[-1]


def epsilon(row: pd.Series) -> tuple[float, str]:
    """The budget a point is drawn at and its unit: ε of one upload, or 2δ/λ per coordinate where λ is set."""
    if str(row["param:choices.privacy"]) == "none":
        return math.inf, ""
    scale = pd.to_numeric(row.get("param:privacy.scale"), errors="coerce")
    if pd.notna(scale):
        return 2 * float(row["param:privacy.clip"]) / float(scale), "per coordinate"
    return float(row["param:privacy.epsilon"]), "per upload"


def points(frame: pd.DataFrame) -> pd.DataFrame:
    """Finished and failed runs → one row per (dataset, curve, ε): utility mean, std and count over the finished
    ones, how many failed (a model that diverged under the noise is a point of the curve too), and the floor."""
    done, _ = drop_reruns(frame)
    done = done[done["status"].isin(["FINISHED", "FAILED"])].copy()
    done["metric"] = done["param:choices.dataset"].map(
        {name: utility_of(runs) for name, runs in done.groupby("param:choices.dataset")})
    done["value"] = [row.get(f"metric:test_{row['metric']}") for _, row in done.iterrows()]
    done["floor"] = [row.get(f"metric:floor_{row['metric']}") for _, row in done.iterrows()]
    done["valid_value"] = [validation_of(row) for _, row in done.iterrows()]
    done["valid_floor"] = [row.get(f"metric:floor_valid_{row['metric']}") for _, row in done.iterrows()]
    done["failed"] = done["status"] == "FAILED"
    private = done["param:choices.privacy"].astype(str) != "none"
    budgets = [epsilon(row) for _, row in done.iterrows()]
    done["epsilon"] = [value for value, _ in budgets]
    done["unit"] = [unit for _, unit in budgets]
    targets = done.get("param:privacy.targets", pd.Series("", index=done.index)).astype(str)
    done["protects"] = targets.where(private, "")
    rows = done.get("param:choices.row", pd.Series(None, index=done.index, dtype=object))
    named = rows.map(lambda row: str(row).split("/")[-1] if pd.notna(row) and str(row) not in ("None", "nan") else None)
    done["curve"] = named.fillna(done["param:choices.method"].astype(str)) + " / " + done[
        "param:choices.backbone"].astype(str)  # a preset's row names it (FedMF is FedGNN's method on K = 0)
    grouped = done.groupby(["param:choices.dataset", "metric", "curve", "epsilon"], dropna=False)
    out = grouped.agg(mean=("value", "mean"), std=("value", "std"), runs=("value", "count"), failed=("failed", "sum"),
                      floor=("floor", "mean"), valid_mean=("valid_value", "mean"), valid_std=("valid_value", "std"),
                      valid_floor=("valid_floor", "mean"),
                      protects=("protects", lambda s: ", ".join(sorted(set(s) - {""}))),
                      unit=("unit", lambda s: ", ".join(sorted(set(s) - {""}))))
    return out.reset_index().rename(columns={"param:choices.dataset": "dataset"}).fillna({"std": 0.0, "valid_std": 0.0})


def validation_of(row: pd.Series) -> float | None:
    """The tested model's validation utility: the best validation where the run kept that model, else the last."""
    for name in (f"metric:best_valid_{row['metric']}", f"metric:valid_{row['metric']}"):
        value = row.get(name)
        if value is not None and pd.notna(value):
            return float(value)
    return None


def render(table: pd.DataFrame) -> str:
    header = ["dataset", "method / backbone", "protects", "ε", "runs", "failed", "test utility", "floor",
              "validation", "validation floor"]
    rows = [[r.dataset, r.curve, r.protects or "nothing",
             "∞" if math.isinf(r.epsilon) else f"{r.epsilon:g}" + (f" {r.unit}" if r.unit != "per upload" else ""),
             str(r.runs), str(r.failed) if r.failed else "",
             f"{r.metric} {mean_std(r.mean, r.std, r.runs)}" if r.runs else "every run failed (reasons in the ledger)",
             _cell(r.floor), mean_std(r.valid_mean, r.valid_std, r.runs) if pd.notna(r.valid_mean) else "",
             _cell(r.valid_floor)]
            for r in table.itertuples()]
    return ("Test utility against the LDP budget ε of one upload (mean ± std over the seeds that finished; failed: "
            "runs that ended FAILED, e.g. a model the noise drove to non-finite values), and the same metric on "
            "validation for the tested model (its floor where the runs logged one).\n\n" + markdown(header, rows))


def _cell(value: float) -> str:
    return f"{value:.4f}" if pd.notna(value) else ""


def plot(table: pd.DataFrame, path: Path, part: str = "test") -> None:
    """One panel per dataset: ``part``'s utility (test, or the tested model's validation) against ε."""
    mean, std, floor_of = ("mean", "std", "floor") if part == "test" else ("valid_mean", "valid_std", "valid_floor")
    if part != "test":  # datasets whose runs validated, their validated points and their failed ones
        validated = set(table.loc[table[mean].notna(), "dataset"])
        table = table[table["dataset"].isin(validated) & (table[mean].notna() | (table["runs"] == 0))]
    datasets = sorted(table["dataset"].unique())
    if not datasets:  # no run logged this part
        return
    fig, axes = plt.subplots(1, len(datasets), figsize=(6.5 * len(datasets), 4.8), squeeze=False)
    for ax, dataset in zip(axes[0], datasets):
        panel = table[table["dataset"] == dataset]
        finite = panel.loc[~panel["epsilon"].map(math.isinf), "epsilon"]
        edge = 2 * finite.max() if len(finite) else 1.0  # where ∞ is drawn
        for curve, line in panel.groupby("curve"):
            line = line.sort_values("epsilon")
            x = line["epsilon"].where(~line["epsilon"].map(math.isinf), edge)
            noisy = ~line["epsilon"].map(math.isinf)
            drawn = ax.errorbar(x[noisy], line[mean][noisy], yerr=line[std][noisy], marker="o", capsize=3,
                                label=curve)
            if (~noisy).any():
                ax.errorbar(x[~noisy], line[mean][~noisy], yerr=line[std][~noisy], marker="s", capsize=3,
                            color=drawn[0].get_color())
                ax.plot(x.iloc[-2:], line[mean].iloc[-2:], ":", color=drawn[0].get_color())
        floor = panel[floor_of].dropna()
        if len(floor):
            ax.axhline(float(floor.mean()), ls="--", color="grey", label="floor")
        lost = panel[panel["runs"] == 0]  # every run failed: marked at the bottom of the panel
        if len(lost):
            ax.plot(lost["epsilon"], [0.0] * len(lost), "x", color="red", transform=ax.get_xaxis_transform(),
                    markersize=10, clip_on=False, label="every run failed")
        ax.set_xscale("log")
        ticks = sorted(finite.unique())
        ax.set_xticks([*ticks, edge], [*[f"{t:g}" for t in ticks], "∞"])
        units = set(panel["unit"]) - {""}
        ax.set_xlabel("ε = 2δ/λ per coordinate (LDP)" if units == {"per coordinate"} else "ε of one upload (LDP)")
        ax.set_ylabel(f"{part} {panel['metric'].iloc[0]}")
        ax.set_title(dataset)
        ax.grid(alpha=.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    frame, out = script_runs(__doc__.splitlines()[0], "privacy-utility", Path("docs/results/privacy-utility"), argv)
    table = points(frame)
    text = render(table)
    (out / "table.md").write_text(text + "\n")
    plot(table, out / "privacy-utility.png")
    plot(table, out / "privacy-utility-valid.png", part="validation")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
