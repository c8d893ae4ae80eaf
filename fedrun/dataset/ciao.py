"""Ciao (Tang et al., WSDM 2012): 7,375 users / 105,114 items / 284,086 ratings 1–5.

``rating.mat`` columns: user, product, category, rating, helpfulness. 34 rows carry
rating 0; they are kept (use ``implicit_threshold`` or the rating metrics' own handling
to exclude them).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import scipy.io

from fedrun.data.files import DataFile
from fedrun.data.interactions import Interactions, reindex
from fedrun.dataset.base import Dataset
from fedrun.errors import DataError

URL = "https://www.cse.msu.edu/~tangjili/datasetcode/ciao.zip"
RATING = DataFile("rating.mat", "aa793568686285a93286ba9e56954fcce347370ad2e58c785760362ab12d2c2c")


class Ciao(Dataset):
    name = "ciao"
    source = (f"Tang et al.'s ciao.zip ({URL}) holds rating.mat; fedrun does not fetch it (the archive's layout and "
              "bytes are not pinned): extract rating.mat into the dataset folder, and the checksum decides.")

    def files(self) -> list[DataFile]:
        return [RATING]

    def read(self, paths: dict[str, Path]) -> dict[str, Interactions]:
        path = paths[RATING.path]
        try:
            table = scipy.io.loadmat(path)["rating"]  # [N, 5]
        except (ValueError, KeyError, OSError) as err:
            raise DataError(f"Cannot read {path} as Ciao's rating.mat ({err}).") from None
        user, users = reindex(table[:, 0].astype(np.int64))
        item, items = reindex(table[:, 1].astype(np.int64))
        return {"all": Interactions(user, item, users.size, items.size, table[:, 3].astype(np.float32), None)}
