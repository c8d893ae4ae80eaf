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

W1's floor (FedAvg-NCF, 4 negatives) is ``neumf_bce_step``: NeuMF's forward and backward over a round's examples
(every client's positives and negatives at once, each weighted by its client's mean) or over a centralized
mini-batch (the batch mean) — one function for both, so the federated and the centralized epoch are measured
against the same arithmetic.
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


def neumf_bce_step(user: torch.Tensor, item: torch.Tensor, net: dict[str, torch.Tensor], group_user: torch.Tensor,
                   example_group: torch.Tensor, example_item: torch.Tensor, label: torch.Tensor, weight: torch.Tensor,
                   gmf_dim: int, lr: float) -> None:
    """One SGD step in place of NeuMF scored with BCE on N examples in G groups that share a user (a client's
    examples; a centralized batch's positive and its negatives): user [U, g + m] and item [I, g + m] rows (GMF
    part, then MLP part), group_user [G] row ids, example_group [N] index into the groups, example_item [N] row
    ids, label [N] (1 or 0), weight [N] each example's weight in the loss (1 / examples per client for a client's
    mean, 1 / N for a batch mean). The first layer's user half is computed once per group (W₁[p; q] = W₁ᵘp + W₁ⁱq,
    as ``fedrun.backbone.ncf``); autograd over the gathered rows and the tower (the arithmetic any implementation
    computes: forward, backward, one ``index_add_`` per table); the tower's step is its summed gradient, as a
    FedSGD server's mean of the clients' own."""
    rows_u = user.index_select(0, group_user).requires_grad_()  # [G, g + m]
    rows_i = item.index_select(0, example_item).requires_grad_()  # [N, g + m]
    params = {name: value.requires_grad_() for name, value in net.items()}
    user_gmf, user_mlp = torch.split(rows_u, [gmf_dim, rows_u.shape[1] - gmf_dim], 1)  # [G, g], [G, m]
    item_gmf, item_mlp = torch.split(rows_i, [gmf_dim, rows_i.shape[1] - gmf_dim], 1)  # [N, g], [N, m]
    first = params["mlp0.weight"]  # [h1, 2m]
    user_half = user_mlp @ first[:, :user_mlp.shape[1]].T  # [G, h1]
    hidden = torch.relu(torch.addmm(params["mlp0.bias"], item_mlp, first[:, user_mlp.shape[1]:].T)
                        + user_half.index_select(0, example_group))  # [N, h1]
    n_layers = sum(name.endswith(".weight") for name in params) - 1
    for k in range(1, n_layers):
        hidden = torch.relu(torch.addmm(params[f"mlp{k}.bias"], hidden, params[f"mlp{k}.weight"].T))  # [N, h_k]
    gmf = user_gmf.index_select(0, example_group) * item_gmf  # [N, g]
    logit = torch.addmm(params["head.bias"], torch.cat([gmf, hidden], 1), params["head.weight"].T).squeeze(1)  # [N]
    loss = (torch.nn.functional.binary_cross_entropy_with_logits(logit, label, reduction="none") * weight).sum()
    grads = torch.autograd.grad(loss, [rows_u, rows_i, *params.values()])
    with torch.no_grad():
        user.index_add_(0, group_user, grads[0], alpha=-lr)
        item.index_add_(0, example_item, grads[1], alpha=-lr)
        for value, grad in zip(params.values(), grads[2:]):
            value.requires_grad_(False).sub_(grad, alpha=lr)


def with_negatives(owner: torch.Tensor, positive: torch.Tensor, negatives: int, n_items: int,
                   generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """N positives with their groups → (group [N(1 + n)], item [N(1 + n)], label [N(1 + n)]): each positive then its
    ``negatives`` uniform negatives (unchecked, as ``draw_pairs``), in the positive's group."""
    drawn = torch.randint(n_items, (positive.numel(), negatives), generator=generator)  # [N, n]
    items = torch.cat([positive.unsqueeze(1), drawn], 1)  # [N, 1 + n]
    label = torch.zeros(items.shape)
    label[:, 0] = 1.0
    return owner.repeat_interleave(1 + negatives), items.reshape(-1), label.reshape(-1)
