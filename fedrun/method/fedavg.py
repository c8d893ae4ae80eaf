"""FedAvg on a recommendation backbone (McMahan et al., AISTATS 2017); with MF this is FCF
(Ammad-ud-din et al. 2019): federated collaborative filtering with private user factors.

Client (vectorized over the round's clients): sample ``num_negatives`` negatives per
positive for this round, run ``sim.local_epochs`` full-batch steps of the client optimizer
on (its user row, its copies of the touched item rows, its copy of the shared weights),
upload the item-row deltas and the shared-weight deltas; the user row never leaves.
Server: aggregate per item row (``defense``: mean over uploaders by default) and apply
with the server optimizer (``OptimizerServer``).

Open points and choices: a local epoch is one full-batch step over the client's data;
client optimizer state is fresh every round (clients are stateless between rounds);
negatives are resampled every round (``resample_negatives=false``: drawn once, the A-hum code).

FedSGD fast path (DESIGN.md principle 4): with one local plain-SGD step, no privacy
transform, no attack and a linear aggregation rule, the aggregate of per-client deltas
−η g_c equals −η ∇(Σ_c w_c L_c) / W_i per item row — computed with one backward pass
over the shared rows and no per-client copies. ``sim.fast_path=off`` forces the
general path; a test checks both give the same model.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from fedrun.backbone.base import PublicParams
from fedrun.backbone.losses import example_sq_norms, per_client_loss
from fedrun.data.negatives import sample_batch_negatives, sample_flat_negatives
from fedrun.defense.base import Defense
from fedrun.errors import check, check_choice
from fedrun.kernels.batching import local_problem
from fedrun.kernels.local import ClientOptimizer, problem_loss, scale_gradient
from fedrun.kernels.rows import gather_rows
from fedrun.kernels.server_opt import ServerOptimizerConfig
from fedrun.method import fedsgd
from fedrun.method.federated import ClientResult, FederatedMethod, Needs
from fedrun.method.fedsgd import FastRound
from fedrun.method.server import OptimizerServer, Server
from fedrun.types import ClientBatch


@dataclass
class FedAvgConfig:
    optimizer: ClientOptimizer = field(default_factory=lambda: ClientOptimizer("sgd", 0.3, user_lr=3.0))
    num_negatives: int = 1  # negatives per positive (ignored for mse)
    resample_negatives: bool = True  # draw them afresh every round | false: once, for the whole run (A-hum code)
    server_optimizer: ServerOptimizerConfig = field(default_factory=ServerOptimizerConfig)
    loss_reduction: str = "balanced"  # balanced: see local_loss | mean: per-client mean | sum (FedRecAttack code)
    l2_scope: str = "example"  # example: backbone.l2 per example | client: ½·l2·(‖u‖² + Σ‖v‖² over its rows), once

    def __post_init__(self) -> None:
        check(self.num_negatives >= 0, "num_negatives", self.num_negatives, "an integer >= 0")
        check_choice("loss_reduction", self.loss_reduction, ("mean", "sum", "balanced"))
        check_choice("l2_scope", self.l2_scope, ("example", "client"))


class FedAvg(FederatedMethod):
    Config = FedAvgConfig
    has_fedsgd_path = True
    graph_backbones = True  # LightGCN over each client's ego graph (fedrun.kernels.ego)

    def __init__(self, config: FedAvgConfig, env):
        super().__init__(config, env)
        self.num_negatives = 0 if env.backbone.config.loss == "mse" else config.num_negatives

    @classmethod
    def needs(cls, config: FedAvgConfig) -> Needs:
        return Needs(user_contexts=frozenset({"ids", "graph"} if cls.graph_backbones else {"ids"}))

    @classmethod
    def offers(cls, config: FedAvgConfig) -> frozenset[str]:
        return frozenset({"model_view", "client_step"})

    def fabricated_step(self, batch: ClientBatch, user: torch.Tensor, round_index: int) -> ClientResult:
        negatives = None
        if self.num_negatives:
            negatives = sample_batch_negatives(batch.users, batch.pos, batch.pos_mask, self.num_negatives,
                                               self.env.n_items, self.negative_seed(round_index))
        return self.local_step(local_problem(batch, negatives, self.env.n_items), user)

    def local_loss(self, problem, user: torch.Tensor, item_table: torch.Tensor,
                   net: dict[str, torch.Tensor]) -> torch.Tensor:
        """The backbone's loss per client: mean or summed over its examples, or ``balanced``: the mean, whose
        gradient on each item row is summed over the client's examples instead of averaged. With the mean, an
        item row moves by lr / |D_c| per example, so one lr is too large on sparse data (Beauty: 9 items per
        user, FedAvg-MF at lr 10 diverges) and too small on dense data (ML-1M: 165); balanced, an item row
        moves by lr per example on every dataset while the private user row still steps on the mean
        (``optimizer.user_lr``). With ``l2_scope=client`` the L2
        term is ½·l2·(‖u‖² + Σ‖v‖² over the client's distinct rows), once per step (the FedRecAttack code's
        ``reg``; the code's rows list a repeated negative twice, fedrun's local table holds it once)."""
        config, backbone = self.config, self.env.backbone
        if config.loss_reduction == "balanced":  # the mean, with each item row's gradient summed over examples
            examples = problem.batch.pos_mask.sum(1).clamp(min=1).to(item_table.dtype)  # [B]
            item_table = scale_gradient(item_table, examples.view(-1, 1, 1))
        if config.loss_reduction != "sum" and config.l2_scope == "example":
            return super().local_loss(problem, user, item_table, net)
        per_client = config.l2_scope == "client"
        loss = problem_loss(backbone, problem, user, item_table, net,
                            "sum" if config.loss_reduction == "sum" else "mean", l2=0.0 if per_client else None)
        if per_client and backbone.config.l2:
            rows = (item_table.pow(2).sum(-1) * problem.item_mask).sum(1)  # [B]
            loss = loss + 0.5 * backbone.config.l2 * (user.pow(2).sum(-1) + rows)
        return loss

    @classmethod
    def l2_step_lr(cls, config: FedAvgConfig) -> float | None:
        """Per-example L2 on a loss that is the client's mean (``balanced`` too, for the user row): each
        example holds ‖u‖², so a plain-SGD step shrinks u by 2·user_lr·l2 through it."""
        mean_l2 = config.loss_reduction in ("mean", "balanced") and config.l2_scope == "example"
        return config.optimizer.private_lr if mean_l2 and config.optimizer.is_plain_sgd else None

    def fedsgd_exact(self) -> bool:
        """The FedSGD pass computes the per-client mean loss with per-example L2 only, on the rows
        themselves (a graph backbone's clients score propagated rows: no per-example pass)."""
        return (super().fedsgd_exact() and self.context.per_example
                and self.config.loss_reduction in ("mean", "balanced") and self.config.l2_scope == "example")

    def negative_seed(self, round_index: int) -> int:
        return super().negative_seed(round_index if self.config.resample_negatives else 0)

    def make_server(self, public: PublicParams, statistics: dict[str, torch.Tensor]) -> Server:
        return OptimizerServer(public, self.config.server_optimizer)

    def fast_round(self, users: torch.Tensor, round_index: int, sent: torch.Tensor | None,
                   rule: Defense) -> FastRound | None:
        """FedSGD in one pass over the round's examples, unpadded: Σ_c w_c·mean_c(ℓ) is the sum
        over examples of (w_c / |D_c|)·ℓ_e, so examples are processed in chunks of at most
        ``sim.max_slots`` scored items with gradients accumulating on the shared rows."""
        env, n_neg = self.env, self.num_negatives
        owner, position, items, ratings = env.train.flat(users)  # [N] each
        sizes = env.train.sizes(users).to(torch.float32)  # [B]
        candidates = items.unsqueeze(1)  # [N, 1 + n]: the positive, then its negatives
        if n_neg:
            seed = self.negative_seed(round_index)
            negatives = sample_flat_negatives(users, owner, position, items, n_neg, env.n_items, seed)
            candidates = torch.cat([candidates, negatives], 1)
        pairs, pair_of = torch.unique(owner.unsqueeze(1) * env.n_items + candidates, return_inverse=True)
        step = fedsgd.leaves(users, pairs, sizes, rule, self.public, self.private.user, env.n_items)
        l2, balanced = env.backbone.config.l2, self.config.loss_reduction == "balanced"

        def example_loss(chunk: torch.Tensor) -> torch.Tensor:
            vectors = gather_rows(step.item, step.row_of_pair[pair_of[chunk]])  # [n, 1 + n_neg, di]
            if balanced:  # each item row's gradient summed over the client's examples, not averaged
                vectors = scale_gradient(vectors, sizes[owner[chunk]].view(-1, 1, 1))
            user_rows = gather_rows(step.user, owner[chunk])  # [n, du]
            scores = env.backbone.score(user_rows, vectors, step.net)  # [n, 1 + n_neg]
            return per_client_loss(
                env.backbone.config.loss, scores[:, :1], scores[:, 1:].unsqueeze(1) if n_neg else None,
                torch.ones(chunk.numel(), 1, dtype=torch.bool, device=chunk.device),
                None if ratings is None else ratings[chunk].unsqueeze(1),
                l2, example_sq_norms(user_rows, vectors, 1) if l2 else None)  # [n]

        losses = fedsgd.over_examples(step, owner, sizes, candidates.shape[1], example_loss, env.sim.max_slots)
        return fedsgd.result(step, losses, self.config.optimizer, self.private.user)
