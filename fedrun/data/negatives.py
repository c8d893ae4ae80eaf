"""Uniform negative sampling that excludes a user's positives, vectorized over all draws."""

from __future__ import annotations

import torch


def contains(sorted_keys: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """Elementwise membership of ``keys`` in the sorted 1-D tensor ``sorted_keys``."""
    if sorted_keys.numel() == 0:
        return torch.zeros_like(keys, dtype=torch.bool)
    pos = torch.searchsorted(sorted_keys, keys).clamp_max(sorted_keys.numel() - 1)
    return sorted_keys[pos] == keys


def sample_negatives(users: torch.Tensor, shape: tuple[int, ...], n_items: int, positive_keys: torch.Tensor,
                     generator: torch.Generator, max_rounds: int = 100) -> torch.Tensor:
    """Items drawn uniformly from each user's non-positives.

    users: [B] user ids; returns [B, *shape] item ids. ``positive_keys`` are the sorted
    ``user * n_items + item`` keys of the items to exclude. Collisions are redrawn
    (rejection sampling), so every returned item is a true negative.
    """
    device = users.device
    full = (users.numel(), *shape)
    draws = torch.randint(n_items, full, generator=generator, device=device)
    owner = users.view(-1, *([1] * len(shape))).expand(full)
    for _ in range(max_rounds):
        bad = contains(positive_keys, owner * n_items + draws)
        n_bad = int(bad.sum())
        if n_bad == 0:
            return draws
        draws[bad] = torch.randint(n_items, (n_bad,), generator=generator, device=device)
    raise RuntimeError("negative sampling did not converge: some user has (almost) every item as a positive")
