"""Per-client training losses: each client's mean over its own examples → a [B] vector."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def per_client_loss(kind: str, pos: torch.Tensor, neg: torch.Tensor | None, mask: torch.Tensor,
                    ratings: torch.Tensor | None, l2: float = 0.0,
                    sq_norms: torch.Tensor | None = None, reduction: str = "mean") -> torch.Tensor:
    """pos [B, P] scores of positives, neg [B, P, n] scores of their negatives, mask [B, P].

    ``l2 · sq_norms`` [B, P] adds, per example, the squared norms of the embeddings it uses
    (user row, positive row, its negatives' rows): PMF's λ(‖U_u‖² + ‖V_i‖²) per rating
    (FedRec++ Eq. 1, α), BPR's regulariser per triple — averaged like the data term.

    bpr: −log σ(s⁺ − s⁻) averaged over (positive, negative) pairs (Rendle et al. 2009).
    bce: −log σ(s⁺) − Σ log σ(−s⁻) averaged over labelled points (He et al. 2017, Eq. 7).
    mse: (s⁺ − r)² averaged over rated items (PMF).
    ``reduction="sum"``: summed over the client's examples instead (the FedRecAttack code's client loss).
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
    if reduction == "sum":
        data = (per_pos * weight).sum(1)  # [B]
        return data if not l2 else data + l2 * (sq_norms * weight).sum(1)
    data = (per_pos * weight).sum(1) / per_count.sum(1).clamp_min(1)  # [B]
    return data + mean_l2(l2, sq_norms, mask) if l2 else data


def mean_l2(l2: float, sq_norms: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """l2 · the mean of ``sq_norms`` [B, P] over each client's examples (``mask`` [B, P]) → [B]."""
    weight = mask.to(sq_norms.dtype)
    return l2 * (sq_norms * weight).sum(1) / weight.sum(1).clamp_min(1)


def example_sq_norms(user: torch.Tensor, vectors: torch.Tensor, n_pos: int) -> torch.Tensor:
    """user [B, du], vectors [B, S, di] = P positives then their P·n negatives → [B, P]:
    ‖u‖² + ‖v_pos‖² + Σ‖v_neg‖² for each positive's example."""
    B = user.shape[0]
    sq = vectors.pow(2).sum(-1)  # [B, S]
    out = user.pow(2).sum(-1, keepdim=True) + sq[:, :n_pos]
    if sq.shape[1] > n_pos:
        out = out + sq[:, n_pos:].reshape(B, n_pos, -1).sum(-1)
    return out
