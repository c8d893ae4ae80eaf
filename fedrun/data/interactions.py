"""Interactions: the (user, item, [rating], [order]) table every loader returns."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np


@dataclass(frozen=True)
class Interactions:
    """A table of interactions with dense 0-based ids.

    ``order`` is a per-row sort key for time order (a timestamp or the position in the
    user's sequence); ``None`` when the data has no order.
    """

    user: np.ndarray  # [N] int64
    item: np.ndarray  # [N] int64
    n_users: int
    n_items: int
    rating: np.ndarray | None = None  # [N] float32
    order: np.ndarray | None = None  # [N] int64

    def __len__(self) -> int:
        return int(self.user.shape[0])

    def take(self, rows: np.ndarray) -> "Interactions":
        return replace(
            self,
            user=self.user[rows],
            item=self.item[rows],
            rating=None if self.rating is None else self.rating[rows],
            order=None if self.order is None else self.order[rows],
        )

    def user_counts(self) -> np.ndarray:
        return np.bincount(self.user, minlength=self.n_users)


def reindex(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Map raw ids to 0..n-1 in sorted raw-id order. Returns (dense ids, raw id of each dense id)."""
    uniques, dense = np.unique(raw, return_inverse=True)
    return dense.astype(np.int64), uniques
