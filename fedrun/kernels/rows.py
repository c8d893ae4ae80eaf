"""Row-wise kernels: a differentiable row gather whose backward is one ``index_add_`` (no sort), the
per-key sums of every aggregation rule, and the reduction seam (``RowReducer``) they go through.

The gather:

``F.embedding``'s CPU backward sorts the indices to sum duplicates; with hundreds of
thousands of lookups per round that sort dominates. Summing duplicate rows with
``index_add_`` gives the same gradient (up to summation order) at a fraction of the cost.
"""

from __future__ import annotations

import torch

from fedrun.types import Aggregate, Uploads


class _GatherRows(torch.autograd.Function):
    @staticmethod
    def forward(ctx, table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(index)
        ctx.n_rows = table.shape[0]
        return table.index_select(0, index.reshape(-1)).view(*index.shape, table.shape[1])

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (index,) = ctx.saved_tensors
        grad_table = torch.zeros(ctx.n_rows, grad.shape[-1], dtype=grad.dtype, device=grad.device)
        grad_table.index_add_(0, index.reshape(-1), grad.reshape(-1, grad.shape[-1]))
        return grad_table, None


def gather_rows(table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """table [N, d], index [*shape] → [*shape, d], differentiable w.r.t. ``table``."""
    return _GatherRows.apply(table, index)


def sum_by_key(keys: torch.Tensor, rows: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """keys [R] (≥ 0), rows [R, d], weights [R] → the distinct keys [G] (sorted), Σ rows per key [G, d]
    and Σ weights per key [G]: the per-item sums of every aggregation rule.

    Where the keys are dense (the largest below ``KEY_TABLE_RATIO`` × R: a round's items, small catalogue) the sums
    go straight into a table indexed by key and the distinct keys are its occupied rows (no sort); otherwise the
    keys are sorted to their distinct values first. Either way each key's rows are added in their upload order, so
    both give the same bits.
    """
    high = int(keys.max()) + 1 if keys.numel() else 0
    if high <= KEY_TABLE_RATIO * keys.numel():
        summed = torch.zeros(high, rows.shape[1], dtype=rows.dtype, device=rows.device).index_add_(0, keys, rows)
        total = torch.zeros(high, dtype=weights.dtype, device=weights.device).index_add_(0, keys, weights)
        distinct = torch.bincount(keys, minlength=high).nonzero().squeeze(1)  # [G] sorted
        return distinct, summed.index_select(0, distinct), total.index_select(0, distinct)
    distinct, inverse = torch.unique(keys, return_inverse=True)
    summed = torch.zeros(distinct.numel(), rows.shape[1], dtype=rows.dtype, device=rows.device)
    summed.index_add_(0, inverse, rows)
    total = torch.zeros(distinct.numel(), dtype=weights.dtype, device=weights.device).index_add_(0, inverse, weights)
    return distinct, summed, total


KEY_TABLE_RATIO = 2  # largest key / rows up to which the per-key sums use a table indexed by key


class RowReducer:
    """The reduction seam: every server-side sum of uploads goes through one of these. This one
    sums on the local device; a distributed reducer (``torch.distributed`` collectives) or a
    secure one (FedMF's Paillier sum, ``fedrun.privacy.paillier``) replaces it without touching
    any method or defense."""

    def sum_by_key(self, keys: torch.Tensor, rows: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return sum_by_key(keys, rows, weights)

    def sum_dense(self, dense: dict[str, torch.Tensor], weight: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """name → [B, *shape] per-client deltas → name → Σ_c w_c Δ_c [*shape] (w = 1 when None)."""
        if weight is None:
            return {name: delta.sum(0) for name, delta in dense.items()}
        return {name: torch.tensordot(weight, delta, dims=1) for name, delta in dense.items()}

    def sum_uploads(self, uploads: Uploads) -> Aggregate:
        """Σ_c Δ_c per item row (with the raters behind each row) and per dense weight."""
        items, total, count = self.sum_by_key(uploads.row_item, uploads.row_delta, uploads.counts())
        return Aggregate(items, total, self.sum_dense(uploads.dense), count)


LOCAL = RowReducer()
