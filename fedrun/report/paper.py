"""A preset's published numbers beside fedrun's: ``paper:`` in ``conf/experiment/<preset>.yaml``.

The block is ``paper.metrics`` (the metric names, in order) and ``paper.<dataset>.<backbone>.<row>``
lists of numbers in that order, ``<row>`` and ``<backbone>`` being the last part of the run's
``row`` and ``backbone`` options (``row=fedcl/fed`` → ``fed``, ``backbone=fedcl/ncf`` → ``ncf``).
``paper.best_row`` names the row the paper claims is best; the report tests that claim.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from omegaconf import OmegaConf


def preset_paper(preset: str, conf_dir: Path) -> dict | None:
    path = conf_dir / "experiment" / f"{preset}.yaml"
    if not path.exists():
        return None
    paper = OmegaConf.to_container(OmegaConf.load(path)).get("paper")
    return paper if isinstance(paper, dict) and "metrics" in paper else None


def beside_paper(done: pd.DataFrame, paper: dict) -> tuple[list[str], list[list[str]]]:
    """Finished runs grouped by (dataset, backbone, row) → for each paper metric: fedrun mean ± std, paper."""
    metrics = list(paper["metrics"])
    keys = ["param:choices.dataset", "param:choices.backbone", "param:choices.row"]
    header = ["dataset", "backbone", "row", "runs"]
    for metric in metrics:
        header += [f"{metric} fedrun", f"{metric} paper"]
    rows = []
    if any(k not in done.columns for k in keys):
        return header, rows
    for (dataset, backbone, row), group in done.groupby(keys, dropna=False):
        published = paper.get(dataset, {}).get(str(backbone).split("/")[-1], {}).get(str(row).split("/")[-1])
        cells = [dataset, backbone, str(row), str(len(group))]
        for k, metric in enumerate(metrics):
            col = group[f"metric:{metric}"].dropna() if f"metric:{metric}" in group else pd.Series(dtype=float)
            ours = "" if col.empty else f"{col.mean():.4f} ± {col.std(ddof=1) if len(col) > 1 else 0.0:.4f}"
            cells += [ours, "" if published is None else f"{published[k]:.4f}"]
        rows.append(cells)
    return header, rows


def claim_tests(done: pd.DataFrame, paper: dict) -> tuple[list[str], list[list[str]]]:
    """The paper's "``paper.best_row`` is best" claim, per (dataset, backbone) and other row: the
    mean difference best − other of each paper metric over the seeds both rows ran, and the
    two-sided paired t-test p-value (pairs share the seed, hence the split and initialisation)."""
    from scipy.stats import ttest_rel

    best, metrics = paper.get("best_row"), list(paper["metrics"])
    header = ["dataset", "backbone", "row", "seeds"] + [f"{m} {part}" for m in metrics for part in ("diff", "p")]
    needed = ["param:choices.dataset", "param:choices.backbone", "param:choices.row", "param:sim.seed"]
    if best is None or any(k not in done.columns for k in needed):
        return header, []
    frame = done.assign(row=done["param:choices.row"].astype(str).str.split("/").str[-1])
    rows = []
    for (dataset, backbone), group in frame.groupby(needed[:2]):
        ours = group[group["row"] == best].set_index("param:sim.seed")
        if ours.empty:  # the best row did not run here: nothing to compare
            continue
        for row in sorted(set(group["row"]) - {best}):
            other = group[group["row"] == row].set_index("param:sim.seed")
            seeds = ours.index.intersection(other.index)
            cells = [dataset, backbone, row, str(len(seeds))]
            for metric in metrics:
                column = f"metric:{metric}"
                if column not in group or not len(seeds):
                    cells += ["", ""]
                    continue
                a, b = ours.loc[seeds, column].astype(float), other.loc[seeds, column].astype(float)
                p = float(ttest_rel(a, b).pvalue) if len(seeds) > 1 and (a - b).std() > 0 else float("nan")
                cells += [f"{(a - b).mean():+.4f}", "" if p != p else f"{p:.3f}"]
            rows.append(cells)
    return header, rows
