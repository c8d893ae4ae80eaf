"""MovieLens 100K (GroupLens): 943 users / 1,682 items / 100,000 ratings 1–5 with timestamps.

``split.protocol=predefined`` reads GroupLens' own five folds ``u{fold+1}.base/.test``
(the FedRec/FedRec++ protocol); any other protocol splits ``u.data``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedrun.data.files import DataFile
from fedrun.data.interactions import Interactions
from fedrun.dataset._text import read_table
from fedrun.dataset.base import Dataset
from fedrun.errors import check

URL = "https://files.grouplens.org/datasets/movielens/ml-100k.zip"
N_USERS, N_ITEMS = 943, 1682
SHA = {
    "u.data": "06416e597f82b7342361e41163890c81036900f418ad91315590814211dca490",
    "u1.base": "ce253ec86c448b44fb3ba9a30d12dcfc2e9210cbde71efada3730c22e9ac212a",
    "u1.test": "18c6014a4b2c7324f250a63f8904a7b16b2b19f911129e346141507b0cbac950",
    "u2.base": "6c06f0b5df4b256da1a994f3ac66edc8da4d3f09bc9282df6b14d893366d703e",
    "u2.test": "4de658d1e04ed9104629509a2e2528fce833ac8e048280183f1df167632038c3",
    "u3.base": "afdc155c291c6edc41c0407e39d7462eb98d341e064f0b0a12175b80b3c4af5d",
    "u3.test": "0f548b51c78327de4c156461d3e430b7e5579fe2b5681586a59416e48fd35f6d",
    "u4.base": "219f0f4d40dfe9c5141d425f53fa91ee23ed275f14e280bbf1b50117afb064ca",
    "u4.test": "7c02ad0a1e7ab1083c8b9d4b627203a051dd7b5eab46d99fa44de33470de8db9",
    "u5.base": "a9574e59ce961eec2121627760b6e9b0974ce1637b3fe69ac32cb14a4bfab485",
    "u5.test": "351cc52e0d15b6c721466276fc24671d40936899e3d01fadeaf312915b8c5634",
}


def _file(name: str) -> DataFile:
    return DataFile(name, SHA[name], URL, f"ml-100k/{name}")


class Ml100k(Dataset):
    name = "ml-100k"
    has_predefined_split = True
    source = f"GroupLens' ml-100k.zip ({URL}), downloaded by name (research use, no redistribution)"

    @classmethod
    def catalogue(cls) -> list[DataFile]:
        return [_file(name) for name in SHA]

    def __init__(self, config):
        super().__init__(config)
        if config.split.protocol == "predefined":
            check(config.split.fold < 5, "dataset.split.fold", config.split.fold, "0..4 (GroupLens folds u1..u5)")

    def _parts(self) -> dict[str, str]:
        if self.config.split.protocol != "predefined":
            return {"all": "u.data"}
        fold = self.config.split.fold + 1
        return {"train": f"u{fold}.base", "test": f"u{fold}.test"}

    def files(self) -> list[DataFile]:
        return [_file(name) for name in self._parts().values()]

    def read(self, paths: dict[str, Path]) -> dict[str, Interactions]:
        out = {}
        for part, name in self._parts().items():
            table = read_table(paths[name], 4)  # user, item, rating, timestamp (1-based ids)
            out[part] = Interactions(
                table[:, 0].astype(np.int64) - 1, table[:, 1].astype(np.int64) - 1, N_USERS, N_ITEMS,
                table[:, 2].astype(np.float32), table[:, 3].astype(np.int64),
            )
        return out
