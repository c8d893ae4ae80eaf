"""An anonymous client-to-client channel (FedRec++'s ordinary → denoising clients, after
Duriakova et al. 2019): senders post rows addressed to a receiver, receivers get the rows in a
random order with no sender attached. Sender anonymity is kept in the type: ``send`` takes no
sender, and :class:`RelayedRows` has no field that could hold one."""

from __future__ import annotations

import torch

from fedrun.types import RelayedRows


class AnonymousChannel:
    def __init__(self) -> None:
        self._posted: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []

    def send(self, to: torch.Tensor, item: torch.Tensor, delta: torch.Tensor) -> None:
        """Post rows: receiver [N], item id [N], row [N, di]."""
        self._posted.append((to, item, delta))

    def deliver(self, generator: torch.Generator, width: int, device: torch.device) -> RelayedRows:
        """Everything posted since the last delivery, shuffled; the channel is empty afterwards."""
        if not self._posted:
            empty = torch.zeros(0, dtype=torch.int64, device=device)
            return RelayedRows(empty, empty, torch.zeros(0, width, device=device))
        to, item, delta = (torch.cat(parts) for parts in zip(*self._posted))
        self._posted = []
        order = torch.randperm(to.numel(), generator=generator).to(to.device)
        return RelayedRows(to[order], item[order], delta[order])
