"""Bucketing clients by data size, and each bucket's local item table.

A client's local model holds one copy of every item row it touches (its positives and
this round's negatives). ``LocalProblem`` lays those copies out as a padded ``[B, Lu]``
table per bucket, with the training examples pointing into it (``pos_slot``,
``neg_slot``), so duplicated items share one local copy exactly as in a per-client model.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedrun.backbone.sequential import SequenceView
from fedrun.types import ClientBatch


def bucketize(sizes: torch.Tensor, n_buckets: int, max_slots: int, slots_per_row: int,
              min_clients: int = 1) -> list[torch.Tensor]:
    """Split clients (by their data size) into groups of similar size.

    Returns index tensors into ``sizes``. Clients are sorted by size and cut into at most
    ``n_buckets`` groups of equal count, each of at least ``min_clients`` clients (fewer,
    larger buckets when a round is small: a bucket's cost is mostly fixed overhead); a
    group whose padded size (clients × longest × ``slots_per_row``) exceeds ``max_slots``
    is cut further.
    """
    order = torch.argsort(sizes, stable=True)
    count = max(1, min(n_buckets, order.numel() // max(min_clients, 1)))
    groups = [g for g in torch.tensor_split(order, count) if g.numel()]
    out: list[torch.Tensor] = []
    for group in groups:
        longest = int(sizes[group].max())
        per_chunk = max(1, max_slots // max(1, longest * slots_per_row))
        out.extend(torch.split(group, per_chunk))
    return out


@dataclass(frozen=True)
class LocalProblem:
    """One bucket's local training problem, in local-table coordinates."""

    batch: ClientBatch
    items: torch.Tensor  # [B, Lu] distinct item ids per client (0 where padded)
    item_mask: torch.Tensor  # [B, Lu] bool
    pos_slot: torch.Tensor  # [B, P] index into items[b]
    neg_slot: torch.Tensor | None  # [B, P, n] index into items[b]
    extra_slot: torch.Tensor | None = None  # [B, T] index into items[b]: per-client items (not per positive)
    extra_mask: torch.Tensor | None = None  # [B, T] bool: which extra entries are real (None: all)
    sequence: SequenceView | None = None  # sequential backbones: targets / Cloze masks of the positions

    @property
    def weight(self) -> torch.Tensor:
        return self.batch.n_pos().to(torch.float32)  # [B]


def local_problem(batch: ClientBatch, negatives: torch.Tensor | None, n_items: int,
                  extra: torch.Tensor | None = None, extra_mask: torch.Tensor | None = None) -> LocalProblem:
    """Deduplicate each client's (positives ∪ negatives ∪ extra) into a local item table.

    negatives [B, P, n] belong to each positive; extra [B, T] to the client as a whole (e.g.
    items the server sent it), each listed once instead of once per positive; ``extra_mask``
    [B, T] marks padding in ``extra`` when clients hold different numbers of them.
    """
    B, P = batch.pos.shape
    touched, valid = [batch.pos], [batch.pos_mask]
    if negatives is not None:
        touched.append(negatives.reshape(B, -1))
        valid.append(batch.pos_mask.unsqueeze(-1).expand_as(negatives).reshape(B, -1))
    if extra is not None:
        touched.append(extra)
        valid.append(torch.ones_like(extra, dtype=torch.bool) if extra_mask is None else extra_mask)
    touched, valid = torch.cat(touched, 1), torch.cat(valid, 1)  # [B, M]
    client = torch.arange(B, device=touched.device).unsqueeze(1).expand_as(touched)
    sentinel = B * n_items  # sorts after every real key
    key = torch.where(valid, client * n_items + touched, torch.full_like(touched, sentinel))
    uniq, inverse = torch.unique(key, return_inverse=True)  # sorted by client, then item
    real = uniq < sentinel
    owner, item = uniq // n_items, uniq % n_items
    counts = torch.bincount(owner[real], minlength=B)
    starts = counts.cumsum(0) - counts
    slot_of_uniq = torch.arange(uniq.numel(), device=uniq.device) - starts[owner.clamp_max(B - 1)]
    width = int(counts.max()) if B else 0
    items = torch.zeros(B, width, dtype=torch.int64, device=touched.device)
    item_mask = torch.zeros(B, width, dtype=torch.bool, device=touched.device)
    items[owner[real], slot_of_uniq[real]] = item[real]
    item_mask[owner[real], slot_of_uniq[real]] = True
    slots = torch.where(valid, slot_of_uniq[inverse], torch.zeros_like(inverse))  # [B, M]
    n_neg = 0 if negatives is None else negatives.shape[1] * negatives.shape[2]
    neg_slot = None if negatives is None else slots[:, P:P + n_neg].reshape(negatives.shape)
    extra_slot = None if extra is None else slots[:, P + n_neg:]
    return LocalProblem(batch, items, item_mask, slots[:, :P], neg_slot, extra_slot, extra_mask)
