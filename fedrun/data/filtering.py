"""Min-count / k-core filtering and implicit conversion, applied before splitting."""

from __future__ import annotations

import numpy as np

from fedrun.data.interactions import Interactions
from fedrun.errors import DataError


def to_implicit(data: Interactions, threshold: float) -> Interactions:
    """Keep interactions rated >= threshold, then drop ratings."""
    if data.rating is None:
        return data
    kept = data.take(np.flatnonzero(data.rating >= threshold))
    return Interactions(kept.user, kept.item, data.n_users, data.n_items, None, kept.order)


def filter_counts(data: Interactions, min_user: int, min_item: int, k_core: bool) -> np.ndarray:
    """Boolean mask of rows kept: users with >= min_user rows, items with >= min_item rows.

    With ``k_core`` the two filters are repeated until both hold at once.
    """
    keep = np.ones(len(data), dtype=bool)
    while True:
        users, items = data.user[keep], data.item[keep]
        user_ok = np.bincount(users, minlength=data.n_users) >= min_user
        item_ok = np.bincount(items, minlength=data.n_items) >= min_item
        new_keep = keep & user_ok[data.user] & item_ok[data.item]
        if not k_core or new_keep.sum() == keep.sum():
            return new_keep
        keep = new_keep


def compact(parts: dict[str, Interactions]) -> dict[str, Interactions]:
    """Re-index users and items over the union of ``parts`` so ids stay dense after filtering."""
    user = np.concatenate([p.user for p in parts.values()])
    item = np.concatenate([p.item for p in parts.values()])
    if user.size == 0:
        raise DataError("No interactions are left after filtering: relax dataset.min_user_count / min_item_count.")
    user_ids, item_ids = np.unique(user), np.unique(item)
    user_map = np.full(max(p.n_users for p in parts.values()), -1, dtype=np.int64)
    item_map = np.full(max(p.n_items for p in parts.values()), -1, dtype=np.int64)
    user_map[user_ids] = np.arange(user_ids.size)
    item_map[item_ids] = np.arange(item_ids.size)
    return {
        name: Interactions(user_map[p.user], item_map[p.item], int(user_ids.size), int(item_ids.size),
                           p.rating, p.order)
        for name, p in parts.items()
    }
