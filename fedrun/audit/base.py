"""The audit contract: an auditor sees exactly what the server sees and reads the truth only when it scores.

In the round (``fedrun.sim.round``, step 7) the auditor receives the benign clients' uploads as they reach the
server (after the privacy transform) and the senders' ids: ``observe``. It is built from the catalogue's size alone,
never from the client store, the split or the private rows (the privacy-boundary test covers it). At the end of the
run the experiment hands it the clients' training items to score its guesses against: ``score``. Observing changes
nothing in the round (tested: a run with and without the audit ends at the same state).
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from fedrun.data.client_store import ClientStore
from fedrun.types import RoundContext, Uploads


class Auditor:
    Config: ClassVar[type]
    active: ClassVar[bool] = True

    def __init__(self, config: Any):
        self.config = config

    def start(self, n_users: int, n_items: int, device: torch.device) -> None:
        """Size the auditor's state: the public counts only."""

    def observe(self, uploads: Uploads, senders: torch.Tensor, ctx: RoundContext) -> None:
        """One round of benign uploads ``uploads`` from clients ``senders`` [B] (user ids, in upload order)."""

    def score(self, truth: ClientStore) -> dict[str, float]:
        """The attacks' metrics against the clients' true training items ``truth`` (read here only)."""
        return {}
