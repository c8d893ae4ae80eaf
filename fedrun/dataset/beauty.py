"""Amazon Beauty, 5-core, as preprocessed by S3-Rec (Zhou et al., CIKM 2020).

22,363 users / 12,101 items / 198,502 interactions, each user's items in time order.
"""

from fedrun.data.files import DataFile
from fedrun.dataset._sequences import SequenceDataset

S3REC = "https://raw.githubusercontent.com/RUCAIBox/CIKM2020-S3Rec/master/data/"


class Beauty(SequenceDataset):
    name = "beauty"
    source = "S3-Rec's preprocessed file (RUCAIBox/CIKM2020-S3Rec, data/), downloaded by name"
    ordered = True
    parts = {"all": DataFile("Beauty.txt", "226cce9c3105299ca0db9615d7d3fb32b3175e90da43100ae352599f0f0107b8",
                             S3REC + "Beauty.txt")}
