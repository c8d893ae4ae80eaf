"""Uniform negative sampling that excludes a user's positives, vectorized over all draws."""

from __future__ import annotations

import torch


def contains(sorted_keys: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """Elementwise membership of ``keys`` in the sorted 1-D tensor ``sorted_keys``."""
    if sorted_keys.numel() == 0:
        return torch.zeros_like(keys, dtype=torch.bool)
    pos = torch.searchsorted(sorted_keys, keys).clamp_max(sorted_keys.numel() - 1)
    return sorted_keys[pos] == keys


def _rejection(owner: torch.Tensor, sorted_keys: torch.Tensor, stride: int, n_items: int,
               generator: torch.Generator, max_rounds: int = 1000) -> torch.Tensor:
    """One uniform item per entry of ``owner`` [N] whose key ``owner * stride + item`` is not in
    ``sorted_keys``. Collisions are redrawn; only the redrawn entries are checked again."""
    draws = torch.randint(n_items, owner.shape, generator=generator, device=owner.device)
    todo = torch.arange(owner.numel(), device=owner.device)
    for _ in range(max_rounds):
        bad = todo[contains(sorted_keys, owner[todo] * stride + draws[todo])]
        if bad.numel() == 0:
            return draws
        draws[bad] = torch.randint(n_items, (bad.numel(),), generator=generator, device=owner.device)
        todo = bad
    raise RuntimeError("negative sampling did not converge: some user has (almost) every item as a positive")


def sample_negatives(users: torch.Tensor, shape: tuple[int, ...], n_items: int, positive_keys: torch.Tensor,
                     generator: torch.Generator) -> torch.Tensor:
    """users [B] → [B, *shape] items drawn uniformly from each user's non-positives.

    ``positive_keys``: the sorted ``user * n_items + item`` keys of the items to exclude.
    """
    full = (users.numel(), *shape)
    owner = users.view(-1, *([1] * len(shape))).expand(full).reshape(-1)
    return _rejection(owner, positive_keys, n_items, n_items, generator).view(full)


def sample_batch_negatives(pos: torch.Tensor, pos_mask: torch.Tensor, n_neg: int, n_items: int,
                           generator: torch.Generator) -> torch.Tensor:
    """pos [B, P] (a padded client batch) → [B, P, n_neg] items that are not the client's positives.

    Same distribution as ``sample_negatives``, but the keys to exclude are built from the
    batch alone (B·P keys instead of every user's), so a round never touches the whole store.
    """
    B, P = pos.shape
    stride = n_items + 1  # padding uses item id n_items, which no draw takes
    rows = torch.sort(torch.where(pos_mask, pos, torch.full_like(pos, n_items)), dim=1).values  # [B, P]
    keys = (rows + torch.arange(B, device=pos.device).unsqueeze(1) * stride).reshape(-1)  # sorted
    owner = torch.arange(B, device=pos.device).repeat_interleave(P * n_neg)
    return _rejection(owner, keys, stride, n_items, generator).view(B, P, n_neg)
