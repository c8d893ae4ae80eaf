"""Train / validation / test splits, each drawn from its own seeded generator.

Protocols: leave-one-out on time order (last item test, second-last validation),
per-user temporal ratio, random ratio (per user or global), k-fold, and a dataset's own
predefined split (with an optional validation share carved out of its train part).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedrun.data.interactions import Interactions
from fedrun.errors import ConfigError


@dataclass(frozen=True)
class Split:
    train: Interactions
    valid: Interactions | None
    test: Interactions
    protocol: str
    # the negatives a dataset's own split lists for sampled ranking, by part ("valid", "test"): rows (user, item)
    negatives: dict[str, Interactions] | None = None

    @property
    def n_users(self) -> int:
        return self.train.n_users

    @property
    def n_items(self) -> int:
        return self.train.n_items


def _rank_within_user(user: np.ndarray, key: np.ndarray, n_users: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row: its 0-based rank among the user's rows by ``key``, and the user's row count."""
    order = np.lexsort((np.arange(user.size), key, user))  # by user, then key, then row (stable)
    counts = np.bincount(user, minlength=n_users)
    starts = np.cumsum(counts) - counts
    rank = np.empty(user.size, dtype=np.int64)
    rank[order] = np.arange(user.size) - starts[user[order]]
    return rank, counts[user]


def _assign(data: Interactions, is_test: np.ndarray, is_valid: np.ndarray | None, protocol: str) -> Split:
    is_train = ~is_test if is_valid is None else ~(is_test | is_valid)
    valid = None if is_valid is None else data.take(np.flatnonzero(is_valid))
    return Split(data.take(np.flatnonzero(is_train)), valid, data.take(np.flatnonzero(is_test)), protocol)


def _require_order(data: Interactions, protocol: str) -> np.ndarray:
    if data.order is None:
        raise ConfigError(
            "dataset.split.protocol", protocol,
            "a protocol that does not need time order (random_ratio, kfold, predefined): this dataset has no order",
        )
    return data.order


def leave_one_out(data: Interactions, with_valid: bool) -> Split:
    """Last interaction in time order → test, second-last → validation (users with ≥3 rows;
    users with fewer keep everything in train)."""
    rank, count = _rank_within_user(data.user, _require_order(data, "loo"), data.n_users)
    need = 3 if with_valid else 2
    is_test = (rank == count - 1) & (count >= need)
    is_valid = ((rank == count - 2) & (count >= need)) if with_valid else None
    return _assign(data, is_test, is_valid, "loo")


def _ratio_by_rank(data: Interactions, rank: np.ndarray, count: np.ndarray, test_ratio: float,
                   valid_ratio: float, protocol: str) -> Split:
    n_test = np.floor(count * test_ratio).astype(np.int64)
    n_valid = np.floor(count * valid_ratio).astype(np.int64)
    is_test = rank >= count - n_test
    is_valid = ((rank >= count - n_test - n_valid) & ~is_test) if valid_ratio > 0 else None
    return _assign(data, is_test, is_valid, protocol)


def temporal_ratio(data: Interactions, test_ratio: float, valid_ratio: float) -> Split:
    """Per user, the latest ``test_ratio`` share → test, the ``valid_ratio`` before it → validation."""
    rank, count = _rank_within_user(data.user, _require_order(data, "temporal_ratio"), data.n_users)
    return _ratio_by_rank(data, rank, count, test_ratio, valid_ratio, "temporal_ratio")


def random_ratio(data: Interactions, test_ratio: float, valid_ratio: float, per_user: bool,
                 rng: np.random.Generator) -> Split:
    """Random test/validation shares, per user (every user keeps train data) or over all rows."""
    if per_user:
        rank, count = _rank_within_user(data.user, rng.random(len(data)), data.n_users)
        return _ratio_by_rank(data, rank, count, test_ratio, valid_ratio, "random_ratio")
    position = rng.permutation(len(data))
    n_test, n_valid = int(len(data) * test_ratio), int(len(data) * valid_ratio)
    is_test = position < n_test
    is_valid = ((position >= n_test) & (position < n_test + n_valid)) if valid_ratio > 0 else None
    return _assign(data, is_test, is_valid, "random_ratio")


def kfold(data: Interactions, n_folds: int, fold: int, valid_ratio: float, rng: np.random.Generator) -> Split:
    """Rows shuffled once and dealt into ``n_folds`` folds; fold ``fold`` is the test set."""
    fold_of = rng.permutation(len(data)) % n_folds
    is_test = fold_of == fold
    split = _assign(data, is_test, None, "kfold")
    return with_carved_valid(split, valid_ratio, rng)


def with_carved_valid(split: Split, valid_ratio: float, rng: np.random.Generator) -> Split:
    """Move a random ``valid_ratio`` share of each user's train rows into validation."""
    if valid_ratio <= 0 or split.valid is not None:
        return split
    train = split.train
    rank, count = _rank_within_user(train.user, rng.random(len(train)), train.n_users)
    is_valid = rank >= count - np.floor(count * valid_ratio).astype(np.int64)
    negatives = None if split.negatives is None else {"test": split.negatives["test"]}  # none for a carved part
    return Split(train.take(np.flatnonzero(~is_valid)), train.take(np.flatnonzero(is_valid)), split.test,
                 split.protocol, negatives)
