"""Binary matrix factorisation: user codes b_u and item codes d_i in {±1}^f, scored by Hamming
similarity sim(b_u, d_i) = 1/2 + b_uᵀd_i / (2f) (LightFR, Zhang et al., TOIS 2023, Eq. 4).

Codes are held as ±1 float tensors so the DCD updates are plain tensor algebra; what goes over
the wire or into storage is the packed form, f/8 bytes per code (``code_bytes``). ``score``
returns the inner product b_uᵀd_i ∈ [−f, f], a monotone map of the Hamming similarity (and of
minus the Hamming distance, (f − b_uᵀd_i)/2), so rankings, ties included, are the same.
Private: b_u. Public: d_i. Trained by ``method=lightfr`` (discrete coordinate descent), not by
gradients; ``init=random`` draws each bit as the sign of a standard normal.
"""

from __future__ import annotations

import torch

from fedrun.backbone.base import Backbone, PrivateParams, PublicParams
from fedrun.backbone.config import BinaryMFConfig


class BinaryMF(Backbone):
    Config = BinaryMFConfig
    binary_codes = True
    losses = ("mse",)

    @property
    def rating_model(self) -> bool:
        return False  # fitted to ratings, but a ranking model: evaluated by HR / NDCG (LightFR §4.1.3)

    def init_params(self, n_users: int, n_items: int, generator: torch.Generator) -> tuple[PrivateParams, PublicParams]:
        user = random_codes(n_users, self.config.dim, generator)
        item = random_codes(n_items, self.config.dim, generator)
        return PrivateParams(user), PublicParams(item)

    def score(self, user: torch.Tensor, item: torch.Tensor, net: dict[str, torch.Tensor]) -> torch.Tensor:
        return torch.einsum("bd,bld->bl", user, item)  # [B, L] b_uᵀd_i

    def score_full(self, user: torch.Tensor, item: torch.Tensor, net: dict[str, torch.Tensor]) -> torch.Tensor:
        return user @ item.T  # [U, I]

    def query_vectors(self, user: torch.Tensor, net: dict[str, torch.Tensor]) -> torch.Tensor:
        return user

    def code_bytes(self) -> int:
        """Bytes of one packed code."""
        return self.config.dim // 8


def random_codes(n: int, bits: int, generator: torch.Generator) -> torch.Tensor:
    """[n, bits] codes in {±1}: the sign of a standard normal draw (never 0)."""
    draw = torch.randn(n, bits, generator=generator)
    return torch.where(draw >= 0, 1.0, -1.0)
