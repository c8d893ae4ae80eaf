"""The plain per-client FedAvg loop: the oracle the vectorized simulator must match.

Written the way the seed papers' code does it: for each client, a full copy of the model
(its user row, the whole item table, the network), a fresh optimizer, local steps on its
own loss, then the deltas of the item rows it touched and of the network are uploaded and
averaged per item row over the clients that touched it. Loss formulas are written out
here independently of ``fedrun.backbone.losses``.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F


def client_loss(backbone, kind, user, item_table, net, pos, neg, ratings):
    """One client's mean loss: pos [P] item ids, neg [P, n] item ids (or None), plus
    l2 · mean over its examples of (‖u‖² + ‖v_pos‖² + Σ‖v_neg‖²)."""
    l2 = backbone.config.l2
    used = pos[:, None] if neg is None else torch.cat([pos[:, None], neg], 1)
    penalty = l2 * (user.pow(2).sum() + item_table[used].pow(2).sum((1, 2))).mean()
    return data_loss(backbone, kind, user, item_table, net, pos, neg, ratings) + penalty


def data_loss(backbone, kind, user, item_table, net, pos, neg, ratings):
    if kind == "mse":
        pred = backbone.score(user[None], item_table[pos][None], net)[0]
        return ((pred - ratings) ** 2).mean()
    candidates = torch.cat([pos[:, None], neg], 1)  # [P, 1 + n]
    scores = backbone.score(user[None], item_table[candidates.reshape(-1)][None], net)[0].view(candidates.shape)
    s_pos, s_neg = scores[:, 0], scores[:, 1:]
    if kind == "bpr":
        return -F.logsigmoid(s_pos[:, None] - s_neg).mean()
    return (F.softplus(-s_pos).sum() + F.softplus(s_neg).sum()) / scores.numel()


def fedavg_round(backbone, user_table, public, clients, optimizer, steps, weighting="uniform", reduction="mean"):
    """clients: list of (user id, pos [P], neg [P, n] or None, ratings [P] or None). The user row steps at
    ``optimizer.user_lr`` (when set); ``reduction="balanced"``: the item table's gradient of the client's
    mean loss is multiplied by its number of examples P before the step.

    Mutates ``user_table`` (client side) and ``public`` (server side) in place.
    """
    kind = backbone.config.loss
    item_sum = torch.zeros_like(public.item)
    item_weight = torch.zeros(public.item.shape[0], device=public.item.device)
    net_sum = {k: torch.zeros_like(v) for k, v in public.net.items()}
    total_weight = 0.0
    for user_id, pos, neg, ratings in clients:
        model = copy.deepcopy({"user": user_table[user_id], "item": public.item, "net": public.net})
        shared = [model["item"].requires_grad_(), *[v.requires_grad_() for v in model["net"].values()]]
        user_lr = optimizer.lr if optimizer.user_lr is None else optimizer.user_lr
        groups = [{"params": shared}, {"params": [model["user"].requires_grad_()], "lr": user_lr}]
        opt = (torch.optim.Adam(groups, lr=optimizer.lr, weight_decay=optimizer.weight_decay)
               if optimizer.name == "adam" else
               torch.optim.SGD(groups, lr=optimizer.lr, momentum=optimizer.momentum,
                               weight_decay=optimizer.weight_decay))
        for _ in range(steps):
            opt.zero_grad()
            client_loss(backbone, kind, model["user"], model["item"], model["net"], pos, neg, ratings).backward()
            if reduction == "balanced":
                model["item"].grad *= len(pos)
            opt.step()
        touched = sorted(set(pos.tolist()) | (set(neg.reshape(-1).tolist()) if neg is not None else set()))
        touched = torch.tensor(touched, device=public.item.device)
        weight = float(len(pos)) if weighting == "data_size" else 1.0
        with torch.no_grad():
            user_table[user_id] = model["user"].detach()
            item_sum[touched] += weight * (model["item"][touched] - public.item[touched])
            item_weight[touched] += weight
            for k in net_sum:
                net_sum[k] += weight * (model["net"][k] - public.net[k])
        total_weight += weight
    with torch.no_grad():
        rows = item_weight > 0
        public.item[rows] += item_sum[rows] / item_weight[rows, None]
        for k in net_sum:
            public.net[k] += net_sum[k] / total_weight


def clients_of(problems):
    """The round's clients as the oracle sees them: plain per-client tensors."""
    out = []
    for problem in problems:
        batch = problem.batch
        for b in range(batch.size):
            mask = batch.pos_mask[b]
            pos = batch.pos[b][mask]
            neg = None if problem.neg_slot is None else problem.items[b][problem.neg_slot[b][mask]]
            ratings = None if batch.ratings is None else batch.ratings[b][mask]
            out.append((int(batch.users[b]), pos, neg, ratings))
    return out
