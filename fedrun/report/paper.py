"""A preset's published numbers beside fedrun's: ``paper:`` in ``conf/experiment/<preset>.yaml``.

The block is ``paper.metrics`` (the metric names, in order) and ``paper.<dataset>.<backbone>.<row>``
lists of numbers in that order, ``<row>`` and ``<backbone>`` being the last part of the run's
``row`` and ``backbone`` options (``row=fedcl/fed`` → ``fed``, ``backbone=fedcl/ncf`` → ``ncf``).
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
