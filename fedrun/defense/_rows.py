"""Per-row robust aggregation, vectorized: the uploads of each item row are gathered into dense
stacks ``[g, c, d]`` — the g rows that have exactly c uploaders each, their uploads in upload
order — by one stable sort and a view, so a rule runs as a few batched kernels per distinct
uploader count: never a Python loop over items or clients, and no padding.

A robust rule implements ``reduce(values [g, c, d]) → [g, d]``: a robust estimate of the mean of
each row's c uploads. ``RobustDefense`` applies it to every item row over the clients that
uploaded that row, and to every shared dense weight over all uploading clients (one stack of B
uploads per weight), then keeps the method's semantics: the estimate itself (``reduce=mean``)
or the estimate times the row's uploader count (``reduce=sum``, servers that sum gradients).
``scope=rows`` leaves the shared weights to the plain mean / sum: it separates what a rule stops on
the item rows from what it stops on the shared network.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch

from fedrun.defense.base import Defense
from fedrun.defense.config import RobustConfig
from fedrun.types import Aggregate, RoundContext, Uploads


@dataclass(frozen=True)
class RowStack:
    """The rows with exactly ``count`` uploads: which distinct rows they are [g] and their uploads
    [g, count, d] in upload order."""

    rows: torch.Tensor
    values: torch.Tensor
    count: int


def stack_rows(keys: torch.Tensor, deltas: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, list[RowStack]]:
    """keys [R] (ids ≥ 0), deltas [R, d] → (distinct keys [G] sorted, uploads per key [G], the stacks, one per
    distinct uploader count)."""
    per_key = torch.bincount(keys)  # [max key + 1]
    distinct = per_key.nonzero().squeeze(1)  # [G]
    count = per_key[distinct]  # [G]
    # one stable sort on (uploader count, key): rows of equal count together, by key, uploads in upload order
    order = torch.argsort(per_key[keys] * per_key.numel() + keys, stable=True)  # [R]
    ordered = deltas.index_select(0, order)  # [R, d]; 4× faster than deltas[order] on the CPU (W9)
    row_order = torch.argsort(count, stable=True)  # [G] the rows in the same order
    sizes, rows_per_size = torch.unique_consecutive(count[row_order], return_counts=True)
    stacks, at, first = [], 0, 0
    for c, g in zip(sizes.tolist(), rows_per_size.tolist()):  # one stack per distinct uploader count
        stacks.append(RowStack(row_order[first: first + g], ordered[at: at + g * c].view(g, c, -1), c))
        at, first = at + g * c, first + g
    return distinct, count, stacks


def order_statistics(values: torch.Tensor, ranks: tuple[int, ...]) -> torch.Tensor:
    """values [g, c, d] → the same values reordered along the uploads (dim 1) so that position r holds the r-th
    smallest value for every r in ``ranks``, smaller values before it and larger after (between two ranks:
    unsorted). A selection, not a sort: on the CPU NumPy's introselect (``np.partition``), 3–5× faster than
    torch's sort of the same stacks (``docs/benchmarks.md``, W9); on other devices, and for dtypes
    NumPy lacks, a sort, which satisfies the same contract."""
    if values.device.type != "cpu" or values.dtype not in (torch.float32, torch.float64):
        return values.sort(dim=1).values
    highest, *lower = sorted(set(ranks), reverse=True)
    out = np.partition(values.detach().numpy(), highest, axis=1)
    for rank, above in zip(lower, [highest, *lower]):  # each in the prefix the previous one left: the smallest
        out[:, :above].partition(rank, axis=1)  # in place; one rank per call is twice as fast as several at once
    return torch.from_numpy(out)


class RobustDefense(Defense):
    """A non-linear rule applied per item row (and per dense weight) over its uploaders."""

    Config: ClassVar[type] = RobustConfig

    def reduce(self, values: torch.Tensor) -> torch.Tensor:
        """values [g, c, d]: g rows of c uploads each → the rule's estimate per row [g, d]."""
        raise NotImplementedError

    def rows(self, keys: torch.Tensor, deltas: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """keys [R], deltas [R, d] → distinct keys [G], the rule's estimate per key [G, d] (× the
        uploader count under ``reduce=sum``)."""
        distinct, count, stacks = stack_rows(keys, deltas)
        out = deltas.new_empty(distinct.numel(), deltas.shape[1])
        for stack in stacks:
            out[stack.rows] = self.reduce(stack.values)
        if self.config.reduce == "sum":
            out = out * count.unsqueeze(1).to(out.dtype)
        return distinct, out

    def aggregate(self, uploads: Uploads, ctx: RoundContext | None = None) -> Aggregate:
        items, item_delta = self.rows(uploads.row_item, uploads.row_delta)
        dense = {}
        for name, delta in uploads.dense.items():  # [B, *shape]: one row, every client uploads it
            if self.config.scope == "rows":  # the shared weights as the plain server would: mean or sum
                dense[name] = delta.sum(0) if self.config.reduce == "sum" else delta.mean(0)
                continue
            flat = delta.reshape(delta.shape[0], -1)
            _, estimate = self.rows(torch.zeros(flat.shape[0], dtype=torch.long, device=flat.device), flat)
            dense[name] = estimate[0].view(delta.shape[1:])
        return Aggregate(items, item_delta, dense)
