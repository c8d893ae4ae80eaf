"""Norm bounding per item row (Sun et al. 2019, "Can you really backdoor federated learning?"):
every upload of a row is scaled to L2 norm at most τ, then the row's uploads are averaged
(``reduce=mean``) or summed (``reduce=sum``: FedRecAttack's server, which clips each client's
per-item gradient to ``grad_limit`` τ = 1.0 before summing). Dense shared weights: each client's
delta of a weight is clipped to τ as a whole.

A clip per upload followed by a sum needs no per-row stacks: the rule runs as one scaling of the
uploads and the reduction seam's sums (``RowReducer.sum_by_key``), like the mean.
"""

from __future__ import annotations

import torch

from fedrun.defense.base import Defense
from fedrun.defense.config import NormBoundConfig
from fedrun.privacy.ldp import clip_rows
from fedrun.types import Aggregate, RoundContext, Uploads


class NormBound(Defense):
    Config = NormBoundConfig

    def aggregate(self, uploads: Uploads, ctx: RoundContext | None = None) -> Aggregate:
        tau, mean = self.config.tau, self.config.reduce == "mean"
        rows = clip_rows(uploads.row_delta, "l2", tau)  # [R, di]
        ones = torch.ones(rows.shape[0], dtype=rows.dtype, device=rows.device)
        items, total, uploaders = self.reducer.sum_by_key(uploads.row_item, rows, ones)
        if mean:
            total = total / uploaders.unsqueeze(1)
        scoped = self.config.scope == "all"  # rows: the shared weights are summed as uploaded
        dense = self.reducer.sum_dense({k: clip_each(v, tau) if scoped else v for k, v in uploads.dense.items()})
        if mean:
            dense = {k: v / uploads.n_clients for k, v in dense.items()}
        return Aggregate(items, total, dense)


def clip_each(delta: torch.Tensor, bound: float | torch.Tensor) -> torch.Tensor:
    """delta [B, *shape]: each client's delta of a weight scaled to L2 norm ≤ bound as a whole."""
    return clip_rows(delta.reshape(delta.shape[0], -1), "l2", bound).view_as(delta)
