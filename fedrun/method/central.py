"""Centralized training of the same backbone on all training data in one place — the
"centralized" row of every paper table, and the floor the federated runs are measured against.

One round = one epoch: every training (user, item) pair once, shuffled, in mini-batches of
``batch_size`` with ``num_negatives`` negatives per positive resampled each epoch; the loss
is the batch mean; one optimizer over all parameters (dense Adam/SGD, as in the usual
PyTorch implementations with non-sparse embeddings).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from fedrun.backbone.losses import example_sq_norms, per_client_loss
from fedrun.data.negatives import sample_negatives
from fedrun.errors import check
from fedrun.method.base import Method, RoundStats
from fedrun.sim.env import RunEnv
from fedrun.sim.local import ClientOptimizer
from fedrun.sim.seeding import derive_seed, generator


@dataclass
class CentralConfig:
    optimizer: ClientOptimizer = field(default_factory=lambda: ClientOptimizer("adam", 1e-3))
    batch_size: int = 1024
    num_negatives: int = 1  # negatives per positive, resampled each epoch (ignored for mse)

    def __post_init__(self) -> None:
        check(self.batch_size >= 1, "batch_size", self.batch_size, "an integer >= 1")
        check(self.num_negatives >= 0, "num_negatives", self.num_negatives, "an integer >= 0")


class Central(Method):
    Config = CentralConfig

    def __init__(self, config: CentralConfig, env: RunEnv, **components):
        super().__init__(config, env)
        private, public = env.backbone.init_params(env.n_users, env.n_items, generator(env.sim.seed, "init"))
        self.user = private.user.to(env.device).requires_grad_(True)
        self.item = public.item.to(env.device).requires_grad_(True)
        self.net = {k: v.to(env.device).requires_grad_(True) for k, v in public.net.items()}
        self.optimizer = config.optimizer.make([self.user, self.item, *self.net.values()])
        self.num_negatives = 0 if env.backbone.config.loss == "mse" else config.num_negatives
        store = env.train
        self.pair_user = torch.repeat_interleave(torch.arange(store.n_users, device=env.device), store.sizes())
        self.pair_item, self.pair_rating = store.items, store.ratings
        self._positive_keys = store.sorted_keys()

    def rounds_per_epoch(self) -> int:
        return 1

    def train_round(self, round_index: int) -> RoundStats:
        env, n_pairs = self.env, self.pair_user.numel()
        gen = generator(env.sim.seed, "central-epoch", round_index)  # CPU: same order on every device
        order = torch.randperm(n_pairs, generator=gen).to(env.device)
        seed = derive_seed(env.sim.seed, "central-negatives", round_index)
        total, batches = 0.0, 0
        for rows in torch.split(order, self.config.batch_size):
            users, items = self.pair_user[rows], self.pair_item[rows]
            candidates = items.unsqueeze(1)  # [N, 1]
            if self.num_negatives:
                negatives = sample_negatives(users, self.num_negatives, env.n_items, self._positive_keys, seed,
                                             draw_ids=rows)  # keyed by the training pair
                candidates = torch.cat([candidates, negatives], 1)  # [N, 1 + n]
            user_rows, vectors = self.user[users], self.item[candidates]  # [N, du], [N, 1 + n, di]
            scores = env.backbone.score(user_rows, vectors, self.net)  # [N, 1 + n]
            neg = scores[:, 1:].unsqueeze(1) if self.num_negatives else None
            ratings = None if self.pair_rating is None else self.pair_rating[rows].unsqueeze(1)
            mask = torch.ones_like(items, dtype=torch.bool).unsqueeze(1)
            l2 = env.backbone.config.l2
            loss = per_client_loss(env.backbone.config.loss, scores[:, :1], neg, mask, ratings, l2,
                                   example_sq_norms(user_rows, vectors, 1) if l2 else None).mean()
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
            total, batches = total + float(loss.detach()), batches + 1
        return RoundStats(total / max(batches, 1))

    def state_dict(self) -> dict:
        return {"user": self.user, "item": self.item, "net": self.net, "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        with torch.no_grad():
            self.user.copy_(state["user"])
            self.item.copy_(state["item"])
            for name, tensor in self.net.items():
                tensor.copy_(state["net"][name])
        self.optimizer.load_state_dict(state["optimizer"])

    @torch.no_grad()
    def score_users(self, users: torch.Tensor) -> torch.Tensor:
        return self.env.backbone.score_full(self.user[users], self.item, self.net)

    @torch.no_grad()
    def score_pairs(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        return self.env.backbone.score(self.user[users], self.item[items].unsqueeze(1), self.net)[:, 0]
