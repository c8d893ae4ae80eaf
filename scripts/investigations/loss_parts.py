"""FedCL's training loss split into its parts, per epoch: Eq. 1's data term and the L2 term's squared norms.

Under ``backbone.l2`` the loss a FedCL run logs is Eq. 1 plus l2·(‖u‖² + ‖p‖² + Σ‖n‖²) per positive (the
method's docstring). This trains the run its overrides compose (without tracking) for ``--epochs`` epochs and
prints, per epoch, the logged loss, the data term and the mean squared norms: of the private user rows as each
client used them, of the positives' rows and of one local negative's row.

  python scripts/investigations/loss_parts.py --epochs 5 +experiment=fedcl/table2 dataset=beauty backbone=fedcl/ncf \
      row=fedcl/fed sim.seed=1 [--out PATH.csv]

The parts are read by wrapping ``mixup_loss`` and ``example_sq_norms`` where ``fedrun.method._retrieval`` calls
them: the run and its numbers are the same as without the wrapping (the first epoch's loss equals the run's).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
from collections.abc import Iterator
from pathlib import Path

import torch

import fedrun.method._retrieval as fedcl  # FedCL's training, where Eq. 1 is called
from fedrun.app.compose import compose
from fedrun.app.plan import build_run
from fedrun.method.fedcl import FedCL


@contextlib.contextmanager
def recorded_parts() -> Iterator[dict[str, list[float]]]:
    """While open, each call of FedCL's loss parts appends its mean to ``parts[name]``."""
    parts: dict[str, list[float]] = {"data": [], "user_sq": [], "positive_sq": [], "negative_sq": []}
    mixup_loss, example_sq_norms = fedcl.mixup_loss, fedcl.example_sq_norms

    def data_term(*args, **kwargs) -> torch.Tensor:
        loss = mixup_loss(*args, **kwargs)  # [n]
        parts["data"].append(loss.detach().mean().item())
        return loss

    def sq_norms(user: torch.Tensor, vectors: torch.Tensor, n_pos: int) -> torch.Tensor:
        rows = vectors.detach().pow(2).sum(-1)  # [n, S]
        parts["user_sq"].append(user.detach().pow(2).sum(-1).mean().item())
        parts["positive_sq"].append(rows[:, :n_pos].mean().item())
        parts["negative_sq"].append(rows[:, n_pos:].mean().item())
        return example_sq_norms(user, vectors, n_pos)

    fedcl.mixup_loss, fedcl.example_sq_norms = data_term, sq_norms
    try:
        yield parts
    finally:
        fedcl.mixup_loss, fedcl.example_sq_norms = mixup_loss, example_sq_norms


def mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def loss_parts(overrides: list[str], epochs: int) -> list[dict[str, float]]:
    """Per epoch: the logged loss (each round's mean over its clients' means), then the parts, each a mean
    over the epoch's rounds of its mean over the examples scored (equal when each round is one client)."""
    built = build_run(compose([*overrides, "track=none"]))
    if not isinstance(built.method, FedCL):
        raise SystemExit(f"the overrides select {type(built.method).__name__}; this splits FedCL's loss")
    if built.plan.sim.threads:
        torch.set_num_threads(built.plan.sim.threads)
    per_epoch, rows = built.trainer.rounds_per_epoch(), []
    with recorded_parts() as parts:
        for epoch in range(epochs):
            losses = []
            for key in parts:
                parts[key].clear()
            for round_index in range(epoch * per_epoch, (epoch + 1) * per_epoch):
                losses.append(built.trainer.train_round(round_index).loss)
            rows.append({"epoch": epoch + 1, "loss": mean(losses), **{k: mean(v) for k, v in parts.items()}})
            print("  ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in rows[-1].items()),
                  flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args, overrides = parser.parse_known_args()
    rows = loss_parts(overrides, args.epochs)
    if args.out:
        with args.out.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)


if __name__ == "__main__":
    main()
