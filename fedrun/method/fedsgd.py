"""The FedSGD pass (DESIGN.md, principle 4), a module the methods with a fast path compose (FedAvg and the
methods built on its local step, FedCL, BIL).

With one local plain-SGD step, no upload transform, no attack and a linear rule, Σ_c w_c Δ_c / W per item row
equals −η ∇(Σ_c w_c L_c) / W: every client's weighted loss backpropagates once into shared leaves — the round's
touched item rows, the clients' private rows and the shared weights — with no per-client copies.

  - ``leaves``: the leaves for the round's distinct (client, item) pairs;
  - ``over_examples``: Σ_c w_c·mean_c(ℓ) = Σ_e (w_c / |D_c|)·ℓ_e on the unpadded example list, in chunks;
  - ``over_buckets``: the general path's buckets and local loss, each client's table gathered from the leaves;
  - ``result``: the aggregate, the clients' new private rows (written on the client side) and the rows each
    client touched.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from fedrun.backbone.base import PublicParams
from fedrun.defense.base import Defense
from fedrun.kernels.batching import LocalProblem
from fedrun.kernels.config import ClientOptimizer
from fedrun.kernels.rows import gather_rows
from fedrun.types import Aggregate

LocalLoss = Callable[[LocalProblem, torch.Tensor, torch.Tensor, dict[str, torch.Tensor]], torch.Tensor]


@dataclass(frozen=True)
class FastRound:
    """What a fast path returns: the aggregate, each client's loss [B], rows each client touched [B]."""

    aggregate: Aggregate
    losses: torch.Tensor
    rows_per_client: torch.Tensor


@dataclass(frozen=True)
class FedSGDPass:
    """The leaves of one FedSGD pass (DESIGN.md principle 4). With one local plain-SGD step, no
    upload transform, no attack and a linear rule, Σ_c w_c Δ_c / W per item row equals
    −η ∇(Σ_c w_c L_c) / W: every client's weighted loss backpropagates into these shared
    leaves once, with no per-client copies and no padding."""

    users: torch.Tensor  # [B] the round's clients
    pair_owner: torch.Tensor  # [Q] client (index into users) of each distinct (client, item) pair
    row_of_pair: torch.Tensor  # [Q] index into ``rows`` of each pair's item
    rows: torch.Tensor  # [G] the item ids the round touches
    weight: torch.Tensor  # [B] w_c, the defense's linear weight of each client
    row_weight: torch.Tensor  # [G] W per item row: Σ w_c over the clients that touch it (or 1)
    total_weight: torch.Tensor | float  # W for the shared weights
    item: torch.Tensor  # [G, di] leaf: the touched public item rows
    user: torch.Tensor  # [B, du] leaf: the clients' private rows (written back on the client side)
    net: dict[str, torch.Tensor]  # leaves: the public shared weights


def leaves(users: torch.Tensor, pairs: torch.Tensor, data_size: torch.Tensor, rule: Defense, public: PublicParams,
           private_user: torch.Tensor, n_items: int) -> FedSGDPass:
    """The leaves for the round's distinct ``client * n_items + item`` pairs [Q] (sorted; client an index into
    ``users`` [B]); ``data_size`` [B] what the general path's uploads weigh; ``private_user`` [U, du] the clients'
    rows (client side)."""
    pair_owner = pairs // n_items
    rows, row_of_pair = torch.unique(pairs % n_items, return_inverse=True)  # [G], [Q]
    weight = rule.linear_weights(data_size.to(public.item.dtype))  # [B]
    if weight is None:
        raise ValueError(f"the FedSGD pass aggregates under a linear rule; {type(rule).__name__} is not one")
    total_weight: torch.Tensor | float
    if rule.normalized:
        row_weight = weight.new_zeros(rows.numel()).index_add_(0, row_of_pair, weight[pair_owner])
        total_weight = weight.sum()
    else:
        row_weight, total_weight = torch.ones(rows.numel(), device=rows.device), 1.0
    net = {k: v.detach().clone().requires_grad_(True) for k, v in public.net.items()}
    return FedSGDPass(users, pair_owner, row_of_pair, rows, weight, row_weight, total_weight,
                      public.item[rows].requires_grad_(True), private_user[users].requires_grad_(True), net)


def over_examples(step: FedSGDPass, owner: torch.Tensor, sizes: torch.Tensor, width: int,
                  example_loss: Callable[[torch.Tensor], torch.Tensor], max_slots: int) -> torch.Tensor:
    """The unpadded pass: Σ_c w_c·mean_c(ℓ) = Σ_e (w_c / |D_c|)·ℓ_e, backpropagated in chunks of examples
    (``owner`` [N] each example's client, ``sizes`` [B] the clients' |D_c|) of at most ``max_slots`` scored items
    (``width`` per example); ``example_loss(chunk)`` → ℓ_e [n]. Returns each client's mean loss [B]; the
    gradients accumulate on ``step``'s leaves."""
    coef = (step.weight / sizes)[owner]  # [N]
    losses = torch.zeros(step.users.numel(), device=owner.device)  # [B]
    for chunk in torch.split(torch.arange(owner.numel(), device=owner.device), max(1, max_slots // width)):
        loss = example_loss(chunk)  # [n]
        (loss * coef[chunk]).sum().backward()
        losses.index_add_(0, owner[chunk], loss.detach() / sizes[owner[chunk]])
    return losses


def over_buckets(problems: list[LocalProblem], rule: Defense, public: PublicParams, private_user: torch.Tensor,
                 n_items: int, local_loss: LocalLoss) -> tuple[FedSGDPass, torch.Tensor]:
    """The general path's buckets ``problems`` and ``local_loss``, each client's item table gathered from the
    shared leaves (not copied) and the shared weights used as they are: one backward of Σ_c w_c L_c per bucket
    (sequential backbones, BIL) → the leaves and each client's loss [B] in bucket order."""
    device = problems[0].items.device
    order = torch.cat([p.batch.users for p in problems])  # [B] the clients in bucket order
    starts = torch.tensor([0, *[p.batch.size for p in problems]]).cumsum(0).tolist()
    keys = [((start + torch.arange(p.batch.size, device=device)).unsqueeze(1) * n_items + p.items)
            for start, p in zip(starts, problems)]  # [b, Lu] each
    pairs = torch.unique(torch.cat([k[p.item_mask] for k, p in zip(keys, problems)]))
    step = leaves(order, pairs, torch.cat([p.weight for p in problems]), rule, public, private_user, n_items)
    losses = []
    for start, key, problem in zip(starts, keys, problems):
        client = torch.arange(start, start + problem.batch.size, device=device)
        pair = torch.searchsorted(pairs, key).clamp_max(pairs.numel() - 1)  # padding slots: masked below
        table = gather_rows(step.item, step.row_of_pair[pair])  # [b, Lu, di]
        table = torch.where(problem.item_mask.unsqueeze(-1), table, torch.zeros_like(table))
        loss = local_loss(problem, gather_rows(step.user, client), table, step.net)  # [b]
        (loss * step.weight[client]).sum().backward()
        losses.append(loss.detach())
    return step, torch.cat(losses)


def result(step: FedSGDPass, losses: torch.Tensor, optimizer: ClientOptimizer,
           private_user: torch.Tensor) -> FastRound:
    """After ``backward`` of Σ_c w_c L_c: the clients' new private rows (written into ``private_user`` [U, du], on
    the client side), the aggregate and the rows each client touched; ``losses`` [B] each client's L_c."""
    lr, user_lr = optimizer.lr, optimizer.private_lr
    if step.user.grad is not None:  # (sequential backbones infer the user from the history instead)
        with torch.no_grad():
            private_user[step.users] = step.user - user_lr * step.user.grad / step.weight.unsqueeze(1)
    item_delta = -lr * grad_of(step.item) / step.row_weight.unsqueeze(1)
    dense = {k: -lr * grad_of(v) / step.total_weight for k, v in step.net.items()}
    rows_per_client = torch.bincount(step.pair_owner, minlength=step.users.numel())
    return FastRound(Aggregate(step.rows, item_delta, dense), losses, rows_per_client)


def grad_of(leaf: torch.Tensor) -> torch.Tensor:
    """A leaf's gradient after the pass's backward (a leaf no loss reached has none: an error, not a zero)."""
    if leaf.grad is None:
        raise RuntimeError("the FedSGD pass left a leaf without a gradient: no client's loss used it")
    return leaf.grad
