"""Exposure of attack targets: ER@K and target NDCG@K (the A-hum code's protocol; rCL4FedRec's ER@5).

For a target item t, the eligible users are the benign users with training data whose train and test
sets (and validation set, where there is one) lack t. Each scores the whole catalogue as at test
time, with its train, validation and test items masked; t's rank is pessimistic (#{j ≠ t: s_j ≥ s_t}).
ER@K_t = the share of eligible users with t in their top K; target NDCG@K_t = the mean of
1 / log2(rank + 2) over them (0 outside the top K). Reported per target (``er_at_K_item<t>``) and
averaged over the targets (``er_at_K``, ``target_ndcg_at_K``). Evaluation runs on the clients:
chunks of users sized by the evaluator's memory budget, never the [n_users, n_items] matrix at once.
"""

from __future__ import annotations

import torch

from fedrun.data.negatives import contains
from fedrun.method.base import Method


@torch.no_grad()
def exposure(method: Method, stores: dict, history: list, targets: torch.Tensor, ks: list[int],
             memory_mb: int = 256, bytes_per_pair: int = 4) -> dict[str, float]:
    """``stores``: the evaluator's train / valid / test stores; ``history``: what the users' models read
    at test time; ``targets`` [T] item ids."""
    train = stores["train"]
    masked = list(stores.values())  # train, valid (where there is one), test
    n_items = train.n_items
    users = torch.nonzero(train.sizes() > 0).squeeze(1)
    targets = targets.to(users.device)
    keys = torch.sort(torch.cat([s.sorted_keys() for s in masked])).values  # every user's known items
    T = targets.numel()
    ks_t = torch.tensor(ks, device=users.device)
    hits = torch.zeros(T, len(ks), dtype=torch.float64, device=users.device)
    gain = torch.zeros(T, len(ks), dtype=torch.float64, device=users.device)
    eligible = torch.zeros(T, dtype=torch.float64, device=users.device)
    chunk_size = max(1, (memory_mb << 20) // (n_items * bytes_per_pair))
    for chunk in torch.split(users, chunk_size):
        scores = method.score_users(chunk, history)  # [U, I]
        for store in masked:
            rows, _, items, _ = store.flat(chunk)
            scores[rows, items] = float("-inf")
        for t, item in enumerate(targets.tolist()):
            ok = ~contains(keys, chunk * n_items + item)  # [U] eligible for this target
            target = scores[ok, item].unsqueeze(1)  # [U', 1]
            rank = (scores[ok] >= target).sum(1) - 1  # [U'] pessimistic
            top = rank.unsqueeze(1) < ks_t  # [U', K]
            hits[t] += top.sum(0).double()
            discount = 1.0 / torch.log2(rank.double() + 2)
            gain[t] += torch.where(top, discount.unsqueeze(1), torch.zeros_like(discount).unsqueeze(1)).sum(0)
            eligible[t] += ok.sum().double()
    er = hits / eligible.clamp_min(1).unsqueeze(1)  # [T, K]
    ndcg = gain / eligible.clamp_min(1).unsqueeze(1)
    out = {}
    for j, k in enumerate(ks):
        out[f"er_at_{k}"] = float(er[:, j].mean())
        out[f"target_ndcg_at_{k}"] = float(ndcg[:, j].mean())
        for t, item in enumerate(targets.tolist()):
            out[f"er_at_{k}_item{item}"] = float(er[t, j])
    return out
