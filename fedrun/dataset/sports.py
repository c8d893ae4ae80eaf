"""Amazon Sports_and_Outdoors, 5-core, as preprocessed by S3-Rec.

35,598 users / 18,357 items / 296,337 interactions, in time order.
"""

from fedrun.data.files import DataFile
from fedrun.dataset._sequences import SequenceDataset
from fedrun.dataset.beauty import S3REC


class Sports(SequenceDataset):
    name = "sports"
    source = "S3-Rec's preprocessed file (RUCAIBox/CIKM2020-S3Rec, data/), downloaded by name"
    ordered = True
    parts = {"all": DataFile("Sports_and_Outdoors.txt",
                             "2a095e0648872beb9982408958290f5d655db5be2911c3756b5446de9f0b8de2",
                             S3REC + "Sports_and_Outdoors.txt")}
