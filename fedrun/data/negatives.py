"""Uniform negative sampling that excludes a user's positives, vectorized over all draws.

Every draw is keyed by (seed, user, position, attempt) through a counter-based hash, so a
user's negatives do not depend on batching, bucketing or device.
"""

from __future__ import annotations

from typing import Sequence, cast

import torch

from fedrun.core import hashrng


def contains(sorted_keys: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """Elementwise membership of ``keys`` in the sorted 1-D tensor ``sorted_keys``."""
    if sorted_keys.numel() == 0:
        return torch.zeros_like(keys, dtype=torch.bool)
    pos = torch.searchsorted(sorted_keys, keys).clamp_max(sorted_keys.numel() - 1)
    return sorted_keys[pos] == keys


class KeySet:
    """Membership of int64 keys in a fixed set of keys in [0, ``high``): a table of flags over [0, high) where that
    is at most ``FLAG_TABLE_RATIO`` × the set's size (no sort; a round's (client, item) keys in a small catalogue),
    the sorted keys and a binary search otherwise. Both give the same answers."""

    def __init__(self, keys: torch.Tensor, high: int | None = None, is_sorted: bool = False):
        self.flags: torch.Tensor | None = None
        self.sorted: torch.Tensor | None = None
        if high is not None and high <= FLAG_TABLE_RATIO * max(keys.numel(), 1):
            self.flags = torch.zeros(high, dtype=torch.bool, device=keys.device)
            self.flags[keys] = True
        else:
            self.sorted = keys if is_sorted else torch.sort(keys).values

    def __call__(self, keys: torch.Tensor) -> torch.Tensor:
        """Elementwise: whether each of ``keys`` is in the set."""
        if self.flags is not None:
            return self.flags[keys]
        return contains(cast(torch.Tensor, self.sorted), keys)


FLAG_TABLE_RATIO = 64  # key range / set size up to which a KeySet is a flag table (a byte per key against 8 and a sort)


def _rejection(seed: int, user: torch.Tensor, position: torch.Tensor, owner: torch.Tensor,
               excluded: KeySet, stride: int, n_items: int, max_rounds: int = 1000) -> torch.Tensor:
    """One item per draw (``user``, ``position``) [N] whose key ``owner * stride + item`` is not in
    ``excluded``. Collisions are redrawn with the next attempt number; only they are re-checked."""
    draws = hashrng.randint(seed, [user, position, torch.zeros_like(user)], n_items)
    bad = excluded(owner * stride + draws).nonzero().squeeze(1)  # [n] the draws to redraw, ascending
    for step in range(1, max_rounds):
        if bad.numel() == 0:
            break
        draws[bad] = hashrng.randint(seed, [user[bad], position[bad], torch.full_like(bad, step)], n_items)
        bad = bad[excluded(owner[bad] * stride + draws[bad])]
    if bad.numel():
        raise RuntimeError("negative sampling did not converge: some user has (almost) every item as a positive")
    return draws


def sample_negatives(users: torch.Tensor, count: int, n_items: int, positive_keys: torch.Tensor, seed: int,
                     draw_ids: torch.Tensor | None = None) -> torch.Tensor:
    """users [B] → [B, count] items drawn uniformly from each user's non-positives.

    ``positive_keys``: the sorted ``user * n_items + item`` keys of the items to exclude.
    ``draw_ids`` [B] name each row's draws (default: the user id — give distinct ids when
    a user appears in several rows that need independent negatives).
    """
    ids = (users if draw_ids is None else draw_ids).repeat_interleave(count)
    owner = users.repeat_interleave(count)
    position = torch.arange(count, device=users.device).repeat(users.numel())
    return _rejection(seed, ids, position, owner, KeySet(positive_keys, is_sorted=True), n_items,
                      n_items).view(-1, count)


def _positive_keys(pos: torch.Tensor, pos_mask: torch.Tensor, n_items: int, first: int = 0) -> torch.Tensor:
    """pos [B, P] → the keys ``(first + b) * (n_items + 1) + item`` [B·P] of every client's positives, unsorted.
    Padding becomes item id ``n_items``, which no draw takes."""
    rows = torch.where(pos_mask, pos, torch.full_like(pos, n_items))  # [B, P]
    return (rows + (first + torch.arange(pos.shape[0], device=pos.device).unsqueeze(1)) * (n_items + 1)).reshape(-1)


def _batch_keys(pos: torch.Tensor, pos_mask: torch.Tensor, n_items: int) -> tuple[torch.Tensor, int]:
    """pos [B, P] → the sorted keys ``b * stride + item`` of every client's positives, and the stride."""
    return torch.sort(_positive_keys(pos, pos_mask, n_items)).values, n_items + 1


def sample_batch_negatives(users: torch.Tensor, pos: torch.Tensor, pos_mask: torch.Tensor, n_neg: int,
                           n_items: int, seed: int) -> torch.Tensor:
    """pos [B, P] (a padded client batch) → [B, P, n_neg] items that are not the client's positives.

    The draw for (user, positive p, k) is keyed by position p·n_neg + k. The keys to
    exclude come from the batch alone, so a round never touches the whole store. Only real positives
    (``pos_mask``) get draws; a padded position holds item 0, which nothing reads (``local_problem`` masks it):
    a bucket's padding cost hash draws and membership tests for nothing.
    """
    return sample_bucket_negatives([(users, pos, pos_mask)], n_neg, n_items, seed)[0]


def sample_bucket_negatives(buckets: Sequence[tuple[torch.Tensor, torch.Tensor, torch.Tensor]], n_neg: int,
                            n_items: int, seed: int) -> list[torch.Tensor]:
    """``sample_batch_negatives`` of every bucket (users [B], pos [B, P], pos_mask [B, P]) of a round, as one
    rejection pass: the same items, since a draw is keyed by (user, position, attempt) and tested against its
    own client's positives only (the buckets' clients are numbered one after another)."""
    stride = n_items + 1
    keys, owners, positions, places, offset = [], [], [], [], 0
    for _, pos, pos_mask in buckets:
        keys.append(_positive_keys(pos, pos_mask, n_items, offset))
        client, column = pos_mask.nonzero(as_tuple=True)  # [N] the real positives
        owners.append(client.repeat_interleave(n_neg) + offset)
        positions.append((column.unsqueeze(1) * n_neg + torch.arange(n_neg, device=pos.device)).reshape(-1))
        places.append((client, column))
        offset += pos.shape[0]
    if not buckets:
        return []
    owner = torch.cat(owners)
    excluded = KeySet(torch.cat(keys), offset * stride)
    drawn = _rejection(seed, torch.cat([users for users, _, _ in buckets])[owner], torch.cat(positions), owner,
                       excluded, stride, n_items)
    out = []
    for (_, pos, _), (client, column), part in zip(buckets, places, torch.split(drawn, [o.numel() for o in owners])):
        negatives = torch.zeros(*pos.shape, n_neg, dtype=drawn.dtype, device=pos.device)  # [B, P, n_neg]
        negatives[client, column] = part.view(-1, n_neg)
        out.append(negatives)
    return out


def sample_client_negatives(users: torch.Tensor, pos: torch.Tensor, pos_mask: torch.Tensor, count: int,
                            n_items: int, seed: int) -> torch.Tensor:
    """pos [B, P] (a padded client batch) → [B, count] items per client that are not its positives,
    drawn with replacement; draw k of a user is keyed by (seed, user, k) alone, so the same seed
    gives a user the same items in every round (e.g. a simulated local negative store)."""
    B, stride = pos.shape[0], n_items + 1
    excluded = KeySet(_positive_keys(pos, pos_mask, n_items), B * stride)
    owner = torch.arange(B, device=pos.device).repeat_interleave(count)
    position = torch.arange(count, device=pos.device).repeat(B)
    return _rejection(seed, users[owner], position, owner, excluded, stride, n_items).view(B, count)


def sample_flat_negatives(users: torch.Tensor, owner: torch.Tensor, position: torch.Tensor, items: torch.Tensor,
                          n_neg: int, n_items: int, seed: int) -> torch.Tensor:
    """Unpadded twin of ``sample_batch_negatives``: rows (owner [N] into ``users``, position [N],
    item [N]) → [N, n_neg] non-positives of each row's client. Same keys, so the same draws."""
    stride = n_items + 1
    excluded = KeySet(owner * stride + items, users.numel() * stride)  # the clients' positives
    row_owner = owner.repeat_interleave(n_neg)
    slot = (position.unsqueeze(1) * n_neg + torch.arange(n_neg, device=owner.device)).reshape(-1)
    return _rejection(seed, users[row_owner], slot, row_owner, excluded, stride, n_items).view(-1, n_neg)


def sample_unrated(users: torch.Tensor, pos: torch.Tensor, pos_mask: torch.Tensor, counts: torch.Tensor,
                   n_items: int, seed: int, max_elements: int = 1 << 22) -> tuple[torch.Tensor, torch.Tensor]:
    """Each client's ``counts[b]`` distinct items drawn uniformly *without replacement* from the
    items it has not rated (FedRec's hybrid filling) → items [B, K], mask [B, K], K = max count.

    A client whose sample is small next to its unrated items (4·count ≤ unrated) takes the first
    ``count`` distinct unrated items of a hashed uniform stream over the catalogue (sequential
    sampling without replacement: a uniform random subset) — cost O(count). The others, and the
    rare client whose stream runs short, take the ``count`` unrated items of smallest hashed key
    (also a uniform subset) — cost O(catalogue), in chunks of at most ``max_elements`` keys.
    Every draw is keyed by (seed, user, ...), so a client's sample does not depend on batching.
    ``counts`` must not exceed a client's number of unrated items.
    """
    B = users.numel()
    width = int(counts.max()) if B else 0
    items = torch.zeros(B, width, dtype=torch.int64, device=users.device)
    mask = torch.arange(width, device=users.device).unsqueeze(0) < counts.unsqueeze(1)  # [B, K]
    if width == 0:
        return items, mask
    sparse = counts * 4 <= n_items - pos_mask.sum(1)  # [B]
    done = torch.zeros(B, dtype=torch.bool, device=users.device)
    if sparse.any():
        rows = torch.nonzero(sparse).squeeze(1)
        drawn, ok = _sequential_unrated(users[rows], pos[rows], pos_mask[rows], counts[rows], n_items, seed)
        items[rows[ok], :drawn.shape[1]] = drawn[ok]
        done[rows[ok]] = True
    rest = torch.nonzero(~done).squeeze(1)
    if rest.numel():
        items[rest] = _smallest_key_unrated(users[rest], pos[rest], pos_mask[rest], width, n_items, seed, max_elements)
    return torch.where(mask, items, torch.zeros_like(items)), mask


def _sequential_unrated(users: torch.Tensor, pos: torch.Tensor, pos_mask: torch.Tensor, counts: torch.Tensor,
                        n_items: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The first ``counts[b]`` distinct unrated items of client b's stream of 2·count + 16 uniform
    draws → items [B, max count] (valid up to counts[b]) and whether the stream sufficed [B]."""
    length = 2 * counts + 16  # [B] draws per client: depends on the client alone
    C = int(length.max())
    position = torch.arange(C, device=users.device).unsqueeze(0)  # [1, C]
    draws = hashrng.randint(seed, [users.unsqueeze(1), position, torch.full_like(position, -1)], n_items)  # [B, C]
    keys, stride = _batch_keys(pos, pos_mask, n_items)
    owner = torch.arange(users.numel(), device=users.device).unsqueeze(1)
    usable = (position < length.unsqueeze(1)) & ~contains(keys, owner * stride + draws)  # [B, C]
    ordered, order = torch.sort(torch.where(usable, draws, torch.full_like(draws, n_items)), dim=1, stable=True)
    repeat = torch.zeros_like(usable)
    repeat[:, 1:] = ordered[:, 1:] == ordered[:, :-1]  # later draws of an item already drawn
    first = usable.clone()
    first.scatter_(1, order, usable.gather(1, order) & ~repeat)
    rank = first.long().cumsum(1)  # [B, C] 1-based rank of each first draw
    take = first & (rank <= counts.unsqueeze(1))
    width = int(counts.max())
    out = torch.zeros(users.numel(), width, dtype=torch.int64, device=users.device)
    row, column = take.nonzero(as_tuple=True)
    out[row, rank[row, column] - 1] = draws[row, column]
    return out, first.sum(1) >= counts


def _smallest_key_unrated(users: torch.Tensor, pos: torch.Tensor, pos_mask: torch.Tensor, width: int,
                          n_items: int, seed: int, max_elements: int) -> torch.Tensor:
    """[B, width] each client's unrated items of smallest hashed (seed, user, item) key, in key order."""
    items = torch.zeros(users.numel(), width, dtype=torch.int64, device=users.device)
    catalogue = torch.arange(n_items, device=users.device)  # [m]
    per_chunk = max(1, max_elements // n_items)
    for chunk in torch.split(torch.arange(users.numel(), device=users.device), per_chunk):
        keys = hashrng.randint(seed, [users[chunk].unsqueeze(1), catalogue.unsqueeze(0)], 1 << 62)  # [b, m]
        rated = torch.where(pos_mask[chunk], pos[chunk], torch.full_like(pos[chunk], n_items))  # [b, P]
        keys = torch.cat([keys, torch.zeros_like(keys[:, :1])], 1)  # a spare column for padding
        keys.scatter_(1, rated, 1 << 62)  # rated items sort last
        items[chunk] = torch.topk(keys[:, :n_items], width, dim=1, largest=False, sorted=True).indices
    return items
