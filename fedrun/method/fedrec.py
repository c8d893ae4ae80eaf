"""FedRec: federated PMF on explicit ratings with hybrid filling (Lin, Liang, Pan, Ming, IEEE
Intelligent Systems 2020), as restated in FedRec++ (Liang, Pan, Ming, AAAI 2021, Eq. 1–3, 7).

Client u in iteration t (vectorized over the round's clients; γ_t = γ·0.9^t):
  1. sample I'_u: ρ|I_u| distinct items it has not rated (fresh every iteration; Alg. 2 line 2);
  2. virtual ratings r'_ui (Eq. 1): the user's mean rating while t < T_predict, else U'_u·V_i
     with U'_u a local copy of U_u trained T_local full-batch steps of Eq. 7 (Alg. 2 line 3);
  3. ∇U_u = mean_{i∈I_u}(−e_ui V_i + λU_u) (Eq. 7); U_u ← U_u − γ_t ∇U_u (stays on the client);
  4. ∇V(u,i) = (U_u·V_i − r_ui)U_u + λV_i for i ∈ I_u ∪ I'_u, r'_ui for the sampled ones (Eq. 3),
     uploaded as item-row deltas −γ_t ∇V(u,i).
Server: the mean over the rows' uploaders, V_i ← V_i − γ_t Σ ∇V / |U_i ∪ U'_i| (Eq. 2) —
``defense=mean`` (uniform) and a plain SGD server step of 1.

Open points and choices: the item gradients use U_u after its step (the order of Alg. 2,
lines 5–8); U'_u also steps with γ_t; |I'_u| = ⌊ρ|I_u|⌋, capped at the client's number of
unrated items; the learning rate decays per round (one round = one iteration of Alg. 1, so
``sim.clients_per_round`` = c and the number of rounds = T). λ is the backbone's ``l2`` (α).
Gradients are computed in closed form (PMF's squared loss), not through autograd.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from fedrun.backbone.base import PublicParams
from fedrun.core.seeding import derive_seed
from fedrun.data.negatives import sample_unrated
from fedrun.errors import check, check_fraction, check_positive
from fedrun.kernels.batching import LocalProblem, local_problem
from fedrun.kernels.local import slot_rows
from fedrun.kernels.server_opt import ServerOptimizerConfig
from fedrun.method.federated import ClientResult, FederatedMethod
from fedrun.method.rating_scale import require_rating_model
from fedrun.method.server import OptimizerServer, Server
from fedrun.privacy.audit import MembershipAudit
from fedrun.types import ClientBatch, RoundContext, Uploads


@dataclass
class FedRecConfig:
    lr: float = 0.5  # γ (paper 0.8 [FedRec++ §5.2] diverges here: docs/reproductions/fedrecpp.md)
    lr_decay: float = 0.9  # γ ← 0.9γ after every iteration (Alg. 1 line 20)
    rho: float = 0.0  # ρ: sampled unrated items per rated item
    t_predict: int = 10  # iterations with the user's mean as virtual rating before predicting (Eq. 1)
    t_local: int = 10  # local steps training the copy U'_u that predicts virtual ratings
    audit: bool = False  # log how well the server can guess rated items from uploaded ids

    def __post_init__(self) -> None:
        check_positive("lr", self.lr)
        check_fraction("lr_decay", self.lr_decay, closed_low=False, closed_high=True)
        check_positive("rho", self.rho, allow_zero=True)
        check(self.t_predict >= 0, "t_predict", self.t_predict, "an integer >= 0")
        check(self.t_local >= 0, "t_local", self.t_local, "an integer >= 0")


@dataclass(frozen=True)
class RatingProblem(LocalProblem):
    """A bucket's local problem in iteration ``round``: rated items (positives, with ratings)
    and sampled unrated items (extra slots, masked) in one local item table."""

    round: int = 0


class FedRec(FederatedMethod):
    Config = FedRecConfig
    unread = {"sim.local_epochs": "each client takes one gradient step on its ratings per round (Alg. 2)"}

    def __init__(self, config: FedRecConfig, env):
        require_rating_model(env, type(self).__name__.lower())
        super().__init__(config, env)
        self.audit = None
        if config.audit:
            self.audit = MembershipAudit(env.train.sorted_keys(), env.train.sizes(), env.n_items)

    def make_server(self, public: PublicParams, statistics: dict[str, torch.Tensor]) -> Server:
        return OptimizerServer(public, ServerOptimizerConfig("sgd", 1.0))  # deltas already carry −γ_t

    def describe(self) -> dict:
        return {"lr_schedule": f"{self.config.lr}*{self.config.lr_decay}^round"}

    def lr_at(self, round_index: int) -> float:
        return self.config.lr * self.config.lr_decay ** round_index

    # -- client side -----------------------------------------------------------------------
    def unrated_counts(self, batch: ClientBatch) -> torch.Tensor:
        """[B] how many unrated items each client samples: ⌊ρ|I_u|⌋, at most its unrated items."""
        rated = batch.n_pos()
        return torch.minimum(torch.floor(rated * self.config.rho).long(), self.env.n_items - rated)

    def problems(self, users: torch.Tensor, round_index: int, sent: torch.Tensor | None = None) -> list[LocalProblem]:
        env = self.env
        seed = derive_seed(env.sim.seed, "unrated", round_index)
        slots_per_row = 1 + math.ceil(self.config.rho)
        out = []
        for _, batch in env.client_batches(users, slots_per_row):
            unrated, mask = sample_unrated(batch.users, batch.pos, batch.pos_mask, self.unrated_counts(batch),
                                           env.n_items, seed, env.sim.max_slots)
            base = local_problem(batch, None, env.n_items, unrated, mask)
            out.append(RatingProblem(**vars(base), round=round_index))
        return out

    def client_step(self, problem: RatingProblem) -> ClientResult:
        uploads, new_user, loss, _ = self.rating_step(problem)
        return ClientResult(uploads, new_user, loss)

    def rating_step(self, problem: RatingProblem) -> tuple[Uploads, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Alg. 2 lines 1–10 for a bucket → (uploads of I_u ∪ I'_u, new U_u [B, d], mean squared
        error [B], which uploaded rows are sampled items [R])."""
        lr, lam = self.lr_at(problem.round), self.env.backbone.config.l2
        batch = problem.batch
        user = self.private.user[batch.users]  # [B, d]
        table = self.public.item[problem.items]  # [B, L, d] the clients' copies of V
        rated = slot_rows(table, problem.pos_slot)  # [B, P, d]
        mask = batch.pos_mask.to(table.dtype)  # [B, P]
        n_rated = mask.sum(1)  # [B]
        error = (batch.ratings - torch.einsum("bd,bpd->bp", user, rated)) * mask  # e_ui [B, P]
        loss = error.pow(2).sum(1) / n_rated
        new_user = user - lr * self.user_gradient(user, rated, error, n_rated, lam)  # Eq. 7

        target = torch.zeros(problem.items.shape, dtype=table.dtype, device=table.device)  # [B, L] r or r'
        client, column = batch.pos_mask.nonzero(as_tuple=True)
        target[client, problem.pos_slot[client, column]] = batch.ratings[client, column]
        is_sampled = torch.zeros_like(problem.item_mask)
        if problem.extra_slot is not None and problem.extra_mask.any():
            virtual = self.virtual_ratings(problem, user, rated, n_rated, slot_rows(table, problem.extra_slot))
            client, column = problem.extra_mask.nonzero(as_tuple=True)
            slot = problem.extra_slot[client, column]
            target[client, slot] = virtual[client, column]
            is_sampled[client, slot] = True

        predicted = torch.einsum("bd,bld->bl", new_user, table)  # [B, L]
        gradient = (predicted - target).unsqueeze(-1) * new_user.unsqueeze(1) + lam * table  # Eq. 3 [B, L, d]
        client, slot = problem.item_mask.nonzero(as_tuple=True)  # [R]
        uploads = Uploads(batch.size, client, problem.items[client, slot], -lr * gradient[client, slot], {},
                          problem.weight)
        return uploads, new_user, loss, is_sampled[client, slot]

    @staticmethod
    def user_gradient(user: torch.Tensor, rated: torch.Tensor, error: torch.Tensor, n_rated: torch.Tensor,
                      lam: float) -> torch.Tensor:
        """Eq. 7: mean over the rated items of (−e_ui V_i + λU_u) → [B, d] (error is 0 on padding)."""
        return -torch.einsum("bp,bpd->bd", error, rated) / n_rated.unsqueeze(1) + lam * user

    def virtual_ratings(self, problem: RatingProblem, user: torch.Tensor, rated: torch.Tensor,
                        n_rated: torch.Tensor, sampled: torch.Tensor) -> torch.Tensor:
        """Eq. 1 → [B, K] virtual ratings of the sampled items (rows ``sampled`` [B, K, d])."""
        batch, config = problem.batch, self.config
        if problem.round < config.t_predict:
            mean = (batch.ratings * batch.pos_mask).sum(1) / n_rated  # [B]
            return mean.unsqueeze(1).expand(sampled.shape[:2])
        lr, lam = self.lr_at(problem.round), self.env.backbone.config.l2
        local = user.clone()  # U'_u ← U_u, trained T_local steps (Alg. 2 line 3)
        mask = batch.pos_mask.to(rated.dtype)
        for _ in range(config.t_local):
            error = (batch.ratings - torch.einsum("bd,bpd->bp", local, rated)) * mask
            local = local - lr * self.user_gradient(local, rated, error, n_rated, lam)
        return torch.einsum("bd,bkd->bk", local, sampled)

    # -- server side -----------------------------------------------------------------------
    def observe_uploads(self, uploads: Uploads, senders: torch.Tensor, ctx: RoundContext) -> dict[str, float]:
        """With ``audit=true``: what the server can guess from the item ids of the ordinary clients'
        uploads (``senders`` [B] in upload order); and the traffic in latent vectors (the paper's unit)."""
        metrics = self.communication(uploads)
        if self.audit is not None:
            metrics.update(self.audit.observe(senders, uploads, audited=self.ordinary(senders)))
        return metrics

    def communication(self, uploads: Uploads) -> dict[str, float]:
        """Per iteration, in latent vectors and bytes (a row is a vector plus an int32 item id)."""
        vectors = float(torch.bincount(uploads.row_client, minlength=uploads.n_clients).double().mean())
        row_bytes = uploads.row_delta.shape[1] * uploads.row_delta.element_size() + 4
        return dict(comm_vectors_ordinary=vectors, comm_vectors_client=vectors,
                    comm_bytes_ordinary=vectors * row_bytes, comm_bytes_client=vectors * row_bytes)

    def ordinary(self, users: torch.Tensor) -> torch.Tensor | None:
        """[B] which of the clients upload hybrid-filled rows (None: all of them)."""
        return None
