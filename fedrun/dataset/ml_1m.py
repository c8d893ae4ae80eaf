"""MovieLens 1M (Harper & Konstan 2015), implicit.

``variant=sequences``: every user's full history in time order (6,040 users / 3,706 items /
1,000,209 interactions; the files hold no ratings or timestamps: GroupLens' ``ml-1m.zip`` has both, and
fetching it by name is issue #66's).
``variant=split80-20``: the random 80/20 implicit split of the A-ra/A-hum reference code
(re-indexed ids; one interaction short of the full set), used with ``split.protocol=predefined``.
"""

from __future__ import annotations

from dataclasses import dataclass

from fedrun.data.files import DataFile
from fedrun.dataset._sequences import SequenceDataset
from fedrun.dataset._sources import POISON_FED_DLRS, raw
from fedrun.dataset.base import DatasetConfig
from fedrun.errors import check_choice

SEQUENCES = {"all": DataFile("sequences.txt", "3b3803d72c034929ada18b2cbd114296261c012b7a3e10282543adeceba53fb1")}
SPLIT80_20 = {
    "train": DataFile("split80-20/train.dat", "007936b9f74eba871cedbcd4f91a464a13f2a321b9df2d793dcbdc9d0fb2a408",
                      raw(POISON_FED_DLRS, "Data/ML/train.dat")),
    "test": DataFile("split80-20/test.dat", "b4da1eb04b1cc6780d2b54aa7c35c7c2e701b81aa030f0547420ab16c7487518",
                     raw(POISON_FED_DLRS, "Data/ML/test.dat")),
}


@dataclass
class Ml1mConfig(DatasetConfig):
    variant: str = "sequences"  # sequences | split80-20

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("variant", self.variant, ("sequences", "split80-20"))


class Ml1m(SequenceDataset):
    Config = Ml1mConfig
    name = "ml-1m"
    source = ("split80-20/: the A-ra/A-hum authors' code (rdz98/PoisonFedDLRS, Data/ML), downloaded by name. "
              "sequences.txt has no public address: it is GroupLens' ml-1m.zip (https://files.grouplens.org/datasets/"
              "movielens/ml-1m.zip, research use, no redistribution) with each user's ratings.dat rows turned into "
              "one line `UserID MovieID MovieID ...` in timestamp order; rows with equal timestamps keep the order "
              "the file had, so a re-derivation whose tie order differs fails the checksum.")

    @classmethod
    def catalogue(cls) -> list[DataFile]:
        return [*SEQUENCES.values(), *SPLIT80_20.values()]

    def __init__(self, config: Ml1mConfig):
        split80 = config.variant == "split80-20"
        self.has_predefined_split, self.ordered = split80, not split80
        self.parts = SPLIT80_20 if split80 else SEQUENCES
        super().__init__(config)
