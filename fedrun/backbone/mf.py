"""Matrix factorisation: score(u, i) = ⟨p_u, q_i⟩ (Koren et al. 2009; BPR: Rendle et al. 2009).

Private: user factors p_u. Public: item factors q_i. Trained with BPR or BCE on sampled
negatives (implicit feedback).
"""

from __future__ import annotations

from typing import ClassVar

import torch

from fedrun.backbone.base import Backbone


class MF(Backbone):
    losses: ClassVar[tuple[str, ...]] = ("bpr", "bce")
    linear_in_user = True

    def score(self, user: torch.Tensor, item: torch.Tensor, net: dict[str, torch.Tensor]) -> torch.Tensor:
        return torch.einsum("bd,bld->bl", user, item)  # [B, L]

    def score_full(self, user: torch.Tensor, item: torch.Tensor, net: dict[str, torch.Tensor]) -> torch.Tensor:
        return user @ item.T  # [U, I]

    def user_score_grad(self, user: torch.Tensor, item: torch.Tensor, net: dict[str, torch.Tensor],
                        weight: torch.Tensor) -> torch.Tensor:
        return torch.einsum("bl,bld->bd", weight, item)  # ∂⟨p, q_l⟩/∂p = q_l  [B, du]

    def query_vectors(self, user: torch.Tensor, net: dict[str, torch.Tensor]) -> torch.Tensor:
        return user
