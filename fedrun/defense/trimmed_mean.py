"""Coordinate-wise trimmed mean per item row (Yin et al., ICML 2018; rCL4FedRec Table 3's
"+Trimmed", whose trim count the paper does not give).

Per row with c uploads and per coordinate: drop the k smallest and k largest values and average
the rest, k = ⌊β·c⌋ (``beta``) or a fixed count (``trim``), capped at ⌊(c − 1)/2⌋ so at least one
value remains — a row with one or two uploads is averaged untrimmed. Dense shared weights: the
same rule over every uploading client. ``reduce=sum`` multiplies by the row's uploader count.
"""

from __future__ import annotations

import torch

from fedrun.defense._rows import RobustDefense, order_statistics
from fedrun.defense.config import TrimmedMeanConfig


class TrimmedMean(RobustDefense):
    Config = TrimmedMeanConfig

    def trimmed(self, count: int) -> int:
        """Values trimmed from each side of a row of ``count`` uploads."""
        k = int(count * self.config.beta) if self.config.trim is None else self.config.trim
        return min(k, (count - 1) // 2)

    def reduce(self, values: torch.Tensor) -> torch.Tensor:
        c = values.shape[1]
        k = self.trimmed(c)
        if k == 0:
            return values.mean(1)
        return order_statistics(values, (k, c - k - 1))[:, k: c - k].mean(1)  # the c − 2k middle values
