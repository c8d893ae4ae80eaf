"""rCL4FedRec Fig. 2: the item embeddings of trained models projected to 2-D (PCA of each model's item
table), the hot items (the most interacted, 100 by default) against the others, and Eq. 12's measure of
each table (``item_uniformity``: lower = more uniform).

  python scripts/figures/item_embeddings.py Original=PATH CL4FedRec=PATH ... [--data "+experiment=rcl4fedrec/table2"] \
      [--hot 100] [--out docs/reproductions/rcl4fedrec/fig2]

PATH is a fedrun checkpoint (``checkpoint.pt``: the item table at that round) of runs on the data that
``--data`` (overrides) selects.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import numpy as np
import torch

from fedrun.app.compose import compose
from fedrun.app.plan import plan
from fedrun.method._contrastive import uniformity_penalty
from fedrun.sim import checkpoint


def item_table(path: Path) -> tuple[torch.Tensor, int]:
    """The public item table [I, d] and the rounds done, from a checkpoint."""
    payload = checkpoint.load(path)
    return payload["method"]["server"]["item"].to(torch.float64), payload["runner"].next_round


def project(table: torch.Tensor) -> np.ndarray:
    """[I, d] → [I, 2]: the first two principal components of the centred table."""
    centred = table - table.mean(0)
    _, _, v = torch.linalg.svd(centred, full_matrices=False)
    return (centred @ v[:2].T).numpy()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", help="LABEL=checkpoint.pt")
    parser.add_argument("--data", default="+experiment=rcl4fedrec/table2",
                        help="overrides selecting the data the models trained on (space-separated)")
    parser.add_argument("--hot", type=int, default=100)
    parser.add_argument("--out", type=Path, default=Path("docs/reproductions/rcl4fedrec/fig2"))
    args = parser.parse_args()
    split = plan(compose([*args.data.split(), "track=none"])).dataset.load()
    counts = np.bincount(split.train.item, minlength=split.n_items)
    hot = np.argsort(-counts, kind="stable")[: args.hot]
    is_hot = np.zeros(split.n_items, dtype=bool)
    is_hot[hot] = True

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(args.models), figsize=(3.6 * len(args.models), 3.6), squeeze=False)
    rows = []
    for ax, spec in zip(axes[0], args.models):
        label, _, path = spec.partition("=")
        table, rounds = item_table(Path(path))
        points = project(table)
        uniformity = float(uniformity_penalty(table.unsqueeze(0), torch.ones(1, table.shape[0], dtype=torch.bool)))
        ax.scatter(points[~is_hot, 0], points[~is_hot, 1], s=2, c="lightgrey", label="other items")
        ax.scatter(points[is_hot, 0], points[is_hot, 1], s=6, c="crimson", label=f"hot ({args.hot})")
        ax.set_title(f"{label} (round {rounds})\nEq. 12 = {uniformity:.3f}", fontsize=9)
        ax.set_xticks([]), ax.set_yticks([])
        rows.append({"model": label, "checkpoint": path, "rounds": rounds, "item_uniformity": round(uniformity, 4),
                     "hot_spread": round(float(np.linalg.norm(points[is_hot] - points[is_hot].mean(0), axis=1).mean()
                                               / np.linalg.norm(points - points.mean(0), axis=1).mean()), 4)})
    axes[0][0].legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    args.out.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out / "fig2.png", dpi=110)
    with open(args.out / "fig2.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    for row in rows:
        print(row)
    print(f"written: {args.out / 'fig2.png'}, {args.out / 'fig2.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
