"""FedAvg's local training, a module the methods whose client trains as FedAvg's compose (FedAvg, FedGNN,
PerFedRec and PerFedRec++, the CL4FedRec family): the settings of the default client step and what they
decide — the per-client loss reduction and L2 scope, the sampled negatives, when the FedSGD pass is
exact, and that pass itself.

A method whose ``Config`` is a :class:`LocalTrainingConfig` gets a :class:`LocalTraining` as
``FederatedMethod.training``; the method base's default client step (``local_step``) reads it. Nothing
here is an option: a change to it reaches every method above, which is why each of them pins its
numbers in ``scripts/checks/equivalence.py``.
"""

from __future__ import annotations

import torch

from fedrun.backbone.base import Backbone, PublicParams
from fedrun.backbone.losses import example_sq_norms, per_client_loss
from fedrun.data.negatives import sample_flat_negatives
from fedrun.defense.base import Defense
from fedrun.kernels.batching import LocalProblem
from fedrun.kernels.env import RunEnv
from fedrun.kernels.local import problem_loss, scale_gradient
from fedrun.kernels.rows import gather_rows
from fedrun.method import fedsgd
from fedrun.method.config import LocalTrainingConfig
from fedrun.method.fedsgd import FastRound


def slot_uses(problem: LocalProblem) -> torch.Tensor:
    """[B, Lu] how many of each client's examples score each row of its local table (its positives, the negatives
    of its real positives and its extra items).

    ``duplicate_rows=once`` divides a row's gradient by this count. The A-hum code (rdz98/PoisonFedDLRS,
    ``server.py``) adds a client's per-example item gradients with ``grad[items] += g``, an indexed add that keeps
    one of the values at a repeated index. The repeats there are negatives drawn twice (positives are distinct and
    never drawn), and two uses of one negative by one user have the same gradient, so keeping one is the sum over
    uses divided by their count."""
    B, width = problem.items.shape
    uses = torch.zeros(B, width, dtype=torch.float32, device=problem.items.device)
    real = problem.batch.pos_mask.to(uses.dtype)  # [B, P]
    uses.scatter_add_(1, problem.pos_slot, real)
    if problem.neg_slot is not None:
        negatives_real = real.unsqueeze(-1).expand_as(problem.neg_slot).reshape(B, -1)  # [B, P·n]
        uses.scatter_add_(1, problem.neg_slot.reshape(B, -1), negatives_real)
    if problem.extra_slot is not None:
        extra = problem.extra_mask if problem.extra_mask is not None else torch.ones_like(problem.extra_slot) > 0
        uses.scatter_add_(1, problem.extra_slot, extra.to(uses.dtype))
    return uses


class LocalTraining:
    """What the settings decide, for one run's backbone."""

    def __init__(self, config: LocalTrainingConfig, backbone: Backbone):
        self.config, self.backbone = config, backbone
        self.num_negatives = 0 if backbone.config.loss == "mse" else config.num_negatives

    def loss(self, problem: LocalProblem, user: torch.Tensor, item_table: torch.Tensor,
             net: dict[str, torch.Tensor]) -> torch.Tensor:
        """The backbone's loss per client [B]: mean or summed over its examples, or ``balanced``: the mean, whose
        gradient on each item row is summed over the client's examples instead of averaged. With the mean, an
        item row moves by lr / |D_c| per example, so one lr is too large on sparse data (Beauty: 9 items per
        user, FedAvg-MF at lr 10 diverges) and too small on dense data (ML-1M: 165); balanced, an item row
        moves by lr per example on every dataset while the private user row still steps on the mean
        (``optimizer.user_lr``). With ``l2_scope=client`` the L2
        term is ½·l2·(‖u‖² + Σ‖v‖² over the client's distinct rows), once per step (the FedRecAttack code's
        ``reg``; the code's rows list a repeated negative twice, fedrun's local table holds it once)."""
        config, backbone = self.config, self.backbone
        if config.duplicate_rows == "once":  # one example's gradient per row: the sum over its uses, divided
            uses = slot_uses(problem).clamp(min=1).to(item_table.dtype)  # [B, Lu]
            item_table = scale_gradient(item_table, 1 / uses.unsqueeze(-1))
        if config.loss_reduction == "balanced":  # the mean, with each item row's gradient summed over examples
            examples = problem.batch.pos_mask.sum(1).clamp(min=1).to(item_table.dtype)  # [B]
            item_table = scale_gradient(item_table, examples.view(-1, 1, 1))
        if config.loss_reduction != "sum" and config.l2_scope == "example":
            return problem_loss(backbone, problem, user, item_table, net)
        per_client = config.l2_scope == "client"
        loss = problem_loss(backbone, problem, user, item_table, net,
                            "sum" if config.loss_reduction == "sum" else "mean", l2=0.0 if per_client else None)
        if per_client and backbone.config.l2:
            rows = (item_table.pow(2).sum(-1) * problem.item_mask).sum(1)  # [B]
            loss = loss + 0.5 * backbone.config.l2 * (user.pow(2).sum(-1) + rows)
        return loss

    def negative_round(self, round_index: int) -> int:
        """The round whose negatives round ``round_index`` uses (``resample_negatives=false``: round 0's)."""
        return round_index if self.config.resample_negatives else 0

    def fedsgd_exact(self, per_example: bool) -> bool:
        """The FedSGD pass computes the per-client mean loss with per-example L2 only, on the rows themselves
        (``per_example``: the user context scores rows, not propagated ones — no graph), each row's gradient summed
        over its uses."""
        config = self.config
        return (per_example and config.loss_reduction in ("mean", "balanced") and config.l2_scope == "example"
                and config.duplicate_rows == "sum")

    def fedsgd_round(self, env: RunEnv, public: PublicParams, user_table: torch.Tensor, users: torch.Tensor,
                     negative_seed: int, rule: Defense) -> FastRound:
        """FedSGD in one pass over the round's examples, unpadded: Σ_c w_c·mean_c(ℓ) is the sum
        over examples of (w_c / |D_c|)·ℓ_e, so examples are processed in chunks of at most
        ``sim.max_slots`` scored items with gradients accumulating on the shared rows."""
        n_neg, backbone = self.num_negatives, self.backbone
        owner, position, items, ratings = env.train.flat(users)  # [N] each
        sizes = env.train.sizes(users).to(torch.float32)  # [B]
        candidates = items.unsqueeze(1)  # [N, 1 + n]: the positive, then its negatives
        if n_neg:
            negatives = sample_flat_negatives(users, owner, position, items, n_neg, env.n_items, negative_seed)
            candidates = torch.cat([candidates, negatives], 1)
        pairs, pair_of = torch.unique(owner.unsqueeze(1) * env.n_items + candidates, return_inverse=True)
        step = fedsgd.leaves(users, pairs, sizes, rule, public, user_table, env.n_items)
        l2, balanced = backbone.config.l2, self.config.loss_reduction == "balanced"

        def example_loss(chunk: torch.Tensor) -> torch.Tensor:
            vectors = gather_rows(step.item, step.row_of_pair[pair_of[chunk]])  # [n, 1 + n_neg, di]
            if balanced:  # each item row's gradient summed over the client's examples, not averaged
                vectors = scale_gradient(vectors, sizes[owner[chunk]].view(-1, 1, 1))
            user_rows = gather_rows(step.user, owner[chunk])  # [n, du]
            scores = backbone.score(user_rows, vectors, step.net)  # [n, 1 + n_neg]
            return per_client_loss(
                backbone.config.loss, scores[:, :1], scores[:, 1:].unsqueeze(1) if n_neg else None,
                torch.ones(chunk.numel(), 1, dtype=torch.bool, device=chunk.device),
                None if ratings is None else ratings[chunk].unsqueeze(1),
                l2, example_sq_norms(user_rows, vectors, 1) if l2 else None)  # [n]

        losses = fedsgd.over_examples(step, owner, sizes, candidates.shape[1], example_loss, env.sim.max_slots)
        return fedsgd.result(step, losses, self.config.optimizer, user_table)
