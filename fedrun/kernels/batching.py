"""Bucketing clients by data size, and each bucket's local item table.

A client's local model holds one copy of every item row it touches (its positives and
this round's negatives). ``LocalProblem`` lays those copies out as a padded ``[B, Lu]``
table per bucket, with the training examples pointing into it (``pos_slot``,
``neg_slot``), so duplicated items share one local copy exactly as in a per-client model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from fedrun.backbone.sequential import SequenceView
from fedrun.types import ClientBatch


def bucketize(sizes: torch.Tensor, n_buckets: int | str, max_slots: int, slots_per_row: int,
              min_clients: int = 1, padding: float = 1.3) -> list[torch.Tensor]:
    """Split clients (by their data size) into groups of similar size.

    Returns index tensors into ``sizes``, smallest clients first, in size order (stable). ``n_buckets="auto"``:
    as few groups as keep every group's padded slots (clients × longest) at most ``padding`` times its real ones
    (``padded_groups``), so padding stays bounded however many clients a round has. An integer: clients cut into
    at most ``n_buckets`` groups of equal count, each of at least ``min_clients`` clients (fewer, larger buckets
    when a round is small). Either way a group whose padded size (clients × longest × ``slots_per_row``) exceeds
    ``max_slots`` is cut further.
    """
    order = torch.argsort(sizes, stable=True)
    if n_buckets == "auto":
        groups = padded_groups(order, sizes[order], padding)
    else:
        count = max(1, min(int(n_buckets), order.numel() // max(min_clients, 1)))
        groups = [g for g in torch.tensor_split(order, count) if g.numel()]
    out: list[torch.Tensor] = []
    for group in groups:
        longest = int(sizes[group].max())
        per_chunk = max(1, max_slots // max(1, longest * slots_per_row))
        out.extend(torch.split(group, per_chunk))
    return out


def padded_groups(order: torch.Tensor, sorted_sizes: torch.Tensor, padding: float) -> list[torch.Tensor]:
    """``order`` [n] (clients by size), ``sorted_sizes`` [n] ascending → contiguous groups each holding at most
    ``padding`` × its real slots once padded to its longest client.

    Greedy from the longest client down: each group takes every shorter client it can. Whether a group from client i
    up fits is monotone in i (a group that fits still fits without its shortest client, which is below its mean), so
    the group's first client is found by one vector test over the candidates, none per client. Not always the fewest
    groups (a group that takes a client can leave the next unable to close), but never a group that could take the
    next shorter client.
    """
    n = order.numel()
    sizes = sorted_sizes.to(torch.float64)
    prefix = torch.cat([sizes.new_zeros(1), sizes.cumsum(0)])  # [n + 1] slots of the i shortest clients
    starts = torch.arange(n, dtype=torch.float64, device=sizes.device)  # [n] candidate first client of a group
    bounds, end = [], n
    while end > 0:
        longest = sizes[end - 1]
        fits = (end - starts[:end]) * longest <= padding * (prefix[end] - prefix[:end])  # [end]: a suffix of True
        start = int(fits.to(torch.uint8).argmax())  # the first client that fits (the longest one always does)
        bounds.append((start, end))
        end = start
    return [order[start:end] for start, end in reversed(bounds)]


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
    real: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None  # (client, slot, item) [R]: ``real_rows``
    examples: torch.Tensor | None = None  # [B, S] pos_slot, then neg_slot flattened (``example_slots``)
    # [R, di] where the client step writes the real rows' deltas it uploads (``real_rows``' order): the bucket's slice
    # of one buffer for the round, so the buckets' uploads join without a copy. A problem is stepped once a round.
    upload_rows: torch.Tensor | None = None

    @property
    def weight(self) -> torch.Tensor:
        return self.batch.n_pos().to(torch.float32)  # [B]

    def context_bytes_down(self) -> torch.Tensor:
        """[B] bytes each client's user context received beside the model's rows (a graph's neighbours): none."""
        return torch.zeros(self.items.shape[0], dtype=torch.float64, device=self.items.device)

    def real_rows(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The real entries of the local tables, row-major (``item_mask.nonzero``'s order): client [R], slot [R] and
        item id [R]. ``local_problems`` keeps them from building the tables; otherwise they are read back."""
        if self.real is not None:
            return self.real
        client, slot = self.item_mask.nonzero(as_tuple=True)  # [R], [R]
        return client, slot, self.items.reshape(-1).index_select(0, client * self.items.shape[1] + slot)


def local_problem(batch: ClientBatch, negatives: torch.Tensor | None, n_items: int,
                  extra: torch.Tensor | None = None, extra_mask: torch.Tensor | None = None) -> LocalProblem:
    """Deduplicate each client's (positives ∪ negatives ∪ extra) into a local item table.

    negatives [B, P, n] belong to each positive; extra [B, T] to the client as a whole (e.g.
    items the server sent it), each listed once instead of once per positive; ``extra_mask``
    [B, T] marks padding in ``extra`` when clients hold different numbers of them.
    """
    return local_problems([batch], [negatives], n_items, [extra], [extra_mask])[0]


def local_problems(batches: Sequence[ClientBatch], negatives: Sequence[torch.Tensor | None], n_items: int,
                   extras: Sequence[torch.Tensor | None] | None = None,
                   extra_masks: Sequence[torch.Tensor | None] | None = None,
                   uploaded: torch.Tensor | None = None) -> list[LocalProblem]:
    """``local_problem`` of every bucket of a round, with one de-duplication for the round.

    A client's table depends on its own keys alone (its distinct items, ascending), so one sort of every
    bucket's (client, item) keys gives each bucket the table its own sort would; the buckets' clients are
    numbered one after another, so each bucket's distinct keys are one contiguous run of the round's.
    ``uploaded`` [N, di]: the table whose rows' deltas the clients upload; each bucket gets its slice of one
    buffer for them (``LocalProblem.upload_rows``), and its real rows' item ids are its slice of the round's.
    """
    extras = [None] * len(batches) if extras is None else extras
    extra_masks = [None] * len(batches) if extra_masks is None else extra_masks
    keys, layouts, offset = [], [], 0
    total = sum(batch.pos.shape[0] for batch in batches)
    sentinel = total * n_items  # sorts after every real key
    for batch, negs, extra, extra_mask in zip(batches, negatives, extras, extra_masks):
        touched, valid = _touched(batch, negs, extra, extra_mask)  # [B, M]
        B = touched.shape[0]
        client = offset + torch.arange(B, device=touched.device).unsqueeze(1)
        keys.append(torch.where(valid, client * n_items + touched, torch.full_like(touched, sentinel)).reshape(-1))
        layouts.append((B, touched.shape[1]))
        offset += B
    if not keys:
        return []
    round_keys = torch.cat(keys)  # [Σ B·M]
    uniq, inverse = torch.unique(round_keys, return_inverse=True)  # sorted by client, then item
    owner, item = uniq // n_items, uniq % n_items  # the sentinel, last if present, is owner ``total``'s
    counts = torch.bincount(owner, minlength=total + 1)[:total]  # [total] distinct items per client
    starts = counts.cumsum(0) - counts
    slot_of_uniq = torch.arange(uniq.numel(), device=uniq.device) - starts[owner.clamp_max(max(total - 1, 0))]
    sizes = torch.tensor([b for b, _ in layouts], device=counts.device)
    bucket = torch.repeat_interleave(torch.arange(len(layouts), device=counts.device), sizes)  # [total]
    widths = torch.zeros_like(sizes).scatter_reduce_(0, bucket, counts, "amax")  # [buckets] widest table
    reals = torch.zeros_like(sizes).index_add_(0, bucket, counts)  # [buckets] distinct keys
    per_bucket = torch.stack([widths, reals], 1).tolist()  # one transfer for the round
    n_real_total = sum(n_real for _, n_real in per_bucket)
    rows_out = None if uploaded is None else uploaded.new_empty(n_real_total, uploaded.shape[1])  # [R, di] the round's
    # every bucket's [B, width] tables in one buffer, one block after another, filled at once
    blocks = [B * width for (B, _), (width, _) in zip(layouts, per_bucket)]
    block_start = torch.tensor([0, *blocks[:-1]], device=counts.device).cumsum(0)[bucket]  # [total]
    first_of_bucket = (sizes.cumsum(0) - sizes)[bucket]  # [total]
    table_row = block_start + (torch.arange(total, device=counts.device) - first_of_bucket) * widths[bucket]
    position = table_row[owner[:n_real_total]] + slot_of_uniq[:n_real_total]  # [R] the real keys, sorted first
    all_items = torch.zeros(sum(blocks), dtype=torch.int64, device=uniq.device).index_put_(
        (position,), item[:n_real_total])
    all_masks = torch.zeros(sum(blocks), dtype=torch.bool, device=uniq.device).index_put_(
        (position,), torch.ones((), dtype=torch.bool, device=uniq.device))
    all_slots = torch.where(round_keys < sentinel, slot_of_uniq[inverse], 0)  # [Σ B·M] each entry's slot (0: padding)
    out, first_client, first_key, first_entry, first_cell = [], 0, 0, 0, 0
    for (B, M), (width, n_real), batch, negs, extra, extra_mask in zip(
            layouts, per_bucket, batches, negatives, extras, extra_masks):
        rows = slice(first_key, first_key + n_real)  # the bucket's distinct keys
        cells = slice(first_cell, first_cell + B * width)
        items, item_mask = all_items[cells].view(B, width), all_masks[cells].view(B, width)
        real = (owner[rows] - first_client, slot_of_uniq[rows], item[rows])  # [R] each, by client then item: row-major
        slots = all_slots[first_entry:first_entry + B * M].view(B, M)
        P = batch.pos.shape[1]
        n_neg = 0 if negs is None else negs.shape[1] * negs.shape[2]
        neg_slot = None if negs is None else slots[:, P:P + n_neg].reshape(negs.shape)
        extra_slot = None if extra is None else slots[:, P + n_neg:]
        out.append(LocalProblem(batch, items, item_mask, slots[:, :P], neg_slot, extra_slot, extra_mask, real=real,
                                examples=slots[:, :P + n_neg],
                                upload_rows=None if rows_out is None else rows_out[rows]))
        first_client, first_key, first_entry = first_client + B, first_key + n_real, first_entry + B * M
        first_cell += B * width
    return out


def _touched(batch: ClientBatch, negatives: torch.Tensor | None, extra: torch.Tensor | None,
             extra_mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, M] the items each client's examples touch (positives, their negatives, the extra ones) and which are
    real."""
    B = batch.pos.shape[0]
    touched, valid = [batch.pos], [batch.pos_mask]
    if negatives is not None:
        touched.append(negatives.reshape(B, -1))
        valid.append(batch.pos_mask.unsqueeze(-1).expand_as(negatives).reshape(B, -1))
    if extra is not None:
        touched.append(extra)
        valid.append(torch.ones_like(extra, dtype=torch.bool) if extra_mask is None else extra_mask)
    return torch.cat(touched, 1), torch.cat(valid, 1)
