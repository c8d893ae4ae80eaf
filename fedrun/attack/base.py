"""Attacks: malicious clients that take part in rounds.

The threat model is in the signature: an attacker is a client, so it receives what a client
receives — the public model view of the round (``PublicParams``: the item table and the shared
weights it downloads) and the round's context — plus only what it declares in ``needs``
(``known_interactions``: a sample of benign interactions; ``fabricated_data``: its own synthetic
users). It never sees benign uploads, private rows or the client store. The round appends the
uploads it crafts to the benign ones before the guards and the defense.
"""

from __future__ import annotations

from typing import ClassVar

from fedrun.backbone.base import PublicParams
from fedrun.types import RoundContext, Uploads

NEEDS = ("model_view", "known_interactions", "fabricated_data")


class Attack:
    Config: ClassVar[type]
    active: ClassVar[bool] = True  # False only for the no-attack option (keeps the FedSGD fast path)
    needs: ClassVar[frozenset[str]] = frozenset({"model_view"})  # a subset of NEEDS

    def __init__(self, config):
        self.config = config

    def craft(self, view: PublicParams, ctx: RoundContext) -> Uploads | None:
        """The malicious clients' uploads this round, crafted from the model view (None: none join).
        Their dense fields and row width must match the benign uploads' (the guards check it)."""
        raise NotImplementedError
