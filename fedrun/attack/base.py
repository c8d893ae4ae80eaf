"""Attacks: malicious clients and what they add to a round's uploads."""

from __future__ import annotations

from typing import ClassVar

from fedrun.types import RoundContext, Uploads


class Attack:
    Config: ClassVar[type]
    injects: ClassVar[bool] = True  # False only for the no-attack option (keeps the FedSGD fast path)

    def __init__(self, config):
        self.config = config

    def inject(self, uploads: Uploads, ctx: RoundContext) -> Uploads:
        raise NotImplementedError
