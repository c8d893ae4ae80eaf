"""Per-client training losses: each client's mean over its own examples → a [B] vector."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def per_client_loss(kind: str, pos: torch.Tensor, neg: torch.Tensor | None, mask: torch.Tensor,
                    ratings: torch.Tensor | None) -> torch.Tensor:
    """pos [B, P] scores of positives, neg [B, P, n] scores of their negatives, mask [B, P].

    bpr: −log σ(s⁺ − s⁻) averaged over (positive, negative) pairs (Rendle et al. 2009).
    bce: −log σ(s⁺) − Σ log σ(−s⁻) averaged over labelled points (He et al. 2017, Eq. 7).
    mse: (s⁺ − r)² averaged over rated items (PMF).
    """
    weight = mask.to(pos.dtype)  # [B, P]
    if kind == "mse":
        per_pos, per_count = (pos - ratings) ** 2, weight
    elif kind == "bpr":
        per_pos = F.softplus(neg - pos.unsqueeze(-1)).sum(-1)  # [B, P]
        per_count = weight * neg.shape[-1]
    elif kind == "bce":
        negatives = F.softplus(neg).sum(-1) if neg is not None else 0.0
        per_pos = F.softplus(-pos) + negatives
        per_count = weight * (1 + (neg.shape[-1] if neg is not None else 0))
    else:  # pragma: no cover - validated by the backbone config
        raise ValueError(kind)
    return (per_pos * weight).sum(1) / per_count.sum(1).clamp_min(1)  # [B]
