"""PerFedRec++ (Luo et al., "PerFedRec++: Enhancing Personalized Federated Recommendation with
Self-Supervised Pre-Training", TIST 2024): PerFedRec (``fedrun.method.perfedrec``) after a
federated self-supervised pre-training stage (§4.1, Algorithm 1 lines 4–8).

Pre-training: the run's first ``pretrain_rounds`` rounds train the contrastive loss only. Each
round's clients (node dropout, Eq. 1: the clients not selected are dropped) build their ego
graphs with the round's pseudo items (edge perturbation, Eq. 2) and propagate them twice with
noise injection (Eq. 3: a random vector of norm ``view_noise`` added to every layer's output,
as in the authors' code and SimGCL); each client then takes InfoNCE (Eq. 4, cosine similarity,
temperature ``tau``):
  - users: its own two views are the positive pair; the negatives are ``user_negatives`` random
    users whose shared rows the server sends the round's clients (Eq. 4 sums over all users, which
    no client holds; the code draws 256 random users) — their layer-0 rows, as a client cannot
    propagate outside its ego graph. ``user_negatives=0`` uses the client's neighbours instead
    (they share its items, so InfoNCE pushes it away from users like it; measured in
    docs/reproductions/perfedrecpp.md);
  - items: each item of its local table, its two views positive, the table's other items negative;
and uploads the deltas of its item rows, as in fine-tuning. Fine-tuning is PerFedRec's rounds.

Open points and their resolution (REFERENCE §3; the authors' code): a pre-training "epoch" is
one round of clients (the code runs one step per pre-training epoch on 256 random users and
items) whose clients step with ``pretrain_optimizer`` (the code: Adam, lr 50 × 1e-3); the views
differ by the noise only — both share the round's pseudo items; τ = 0.2 and
the noise on every layer are the code's; Eq. 3's unit-norm noise is ``view_noise = 1``, the
code's ``pretrain_noise`` (value not published) is configurable, default 0.1 (SimGCL's ε).
The pre-training rounds' loss is Eq. 4 alone: ``backbone.l2`` enters the fine-tuning rounds only.
"""

from __future__ import annotations

import dataclasses
from typing import cast

import torch
import torch.nn.functional as F

from fedrun.core import hashrng
from fedrun.core.seeding import derive_seed, generator
from fedrun.errors import check
from fedrun.kernels.batching import LocalProblem
from fedrun.kernels.config import ClientOptimizer
from fedrun.kernels.ego import EgoGraphs, GraphProblem
from fedrun.kernels.local import problem_loss
from fedrun.method._contrastive import info_nce
from fedrun.method._personalized import PersonalizedClient, PersonalizedMethod
from fedrun.method.config import PerFedRecPPConfig
from fedrun.method.federated import Exchange
from fedrun.privacy.base import Privacy

NOISE_BITS = 24


class PerFedRecPPClient(PersonalizedClient):
    """PerFedRec's client program with the pre-training rounds: their optimizer and Eq. 4's loss."""

    config: PerFedRecPPConfig

    def pretraining(self, round_index: int) -> bool:
        return round_index < self.config.pretrain_rounds

    def client_optimizer(self, problem: LocalProblem) -> ClientOptimizer:
        """Pre-training rounds step with ``pretrain_optimizer`` (the code: Adam at 50 × its lr 1e-3)."""
        if self.pretraining(cast(GraphProblem, problem).round):
            return self.config.pretrain_optimizer
        return super().client_optimizer(problem)

    def local_loss(self, problem: LocalProblem, user: torch.Tensor, item_table: torch.Tensor,
                   net: dict[str, torch.Tensor]) -> torch.Tensor:
        problem = cast(GraphProblem, problem)
        if not self.pretraining(problem.round):
            return problem_loss(self.env.backbone, problem, user, item_table, net)
        seed = derive_seed(self.env.sim.seed, "pretrain-views", problem.round)
        ego = problem.ego
        assert ego is not None, "a graph context's problems carry their ego graphs"
        owner, key = ego.node_keys(problem.batch.users)
        views = [ego.propagate_all(user, item_table, problem.layers,
                                           noise_injection(owner, key, seed, view, self.config.view_noise))
                 for view in (0, 1)]
        if problem.sent is not None:
            user_term = random_user_infonce(views[0][0], views[1][0], problem.sent, self.config.tau)
        else:
            user_term = user_infonce(views[0], views[1], ego, self.config.tau)
        return user_term + item_infonce(views[0][1], views[1][1], problem.item_mask, self.config.tau)


class PerFedRecPP(PersonalizedMethod):
    Config = PerFedRecPPConfig
    client_program = PerFedRecPPClient

    def pretraining(self, round_index: int) -> bool:
        return round_index < self.config.pretrain_rounds

    def first_cluster_round(self) -> int:
        """``cluster_from`` counts from the end of pre-training."""
        return self.config.pretrain_rounds + self.config.cluster_from

    def check_length(self, rounds: int) -> None:
        check(self.config.pretrain_rounds < rounds, "method.pretrain_rounds", self.config.pretrain_rounds,
              f"fewer than the run's {rounds} rounds: otherwise it only pre-trains (and is recorded as PerFedRec++)")
        super().check_length(rounds)

    def exchange(self, users: torch.Tensor, round_index: int, privacy: Privacy) -> Exchange:
        """Pre-training rounds: the server also sends every client of the round the shared rows of
        ``user_negatives`` random users (Eq. 4's other users; anonymous)."""
        exchange = super().exchange(users, round_index, privacy)
        count = self.config.user_negatives
        if not self.pretraining(round_index) or not count:
            return exchange
        shared = self.shared_embeddings()
        gen = generator(self.env.sim.seed, "pretrain-negatives", round_index)
        chosen = torch.randperm(shared.shape[0], generator=gen)[:count].to(shared.device)
        rows = shared[chosen]  # [S, d]
        return dataclasses.replace(exchange, sent=rows,
                                   bytes_down=exchange.bytes_down + rows.numel() * rows.element_size())


def noise_injection(owner: torch.Tensor, key: torch.Tensor, seed: int, view: int, norm: float):
    """Eq. 3 per layer: x + norm · Δ/‖Δ‖ with Δ ~ U(0, 1)^d (the code's ``rand_like``), keyed by
    (client, node key, layer, view, coordinate) — a client's views do not depend on its bucket."""
    def perturb(layer: int, x: torch.Tensor) -> torch.Tensor:
        if not norm:
            return x
        coord = torch.arange(x.shape[1], device=x.device)
        bits = hashrng.randint(seed, [owner.unsqueeze(1), key.unsqueeze(1), torch.tensor(layer * 2 + view),
                                      coord.unsqueeze(0)], 1 << NOISE_BITS)  # [N, d]
        delta = (bits.to(x.dtype) + 0.5) / (1 << NOISE_BITS)
        return x + norm * F.normalize(delta, dim=-1)
    return perturb


def user_infonce(view1, view2, ego: EgoGraphs, tau: float) -> torch.Tensor:
    """[B]: −log e^{s(u', u'')/τ} / (e^{s(u', u'')/τ} + Σ_v e^{s(u', v'')/τ}), v the client's neighbours."""
    center1, center2, neighbors2 = view1[0], view2[0], view2[2]
    positive = F.cosine_similarity(center1, center2, dim=-1) / tau  # [B]
    owner = ego.neighbor_owner  # [V]
    negative = F.cosine_similarity(center1[owner], neighbors2, dim=-1) / tau  # [V]
    top = positive.detach().scatter_reduce(0, owner, negative.detach(), "amax")  # [B] for stability
    total = torch.exp(positive - top).index_add(0, owner, torch.exp(negative - top[owner]))
    return top + torch.log(total) - positive


def random_user_infonce(center1: torch.Tensor, center2: torch.Tensor, others: torch.Tensor, tau: float) -> torch.Tensor:
    """[B]: −log e^{s(u', u'')/τ} / (e^{s(u', u'')/τ} + Σ_j e^{s(u', o_j)/τ}), o_j [S, d] the shared rows of
    random users the server sent (a client cannot propagate outside its ego graph: their layer-0 rows)."""
    cosines = F.normalize(center1, dim=-1) @ F.normalize(others.to(center1.dtype), dim=-1).T  # [B, S]
    return info_nce(center1, center2, cosines, tau)


def item_infonce(items1: torch.Tensor, items2: torch.Tensor, item_mask: torch.Tensor, tau: float) -> torch.Tensor:
    """[B]: the mean over each client's items of InfoNCE between the two views of its local table
    (items1, items2 [B, Lu, d]), the other items of the table as negatives."""
    logits = torch.bmm(F.normalize(items1, dim=-1), F.normalize(items2, dim=-1).transpose(1, 2)) / tau  # [B, Lu, Lu]
    logits = logits.masked_fill(~item_mask.unsqueeze(1), float("-inf"))
    per_item = torch.logsumexp(logits, -1) - torch.diagonal(logits, dim1=1, dim2=2)  # [B, Lu]
    per_item = torch.where(item_mask, per_item, torch.zeros_like(per_item))
    return per_item.sum(1) / item_mask.sum(1).clamp_min(1)
