"""Popularity: rank items by their number of training interactions, the same list for every
user. The floor row of every table; it trains nothing (zero rounds).

Counts use the training part only (the S3-Rec PopRec rows count test items too, which
fedrun does not: it would leak the test set).
"""

from __future__ import annotations

import torch

from fedrun.kernels.env import RunEnv
from fedrun.method.base import Method, RoundStats
from fedrun.method.config import PopConfig


class Pop(Method):
    Config = PopConfig
    trains_backbone = False

    def __init__(self, config: PopConfig, env: RunEnv):
        super().__init__(config, env)
        self.counts = torch.bincount(env.train.items, minlength=env.n_items).to(torch.float32)  # [I]
        ratings = env.train.ratings
        self.mean_rating = float(ratings.mean()) if ratings is not None and ratings.numel() else 0.0

    def rounds_per_epoch(self) -> int:
        return 0

    def train_round(self, round_index: int) -> RoundStats:  # pragma: no cover - never called (0 rounds)
        return RoundStats(0.0)

    @torch.no_grad()
    def score_users(self, users: torch.Tensor, history=()) -> torch.Tensor:
        return self.counts.unsqueeze(0).expand(users.numel(), -1).clone()

    @torch.no_grad()
    def score_pairs(self, users: torch.Tensor, items: torch.Tensor, history=()) -> torch.Tensor:
        """The rating prediction: the mean training rating."""
        return torch.full(users.shape, self.mean_rating, device=users.device)

    @torch.no_grad()
    def rank_pairs(self, users: torch.Tensor, items: torch.Tensor, history=()) -> torch.Tensor:
        """The ranking: training counts, as in ``score_users``."""
        return self.counts[items]
