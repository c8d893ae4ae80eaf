"""Steam as split by the FedRecAttack reference code (Rong et al.): leave-one-out test.

3,753 users / 5,092 items / 114,713 interactions.
"""

from fedrun.data.files import DataFile
from fedrun.dataset._sequences import SequenceDataset
from fedrun.dataset._sources import FED_REC_ATTACK, raw


class Steam(SequenceDataset):
    name = "steam"
    source = "the FedRecAttack authors' code (rdz98/FedRecAttack, Data/steam), downloaded by name"
    has_predefined_split = True
    parts = {
        "train": DataFile("train.txt", "e274a2acf7f37c198bc59509e10fe7f4902d3dee59d10836808db14e59724ffc",
                          raw(FED_REC_ATTACK, "Data/steam/train.txt")),
        "test": DataFile("test.txt", "74a4eb89155541303294c2537479ad83d5184b7b94574fc3db112e74b56d9f65",
                         raw(FED_REC_ATTACK, "Data/steam/test.txt")),
    }
