"""Client sampling. ``epoch``: each epoch a seeded permutation of the clients that hold training
data, dealt out ``clients_per_round`` at a time (the last round of an epoch may be smaller).
``independent``: every round draws ``clients_per_round`` distinct clients afresh (c clients per
iteration, as in FedRec++ Fig. 2); an epoch is then ⌈n / c⌉ rounds for accounting only."""

from __future__ import annotations

import math

import torch

from fedrun.core.seeding import generator


class ClientSampler:
    def __init__(self, clients: torch.Tensor, per_round: int, seed: int, independent: bool = False):
        self.clients = clients  # [n] user ids with training data
        self.per_round = min(per_round, clients.numel())
        self.seed = seed
        self.independent = independent
        self.rounds_per_epoch = math.ceil(clients.numel() / self.per_round)
        self._epoch, self._perm = -1, clients

    def users(self, round_index: int) -> torch.Tensor:
        if self.independent:
            gen = generator(self.seed, "clients-independent", round_index)
            order = torch.randperm(self.clients.numel(), generator=gen).to(self.clients.device)
            return self.clients[order[: self.per_round]]
        epoch, k = divmod(round_index, self.rounds_per_epoch)
        if epoch != self._epoch:
            gen = generator(self.seed, "clients", epoch)
            self._perm = self.clients[torch.randperm(self.clients.numel(), generator=gen).to(self.clients.device)]
            self._epoch = epoch
        return self._perm[k * self.per_round:(k + 1) * self.per_round]
