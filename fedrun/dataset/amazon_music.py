"""The Amazon set ("AZ") of the A-ra/A-hum reference code (Rong et al.), 80/20 split.

16,566 users / 11,797 items / 169,781 entries (145,292 unique pairs: lines repeat items).
"""

from fedrun.data.files import DataFile
from fedrun.dataset._sequences import SequenceDataset
from fedrun.dataset._sources import POISON_FED_DLRS, raw


class AmazonMusic(SequenceDataset):
    name = "amazon-music"
    source = "the A-ra/A-hum authors' code (rdz98/PoisonFedDLRS, Data/AZ), downloaded by name"
    has_predefined_split = True
    parts = {
        "train": DataFile("train.dat", "1d5119e97726f97bb587134b543552253b98c6874cb1f247215a9501fd06151d",
                          raw(POISON_FED_DLRS, "Data/AZ/train.dat")),
        "test": DataFile("test.dat", "4caaa1b6ad52ca303b35b161d915f0881aa51a8fca3f7d776c6d5606207e1a9a",
                         raw(POISON_FED_DLRS, "Data/AZ/test.dat")),
    }
