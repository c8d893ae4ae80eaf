"""Yelp (transactions after 2019-01-01) as preprocessed by S3-Rec.

30,431 users / 20,033 items / 316,354 interactions (304,524 unique pairs: users revisit
businesses), in time order. With the history masked at evaluation, test items that are
already in the history are unreachable (6.7% of them); fedrun logs that masking is on.
"""

from fedrun.data.files import DataFile
from fedrun.dataset._sequences import SequenceDataset
from fedrun.dataset.beauty import S3REC


class Yelp(SequenceDataset):
    name = "yelp"
    source = "S3-Rec's preprocessed file (RUCAIBox/CIKM2020-S3Rec, data/), downloaded by name"
    ordered = True
    parts = {"all": DataFile("Yelp.txt", "724b219106b81dd2349027da997334ddb6da9fe2f152ad6e0d97a93170f7caed",
                             S3REC + "Yelp.txt")}
