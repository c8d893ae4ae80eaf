"""Everything a method needs about the run: data, client store, device, seeds, backbone."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedrun.backbone.base import Backbone
from fedrun.data.client_store import ClientStore
from fedrun.data.splits import Split
from fedrun.sim.config import SimConfig


@dataclass
class RunEnv:
    split: Split
    train: ClientStore  # the clients' local training data (client side only)
    device: torch.device
    sim: SimConfig
    backbone: Backbone

    @classmethod
    def create(cls, split: Split, sim: SimConfig, backbone: Backbone) -> "RunEnv":
        device = sim.torch_device()
        return cls(split, ClientStore.from_interactions(split.train, device), device, sim, backbone)

    @property
    def n_users(self) -> int:
        return self.split.n_users

    @property
    def n_items(self) -> int:
        return self.split.n_items

    def clients_with_data(self) -> torch.Tensor:
        return torch.nonzero(self.train.sizes() > 0).squeeze(1)
