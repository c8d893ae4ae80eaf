"""Attacks: malicious clients that take part in rounds.

The threat model is in the signatures: an attacker is a client, so it receives what a client
receives — the public model view of the round (``PublicParams``: the item table and the shared
weights it downloads), the round's context and the protocol a client runs (``AttackSetup``: the
model's architecture, the client learning rate) — plus only what it declares in ``needs``
(``known_interactions``: a sample of benign interactions; ``fabricated_data``: its own synthetic
users). It never sees benign uploads, private rows or the client store. The round appends the
uploads it crafts to the benign ones before the guards and the defense. Malicious clients are
extra participants: they are not users of the split, so they never count in evaluation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar

import torch

from fedrun.attack._known import KnownInteractions
from fedrun.backbone.base import Backbone, PublicParams
from fedrun.core.seeding import generator
from fedrun.errors import check
from fedrun.types import ClientBatch, RoundContext, Uploads

NEEDS = ("model_view", "client_step", "known_interactions", "fabricated_data")


@dataclass(frozen=True)
class AttackSetup:
    """What the attacker knows before the first round: the protocol (architecture, client lr, how the server
    deals clients into rounds), how many benign users there are (to size itself), its target items and its own
    seed."""

    backbone: Backbone
    n_users: int
    round_share: float  # clients per round / clients (``participation=sampled``)
    client_lr: float
    targets: torch.Tensor  # [T] item ids
    seed: int
    device: torch.device
    n_items: int = 0  # the catalogue the clients download
    client_step: Callable[[ClientBatch, torch.Tensor, int], Any] | None = None  # the benign client software
    known: KnownInteractions | None = None  # the benign interactions it knows (``needs`` known_interactions)
    # the epoch the server deals (``participation=per_epoch``): its benign clients, per round, rounds
    schedule: tuple[int, int, int] | None = None


class Attack:
    Config: ClassVar[type]
    active: ClassVar[bool] = True  # False only for the no-attack option (keeps the FedSGD fast path)
    needs: ClassVar[frozenset[str]] = frozenset({"model_view"})  # a subset of NEEDS
    # the backbone user contexts its clients can take part in (``fedrun.method.context``): every attack's clients
    # are users that are rows of their own (synthetic users scored by the backbone, fabricated clients' private
    # rows), so ids only — a sequence's users are queries inferred from a history, a graph's need an ego graph
    user_contexts: ClassVar[frozenset[str]] = frozenset({"ids"})

    def __init__(self, config):
        self.config = config

    def setup(self, setup: AttackSetup) -> None:
        """Called once the data is loaded, before the first round."""

    def enlist(self, setup: AttackSetup) -> None:
        """Size the malicious population: ⌊fraction × n_users⌋ clients (the A-hum code's int(n_users × fraction)),
        refused when that is none (it was raised to one: another threat than the fraction says); remember what
        ``joining`` draws from. (Every-round attackers may outnumber a round's benign clients: a stress regime
        the run's params name, ``participation=every_round`` and the fraction.)"""
        fraction = self.config.fraction
        self.n_clients = int(setup.n_users * fraction)
        check(self.n_clients >= 1, "attack.fraction", fraction,
              f"at least 1/{setup.n_users} = {1 / setup.n_users:.2g}: {fraction:g} of the {setup.n_users} users is "
              "no malicious client (the count is the reference code's int(users x fraction))")
        self.round_share, self.seed, self.device = setup.round_share, setup.seed, setup.device
        self.schedule = setup.schedule
        self._epoch, self._epoch_rounds = -1, torch.empty(0, dtype=torch.long)  # ``epoch_rounds``, drawn once an epoch

    def joining(self, ctx: RoundContext) -> torch.Tensor:
        """[M'] the malicious clients that join round ``ctx.round``, drawn from the attack's own seed:
        ``per_epoch`` — each once per epoch, at its place in the epoch's order of benign and malicious clients
        shuffled together (``epoch_rounds``); ``sampled`` — each with a benign client's odds; ``every_round`` —
        all of them."""
        everyone = torch.arange(self.n_clients, device=self.device)
        participation = self.config.participation
        if participation == "every_round":
            return everyone
        if participation == "per_epoch":
            return everyone[(self.epoch_rounds(ctx.epoch) == ctx.round).to(self.device)]
        draw = torch.rand(self.n_clients, generator=generator(self.seed, "attack-participation", ctx.round))
        return everyone[(draw < self.round_share).to(everyone.device)]

    def epoch_rounds(self, epoch: int) -> torch.Tensor:
        """[M] the round (the run's index) of ``epoch`` each malicious client joins: the epoch's N benign and M
        malicious clients are shuffled together and dealt ``per_round`` at a time, as the reference code deals
        them (places past the benign epoch's last round fall into that round). Drawn once per epoch."""
        if self.schedule is None:
            raise RuntimeError("participation=per_epoch needs the server's schedule (AttackSetup.schedule)")
        if epoch != self._epoch:
            n_benign, per_round, rounds = self.schedule
            order = torch.randperm(n_benign + self.n_clients, generator=generator(self.seed, "attack-epoch", epoch))
            place = torch.empty_like(order)
            place[order] = torch.arange(order.numel())  # each client's place in the epoch's order
            self._epoch = epoch  # the malicious clients are the last M ids
            self._epoch_rounds = epoch * rounds + (place[n_benign:] // per_round).clamp_max(rounds - 1)
        return self._epoch_rounds

    def craft(self, view: PublicParams, ctx: RoundContext) -> Uploads | None:
        """The malicious clients' uploads this round, crafted from the model view (None: none join).
        Their dense fields and row width must match the benign uploads' (the guards check it)."""
        raise NotImplementedError
