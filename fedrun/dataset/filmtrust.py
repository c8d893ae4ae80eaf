"""FilmTrust (Guo et al. 2013): 1,508 users / 2,071 items / 35,497 ratings 0.5–4.0.

``variant=full``: the original ratings (shipped cut into ``ratings_0..3.txt``; read together).
``variant=lightfr``: the LightFR code's own preprocessed split (1,002 users, ratings min-max
rescaled to 0.01–1.01) with ``split.protocol=predefined``. Its validation/test files also
list 49 sampled negatives per user as rows rated 0.0; they are not interactions: they become the
split's listed negatives (``eval.negatives=split`` ranks against them, as the authors' code does). The
files' ratings are on the raw 0.5–4 scale while the training file's are rescaled: they are mapped to the
training scale (0.5 → 0.01, 4 → 1.01) so rating metrics compare like with like.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedrun.data.files import DataFile
from fedrun.data.interactions import Interactions, reindex
from fedrun.dataset._sources import LIGHTFR as LIGHTFR_CODE
from fedrun.dataset._sources import raw
from fedrun.dataset._text import read_table
from fedrun.dataset.base import Dataset, DatasetConfig
from fedrun.errors import DataError, check_choice

URL = "https://guoguibing.github.io/librec/datasets/filmtrust.zip"
FULL = [
    DataFile("ratings_0.txt", "cafa37f1b848a03fc7386c66474679c6e5d96eaf718e4818039201843ffa0b6b"),
    DataFile("ratings_1.txt", "61a1d503f60933a190b61a87390617bbdbabd93acc0710b22cece560febca914"),
    DataFile("ratings_2.txt", "970d371db2c51a079469bafe034f3fda145b509ff6f9021b596c3bfabffb80de"),
    DataFile("ratings_3.txt", "86e31a869eef1f8667217447f867436efc3bf32c05ff396902427dd5be01d3bd"),
]
LIGHTFR = {
    part: DataFile(f"lightfr_split/filmtrust_{name}.csv", sha,
                   raw(LIGHTFR_CODE, f"data/filmtrust/filmtrust_{name}.csv"))
    for part, name, sha in (("train", "train", "240e2f3e1ea11128196b322c2a9a4d478df735630e788423528075162417c349"),
                            ("valid", "val", "34556c6ccf050d947ef0da9897fd45577f49f2db0a689ffb32d7ef06d99a89f2"),
                            ("test", "test", "2c0ef085baa63d2f188911b8bd1f052507a40bf395be9dd53c3259531b1458c4"))
}

RAW_LOW, RAW_HIGH = 0.5, 4.0  # FilmTrust's rating range


@dataclass
class FilmtrustConfig(DatasetConfig):
    variant: str = "full"  # full | lightfr

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("variant", self.variant, ("full", "lightfr"))


class Filmtrust(Dataset):
    Config = FilmtrustConfig
    name = "filmtrust"
    source = ("lightfr_split/: the LightFR authors' code (hongleizhang/LightFR, data/filmtrust), downloaded by name. "
              f"ratings_0..3.txt: FilmTrust's ratings.txt (distributed by LibRec, {URL}) cut into four files at line "
              "boundaries; no address serves the parts: put them as given, or cut ratings.txt so that each part's "
              "checksum matches.")

    @classmethod
    def catalogue(cls) -> list[DataFile]:
        return [*FULL, *LIGHTFR.values()]

    def __init__(self, config: FilmtrustConfig):
        self.has_predefined_split = config.variant == "lightfr"
        super().__init__(config)

    def files(self) -> list[DataFile]:
        return FULL if self.config.variant == "full" else list(LIGHTFR.values())

    def _read_key(self) -> str:
        return self.config.variant + ("-scaled-negatives" if self.config.variant == "lightfr" else "")

    def read(self, paths: dict[str, Path]) -> dict[str, Interactions]:
        if self.config.variant == "full":
            table = np.concatenate([read_table(paths[spec.path], 3) for spec in FULL])
            return {"all": _ratings(table, table)}
        files = {part: read_table(paths[spec.path], 3, sep=",", skip_header=True) for part, spec in LIGHTFR.items()}
        tables = {part: t if part == "train" else _to_training_scale(t[t[:, 2] > 0]) for part, t in files.items()}
        every = np.concatenate(list(tables.values()))
        for part, table in files.items():  # ids are numbered over the interactions: a negative must be among them
            unknown = ~(np.isin(table[:, 0], every[:, 0]) & np.isin(table[:, 1], every[:, 1]))
            if unknown.any():
                raise DataError(f"{paths[LIGHTFR[part].path]}: {int(unknown.sum())} listed negatives name a user or "
                                "item with no rating in the split; the file is not the LightFR code's")
        negatives = {f"negatives/{part}": _ratings(t[t[:, 2] == 0], every)
                     for part, t in files.items() if part != "train"}
        return {**{part: _ratings(t, every) for part, t in tables.items()}, **negatives}


def _to_training_scale(table: np.ndarray) -> np.ndarray:
    """Raw FilmTrust ratings (0.5–4) → the LightFR training file's scale, 0.01 + (r − 0.5) / 3.5."""
    scaled = table.copy()
    scaled[:, 2] = 0.01 + (table[:, 2] - RAW_LOW) / (RAW_HIGH - RAW_LOW)
    return scaled


def _ratings(table: np.ndarray, every: np.ndarray) -> Interactions:
    """Rows (user, item, rating) with ids re-indexed over ``every`` row of the dataset."""
    _, users = reindex(every[:, 0].astype(np.int64))
    _, items = reindex(every[:, 1].astype(np.int64))
    user = np.searchsorted(users, table[:, 0].astype(np.int64))
    item = np.searchsorted(items, table[:, 1].astype(np.int64))
    return Interactions(user, item, users.size, items.size, table[:, 2].astype(np.float32), None)
