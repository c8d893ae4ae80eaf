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
    half = values.shape[1] // 2
    ordered = order_statistics(values, (half,))  # position `half` holds its order statistic, the smaller before it
    if values.shape[1] % 2:
        return ordered[:, half]
    lower = ordered[:, :half].amax(dim=1)  # the (half − 1)-th smallest: the largest of those below; half a selection
    return (lower + ordered[:, half]) / 2
