"""No attack: every client is benign."""

from __future__ import annotations

from fedrun.attack.base import Attack
from fedrun.attack.config import NoAttackConfig
from fedrun.backbone.base import PublicParams
from fedrun.types import RoundContext, Uploads


class NoAttack(Attack):
    Config = NoAttackConfig
    active = False
    needs = frozenset()
    user_contexts = frozenset({"ids", "sequence", "graph"})

    def craft(self, view: PublicParams, ctx: RoundContext) -> Uploads | None:
        return None
