"""EB, explicit boosting (the A-hum code's baseline): a malicious client is an ordinary client whose
only positives are the target items, trained like a benign client (its negatives drawn as a benign
client's) — what a fake account that interacts with the target alone uploads. Shared mechanics:
``fedrun.attack._fabricated``."""

from __future__ import annotations

import torch

from fedrun.attack._fabricated import FabricatedClients
from fedrun.attack.base import AttackSetup
from fedrun.attack.config import EBConfig


class EB(FabricatedClients):
    Config = EBConfig

    def fabricated_items(self, setup: AttackSetup) -> torch.Tensor:
        return self.targets.unsqueeze(0).expand(self.n_clients, -1).clone()  # [M, T]
