"""Coordinate-wise median per item row over the clients that uploaded it (Yin et al., ICML 2018;
rCL4FedRec Table 3's "+Median", applied per item row as federated-recommendation code does).

An even number of uploads takes the mean of the two middle values (NumPy's median); a row with
one upload keeps it; two uploads give their mean. Dense shared weights: the same rule over every
uploading client. ``reduce=sum`` multiplies the median by the row's uploader count.
"""

from __future__ import annotations

import torch

from fedrun.defense._rows import RobustDefense, order_statistics
from fedrun.defense.config import RobustConfig


class Median(RobustDefense):
    Config = RobustConfig

    def reduce(self, values: torch.Tensor) -> torch.Tensor:
        return coordinate_median(values)


def coordinate_median(values: torch.Tensor) -> torch.Tensor:
    """values [g, c, d] → the per-coordinate median [g, d] (even c: the mean of the two middle values)."""
    c = values.shape[1]
    if c % 2:
        return order_statistics(values, (c // 2,))[:, c // 2]
    middle = order_statistics(values, (c // 2 - 1, c // 2))
    return (middle[:, c // 2 - 1] + middle[:, c // 2]) / 2
