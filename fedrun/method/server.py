"""The server side of a federated method.

A ``Server`` is built from the public parameters alone and only ever receives
:class:`Aggregate` objects: it has no reference to the client store, raw interactions
or private parameters (the privacy boundary of DESIGN.md, kept in the types; see
``tests/test_privacy_boundary.py``).
"""

from __future__ import annotations

from typing import Any

import torch

from fedrun.backbone.base import PublicParams
from fedrun.sim.server_opt import ServerOptimizer, ServerOptimizerConfig
from fedrun.types import Aggregate, RoundContext


class Server:
    def __init__(self, public: PublicParams):
        self.public = public

    def step(self, aggregate: Aggregate, ctx: RoundContext) -> None:
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        return {"item": self.public.item, "net": dict(self.public.net)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        with torch.no_grad():
            self.public.item.copy_(state["item"])
            for name, tensor in self.public.net.items():
                tensor.copy_(state["net"][name])


class OptimizerServer(Server):
    """Applies the aggregate with a server optimizer (FedAvg: SGD with lr 1)."""

    def __init__(self, public: PublicParams, config: ServerOptimizerConfig):
        super().__init__(public)
        self.optimizer = ServerOptimizer(config, public)

    def step(self, aggregate: Aggregate, ctx: RoundContext) -> None:
        self.optimizer.step(aggregate)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.optimizer.load_state_dict(state["optimizer"])
