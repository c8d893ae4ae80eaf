"""Malicious clients that run the benign client software on fabricated data (EB, RA).

Each malicious client is a fabricated user outside the split (id n_users + m) with its own private
row, drawn once like a benign user's from the attack's seed and kept between rounds, and its own
training items (``fabricated_items``). The round it joins, it runs exactly the benign client step
the protocol's client software runs (``AttackSetup.client_step``: negatives drawn as a benign
client's, the same local training on the downloaded model view) and uploads what that step uploads.
All joining malicious clients are one batch of that step.
"""

from __future__ import annotations

import torch

from fedrun.attack.base import Attack, AttackSetup
from fedrun.backbone.base import PublicParams
from fedrun.core.seeding import generator
from fedrun.errors import ConfigError
from fedrun.types import ClientBatch, RoundContext, Uploads


class FabricatedClients(Attack):
    needs = frozenset({"model_view", "client_step", "fabricated_data"})

    def setup(self, setup: AttackSetup) -> None:
        if setup.client_step is None:  # build.check_combination refuses this first; kept as a guard
            raise ConfigError("attack", type(self).__name__, "a method that offers its client step")
        self.enlist(setup)
        self.step, self.first_id = setup.client_step, setup.n_users
        self.targets = setup.targets.to(setup.device)
        private, _ = setup.backbone.init_params(self.n_clients, max(setup.n_items, 1),
                                                generator(setup.seed, "attack-users"))
        self.user = private.user.to(setup.device)  # [M, du] each fabricated user's own row
        self.items = self.fabricated_items(setup)  # [M, P]

    def fabricated_items(self, setup: AttackSetup) -> torch.Tensor:
        """[M, P] each malicious client's training items."""
        raise NotImplementedError

    def craft(self, view: PublicParams, ctx: RoundContext) -> Uploads | None:
        clients = self.joining(ctx)
        if clients.numel() == 0:
            return None
        pos = self.items[clients]  # [M', P]
        batch = ClientBatch(self.first_id + clients, pos, torch.ones_like(pos, dtype=torch.bool), None)
        with torch.enable_grad():
            result = self.step(batch, self.user[clients], ctx.round)
        self.user[clients] = result.user.detach()  # kept on the malicious client
        return result.uploads
