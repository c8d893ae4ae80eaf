"""Matrix factorisation: score(u, i) = ⟨p_u, q_i⟩ (Koren et al. 2009; BPR: Rendle et al. 2009).

Private: user factors p_u. Public: item factors q_i. Trained with BPR or BCE on sampled
negatives (implicit feedback).
"""

from __future__ import annotations

from typing import ClassVar

import torch

from fedrun.backbone.base import Backbone
from fedrun.backbone.config import BackboneConfig


class _InnerProducts(torch.autograd.Function):
    """⟨p_b, q_bl⟩ for user rows p [B, d] and item rows q [B, L, d] → [B, L], computed by ``einsum`` as before.

    Its backward is written out so that ∂/∂q = g_bl · p_b comes back as a contiguous [B, L, d] product: autograd's
    ``einsum`` backward returned the transpose of a [B, d, L] batched product, which the row gather behind ``q``
    (``fedrun.kernels.rows``) had to copy before its ``index_add_`` (8 ms of a 100 ms general W0 round). Each entry
    of ∂/∂q is one product either way, and ∂/∂p = Σ_l g_bl q_bl is the same batched product as before, so the
    gradients are the same bits (``tests/test_backbone_mf.py``)."""

    @staticmethod
    def forward(ctx, user: torch.Tensor, item: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(user, item)
        return torch.einsum("bd,bld->bl", user, item)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        user, item = ctx.saved_tensors
        grad_user = torch.einsum("bl,bld->bd", grad, item) if ctx.needs_input_grad[0] else None
        grad_item = grad.unsqueeze(-1) * user.unsqueeze(1) if ctx.needs_input_grad[1] else None
        return grad_user, grad_item


class MF(Backbone):
    Config = BackboneConfig
    losses: ClassVar[tuple[str, ...]] = ("bpr", "bce")
    linear_in_user = True

    def score(self, user: torch.Tensor, item: torch.Tensor, net: dict[str, torch.Tensor]) -> torch.Tensor:
        return _InnerProducts.apply(user, item)  # [B, L]

    def score_full(self, user: torch.Tensor, item: torch.Tensor, net: dict[str, torch.Tensor]) -> torch.Tensor:
        return user @ item.T  # [U, I]

    def user_score_grad(self, user: torch.Tensor, item: torch.Tensor, net: dict[str, torch.Tensor],
                        weight: torch.Tensor) -> torch.Tensor:
        return torch.einsum("bl,bld->bd", weight, item)  # ∂⟨p, q_l⟩/∂p = q_l  [B, du]

    def query_vectors(self, user: torch.Tensor, net: dict[str, torch.Tensor]) -> torch.Tensor:
        return user
