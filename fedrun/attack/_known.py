"""The benign interactions an attacker knows (FedRecAttack's prior knowledge): a share of the
training interactions drawn with the attack's own seed, handed over as (user, item) pairs. The
attacker holds these pairs only — never the client store, private rows or uploads."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from fedrun.core.seeding import derive_seed
from fedrun.data.interactions import Interactions


@dataclass(frozen=True)
class KnownInteractions:
    """(user, item) pairs the attacker knows, sorted by user then item, and the sizes they index."""

    user: torch.Tensor  # [K] int64
    item: torch.Tensor  # [K] int64
    n_users: int
    n_items: int

    @property
    def keys(self) -> torch.Tensor:
        """[K] sorted user × n_items + item, for membership tests."""
        return self.user * self.n_items + self.item

    def contains(self, user: torch.Tensor, item: torch.Tensor) -> torch.Tensor:
        """Whether each (user, item) pair is known (same shapes, bool)."""
        keys = self.keys
        if keys.numel() == 0:
            return torch.zeros_like(user, dtype=torch.bool)
        query = user * self.n_items + item
        at = torch.searchsorted(keys, query).clamp_max(keys.numel() - 1)
        return keys[at] == query

    def to(self, device: torch.device) -> "KnownInteractions":
        return KnownInteractions(self.user.to(device), self.item.to(device), self.n_users, self.n_items)


def sample_known(train: Interactions, fraction: float, seed: int) -> KnownInteractions:
    """⌊fraction × |train|⌋ distinct training interactions (at least 1), uniformly without replacement
    from ``seed`` (the attack's own stream, not the data's or the training's)."""
    rng = np.random.default_rng(derive_seed(seed, "attack-known"))
    n_known = max(1, int(len(train) * fraction))
    rows = rng.choice(len(train), size=n_known, replace=False)
    keys = torch.from_numpy(np.unique(np.asarray(train.user)[rows].astype(np.int64) * train.n_items
                                      + np.asarray(train.item)[rows].astype(np.int64)))  # sorted, duplicates once
    return KnownInteractions(keys // train.n_items, keys % train.n_items, train.n_users, train.n_items)
