"""Top-K metrics from 0-based ranks, and rating errors.

Every metric is per user (HR, Recall, NDCG, MRR over the user's targets), then averaged
over users. A target that is unreachable or ranked ≥ K_max has rank ``MISS``.
"""

from __future__ import annotations

import torch

MISS = torch.iinfo(torch.int64).max
RATING_METRICS = ("mae", "rmse")  # lower is better


def from_ranks(ranks: torch.Tensor, target_mask: torch.Tensor, ks: list[int],
               names: list[str]) -> dict[str, torch.Tensor]:
    """ranks [U, T] (MISS for misses), target_mask [U, T] → {metric_at_k: per-user values [U]}.

    HR@K: 1 if any target is in the top K. Recall@K: hits / #targets. Precision@K: hits / K. NDCG@K: Σ_hits
    1/log2(rank+2) over the ideal DCG of min(#targets, K) hits. MRR@K: 1/(rank+1) of the
    best-ranked target in the top K.
    """
    n_targets = target_mask.sum(1).clamp_min(1)  # [U] int64
    n_float = n_targets.to(torch.float64)
    gain = 1.0 / torch.log2(ranks.clamp_max(1 << 30).to(torch.float64) + 2)  # [U, T]
    out = {}
    for k in ks:
        hit = (ranks < k) & target_mask  # [U, T]
        ideal = (1.0 / torch.log2(torch.arange(k, dtype=torch.float64, device=ranks.device) + 2)).cumsum(0)
        values = {
            "hr": hit.any(1).to(torch.float64),
            "recall": hit.sum(1).to(torch.float64) / n_float,
            "precision": hit.sum(1).to(torch.float64) / k,
            "ndcg": (gain * hit).sum(1) / ideal[n_targets.clamp_max(k) - 1],
            "mrr": (hit * (1.0 / (ranks.clamp_max(1 << 30).to(torch.float64) + 1))).amax(1),
        }
        out.update({f"{name}_at_{k}": values[name] for name in names})
    return out


def pessimistic_ranks(scores: torch.Tensor, targets: torch.Tensor, target_mask: torch.Tensor,
                      k_max: int) -> torch.Tensor:
    """Exact ranks < k_max with ties broken against the target; MISS otherwise.

    scores [U, I] with masked items at −inf; targets [U, T]. A target's pessimistic rank is
    #{j ≠ t : s_j ≥ s_t}. With a_0 ≥ a_1 ≥ … the sorted scores, that rank is < k iff
    s_t > a_k, so the top (k_max + 1) values decide every rank below k_max exactly.
    """
    n_items = scores.shape[1]
    top = scores.topk(min(k_max + 1, n_items), dim=1).values  # [U, K+1] descending
    target_scores = scores.gather(1, targets)  # [U, T]
    ahead = (top.unsqueeze(1) >= target_scores.unsqueeze(2)).sum(2) - 1  # [U, T]
    within = target_scores > top[:, -1:] if k_max + 1 <= n_items else torch.ones_like(target_mask)
    reachable = target_scores > float("-inf")
    ok = within & reachable & target_mask
    return torch.where(ok, ahead, torch.full_like(ahead, MISS))


def rating_errors(predicted: torch.Tensor, actual: torch.Tensor) -> dict[str, float]:
    err = (predicted.to(torch.float64) - actual.to(torch.float64))
    return {"mae": float(err.abs().mean()), "rmse": float(err.pow(2).mean().sqrt())}
