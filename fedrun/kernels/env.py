"""Everything a method needs about the run: data, client store, device, seeds, backbone."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import torch

from fedrun.backbone.base import Backbone
from fedrun.core.memory import keep_freed_memory
from fedrun.core.seeding import reproducible_on
from fedrun.data.client_store import ClientStore
from fedrun.data.splits import Split
from fedrun.kernels.batching import bucketize
from fedrun.kernels.config import SimConfig
from fedrun.types import ClientBatch


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
        reproducible_on(device)
        keep_freed_memory()  # a round's temporaries reuse the last round's pages (fedrun.core.memory)
        return cls(split, ClientStore.from_interactions(split.train, device), device, sim, backbone)

    @property
    def n_users(self) -> int:
        return self.split.n_users

    @property
    def n_items(self) -> int:
        return self.split.n_items

    def clients_with_data(self) -> torch.Tensor:
        return torch.nonzero(self.train.sizes() > 0).squeeze(1)

    def client_batches(self, users: torch.Tensor, slots_per_row: int, sizes: torch.Tensor | None = None,
                       max_len: int | None = None) -> Iterator[tuple[torch.Tensor, ClientBatch]]:
        """Clients ``users`` [B] in buckets of similar data size under ``sim``'s budget (``bucketize``;
        ``sizes`` [B] overrides their data sizes) → (index into ``users``, the bucket's padded local
        data, its last ``max_len`` items when given), client side."""
        sizes = self.train.sizes(users) if sizes is None else sizes
        for index in bucketize(sizes, self.sim.buckets, self.sim.max_slots, slots_per_row,
                               self.sim.min_bucket_clients, self.sim.padding):
            yield index, self.train.client_batch(users[index], max_len)
