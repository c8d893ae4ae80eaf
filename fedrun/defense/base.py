"""Server-side aggregation rules, applied per item row over the clients that uploaded it.

A rule receives :class:`Uploads` only (the privacy boundary) and returns an
:class:`Aggregate`. Every server-side sum goes through a rule, and every rule sums through the
reduction seam (``fedrun.kernels.rows.RowReducer``).

Declared capabilities (checked by ``fedrun.app.build.check_combination`` before any data is read):
  - ``linear``: the rule is Σ_c w_c Δ_c / (Σ_c w_c or 1) per row; it then exposes its client
    weights (the FedSGD fast path aggregates through one backward pass with them);
  - ``offers_exact_sum``: it can hand a method whose server rule is a sum (FedMF, LightFR,
    PrivRec, FedRec++, FCF, MetaMF) exactly Σ_c Δ_c — a linear rule with unit weights;
  - ``plain``: it is plain averaging, i.e. no defense at all (what a method without a server
    aggregation, ``central`` or ``pop``, accepts).
"""

from __future__ import annotations

from typing import ClassVar

import torch

from fedrun.kernels.rows import LOCAL, RowReducer
from fedrun.types import Aggregate, RoundContext, Uploads


class Defense:
    Config: ClassVar[type]
    linear: ClassVar[bool] = False
    normalized: ClassVar[bool] = True  # linear rules: divide by the uploaders' total weight

    def __init__(self, config, reducer: RowReducer = LOCAL):
        self.config = config
        self.reducer = reducer

    def aggregate(self, uploads: Uploads, ctx: RoundContext | None = None) -> Aggregate:
        raise NotImplementedError

    def linear_weights(self, data_size: torch.Tensor) -> torch.Tensor | None:
        """Per-client weights [B] if the rule is Σ_c w_c Δ_c / (Σ_c w_c or 1), else None."""
        return None

    def check_participants(self, n_clients: int) -> None:
        """Refuse settings a round of ``n_clients`` clients cannot meet (checked before training)."""

    @property
    def offers_exact_sum(self) -> bool:
        return False

    @property
    def plain(self) -> bool:
        return False

    def exact_sum(self, uploads: Uploads, reducer: RowReducer | None = None) -> Aggregate:
        """Σ_c Δ_c per item row (with the raters behind each row) and per dense weight, for a method
        whose server rule is a sum; ``reducer`` replaces this rule's own (a secure sum)."""
        raise NotImplementedError(f"{type(self).__name__} is not a linear rule with unit weights")


class LinearDefense(Defense):
    """Per item i: Σ_{c ∋ i} w_c Δ_ci / Σ_{c ∋ i} w_c (normalized) or Σ_{c ∋ i} w_c Δ_ci."""

    linear = True

    def aggregate(self, uploads: Uploads, ctx: RoundContext | None = None) -> Aggregate:
        data_size = uploads.weight if uploads.weight is not None else torch.ones(uploads.n_clients)
        weight = self.linear_weights(data_size.to(uploads.row_delta))  # [B]
        row_weight = weight[uploads.row_client]  # [R]
        rows = uploads.row_delta if self.offers_exact_sum else uploads.row_delta * row_weight.unsqueeze(1)  # ×1: as is
        items, total, item_weight = self.reducer.sum_by_key(uploads.row_item, rows, row_weight)  # [G], [G, di], [G]
        dense = self.reducer.sum_dense(uploads.dense, weight)
        if self.normalized:
            total = total / item_weight.unsqueeze(1)
            dense = {k: v / weight.sum() for k, v in dense.items()}
        return Aggregate(items, total, dense)

    @property
    def offers_exact_sum(self) -> bool:
        return bool((self.linear_weights(torch.arange(1.0, 4.0)) == 1).all())  # unit weights

    def exact_sum(self, uploads: Uploads, reducer: RowReducer | None = None) -> Aggregate:
        if not self.offers_exact_sum:
            return super().exact_sum(uploads, reducer)
        return (reducer or self.reducer).sum_uploads(uploads)
