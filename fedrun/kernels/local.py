"""Vectorized local training: B clients' local models stacked on a batch dimension.

Each client's loss depends only on its own slices (``user[b]``, ``item[b]``, ``net[b]``),
so the gradient of the *summed* loss w.r.t. a slice is that client's own gradient, and an
element-wise optimizer (SGD, Adam) stepping the stacked tensors is exactly B independent
per-client optimizers (DESIGN.md, "The vectorization principle" 1–2).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, cast

import torch

from fedrun.backbone.base import Backbone
from fedrun.backbone.losses import example_sq_norms, per_client_loss
from fedrun.kernels.batching import LocalProblem
from fedrun.kernels.config import ClientOptimizer
from fedrun.kernels.rows import gather_rows


def scale_gradient(x: torch.Tensor, scale: torch.Tensor | float) -> torch.Tensor:
    """``x`` in the forward pass; its gradient times ``scale`` in the backward pass."""
    return x.detach() + scale * (x - x.detach())


def example_slots(problem: LocalProblem) -> torch.Tensor:
    """[B, S] local-table slot of every scored example: the P positives, then their negatives (kept by
    ``local_problems``, which lays them out side by side; joined here otherwise)."""
    if problem.examples is not None:
        return problem.examples
    if problem.neg_slot is None:
        return problem.pos_slot
    return torch.cat([problem.pos_slot, problem.neg_slot.reshape(problem.pos_slot.shape[0], -1)], 1)


def slot_rows(item_table: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """item_table [B, Lu, di] (each client's local copies), slots [B, S] → rows [B, S, di], differentiable."""
    B, Lu, di = item_table.shape
    base = torch.arange(B, device=slots.device).unsqueeze(1) * Lu  # client b's rows start at b·Lu
    return gather_rows(item_table.reshape(B * Lu, di), slots + base)


def problem_loss(backbone: Backbone, problem: LocalProblem, user: torch.Tensor, item_table: torch.Tensor,
                 net: dict[str, torch.Tensor], reduction: str = "mean", l2: float | None = None) -> torch.Tensor:
    """Per-client loss [B] of each client's examples (their mean, or ``reduction="sum"``), scored with its
    local item table, with the backbone's per-example L2 (``l2`` overrides its weight) on the parameters
    the examples use. A problem with an ``encode(user, item_table)`` (``fedrun.kernels.ego.GraphProblem``)
    scores the representations it returns instead (LightGCN over the clients' ego graphs).

    user [B, du]; item_table [B, Lu, di] (each client's own copies); net shared or [B, *shape].
    """
    P = problem.pos_slot.shape[1]
    slots = example_slots(problem)
    vectors = raw = slot_rows(item_table, slots)  # [B, S, di]
    user_raw = user
    encode = getattr(problem, "encode", None)
    if encode is not None:  # graph backbones: score the rows propagated over the clients' ego graphs
        user, item_rep = encode(user, item_table)  # [B, du], [B, Lu, di]
        vectors = slot_rows(item_rep, slots)
    scores = backbone.score(user, vectors, net)  # [B, S]
    # one split, not two slices: the backward joins the two gradients instead of adding two zero-padded copies
    pos, neg = scores.split([P, scores.shape[1] - P], 1)  # [B, P], [B, S − P]
    neg = None if problem.neg_slot is None else neg.reshape(problem.neg_slot.shape)
    l2 = backbone.config.l2 if l2 is None else l2
    return per_client_loss(backbone.config.loss, pos, neg, problem.batch.pos_mask, problem.batch.ratings,
                           l2, example_sq_norms(user_raw, raw, P) if l2 else None, reduction)


@dataclass(frozen=True)
class LocalResult:
    user: torch.Tensor  # [B, du] the clients' new private rows
    item: torch.Tensor  # [B, Lu, di] each client's local item rows after training
    item0: torch.Tensor  # [B, Lu, di] ... and before
    item_mask: torch.Tensor  # [B, Lu] which local rows are real
    net_delta: dict[str, torch.Tensor]  # name → [B, *shape]
    loss: torch.Tensor  # [B] each client's loss at its first local step

    @property
    def item_delta(self) -> torch.Tensor:
        """[B, Lu, di] change of each local item row (0 where padded)."""
        return (self.item - self.item0) * self.item_mask.unsqueeze(-1)

    def row_delta(self, client: torch.Tensor, slot: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """[R, di] the change of the real local rows (``client``, ``slot``) [R]: ``item_delta``'s entries there,
        written into ``out`` [R, di] when given. One difference over the tables (≤ ``sim.padding`` × R rows) and one
        row gather cost less than gathering both tables' rows first; each entry is the same subtraction."""
        B, Lu, di = self.item.shape
        rows = client * Lu + slot  # [R] into the flattened tables (a row gather, not a 2-D advanced index)
        change = (self.item - self.item0).reshape(B * Lu, di)  # [B·Lu, di]
        return change.index_select(0, rows) if out is None else torch.index_select(change, 0, rows, out=out)


@torch.no_grad()
def plain_sgd_step(groups: list[tuple[list[torch.Tensor], float]]) -> None:
    """``torch.optim.SGD``'s step without momentum or weight decay (θ ← θ − lr·∇θ, the same ``add_``, so the same
    bits), then the gradients cleared; with none of the optimizer object's per-bucket set-up."""
    for params, lr in groups:
        for param in params:
            if param.grad is not None:
                param.add_(param.grad, alpha=-lr)
                param.grad = None


LossFn = Callable[[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]], torch.Tensor]


def train_local(backbone: Backbone, problem: LocalProblem, user0: torch.Tensor, item0: torch.Tensor,
                net0: dict[str, torch.Tensor], optimizer: ClientOptimizer, steps: int,
                loss_fn: LossFn | None = None) -> LocalResult:
    """Run ``steps`` full-batch local steps for every client of the bucket at once.

    user0 [B, du] private rows; item0 [B, Lu, di] the clients' copies of their item rows;
    net0 shared weights (each client gets its own copy, [B, *shape]). ``loss_fn(user, item,
    net)`` → per-client losses [B] (default: the backbone's loss on the problem's examples).
    """
    if loss_fn is None:
        def loss_fn(user, item, net):
            return problem_loss(backbone, problem, user, item, net)
    B = user0.shape[0]
    user = user0.detach().clone().requires_grad_(True)
    item = item0.detach().clone().requires_grad_(True)
    net = {k: v.detach().unsqueeze(0).repeat(B, *([1] * v.dim())).requires_grad_(True) for k, v in net0.items()}
    params = [item, *net.values()]
    opt = None if optimizer.is_plain_sgd else optimizer.make(params, private=[user])
    first_loss = None
    for _ in range(steps):
        losses = loss_fn(user, item, net)  # [B]
        losses.sum().backward()
        if opt is None:
            plain_sgd_step([(params, optimizer.lr), ([user], optimizer.private_lr)])
        else:
            opt.step()
            opt.zero_grad(set_to_none=True)
        first_loss = losses.detach() if first_loss is None else first_loss
    with torch.no_grad():
        net_delta = {k: v - net0[k].unsqueeze(0) for k, v in net.items()}
    return LocalResult(user.detach(), item.detach(), item0.detach(), problem.item_mask, net_delta,
                       cast(torch.Tensor, first_loss))  # (≥ 1 step: set)
