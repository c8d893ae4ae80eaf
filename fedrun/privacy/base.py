"""Privacy mechanisms: what a client does to its upload before it leaves (clip → noise → account)."""

from __future__ import annotations

from typing import ClassVar

import torch

from fedrun.types import Uploads


class Privacy:
    """Transforms each client's upload, vectorized over the clients of the round."""

    Config: ClassVar[type]
    transforms_uploads: ClassVar[bool] = True  # False only for the identity (keeps the FedSGD fast path)

    def __init__(self, config):
        self.config = config

    def apply(self, uploads: Uploads, generator: torch.Generator) -> Uploads:
        raise NotImplementedError

    def epsilon_per_upload(self) -> float | None:
        """ε of one upload (None: no formal guarantee)."""
        return None
