"""Privacy mechanisms: what a client does to its uploads before they leave (clip → noise → account).

Two kinds of upload can be protected, each vectorized over the round's clients:
  - ``user_embedding``: a vector a client shares so the server can act on it (FedCL's
    user embedding for federated negative sampling, ``privatize_embeddings``);
  - ``item_rows``: the item-row deltas of a model update (``apply``).
"""

from __future__ import annotations

from typing import ClassVar

import torch

from fedrun.types import Uploads


class Privacy:
    """Transforms what clients upload. The identity unless a subclass says otherwise."""

    Config: ClassVar[type]
    transforms_uploads: ClassVar[bool] = True  # False only for the identity (keeps the FedSGD fast path)

    def __init__(self, config):
        self.config = config

    @property
    def targets(self) -> tuple[str, ...]:
        """Which uploads this mechanism protects (a subset of ``TARGETS``)."""
        return ()

    @property
    def active(self) -> bool:
        """Whether this is a mechanism at all (what a method without clients refuses)."""
        return self.transforms_uploads or bool(self.targets)

    def apply(self, uploads: Uploads, generator: torch.Generator) -> Uploads:
        """Model updates of one bucket of clients → what leaves those clients."""
        return uploads

    def privatize_embeddings(self, vectors: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """vectors [B, d], one per client → what leaves those clients."""
        return vectors

    def epsilon_per_upload(self, dim: int) -> float | None:
        """ε of one protected ``dim``-dimensional vector (None: no formal guarantee)."""
        return None
