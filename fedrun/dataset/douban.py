"""Douban-movie 3000×3000 subset (Monti et al., NeurIPS 2017): 136,891 ratings 1–5, fixed split.

``training_test_dataset.mat`` is MATLAB v7.3 (HDF5): the rating matrix ``M`` and the
``Otraining``/``Otest`` masks (123,202 / 13,689 ratings), stored transposed, so rows of
the array read by h5py are items and columns users.
"""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np

from fedrun.data.files import DataFile
from fedrun.data.interactions import Interactions
from fedrun.dataset.base import Dataset
from fedrun.errors import DataError

URL = "https://raw.githubusercontent.com/fmonti/mgcnn/master/Data/douban/training_test_dataset.mat"
MATRIX = DataFile("training_test_dataset.mat", "1f4476321cbfe0f606e7e35d0695ca15447a1b0b2c811df130109b6cb9a067ae", URL)


class Douban(Dataset):
    name = "douban"
    source = "Monti et al.'s Douban subset (fmonti/mgcnn, Data/douban), downloaded by name"
    has_predefined_split = True

    def files(self) -> list[DataFile]:
        return [MATRIX]

    def read(self, paths: dict[str, Path]) -> dict[str, Interactions]:
        path = paths[MATRIX.path]
        try:
            with h5py.File(path, "r") as mat:
                ratings = np.asarray(mat["M"]).T  # [users, items]
                masks = {"train": np.asarray(mat["Otraining"]).T, "test": np.asarray(mat["Otest"]).T}
        except (OSError, KeyError) as err:
            raise DataError(f"Cannot read {path} as Douban's training_test_dataset.mat ({err}).") from None
        n_users, n_items = ratings.shape
        out = {}
        for part, mask in masks.items():
            user, item = np.nonzero(mask > 0)
            out[part] = Interactions(user.astype(np.int64), item.astype(np.int64), n_users, n_items,
                                     ratings[user, item].astype(np.float32), None)
        return out
