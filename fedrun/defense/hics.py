"""HiCS: hierarchical gradient clipping with sparsified updating — the countermeasure of Yuan et al.
(SIGIR 2023, "Manipulating federated recommender systems: poisoning with synthetic users and its
countermeasures"), which rCL4FedRec compares against (its Table 3 and Fig. 4).

No public code or step-level description exists (``../shared/REFERENCE.md`` §2): this module is a
design from the papers' one-line descriptions ("hierarchical gradient clipping with sparsified
updating"; a sibling paper: "user-level gradient clipping with sparsified updating"). Every choice
is a config field:

1. Item level: every uploaded row is L2-clipped to τ_row = ``scale`` × the ``quantile``-th quantile of
   the round's uploaded row norms. Bounds are relative to the round, so the rule needs no tuning to a
   method's update scale: a poisoned row far larger than benign rows of the same round is cut to a
   benign size.
2. User level (the hierarchy's second level): each client's clipped rows together are scaled to L2
   norm ≤ τ_user = ``scale`` × the same quantile of the clients' total norms. Dense shared weights are
   clipped per client and per weight the same way (quantile over the clients).
3. Sparsified updating: a row is updated only when at least ``min_uploaders`` clients uploaded it in
   the round; rows pushed by fewer wait (their uploads are dropped).

Then the rows are averaged over their uploaders (``reduce=mean``) or summed (``reduce=sum``), keeping
the method's server semantics.
"""

from __future__ import annotations

import math

import torch

from fedrun.defense.base import Defense
from fedrun.defense.config import HiCSConfig
from fedrun.defense.norm_bound import clip_each
from fedrun.errors import check
from fedrun.privacy.ldp import clip_rows
from fedrun.types import Aggregate, RoundContext, Uploads


def quantile_of(values: torch.Tensor, q: float) -> torch.Tensor:
    """The q-quantile of a 1-D tensor as its ⌈q·n⌉-th smallest value (no interpolation; any size)."""
    return values.kthvalue(min(values.numel(), max(1, math.ceil(q * values.numel())))).values


class HiCS(Defense):
    Config = HiCSConfig

    def check_participants(self, n_clients: int) -> None:
        check(self.config.min_uploaders <= n_clients, "defense.min_uploaders", self.config.min_uploaders,
              f"at most the round's {n_clients} clients: a row with fewer uploaders in a round is never updated")

    def aggregate(self, uploads: Uploads, ctx: RoundContext | None = None) -> Aggregate:
        config = self.config
        rows = uploads.row_delta  # [R, di]
        items = uploads.row_item
        if rows.shape[0]:
            rows = clip_rows(rows, "l2", config.scale * quantile_of(rows.norm(dim=1), config.quantile))  # 1. item
            totals = rows.new_zeros(uploads.n_clients).index_add_(0, uploads.row_client, rows.square().sum(1)).sqrt()
            positive = totals[totals > 0]  # clients whose rows are not all zero (all zero: nothing to clip)
            bound = config.scale * quantile_of(positive if positive.numel() else totals, config.quantile)
            rows = rows * torch.clamp(bound / totals.clamp_min(1e-30), max=1.0)[uploads.row_client, None]  # 2. user
        keys, summed, uploaders = self.reducer.sum_by_key(items, rows, torch.ones_like(items, dtype=rows.dtype))
        kept = uploaders >= config.min_uploaders  # 3. sparsified updating
        keys, summed, uploaders = keys[kept], summed[kept], uploaders[kept]
        if config.reduce == "mean":
            summed = summed / uploaders.unsqueeze(1)
        dense = {}
        for name, delta in uploads.dense.items():  # [B, *shape]
            norms = delta.reshape(delta.shape[0], -1).norm(dim=1)  # [B]
            clipped = clip_each(delta, config.scale * quantile_of(norms, config.quantile))
            dense[name] = self.reducer.sum_dense({name: clipped})[name]
            if config.reduce == "mean":
                dense[name] = dense[name] / delta.shape[0]
        return Aggregate(keys, summed, dense)
