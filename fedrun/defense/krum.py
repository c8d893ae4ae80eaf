"""Krum per item row (Blanchard et al., NeurIPS 2017), and the selection it shares with Multi-Krum.

Per row with c uploads x_1..x_c: the score of x_i is Σ of its squared L2 distances to its
n = c − f − 2 nearest other uploads; Krum keeps the upload with the lowest score (ties: the
earlier upload). ``variant=closest_to_mean`` is rCL4FedRec's reading instead ("the gradient of an
item that is closest to the mean of all other clients' uploaded gradients of this item"): the score
of x_i is ‖x_i − mean_{j≠i} x_j‖².

Rows with few uploads (a documented rule; Krum's guarantee needs c ≥ 2f + 3): n is clamped to
[1, c − 1], so a row with three or more uploads still selects; a row with one upload keeps it and a
row with two takes their mean (two uploads cannot tell which one is the outlier). Dense shared
weights: the same rule over every uploading client, whose count the round checks: f must stay
below half the round's clients. ``reduce=sum`` multiplies the selection by the row's uploader count.
"""

from __future__ import annotations

import torch

from fedrun.defense._rows import RobustDefense
from fedrun.defense.config import KrumConfig
from fedrun.errors import check


def squared_distances(x: torch.Tensor) -> torch.Tensor:
    """x [g, c, d] → ‖x_i − x_j‖² [g, c, c], as ‖x_i‖² + ‖x_j‖² − 2 x_i·x_j (one batched matmul that adds the
    norms itself: −2 x_i·x_j is exact in floating point, so this rounds as the three-pass form did)."""
    square = x.pow(2).sum(2)  # [g, c]
    norms = square.unsqueeze(2) + square.unsqueeze(1)  # [g, c, c]
    return torch.baddbmm(norms, x, x.transpose(1, 2), alpha=-2).clamp_min_(0)


def krum_scores(values: torch.Tensor, f: int, variant: str) -> torch.Tensor:
    """values [g, c, d] (c ≥ 3) → each upload's score [g, c]."""
    c = values.shape[1]
    if variant == "closest_to_mean":
        others = (values.sum(1, keepdim=True) - values) / (c - 1)
        return (values - others).pow(2).sum(2)
    distance = squared_distances(values)  # [g, c, c]
    n = min(max(c - f - 2, 1), c - 1)  # neighbours scored
    dropped = c - 1 - n  # the farthest others, not scored (f + 1 for a row of c ≥ f + 3)
    if dropped < n:
        # few to drop (small f): zero the upload itself and its `dropped` farthest, then sum the rest — a top-k of
        # f + 1 instead of one of c − f − 2, which is nearly a sort. Zeroed, not subtracted from the full sum: an
        # attacker's huge distances would swamp an honest upload's score in float32.
        distance.diagonal(dim1=1, dim2=2).zero_()
        if dropped <= 3:  # Krum's f ≤ 2: one max pass per dropped distance, 2–3× faster than a top-k of short rows
            for _ in range(dropped):
                distance.scatter_(2, distance.argmax(dim=2, keepdim=True), 0.0)
        else:
            distance.scatter_(2, distance.topk(dropped, dim=2).indices, 0.0)
        return distance.sum(2)
    distance.diagonal(dim1=1, dim2=2).fill_(float("inf"))
    return distance.topk(n, dim=2, largest=False).values.sum(2)


def select(values: torch.Tensor, m: int, f: int, variant: str) -> torch.Tensor:
    """The mean of each row's m lowest-scored uploads (m capped at c; ties in upload order) → [g, d];
    rows of one or two uploads: their mean."""
    c = values.shape[1]
    if c <= 2:
        return values.mean(1)
    scores = krum_scores(values, f, variant)  # [g, c]
    if m == 1:  # Krum: the lowest score, the earlier upload on a tie (a stable sort's first) in one pass
        order = scores.argmin(dim=1, keepdim=True)  # [g, 1]
    else:
        order = scores.argsort(dim=1, stable=True)[:, : min(m, c)]  # [g, m]
    return values.gather(1, order.unsqueeze(2).expand(-1, -1, values.shape[2])).mean(1)


class Krum(RobustDefense):
    Config = KrumConfig
    selected = 1  # uploads averaged after scoring (Multi-Krum: m)

    def check_participants(self, n_clients: int) -> None:
        check(2 * self.config.f < n_clients, "defense.f", self.config.f,
              f"fewer than half of the round's {n_clients} clients (an integer below {(n_clients + 1) // 2})")

    def reduce(self, values: torch.Tensor) -> torch.Tensor:
        return select(values, self.selected, self.config.f, self.config.variant)
