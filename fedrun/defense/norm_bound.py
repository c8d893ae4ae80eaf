"""Norm bounding per item row (Sun et al. 2019, "Can you really backdoor federated learning?"):
every upload of a row is scaled to L2 norm at most τ, then the row's uploads are averaged
(``reduce=mean``) or summed (``reduce=sum``: FedRecAttack's server, which clips each client's
per-item gradient to ``grad_limit`` τ = 1.0 before summing). Dense shared weights: each client's
delta of a weight is clipped to τ as a whole.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedrun.defense._rows import RobustConfig, RobustDefense
from fedrun.errors import check_positive


@dataclass
class NormBoundConfig(RobustConfig):
    tau: float = 1.0  # τ, the largest L2 norm an upload of one row may have

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive("tau", self.tau)


class NormBound(RobustDefense):
    Config = NormBoundConfig

    def reduce(self, values: torch.Tensor) -> torch.Tensor:
        norm = values.norm(dim=2, keepdim=True)  # [g, c, 1]
        return (values * torch.clamp(self.config.tau / norm.clamp_min(1e-30), max=1.0)).mean(1)
