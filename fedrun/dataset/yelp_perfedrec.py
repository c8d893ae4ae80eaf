"""The Yelp subset shipped with PerFedRec++'s code (Luo et al.): fixed train/valid/test.

5,224 users / 7,690 items / 123,024 interactions, downloaded by name from the authors' repository.
"""

from fedrun.data.files import DataFile
from fedrun.dataset._sequences import SequenceDataset
from fedrun.dataset._sources import PERFEDREC_PLUS, raw


class YelpPerfedrec(SequenceDataset):
    name = "yelp-perfedrec"
    source = ("the PerFedRec++ authors' code (sichunluo/PerFedRec-Plus, PerFedRec++/dataset/yelp_test), "
              "downloaded by name")
    has_predefined_split = True
    parts = {
        part: DataFile(f"{part}.txt", sha, raw(PERFEDREC_PLUS, f"PerFedRec++/dataset/yelp_test/{part}.txt"))
        for part, sha in (("train", "11c09b3d7a29d007d20489b6c60a7412225ab9c7e67d2437c11a6a0d89ebe291"),
                          ("valid", "9056b119549daa1ce55a9c29c63b619da4afa28ef063ed702ab0a42f78823128"),
                          ("test", "75d620229f8199f1b5d340c081bb9fd2e638173eb869ffa13a9475a585e0f1f5"))
    }
