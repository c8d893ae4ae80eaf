"""MovieLens 1M (Harper & Konstan 2015).

``variant=sequences``: every user's full history in time order (6,040 users / 3,706 items /
1,000,209 interactions), implicit: the file holds no ratings or timestamps.
``variant=ratings``: GroupLens' own ``ratings.dat`` (``UserID::MovieID::Rating::Timestamp``, ratings 1–5), fetched
by name from ``ml-1m.zip``: the same interactions with their ratings and timestamps (explicit-rating methods,
temporal splits). GroupLens publishes the archive's md5, checked on download, and no digest of ``ratings.dat``
itself; what is read is checked instead against ``sequences.txt``'s pinned sha256, which the time-ordered
histories derived from it must reproduce byte for byte (``histories``). A missing ``sequences.txt`` is derived
from ``ratings.dat`` the same way (``derive_sequences``): with a network, every variant is fetched by name. Ids
are numbered as in ``sequences``: the two variants name the same users and items alike.
``variant=split80-20``: the random 80/20 implicit split of the A-ra/A-hum reference code
(re-indexed ids; one interaction short of the full set), used with ``split.protocol=predefined``.
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedrun.data.files import DataFile, resolve
from fedrun.data.interactions import Interactions, reindex
from fedrun.dataset._sequences import SequenceDataset
from fedrun.dataset._sources import POISON_FED_DLRS, raw
from fedrun.dataset._text import read_table
from fedrun.dataset.base import DatasetConfig
from fedrun.errors import DataError, check_choice

GROUPLENS = "https://files.grouplens.org/datasets/movielens/ml-1m.zip"
GROUPLENS_MD5 = "c4d9eecfca2ab87c1945afe126590906"  # GroupLens' published checksum of ml-1m.zip
RATINGS = {"all": DataFile("ratings.dat", None, GROUPLENS, "ml-1m/ratings.dat", GROUPLENS_MD5)}


def derive_sequences(path: Path) -> None:
    """``sequences.txt`` written from GroupLens' ``ratings.dat`` (fetched by name first if absent)."""
    try:
        ratings = resolve("ml-1m", RATINGS["all"], path.parents[1])
    except DataError as err:
        raise DataError(f"Missing data file {path}, which is derived from ml-1m's ratings.dat: {err}") from None
    users, items, _, times = read_ratings(ratings)
    partial = path.with_suffix(path.suffix + ".part")  # a derivation cut short leaves no file a run would read
    partial.write_text(histories(users, items, times))
    partial.replace(path)


SEQUENCES = {"all": DataFile("sequences.txt", "3b3803d72c034929ada18b2cbd114296261c012b7a3e10282543adeceba53fb1",
                             derive=derive_sequences)}
SPLIT80_20 = {
    "train": DataFile("split80-20/train.dat", "007936b9f74eba871cedbcd4f91a464a13f2a321b9df2d793dcbdc9d0fb2a408",
                      raw(POISON_FED_DLRS, "Data/ML/train.dat")),
    "test": DataFile("split80-20/test.dat", "b4da1eb04b1cc6780d2b54aa7c35c7c2e701b81aa030f0547420ab16c7487518",
                     raw(POISON_FED_DLRS, "Data/ML/test.dat")),
}


@dataclass
class Ml1mConfig(DatasetConfig):
    variant: str = "sequences"  # sequences | ratings | split80-20

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("variant", self.variant, ("sequences", "ratings", "split80-20"))


class Ml1m(SequenceDataset):
    Config = Ml1mConfig
    name = "ml-1m"
    source = ("ratings.dat: GroupLens' ml-1m.zip (https://files.grouplens.org/datasets/movielens/ml-1m.zip, research "
              "use, no redistribution), downloaded by name, the archive checked by its published md5 and the ratings "
              "by the digest of sequences.txt. sequences.txt has no address of its own: it is derived from "
              "ratings.dat (fetched first if absent), each user's rows one line `UserID MovieID MovieID ...` in "
              "timestamp order, rows with equal timestamps in the order the file has them. split80-20/: the "
              "A-ra/A-hum authors' code (rdz98/PoisonFedDLRS, Data/ML), downloaded by name.")

    @classmethod
    def catalogue(cls) -> list[DataFile]:
        return [*SEQUENCES.values(), *RATINGS.values(), *SPLIT80_20.values()]

    def __init__(self, config: Ml1mConfig):
        split80 = config.variant == "split80-20"
        self.has_predefined_split, self.ordered = split80, not split80
        self.parts = {"split80-20": SPLIT80_20, "ratings": RATINGS}.get(config.variant, SEQUENCES)
        super().__init__(config)

    def read(self, paths: dict[str, Path]) -> dict[str, Interactions]:
        if self.config.variant != "ratings":
            return super().read(paths)
        path = paths[RATINGS["all"].path]
        users, items, ratings, times = read_ratings(path)
        if hashlib.sha256(histories(users, items, times).encode()).hexdigest() != SEQUENCES["all"].sha256:
            raise DataError(f"{path} is not GroupLens' MovieLens 1M ratings.dat: its time-ordered histories do not "
                            f"reproduce the published set's digest. Replace it with ratings.dat from {GROUPLENS}.")
        user_ids, user_raw = reindex(users)
        item_ids, item_raw = reindex(items)
        return {"all": Interactions(user_ids, item_ids, user_raw.size, item_raw.size, ratings, times)}


def read_ratings(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``UserID::MovieID::Rating::Timestamp`` rows (raw ids from 1) → users, items, ratings, timestamps. pandas'
    C parser reads the million rows in a fraction of a second; a file it cannot read is read again line by line
    for an error that names the line."""
    import pandas as pd

    try:
        table = pd.read_csv(io.BytesIO(path.read_bytes().replace(b"::", b"\t")), sep="\t", header=None,
                            dtype=np.int64).to_numpy()
    except (ValueError, pd.errors.ParserError):
        table = None
    if table is None or table.shape[1] != 4:
        table = read_table(path, 4, sep="::")  # raises the DataError naming the malformed line
    return (table[:, 0].astype(np.int64), table[:, 1].astype(np.int64), table[:, 2].astype(np.float32),
            table[:, 3].astype(np.int64))


def histories(users: np.ndarray, items: np.ndarray, times: np.ndarray) -> str:
    """The ratings as ``sequences.txt`` holds them: one line ``UserID MovieID MovieID ...`` per user in ascending
    id, the items in timestamp order, rows with equal timestamps in file order."""
    order = np.lexsort((np.arange(users.size), times, users))  # user, then time, then file position
    users, items = users[order], items[order]
    starts = np.flatnonzero(np.r_[True, users[1:] != users[:-1]])
    return "".join(f"{user} " + " ".join(map(str, history)) + "\n"
                   for user, history in zip(users[starts].tolist(), np.split(items, starts[1:])))
