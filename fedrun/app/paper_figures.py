"""A paper's figures from the runs of ``fedrun -m +experiment=<paper>/<figN>`` (FedCL Figures 3–9,
LightFR Figures 4–6, rCL4FedRec Fig. 5, PerFedRec++ Figures 5–6): the preset's metrics (``paper.metrics``;
else test HR@10 and NDCG@10) against the swept setting (the preset's ``figure.x``), one line (or bar group)
per backbone, mean ± std over seeds, one panel per dataset and metric. Where the preset names a
``figure.reference`` (the paper's setting), every other value is compared with it paired over the seeds both
ran: mean difference and a paired t-test (``<figN>-paired.csv``).

    python -m fedrun.app.paper_figures fedcl/fig5 [lightfr/fig4 ...] [--out docs/reproductions/<paper>]

One figure can read another experiment than ``<paper>-<figN>`` and count runs another preset recorded at one
of its points (``--borrow``), e.g. rCL4FedRec's Fig. 5 at λ2 = 0, whose |U_syn| = 60 is Table 2's run:

    python -m fedrun.app.paper_figures rcl4fedrec/fig5 --experiment rcl4fedrec-fig5-item0 \
        --borrow docs/reproductions/rcl4fedrec/rcl4fedrec-dev-runs.csv row=rcl4fedrec method.lambda_item=0
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
from mlflow.tracking import MlflowClient
from omegaconf import OmegaConf
from scipy import stats

from fedrun.app.report import add_borrow_argument, collect
from fedrun.core.paths import config_dir
from fedrun.report import ledger
from fedrun.store.runs import default_uri

METRICS = ("test_hr_at_10", "test_ndcg_at_10")


def figure_settings(preset_name: str) -> tuple[str, str | None, tuple[str, ...]]:
    """The preset's ``figure.x``, ``figure.reference`` (None when it names none) and ``paper.metrics``
    (default :data:`METRICS`); ``preset_name`` is ``<paper>/<figN>`` under conf/experiment."""
    path = Path(config_dir()) / "experiment" / f"{preset_name}.yaml"
    if not path.is_file():
        raise SystemExit(f"no figure preset {preset_name!r}: expected {path} (e.g. fedcl/fig5, lightfr/fig4)")
    preset = OmegaConf.load(path)
    if "figure" not in preset:
        raise SystemExit(f"{preset_name!r} is not a figure preset: it has no 'figure.x' (the swept setting)")
    reference = preset.figure.get("reference")
    metrics = tuple(preset.paper.metrics) if "paper" in preset and "metrics" in preset.paper else METRICS
    return str(preset.figure.x), None if reference is None else str(reference), metrics


def finished(frame: pd.DataFrame, x: str) -> pd.DataFrame:
    """Finished runs with short ``x``, ``backbone``, ``dataset`` and ``seed`` columns."""
    done = frame[frame["status"] == "FINISHED"].copy()
    column = "param:choices.row" if x == "row" else f"param:{x}"
    done["x"] = done[column].astype(str).str.split("/").str[-1]
    done["backbone"] = done["param:choices.backbone"].astype(str).str.split("/").str[-1]
    done["dataset"] = done["param:choices.dataset"].astype(str)
    done["seed"] = done["param:sim.seed"].astype(str)
    return done


def curves(frame: pd.DataFrame, x: str, metrics: tuple[str, ...] = METRICS) -> pd.DataFrame:
    """Finished runs → one row per (dataset, backbone, x): mean, std and count of each metric over seeds."""
    done = finished(frame, x)
    grouped = done.groupby(["dataset", "backbone", "x"])[[f"metric:{m}" for m in metrics]]
    out = grouped.agg(["mean", "std", "count"])
    out.columns = [f"{m.split(':')[1]}_{s}" for m, s in out.columns]
    out = out.reset_index()
    if numeric(out["x"]):  # 8, 16, 32, 64 rather than "16" < "32" < "64" < "8"
        out = out.sort_values(["dataset", "backbone", "x"], key=lambda c: pd.to_numeric(c) if c.name == "x" else c)
    return out.reset_index(drop=True)


def same_value(values: pd.Series, reference: str) -> pd.Series:
    """Which ``values`` equal ``reference`` (numerically where both are numbers: 4 = 4.0)."""
    as_number = pd.to_numeric(values, errors="coerce")
    ref_number = pd.to_numeric(pd.Series([reference]), errors="coerce")[0]
    return as_number == ref_number if not pd.isna(ref_number) and as_number.notna().all() else values == reference


def paired(frame: pd.DataFrame, x: str, reference: str, metrics: tuple[str, ...] = METRICS) -> pd.DataFrame:
    """Each value of ``x`` against ``reference`` per (dataset, backbone), over the seeds both ran:
    mean paired difference of each metric and the paired t-test's two-sided p (two seeds or more)."""
    done = finished(frame, x)
    rows = []
    for (dataset, backbone), part in done.groupby(["dataset", "backbone"]):
        is_ref = same_value(part["x"], reference)
        base = part[is_ref].drop_duplicates("seed", keep="last").set_index("seed")
        for value, other in part[~is_ref].groupby("x", sort=False):
            other = other.drop_duplicates("seed", keep="last").set_index("seed")
            seeds = sorted(set(base.index) & set(other.index))
            row = {"dataset": dataset, "backbone": backbone, "x": value, "vs": reference, "seeds": len(seeds)}
            for metric in metrics:
                diff = other.loc[seeds, f"metric:{metric}"] - base.loc[seeds, f"metric:{metric}"]
                row[f"{metric}_diff"] = diff.mean() if seeds else float("nan")
                row[f"{metric}_p"] = (stats.ttest_rel(other.loc[seeds, f"metric:{metric}"],
                                                      base.loc[seeds, f"metric:{metric}"]).pvalue
                                      if len(seeds) >= 2 else float("nan"))
            rows.append(row)
    return pd.DataFrame(rows)


def numeric(values: pd.Series) -> bool:
    return pd.to_numeric(values, errors="coerce").notna().all()


def plot(table: pd.DataFrame, x: str, title: str, path: Path, metrics: tuple[str, ...] = METRICS) -> None:
    datasets = sorted(table["dataset"].unique())
    fig, axes = plt.subplots(len(metrics), len(datasets), figsize=(5 * len(datasets), 3.6 * len(metrics)),
                             squeeze=False)
    for col, dataset in enumerate(datasets):
        part = table[table["dataset"] == dataset]
        backbones = sorted(part["backbone"].unique())
        for row, metric in enumerate(metrics):
            ax = axes[row][col]
            if numeric(part["x"]):
                for backbone in backbones:
                    line = part[part["backbone"] == backbone].assign(xv=lambda f: f["x"].astype(float))
                    line = line.sort_values("xv")
                    ax.errorbar(line["xv"], line[f"{metric}_mean"], yerr=line[f"{metric}_std"].fillna(0), fmt="o-",
                                capsize=3, label=backbone)
            else:
                labels = list(dict.fromkeys(part["x"]))
                width = 0.8 / max(len(backbones), 1)
                for k, backbone in enumerate(backbones):
                    bars = part[part["backbone"] == backbone].set_index("x").reindex(labels)
                    ax.bar([i + k * width for i in range(len(labels))], bars[f"{metric}_mean"], width,
                           yerr=bars[f"{metric}_std"].fillna(0), capsize=3, label=backbone)
                ax.set_xticks([i + width * (len(backbones) - 1) / 2 for i in range(len(labels))], labels,
                              rotation=20)
            ax.set_title(f"{dataset}: {metric.replace('test_', '').replace('_at_', '@').upper()}")
            ax.set_xlabel(x)
            ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("figures", nargs="+", help="<paper>/<figN> presets: fedcl/fig3 … fig9, lightfr/fig4 … fig6")
    parser.add_argument("--uri", default=None)
    parser.add_argument("--out", default=None, help="default: docs/reproductions/<paper>")
    parser.add_argument("--experiment", default=None, help="one figure only; default: <paper>-<figN>")
    add_borrow_argument(parser)
    args = parser.parse_args()
    if args.experiment and len(args.figures) > 1:
        parser.error(f"--experiment {args.experiment} names one figure's runs; {len(args.figures)} figures given")
    client = MlflowClient(args.uri or default_uri())
    for preset_name in args.figures:
        x, reference, metrics = figure_settings(preset_name)
        paper, figure = preset_name.split("/", 1)
        name = args.experiment or f"{paper}-{figure}"
        experiment = client.get_experiment_by_name(name)
        if experiment is None:
            raise SystemExit(f"no experiment named '{name}': run fedrun -m +experiment={preset_name} first")
        out = Path(args.out or f"docs/reproductions/{paper}")
        out.mkdir(parents=True, exist_ok=True)
        try:  # a figure groups by its swept setting, so borrowed runs keep their own preset's labels
            runs = ledger.with_borrowed(collect(client, experiment.experiment_id), args.borrow, relabel=False)
        except ValueError as error:
            parser.error(str(error))
        table = curves(runs, x, metrics)
        table.to_csv(out / f"{figure}.csv", index=False)
        plot(table, x, f"{paper} {figure}: test metrics vs {x}", out / f"{figure}.png", metrics)
        print(table.to_string(index=False))
        written = [out / f"{figure}.csv", out / f"{figure}.png"]
        if reference is not None:
            comparison = paired(runs, x, reference, metrics)
            comparison.to_csv(out / f"{figure}-paired.csv", index=False, float_format="%.4g")
            print(f"\npaired over seeds against {x} = {reference}:\n{comparison.to_string(index=False)}")
            written.append(out / f"{figure}-paired.csv")
        print("written:", ", ".join(map(str, written)))


if __name__ == "__main__":
    main()
