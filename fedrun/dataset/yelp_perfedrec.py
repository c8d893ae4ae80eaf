"""The Yelp subset shipped with PerFedRec++'s code (Luo et al.): fixed train/valid/test.

5,224 users / 7,690 items / 123,024 interactions. No public download address is known.
"""

from fedrun.data.files import DataFile
from fedrun.dataset._sequences import SequenceDataset


class YelpPerfedrec(SequenceDataset):
    name = "yelp-perfedrec"
    has_predefined_split = True
    parts = {
        "train": DataFile("train.txt", "11c09b3d7a29d007d20489b6c60a7412225ab9c7e67d2437c11a6a0d89ebe291"),
        "valid": DataFile("valid.txt", "9056b119549daa1ce55a9c29c63b619da4afa28ef063ed702ab0a42f78823128"),
        "test": DataFile("test.txt", "75d620229f8199f1b5d340c081bb9fd2e638173eb869ffa13a9475a585e0f1f5"),
    }
