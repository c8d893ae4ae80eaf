"""BIL: a batch-insensitive loss for federated retrieval with limited negatives (Ning, Singhal,
Zhou, Prakash, 2021, arXiv:2108.07931) — FedCL's "+BIL" baseline rows (Wu et al. 2022, §4.2 (c):
"local positive items only", plus a spread-out regulariser on the item embeddings).

Each client trains on its local positives only, so its loss does not depend on which other items
share its batch. Following the hinge loss of Ning et al.'s open-source dual-encoder framework
(``google-research/federated``, ``dual_encoder``), a positive is scored by the cosine of the
user's query and the item's embedding, and the client's loss is

    L_i = mean_j max(0, m − cos(q_i, v_{p_j}))²,            m = ``margin`` (0.9 there).

Alone this is minimised by every item pointing where every user points. The spread-out term of
Zhang et al. 2017, which FedAwS (Yu et al. 2020) applies on the server to the class embeddings
when clients see positives only, keeps the item directions apart over the whole catalogue:

    S(V) = ( Σ_{k ≠ l} cos(v_k, v_l)² )^½,      over all I items (Ning et al.'s code).

The server adds λ·S to the round (``SpreadOutServer``). It needs no client data, and for one local
SGD step, with client weights summing to one, it equals every client adding λ·S(V) to L_i.
Evaluation ranks by the same cosine: items normalised, so a popular item's long row does not win.

Open points and choices (each a config field, logged):
  - FedCL gives no formula for BIL. The loss above is one of Ning et al.'s batch-insensitive
    losses (``positive_loss=hinge``); ``logistic`` takes mean_j −log σ(s) instead.
  - ``similarity=auto`` uses the cosine when the backbone scores by an inner product (MF,
    GRU4Rec, BERT4Rec). NCF's score is an MLP output with no cosine, so it scores raw. Positives
    alone then have nothing to push against: the NCF row collapses, as measured.
  - The spread-out term is Ning et al.'s root of the summed squared cosines. A first version took
    their mean (independent of the catalogue size): 1/I² per pair is so weak that the items the
    clients train drew together while the rest spread (GRU4Rec on ML-1M: test HR@10 .041 after
    20 epochs, popularity's level).
  - Everything else (sampling, server Adam, one local step) is FedCL's training
    (``fedrun.method._retrieval``, as ``method=fedcl`` runs it), so the rows differ only in the loss.
"""

from __future__ import annotations

from typing import Sequence, cast

import torch
import torch.nn.functional as F

from fedrun.backbone.base import PrivateParams, PublicParams
from fedrun.backbone.mf import MF
from fedrun.data.client_store import ClientStore
from fedrun.errors import ConfigError
from fedrun.kernels.batching import LocalProblem
from fedrun.kernels.config import ServerOptimizerConfig
from fedrun.kernels.local import slot_rows
from fedrun.method._retrieval import RetrievalClient, RetrievalMethod
from fedrun.method.client import ModelView
from fedrun.method.config import BILConfig
from fedrun.method.server import OptimizerServer, Server
from fedrun.types import Aggregate, RoundContext


def spread_out(item: torch.Tensor) -> torch.Tensor:
    """item [I, d] → the root of Σ over ordered pairs k ≠ l of cos(v_k, v_l)².

    Σ_{k,l} cos² = ‖V̂ᵀV̂‖²_F, so the sum costs [d, d], not [I, I]; the k = l terms
    (1 for every non-zero row) are taken out."""
    unit = F.normalize(item, dim=1)  # [I, d]
    all_pairs = (unit.T @ unit).pow(2).sum()
    diagonal = unit.pow(2).sum(1).pow(2).sum()
    return (all_pairs - diagonal).clamp_min(1e-12).sqrt()  # no infinite gradient at 0


def positive_loss(similarity: torch.Tensor, weight: torch.Tensor, kind: str, margin: float) -> torch.Tensor:
    """similarity [B, P] of each client's positives, weight [B, P] which count → [B] the mean loss."""
    per_positive = (margin - similarity).clamp_min(0).pow(2) if kind == "hinge" else F.softplus(-similarity)
    weight = weight.to(similarity.dtype)
    return (per_positive * weight).sum(1) / weight.sum(1).clamp_min(1)


class SpreadOutServer(OptimizerServer):
    """Adds λ·S(V) of the public item table to the clients' aggregate, then applies it.

    The aggregate is the clients' (weighted mean) delta, −lr·∇L_i for one SGD step; the server
    adds −lr·λ·∇S(V) to every item row (``step_weight`` = lr·λ), which is what each client
    would have added had λ·S(V) been in its loss. Only public parameters are used."""

    def __init__(self, public: PublicParams, config: ServerOptimizerConfig, step_weight: float):
        super().__init__(public, config)
        self.step_weight = step_weight

    def step(self, aggregate: Aggregate, ctx: RoundContext) -> dict[str, float]:
        item = self.public.item
        with torch.enable_grad():
            leaf = item.detach().requires_grad_(True)
            (gradient,) = torch.autograd.grad(spread_out(leaf), leaf)  # [I, d]
        delta = torch.zeros_like(item).index_add_(0, aggregate.items, aggregate.item_delta)
        delta.add_(gradient, alpha=-self.step_weight)
        every_item = torch.arange(item.shape[0], device=item.device)
        self.optimizer.step(Aggregate(every_item, delta, aggregate.dense))
        return {}


class BILClient(RetrievalClient):
    """FedCL's client program with the positives-only loss, ranking by the similarity it trained."""

    needs_negatives = False

    def __init__(self, config: BILConfig, env, private: PrivateParams, view: ModelView):
        super().__init__(config, env, private, view)
        inner_product = isinstance(env.backbone, MF)  # MF, GRU4Rec, BERT4Rec: score = ⟨q, v⟩
        if config.similarity == "cosine" and not inner_product:
            raise ConfigError("method.similarity", "cosine", f"score or auto for {type(env.backbone).__name__}: "
                              "its score is not an inner product, so it has no cosine")
        self.cosine = config.similarity == "cosine" or (config.similarity == "auto" and inner_product)

    def local_loss(self, problem: LocalProblem, user: torch.Tensor, item_table: torch.Tensor,
                   net: dict[str, torch.Tensor]) -> torch.Tensor:
        if problem.sequence is not None:  # one query per target position
            queries, rows = self.sequence_queries(problem, item_table, net)  # [B, P, d] each
            weight = problem.sequence.target
        else:
            queries, rows = user.unsqueeze(1), slot_rows(item_table, problem.pos_slot)  # [B, 1, du], [B, P, di]
            weight = problem.batch.pos_mask
        if self.cosine:
            similarity = F.cosine_similarity(queries, rows, dim=-1)  # [B, P]
        elif problem.sequence is not None:
            similarity = (queries * rows).sum(-1)
        else:
            similarity = self.env.backbone.score(user, rows, net)
        return positive_loss(similarity, weight, self.config.positive_loss, self.config.margin)

    # -- evaluation: rank by the similarity the loss trained ------------------------------
    def ranking_items(self) -> torch.Tensor:
        """[I, d] the item rows ranked against: unit rows under the cosine."""
        return F.normalize(self.public.item, dim=1) if self.cosine else self.public.item

    @torch.no_grad()
    def score_users(self, users: torch.Tensor, history: Sequence[ClientStore] = ()) -> torch.Tensor:
        queries = self.queries(users, history)
        if self.cosine:
            queries = F.normalize(queries, dim=1)
        return self.env.backbone.score_full(queries, self.ranking_items(), self.public.net)

    @torch.no_grad()
    def score_pairs(self, users: torch.Tensor, items: torch.Tensor,
                    history: Sequence[ClientStore] = ()) -> torch.Tensor:
        distinct, index = torch.unique(users, return_inverse=True)
        queries = self.queries(distinct, history)  # [U', d]: the encoder reads the raw rows
        if self.cosine:
            queries = F.normalize(queries, dim=1)
        rows = self.ranking_items()[items].unsqueeze(1)  # [N, 1, d]
        return self.env.backbone.score(queries[index], rows, self.public.net)[:, 0]


class BIL(RetrievalMethod):
    Config = BILConfig
    client_program = BILClient
    unpadded_fast_path = False  # the unpadded pass computes Eq. 1: BIL takes the bucketed one
    unread = {"backbone.l2": "its loss is the hinge on the positives' similarity and the server's spread-out "
                             "term, with no L2"}

    def describe(self) -> dict:
        return {**super().describe(), "bil_similarity": "cosine" if cast(BILClient, self.client).cosine else "score"}

    def make_server(self, public: PublicParams, statistics: dict[str, torch.Tensor]) -> Server:
        config = self.config
        if not config.spread_weight:  # positives alone: no regulariser gradient to compute each round
            return OptimizerServer(public, config.server_optimizer)
        return SpreadOutServer(public, config.server_optimizer, config.optimizer.lr * config.spread_weight)
