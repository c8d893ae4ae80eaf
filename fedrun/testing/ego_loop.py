"""The plain per-client loop for FedAvg on LightGCN over ego graphs: the oracle of the vectorized
``fedrun.kernels.ego`` path, written from the protocol's definition without its code.

For each client: its ego graph as a dense adjacency over [the client, its local items (positives
and negatives), every other user holding one of those items], the client linked to its
positives, each neighbour to the local items it holds; weights 1/√(d_a d_b) with the training
degrees (the client's: its distinct positives). LightGCN's layer mean on it, BPR on the
propagated rows plus l2 on the layer-0 rows of each example, plain SGD, deltas averaged per row.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F


def ego_representations(center_row, item_rows, neighbor_rows, adjacency, layers):
    """Dense LightGCN on one ego graph: node order [center, items..., neighbours...]."""
    x = torch.cat([center_row[None], item_rows, neighbor_rows])
    out, cur = x, x
    for _ in range(layers):
        cur = adjacency @ cur
        out = out + cur
    out = out / (layers + 1)
    return out[0], out[1:1 + item_rows.shape[0]]


def ego_adjacency(user_id, local_items, pos, interactions):
    """interactions [U, I] bool (training graph) → (neighbour user ids, normalised adjacency)."""
    held = interactions[:, local_items].any(1)
    held[user_id] = False
    neighbors = held.nonzero().squeeze(1)
    n_items = local_items.numel()
    size = 1 + n_items + neighbors.numel()
    adjacency = torch.zeros(size, size, dtype=torch.float64)
    item_degree = interactions.sum(0).clamp_min(1).double()
    user_degree = interactions.sum(1).clamp_min(1).double()
    own = torch.isin(local_items, pos)
    own_degree = float(own.sum())
    for k in range(n_items):
        item = int(local_items[k])
        if own[k]:
            adjacency[0, 1 + k] = adjacency[1 + k, 0] = 1 / (own_degree * item_degree[item]).sqrt()
        for j in range(neighbors.numel()):
            v = int(neighbors[j])
            if interactions[v, item]:
                w = 1 / (user_degree[v] * item_degree[item]).sqrt()
                adjacency[1 + n_items + j, 1 + k] = adjacency[1 + k, 1 + n_items + j] = w
    return neighbors, adjacency


def ego_fedavg_round(layers, l2, user_table, shared, item_table, clients, interactions, lr):
    """clients: list of (user id, pos [P], neg [P, n]); mutates ``user_table`` and ``item_table``
    (mean of the deltas per touched row). ``shared`` [U, d]: the rows the neighbours shared."""
    item_sum = torch.zeros_like(item_table)
    item_count = torch.zeros(item_table.shape[0], dtype=item_table.dtype)
    dtype = user_table.dtype
    for user_id, pos, neg in clients:
        local_items = torch.unique(torch.cat([pos, neg.reshape(-1)]))
        neighbors, adjacency = ego_adjacency(user_id, local_items, pos, interactions)
        model = copy.deepcopy({"user": user_table[user_id], "item": item_table[local_items]})
        user, items = model["user"].requires_grad_(), model["item"].requires_grad_()
        center, reps = ego_representations(user, items, shared[neighbors], adjacency.to(dtype), layers)
        slot = {int(i): k for k, i in enumerate(local_items)}
        pos_slot = torch.tensor([slot[int(i)] for i in pos])
        neg_slot = torch.tensor([[slot[int(i)] for i in row] for row in neg])
        s_pos = reps[pos_slot] @ center  # [P]
        s_neg = reps[neg_slot] @ center  # [P, n]
        data = -F.logsigmoid(s_pos[:, None] - s_neg).mean()
        penalty = l2 * (user.pow(2).sum() + items[pos_slot].pow(2).sum(1) + items[neg_slot].pow(2).sum((1, 2))).mean()
        (data + penalty).backward()
        with torch.no_grad():
            user_table[user_id] = user - lr * user.grad
            item_sum[local_items] += -lr * items.grad
            item_count[local_items] += 1
    with torch.no_grad():
        rows = item_count > 0
        item_table[rows] += item_sum[rows] / item_count[rows, None]
