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
negatives are resampled every round.

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
from fedrun.errors import check
from fedrun.method.federated import FederatedMethod
from fedrun.method.server import OptimizerServer, Server
from fedrun.sim.batching import LocalProblem
from fedrun.sim.local import ClientOptimizer, example_slots, train_local, vectors_loss
from fedrun.sim.rows import gather_rows
from fedrun.sim.server_opt import ServerOptimizerConfig
from fedrun.types import Aggregate, Uploads


@dataclass
class FedAvgConfig:
    optimizer: ClientOptimizer = field(default_factory=lambda: ClientOptimizer("sgd", 10.0))
    num_negatives: int = 1  # negatives per positive, resampled each round (ignored for mse)
    server_optimizer: ServerOptimizerConfig = field(default_factory=ServerOptimizerConfig)

    def __post_init__(self) -> None:
        check(self.num_negatives >= 0, "num_negatives", self.num_negatives, "an integer >= 0")


class FedAvg(FederatedMethod):
    Config = FedAvgConfig

    def __init__(self, config: FedAvgConfig, env, **components):
        super().__init__(config, env, **components)
        self.num_negatives = 0 if env.backbone.config.loss == "mse" else config.num_negatives
        self.uses_fast_path = (
            env.sim.fast_path == "auto" and env.sim.local_epochs == 1 and config.optimizer.is_plain_sgd
            and not self.privacy.transforms_uploads and not self.attack.injects
            and self.defense.linear_weights(torch.ones(1)) is not None
        )

    def describe(self) -> dict:
        return {"fedsgd_fast_path": self.uses_fast_path}

    def client_step(self, problem: LocalProblem) -> tuple[Uploads, torch.Tensor, torch.Tensor]:
        users = problem.batch.users
        item0 = self.public.item[problem.items]  # [B, Lu, di]
        result = train_local(self.env.backbone, problem, self.private.user[users], item0, self.public.net,
                             self.config.optimizer, self.env.sim.local_epochs)
        client, slot = problem.item_mask.nonzero(as_tuple=True)  # [R], [R]
        uploads = Uploads(users.numel(), client, problem.items[client, slot], result.item_delta[client, slot],
                          result.net_delta, problem.weight)
        return uploads, result.user, result.loss

    def make_server(self, public: PublicParams) -> Server:
        return OptimizerServer(public, self.config.server_optimizer)

    def fast_round(self, problems: list[LocalProblem]) -> tuple[Aggregate, torch.Tensor] | None:
        if not self.uses_fast_path:
            return None
        lr = self.config.optimizer.lr
        rows = torch.unique(torch.cat([p.items[p.item_mask] for p in problems]))  # [G] items touched this round
        item_leaf = self.public.item[rows].requires_grad_(True)  # [G, di]
        net_leaf = {k: v.detach().clone().requires_grad_(True) for k, v in self.public.net.items()}
        row_weight = torch.zeros(rows.numel(), device=rows.device)  # W_i = Σ_{c ∋ i} w_c
        total_weight, losses = 0.0, []
        for problem in problems:
            users = problem.batch.users
            weight = self.defense.linear_weights(problem.weight)  # [B]
            user_leaf = self.private.user[users].requires_grad_(True)
            local = torch.searchsorted(rows, problem.items)  # [B, Lu] positions in `rows`
            vectors = gather_rows(item_leaf, local.gather(1, example_slots(problem)))  # [B, S, di]
            loss = vectors_loss(self.env.backbone, problem, user_leaf, vectors, net_leaf)  # [B]
            (loss * weight).sum().backward()
            with torch.no_grad():
                self.private.user[users] = user_leaf - lr * user_leaf.grad / weight.unsqueeze(1)
                row_weight.index_add_(0, local[problem.item_mask],
                                      weight.unsqueeze(1).expand_as(local)[problem.item_mask])
            total_weight = total_weight + weight.sum()
            losses.append(loss.detach())
        if not self.defense.normalized:
            row_weight, total_weight = torch.ones_like(row_weight), 1.0
        item_delta = -lr * item_leaf.grad / row_weight.unsqueeze(1)
        dense = {k: -lr * v.grad / total_weight for k, v in net_leaf.items()}
        return Aggregate(rows, item_delta, dense), torch.cat(losses)
