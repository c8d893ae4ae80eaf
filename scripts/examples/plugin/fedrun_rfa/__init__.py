"""A fedrun plugin, as an example of the plugin path (``fedrun.core.plugins``): the geometric median as a robust
aggregation rule per item row — RFA (Pillutla, Kakade and Harchaoui, "Robust Aggregation for Federated
Learning", IEEE TSP 2022), computed by the smoothed Weiszfeld iterations of its Algorithm 2.

For the c uploads of a row, v_1 … v_c, the geometric median minimises Σ_k ‖z − v_k‖. Weiszfeld's iteration
z ← Σ_k β_k v_k / Σ_k β_k with β_k = 1 / max(ν, ‖z − v_k‖) starts at the mean and runs ``iterations`` steps
(the paper: "a few", 3 in its experiments; ν = 1e-6 keeps a weight finite where z meets an upload). Every row of
the round, and every coordinate block, is one batch: no loop over rows or clients.

Installed (``pip install scripts/examples/plugin``), the package's entry point makes ``defense=geomedian`` an
option; without installing, ``FEDRUN_PLUGINS=scripts/examples/plugin/fedrun_rfa/conf`` and the folder on
``PYTHONPATH`` do the same.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedrun.defense._rows import RobustDefense
from fedrun.defense.config import RobustConfig
from fedrun.errors import check


@dataclass
class GeoMedianConfig(RobustConfig):
    iterations: int = 3  # Weiszfeld steps from the mean (RFA's experiments: 3)
    smoothing: float = 1e-6  # ν: the smallest distance a weight divides by

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.iterations >= 1, "iterations", self.iterations, "an integer >= 1")
        check(self.smoothing > 0, "smoothing", self.smoothing, "a number > 0")


class GeoMedian(RobustDefense):
    Config = GeoMedianConfig

    def reduce(self, values: torch.Tensor) -> torch.Tensor:
        return geometric_median(values, self.config.iterations, self.config.smoothing)


def geometric_median(values: torch.Tensor, iterations: int = 3, smoothing: float = 1e-6) -> torch.Tensor:
    """values [g, c, d] (g rows, c uploads each) → [g, d] each row's smoothed Weiszfeld estimate."""
    estimate = values.mean(1)  # [g, d]
    for _ in range(iterations):
        distance = (values - estimate.unsqueeze(1)).norm(dim=2).clamp_min(smoothing)  # [g, c]
        weight = 1.0 / distance
        estimate = (weight.unsqueeze(2) * values).sum(1) / weight.sum(1, keepdim=True)
    return estimate
