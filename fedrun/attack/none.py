"""No attack: every client is benign."""

from __future__ import annotations

from dataclasses import dataclass

from fedrun.attack.base import Attack
from fedrun.types import RoundContext, Uploads


@dataclass
class NoAttackConfig:
    pass


class NoAttack(Attack):
    Config = NoAttackConfig
    injects = False

    def inject(self, uploads: Uploads, ctx: RoundContext) -> Uploads:
        return uploads
