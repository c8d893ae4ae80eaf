"""RA, random attack (the A-hum code's baseline): a malicious client is an ordinary client whose
positives are the targets plus random other items, ``items_limit`` in all (the code: the target and
29 random items), drawn once per client from the attack's seed; trained like a benign client.
Shared mechanics: ``fedrun.attack._fabricated``."""

from __future__ import annotations

import torch

from fedrun.attack._fabricated import FabricatedClients
from fedrun.attack.base import AttackSetup
from fedrun.attack.config import RAConfig
from fedrun.core import hashrng
from fedrun.core.seeding import derive_seed
from fedrun.errors import check


class RA(FabricatedClients):
    Config = RAConfig

    def fabricated_items(self, setup: AttackSetup) -> torch.Tensor:
        T, n_items = self.targets.numel(), setup.n_items
        fillers = max(0, self.config.items_limit - T)
        check(fillers <= n_items - T, "attack.items_limit", self.config.items_limit,
              f"at most the {n_items} items of the catalogue")
        others = torch.tensor(sorted(set(range(n_items)) - set(self.targets.tolist())), device=self.targets.device)
        keys = hashrng.randint(derive_seed(setup.seed, "ra-fillers"),
                               [torch.arange(self.n_clients, device=others.device).unsqueeze(1),
                                others.unsqueeze(0)], 1 << 62)  # [M, n_items − T] a random key per (client, item)
        picks = others[keys.argsort(dim=1)[:, :fillers]]  # distinct random fillers per client
        return torch.cat([self.targets.unsqueeze(0).expand(self.n_clients, -1), picks], 1)
