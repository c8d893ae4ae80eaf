"""Server-side aggregation rules, applied per item row over the clients that uploaded it.

A rule receives :class:`Uploads` only (the privacy boundary) and returns an
:class:`Aggregate`. Linear rules (weighted mean, sum) also expose their client weights,
which lets the FedSGD fast path aggregate through one backward pass.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from fedrun.sim.rows import sum_by_key
from fedrun.types import Aggregate, Uploads


class Defense:
    Config: ClassVar[type]

    def __init__(self, config):
        self.config = config

    def aggregate(self, uploads: Uploads) -> Aggregate:
        raise NotImplementedError

    def linear_weights(self, data_size: torch.Tensor) -> torch.Tensor | None:
        """Per-client weights [B] if the rule is Σ_c w_c Δ_c / (Σ_c w_c or 1), else None."""
        return None

    normalized: ClassVar[bool] = True  # linear rules: divide by the uploaders' total weight


class LinearDefense(Defense):
    """Per item i: Σ_{c ∋ i} w_c Δ_ci / Σ_{c ∋ i} w_c (normalized) or Σ_{c ∋ i} w_c Δ_ci."""

    def aggregate(self, uploads: Uploads) -> Aggregate:
        data_size = uploads.weight if uploads.weight is not None else torch.ones(uploads.n_clients)
        weight = self.linear_weights(data_size.to(uploads.row_delta))  # [B]
        row_weight = weight[uploads.row_client]  # [R]
        items, total, item_weight = sum_by_key(uploads.row_item, uploads.row_delta * row_weight.unsqueeze(1),
                                               row_weight)  # [G], [G, di], [G]
        dense = {k: torch.tensordot(weight, v, dims=1) for k, v in uploads.dense.items()}
        if self.normalized:
            total = total / item_weight.unsqueeze(1)
            dense = {k: v / weight.sum() for k, v in dense.items()}
        return Aggregate(items, total, dense)
