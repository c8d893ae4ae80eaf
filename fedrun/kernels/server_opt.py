"""Server optimizer: applies an aggregated delta to the public parameters.

``sgd`` with lr 1 is plain FedAvg (params += mean delta); other learning rates scale the
step (server learning rate, Reddi et al. 2021). ``adam`` treats −delta as a pseudo-gradient
(FedAdam, Reddi et al. 2021, Alg. 2) over the whole public state.
"""

from __future__ import annotations

import torch

from fedrun.backbone.base import PublicParams
from fedrun.kernels.config import ServerOptimizerConfig
from fedrun.types import Aggregate


class ServerOptimizer:
    def __init__(self, config: ServerOptimizerConfig, public: PublicParams):
        self.config, self.public = config, public
        self._adam = None
        if config.name == "adam":
            self._adam = torch.optim.Adam([public.item, *public.net.values()], lr=config.lr)

    @torch.no_grad()
    def step(self, aggregate: Aggregate) -> None:
        public = self.public
        if self._adam is None:
            public.item.index_add_(0, aggregate.items, aggregate.item_delta, alpha=self.config.lr)
            for name, delta in aggregate.dense.items():
                public.net[name].add_(delta, alpha=self.config.lr)
            return
        public.item.grad = torch.zeros_like(public.item).index_add_(0, aggregate.items, -aggregate.item_delta)
        for name, tensor in public.net.items():
            tensor.grad = -aggregate.dense[name]
        self._adam.step()

    def state_dict(self) -> dict:
        return {} if self._adam is None else self._adam.state_dict()

    def load_state_dict(self, state: dict) -> None:
        if self._adam is not None:
            self._adam.load_state_dict(state)
