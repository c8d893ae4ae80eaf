"""Which items an attack promotes: chosen by the experiment from the data, handed to the attack
and to the exposure metrics (ER@K)."""

from __future__ import annotations

import numpy as np
import torch

from fedrun.attack.config import AttackConfig
from fedrun.core.seeding import generator
from fedrun.data.splits import Split
from fedrun.errors import check


def choose_targets(config: AttackConfig, split: Split) -> torch.Tensor:
    """[T] target item ids. ``least_popular``: the items with the fewest interactions over every part
    (train, validation, test: the A-hum code counts its whole data) among those that occur, ties to the
    lower id; ``random``:
    drawn from the items that occur, with ``target_seed``; ``explicit``: ``target_ids``."""
    n_items = split.n_items
    if config.targets == "explicit":
        ids = torch.tensor(config.target_ids, dtype=torch.long)
        check(bool(((ids >= 0) & (ids < n_items)).all()), "attack.target_ids", config.target_ids,
              f"item ids in [0, {n_items}) of this dataset")
        return ids
    parts = [p.item for p in (split.train, split.valid, split.test) if p is not None]
    counts = torch.from_numpy(np.bincount(np.concatenate([np.asarray(p) for p in parts]), minlength=n_items))
    occurring = torch.nonzero(counts > 0).squeeze(1)
    check(config.n_targets <= occurring.numel(), "attack.n_targets", config.n_targets,
          f"at most the {occurring.numel()} items that occur in the data")
    if config.targets == "random":
        order = torch.randperm(occurring.numel(), generator=generator(config.target_seed, "attack-targets"))
        return occurring[order[: config.n_targets]].sort().values
    order = torch.argsort(counts[occurring], stable=True)
    return occurring[order[: config.n_targets]].sort().values
