"""The robustness matrix of a ``robustness/*`` preset: attacks (its ``row`` sweep) × defenses (its
``defense`` sweep) → heatmaps (PNG) and tables (Markdown) of the target's exposure at the end of the run and at
its peak over the run's evaluations (where the runs recorded it), and of the utility lost against the no-attack
run under the server's own rule (the first row and column of the sweep).

Cells hold the mean over seeds (± std in the tables, with the number of runs; one run: ``(n = 1)``). A
combination that the declared capabilities refuse (``fedrun.app.build.check_combination``: binary codes,
encrypted or denoised sums, a method that offers no client step) is shown as "n/a" with the refusal's
reason; a combination not run yet is left empty.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, cast

import matplotlib
import numpy as np
import pandas as pd
from omegaconf import DictConfig, OmegaConf

from fedrun.errors import ConfigError
from fedrun.report.table import markdown

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the headless backend)

ROW, COLUMN = "param:choices.row", "param:choices.defense"


@dataclass(frozen=True)
class Axes:
    rows: list[str]  # row options, e.g. robustness/a_hum; the first is the no-attack row
    columns: list[str]  # defense options; the first is the server's own rule

    @staticmethod
    def of(preset: str, conf_dir: Path) -> "Axes | None":
        preset_node = cast(DictConfig, OmegaConf.load(conf_dir / "experiment" / f"{preset}.yaml"))
        params = preset_node.get("hydra", {}).get("sweeper", {}).get("params", {})
        rows, columns = (str(params.get(key, "")).split(",") for key in ("row", "defense"))
        rows, columns = [r.strip() for r in rows if r.strip()], [c.strip() for c in columns if c.strip()]
        return Axes(rows, columns) if rows and columns else None


def utility_metric(preset: str, conf_dir: Path) -> str:
    """The utility a preset's matrix reports: its ``matrix.utility``, else test Recall@20."""
    node = OmegaConf.load(conf_dir / "experiment" / f"{preset}.yaml")
    return str(OmegaConf.select(node, "matrix.utility", default="test_recall_at_20"))


def cells(done: pd.DataFrame, metric: str, axes: Axes) -> dict[tuple[str, str], np.ndarray]:
    """(row, defense) → the metric's final values over the finished runs (seeds) of that cell."""
    column = f"metric:{metric}"
    if column not in done or ROW not in done or COLUMN not in done:
        return {}
    out = {}
    for (row, defense), group in done.groupby([ROW, COLUMN]):
        values = pd.to_numeric(group[column], errors="coerce").dropna().to_numpy()
        if len(values):
            out[str(row), str(defense)] = values
    return out


def utility_drop(utility: dict[tuple[str, str], np.ndarray], axes: Axes) -> dict[tuple[str, str], np.ndarray]:
    """(row, defense) → 100 × (1 − cell / baseline) per seed value, the baseline being the mean of the
    no-attack row under the server's own rule (the sweeps' first row and column)."""
    base = utility.get((axes.rows[0], axes.columns[0]))
    if base is None or base.mean() == 0:
        return {}
    return {key: 100 * (1 - values / base.mean()) for key, values in utility.items()}


def label(option: str) -> str:
    return option.split("/")[-1]


def table(values: dict, refused: dict, axes: Axes, digits: int) -> str:
    header = ["attack \\ defense"] + [label(c) for c in axes.columns]
    rows = []
    for row in axes.rows:
        line = [label(row)]
        for column in axes.columns:
            if (row, column) in refused:
                line.append("n/a")
            elif (row, column) in values:
                v = values[row, column]
                line.append(f"{v.mean():.{digits}f} (n = 1)" if len(v) == 1 else
                            f"{v.mean():.{digits}f} ± {v.std(ddof=1):.{digits}f} ({len(v)})")
            else:
                line.append("")
        rows.append(line)
    return markdown(header, rows)


def heatmap(path: Path, panels: list[tuple[str, dict, str, tuple[float, float], str]], refused: dict,
            axes: Axes, title: str) -> None:
    """One PNG, a panel per (title, values, colour map, colour range, number format)."""
    figure, subplots = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 0.55 * len(axes.rows) + 1.8))
    for ax, (name, values, cmap, (low, high), fmt) in zip(np.atleast_1d(subplots), panels):
        grid = np.full((len(axes.rows), len(axes.columns)), np.nan)
        for i, row in enumerate(axes.rows):
            for j, column in enumerate(axes.columns):
                if (row, column) in values:
                    grid[i, j] = values[row, column].mean()
        ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, vmin=low, vmax=high, aspect="auto")
        for i, row in enumerate(axes.rows):
            for j, column in enumerate(axes.columns):
                text = "n/a" if (row, column) in refused else ("" if np.isnan(grid[i, j]) else format(grid[i, j], fmt))
                ax.text(j, i, text, ha="center", va="center", fontsize=8)
        ax.set_xticks(range(len(axes.columns)), [label(c) for c in axes.columns], rotation=30, ha="right")
        ax.set_yticks(range(len(axes.rows)), [label(r) for r in axes.rows])
        ax.set_title(name, fontsize=10)
    figure.suptitle(title, fontsize=11)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


Refusals = Callable[[str, Axes], dict[tuple[str, str], str]]  # (preset, axes) → {(row, defense): why refused}


def render(done: pd.DataFrame, preset: str, conf_dir: Path, out: Path, refusals: Refusals,
           exposure: str = "test_er_at_5", utility: str | None = None) -> tuple[str, list[Path]]:
    """Markdown sections and the files written (PNG + CSV) for the matrix of ``preset``'s runs (``utility``: the
    preset's own, ``utility_metric``, unless given; ``refusals``: the combinations the capabilities refuse,
    shown as n/a — the application checks them, ``fedrun.app.report.matrix_refusals``)."""
    axes = Axes.of(preset, conf_dir)
    if axes is None:
        return "", []
    utility = utility or utility_metric(preset, conf_dir)
    if len(done) and f"metric:{utility}" not in done:
        raise ConfigError("matrix.utility", utility, "a metric the preset's runs logged (e.g. test_recall_at_20)")
    refused = refusals(preset, axes)
    er, quality = cells(done, exposure, axes), cells(done, utility, axes)
    peak = cells(done, f"{exposure}_peak", axes)  # over each run's evaluations (fedrun.app.report.exposure_over_run)
    drop = utility_drop(quality, axes)
    png = out / "matrix.png"
    name = exposure.removeprefix("test_")
    panels = [(f"{name} of the target, end of run", er, "Reds", (0.0, 1.0), ".2f")]
    panels += [(f"{name}, peak over the run", peak, "Reds", (0.0, 1.0), ".2f")] if peak else []
    panels += [(f"{utility.removeprefix('test_')} drop vs no attack, {label(axes.columns[0])} (%)", drop,
                "RdBu_r", (-60.0, 60.0), ".0f")]
    heatmap(png, panels, refused, axes, f"{preset}: attack × defense")
    csv = out / "matrix.csv"
    pd.DataFrame([{"row": label(r), "defense": label(c), "runs": len(er.get((r, c), [])),
                   exposure: er[r, c].mean() if (r, c) in er else None,
                   f"{exposure}_peak": peak[r, c].mean() if (r, c) in peak else None,
                   utility: quality[r, c].mean() if (r, c) in quality else None,
                   "utility_drop_pct": drop[r, c].mean() if (r, c) in drop else None,
                   "refused": refused.get((r, c), "")}
                  for r in axes.rows for c in axes.columns]).to_csv(csv, index=False)
    text = f"\n## Robustness matrix: {exposure} (mean ± std over seeds, runs)\n\n{table(er, refused, axes, 3)}\n"
    if peak:
        text += (f"\n## {exposure}, peak over each run's evaluations (mean ± std over seeds, runs)\n\n"
                 f"{table(peak, refused, axes, 3)}\n")
    text += (f"\n## {utility} (mean ± std, runs)\n\n{table(quality, refused, axes, 4)}\n"
             f"\n## {utility} drop against no attack under {label(axes.columns[0])} (%)\n\n"
             f"{table(drop, refused, axes, 1)}\n")
    if refused:
        text += "\n## Combinations refused before training\n\n" + "\n".join(
            f"- {label(r)} × {label(c)}: {reason}" for (r, c), reason in refused.items()) + "\n"
    return text + f"\nHeatmaps: {png.name}\n", [png, csv]
