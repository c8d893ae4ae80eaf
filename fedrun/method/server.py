"""The server program of a federated method (DESIGN.md, "The method contract").

A ``Server`` is built from the public parameters and its method's settings alone — never the
run's env, the client store, raw interactions or private parameters; what it reads from the data
it receives as a value its method declares (CL4FedRec: item popularity, the server's public
statistic). In the round it only ever receives :class:`Uploads` with the senders' ids and
:class:`Aggregate` objects (steps 8–9 of ``fedrun.sim.round``):

  - ``public``: the model view a round downloads (what an attacker and an auditor see too);
  - ``aggregate``: its own aggregation of the round's uploads through the defense (PerFedRec's
    cluster models, MetaMF's back-propagation through the generated models); None by default:
    the round's one aggregation path;
  - ``step``: the server step on the aggregate → per-round metrics.

The privacy boundary is kept in the types and tested by poisoning the client side while every
server phase runs (``tests/test_privacy_boundary.py``).
"""

from __future__ import annotations

from typing import Any

import torch

from fedrun.backbone.base import PublicParams
from fedrun.defense.base import Defense
from fedrun.kernels.config import ServerOptimizerConfig
from fedrun.kernels.server_opt import ServerOptimizer
from fedrun.types import Aggregate, RoundContext, Uploads


class Server:
    def __init__(self, public: PublicParams):
        self.public = public
        self.steps = 0  # server steps taken: the version of the public model (the round counts them)

    def aggregate(self, uploads: Uploads, senders: torch.Tensor, defense: Defense,
                  ctx: RoundContext) -> Aggregate | None:
        """Its own aggregation of the round's ``uploads`` (``senders`` [B]: the user id of each upload
        client, as the server of any FL protocol knows), through ``defense``; None: the round's path."""
        return None

    def step(self, aggregate: Aggregate, ctx: RoundContext) -> dict[str, float]:
        """The server step on the round's aggregate → per-round metrics."""
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

    def step(self, aggregate: Aggregate, ctx: RoundContext) -> dict[str, float]:
        self.optimizer.step(aggregate)
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.optimizer.load_state_dict(state["optimizer"])
