"""The kernel floor of a FedAvg-MF BPR round (issue #67): the round's arithmetic and nothing else, the baseline
the benchmarks report fedrun's rounds against (``scripts/bench/training.py``, W0 and W2).

A round of FedAvg with one local SGD step on MF with BPR and the mean loss per client, for B clients and their N
(positive, negative) pairs: gather the user and item rows, score both items, the closed-form gradient of
−log σ(x) (x = ⟨u, v_pos⟩ − ⟨u, v_neg⟩: ∂/∂x = −σ(−x)), each client's mean over its pairs, and one ``index_add_``
into the user rows and one into the item rows (the server's mean per item row: a per-row count divides the sum).
No copies, no guards, no bookkeeping: what any implementation of the round must at least compute.
``draw_pairs`` draws a round as fedrun's sampler does (clients uniformly without replacement among those with
training data, every training item of each, one uniform negative per positive) but without the membership check,
so ``floor + sampling`` is the floor of the whole round, sampling included.
"""

from __future__ import annotations

import torch

from fedrun.data.client_store import ClientStore


def draw_pairs(train: ClientStore, eligible: torch.Tensor, clients_per_round: int, n_items: int,
               generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A round's clients [B] (user ids) and its pairs: owner [N] (index into the clients), positive [N] and
    negative [N] item ids."""
    pick = torch.randperm(eligible.numel(), generator=generator)[:clients_per_round]
    clients = eligible[pick]  # [B]
    owner, _, positive, _ = train.flat(clients)  # [N] each
    negative = torch.randint(n_items, positive.shape, generator=generator)  # [N]
    return clients, owner, positive, negative


def mf_bpr_round(user: torch.Tensor, item: torch.Tensor, clients: torch.Tensor, owner: torch.Tensor,
                 positive: torch.Tensor, negative: torch.Tensor, lr: float, user_lr: float) -> None:
    """One round in place: user [U, d], item [I, d] updated by the round's clients [B] and pairs [N]."""
    u = user[clients][owner]  # [N, d]
    v_pos, v_neg = item[positive], item[negative]  # [N, d]
    difference = v_pos - v_neg  # [N, d]
    x = (u * difference).sum(1)  # [N]
    pairs_per_client = torch.bincount(owner, minlength=clients.numel()).clamp_min(1)  # [B]
    weight = torch.sigmoid(-x) / pairs_per_client[owner]  # [N] −∂(client mean loss)/∂x
    step_u = torch.zeros(clients.numel(), user.shape[1], dtype=user.dtype).index_add_(
        0, owner, weight.unsqueeze(1) * difference)  # [B, d]
    rows = torch.cat([positive, negative])  # [2N]
    deltas = torch.cat([weight.unsqueeze(1) * u, -weight.unsqueeze(1) * u])  # [2N, d] −gradient of each pair's row
    uploads = torch.zeros_like(item).index_add_(0, rows, deltas)  # [I, d] summed over clients
    uploaders = torch.zeros(item.shape[0], dtype=item.dtype).index_add_(
        0, rows, torch.ones(rows.numel(), dtype=item.dtype))  # [I] (pairs, a client's repeats included)
    item.add_(lr * uploads / uploaders.clamp_min(1).unsqueeze(1))
    user.index_add_(0, clients, user_lr * step_u)
