"""Sum per item row of the uploaders' deltas (the A-ra/A-hum reference code's server: it sums
client gradients instead of averaging them)."""

from __future__ import annotations

import torch

from fedrun.defense.base import LinearDefense
from fedrun.defense.config import SumConfig


class Sum(LinearDefense):
    Config = SumConfig
    normalized = False

    def linear_weights(self, data_size: torch.Tensor) -> torch.Tensor:
        return torch.ones_like(data_size)
