"""Mean per item row over the clients that uploaded it (FedAvg / FCF aggregation).

``weighting=uniform``: every uploader counts once (FCF, Ammad-ud-din et al. 2019, and the
FedRec++ server, which divides by the number of uploaders). ``weighting=data_size``:
uploaders weighted by their number of training interactions (McMahan et al. 2017, Eq. in
Alg. 1, applied per row).
"""

from __future__ import annotations

import torch

from fedrun.defense.base import LinearDefense
from fedrun.defense.config import MeanConfig


class Mean(LinearDefense):
    Config = MeanConfig

    def linear_weights(self, data_size: torch.Tensor) -> torch.Tensor:
        return data_size if self.config.weighting == "data_size" else torch.ones_like(data_size)

    @property
    def plain(self) -> bool:
        return self.config.weighting == "uniform"
