"""Shared loader for datasets stored as ``user item item ...`` lines (one file or a fixed split)."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import numpy as np

from fedrun.data.files import DataFile
from fedrun.data.interactions import Interactions, reindex
from fedrun.dataset._text import read_sequences
from fedrun.dataset.base import Dataset


class SequenceDataset(Dataset):
    """One line per user; ``parts`` maps a part name (``all``/``train``/``valid``/``test``) to a file.

    ``ordered``: the items of a line are in time order (the position becomes ``order``).
    Ids are re-indexed in sorted order, so files whose ids are already dense keep them.
    """

    parts: ClassVar[dict[str, DataFile]] = {}
    ordered: ClassVar[bool] = False

    def files(self) -> list[DataFile]:
        return list(self.parts.values())

    def read(self, paths: dict[str, Path]) -> dict[str, Interactions]:
        raw = {name: read_sequences(paths[spec.path]) for name, spec in self.parts.items()}
        users = np.concatenate([r[0] for r in raw.values()])
        items = np.concatenate([r[1] for r in raw.values()])
        user_ids, user_raw = reindex(users)
        item_ids, item_raw = reindex(items)
        n_users, n_items = user_raw.size, item_raw.size
        out, start = {}, 0
        for name, (user, _, position) in raw.items():
            rows = slice(start, start + user.size)
            start += user.size
            order = position if self.ordered else None
            out[name] = Interactions(user_ids[rows], item_ids[rows], n_users, n_items, None, order)
        return out
