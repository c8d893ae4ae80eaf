"""Gowalla check-ins as preprocessed by LightGCN (He et al., SIGIR 2020), fixed train/test.

29,858 users / 40,981 items / 1,027,370 interactions; ids are the LightGCN remapped ids.
"""

from fedrun.data.files import DataFile
from fedrun.dataset._sequences import SequenceDataset

LIGHTGCN = "https://raw.githubusercontent.com/kuandeng/LightGCN/master/Data/gowalla/"


class Gowalla(SequenceDataset):
    name = "gowalla"
    source = "LightGCN's preprocessed split (kuandeng/LightGCN, Data/gowalla), downloaded by name"
    has_predefined_split = True
    parts = {
        "train": DataFile("train.txt", "7244696fdeb23911319cf7b689f2e15a3c4c92549c873a5677b44e3f13cc3e62",
                          LIGHTGCN + "train.txt"),
        "test": DataFile("test.txt", "099a2a73924e4b754dc6efd730d764f492321b53c38eb93298850c83acf57be3",
                         LIGHTGCN + "test.txt"),
    }
