"""ClientStore: every client's local data packed as CSR tensors, gathered into padded batches."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from fedrun.data.interactions import Interactions
from fedrun.types import ClientBatch


@dataclass(frozen=True)
class ClientStore:
    """CSR over users: client ``u`` owns rows ``indptr[u]:indptr[u+1]`` of ``items`` (and ``ratings``).

    Rows keep the data's time order within each client when it has one.
    """

    indptr: torch.Tensor  # [n_users + 1] int64
    items: torch.Tensor  # [nnz] int64
    ratings: torch.Tensor | None  # [nnz] float32
    n_items: int

    @classmethod
    def from_interactions(cls, data: Interactions, device: torch.device | str = "cpu") -> "ClientStore":
        key = data.order if data.order is not None else np.zeros(len(data), dtype=np.int64)
        order = np.lexsort((np.arange(len(data)), key, data.user))
        counts = np.bincount(data.user, minlength=data.n_users)
        indptr = np.concatenate([[0], np.cumsum(counts)])
        ratings = None if data.rating is None else torch.as_tensor(data.rating[order], dtype=torch.float32,
                                                                   device=device)
        return cls(
            torch.as_tensor(indptr, dtype=torch.int64, device=device),
            torch.as_tensor(data.item[order], dtype=torch.int64, device=device),
            ratings,
            data.n_items,
        )

    @property
    def n_users(self) -> int:
        return int(self.indptr.numel() - 1)

    def sizes(self, users: torch.Tensor | None = None) -> torch.Tensor:
        sizes = self.indptr[1:] - self.indptr[:-1]
        return sizes if users is None else sizes[users.to(sizes.device)]

    def gather(self, users: torch.Tensor, last: int | None = None
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Pad the clients' rows: items [B, P], mask [B, P], ratings [B, P] or None.

        ``last``: keep only each client's last ``last`` rows (the most recent, in time order)."""
        users = users.to(self.indptr.device)  # callers may hold ids on another device
        start, size = self.indptr[users], self.sizes(users)  # [B], [B]
        if last is not None:
            start, size = start + (size - last).clamp_min(0), size.clamp_max(last)
        width = int(size.max()) if users.numel() else 0
        offset = torch.arange(width, device=users.device)  # [P]
        mask = offset[None, :] < size[:, None]  # [B, P]
        index = torch.where(mask, start[:, None] + offset[None, :], torch.zeros_like(mask, dtype=torch.int64))
        items = torch.where(mask, self.items[index], torch.zeros_like(index))
        ratings = None if self.ratings is None else torch.where(mask, self.ratings[index], 0.0)
        return items, mask, ratings

    def flat(self, users: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """The clients' rows without padding: owner [N] (index into ``users``), position [N]
        (within its client, in store order), items [N], ratings [N] or None."""
        users = users.to(self.indptr.device)
        sizes = self.sizes(users)  # [B]
        owner = torch.repeat_interleave(torch.arange(users.numel(), device=users.device), sizes)  # [N]
        position = torch.arange(owner.numel(), device=users.device) - (sizes.cumsum(0) - sizes)[owner]
        index = self.indptr[users][owner] + position
        return owner, position, self.items[index], None if self.ratings is None else self.ratings[index]

    def client_batch(self, users: torch.Tensor, last: int | None = None) -> "ClientBatch":
        items, mask, ratings = self.gather(users, last)
        return ClientBatch(users, items, mask, ratings)

    def sorted_keys(self) -> torch.Tensor:
        """Sorted ``user * n_items + item`` keys, for membership tests (negative sampling, masking)."""
        users = torch.repeat_interleave(torch.arange(self.n_users, device=self.items.device), self.sizes())
        return torch.sort(users * self.n_items + self.items).values


def recent_history(stores: list[ClientStore], users: torch.Tensor, last: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each user's rows across ``stores`` (in that order: e.g. train then validation), keeping the
    last ``last`` of them, left-aligned → items [U, W], mask [U, W] with W ≤ ``last``."""
    device = stores[0].items.device
    parts = [tuple(x.to(device) for x in store.gather(users, last)[:2]) for store in stores]
    items = torch.cat([p[0] for p in parts], 1)  # [U, M]
    mask = torch.cat([p[1] for p in parts], 1)
    count = mask.sum(1, keepdim=True)  # [U, 1]
    rank = mask.cumsum(1) - 1  # position among the user's real rows
    keep = mask & (rank >= count - last)
    slot = rank - (count - last).clamp_min(0)  # [U, M] target column of a kept row
    width = int(count.clamp_max(last).max()) if users.numel() else 0
    out = torch.zeros(users.numel(), width, dtype=items.dtype, device=items.device)
    out_mask = torch.zeros(users.numel(), width, dtype=torch.bool, device=items.device)
    row = torch.arange(users.numel(), device=items.device).unsqueeze(1).expand_as(items)
    out[row[keep], slot[keep]] = items[keep]
    out_mask[row[keep], slot[keep]] = True
    return out, out_mask
