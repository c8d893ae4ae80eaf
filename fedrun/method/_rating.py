"""FedRec's client step on explicit ratings (Lin et al. 2020, as FedRec++ restates it: Eq. 1–3, 7), a module
the rating methods compose: FedRec (hybrid filling), FedRec++ (the same step, denoised) and FedMF (ρ = 0).

  - ``RatingConfig``: γ and its decay, ρ, the virtual-rating schedule;
  - ``RatingStep``: the round's problems (rated items plus ⌊ρ|I_u|⌋ sampled unrated ones per client)
    and Alg. 2 lines 1–10 in closed form (PMF's squared loss), vectorized over a bucket;
  - ``communication``: the traffic of rows uploaded, in the paper's unit (latent vectors) and bytes.
What the server can infer from the uploads is measured by the audit group (``audit=server``, ``fedrun.audit``).

Open points (the options' docstrings restate them): the item gradients use U_u after its step (the order
of Alg. 2, lines 5–8); U'_u also steps with γ_t; |I'_u| = ⌊ρ|I_u|⌋, capped at the client's unrated items;
λ is the backbone's ``l2``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import cast

import torch

from fedrun.audit.base import MFStep
from fedrun.backbone.base import PrivateParams
from fedrun.core.seeding import derive_seed
from fedrun.data.negatives import sample_unrated
from fedrun.kernels.batching import LocalProblem, local_problem
from fedrun.kernels.env import RunEnv
from fedrun.kernels.local import slot_rows
from fedrun.method.client import Client, ClientResult, ModelView
from fedrun.method.config import RatingConfig
from fedrun.types import ClientBatch, Uploads

# the settings a rating method never reads (``Method.unread``)
UNREAD = {"sim.local_epochs": "each client takes one gradient step on its ratings per round (Alg. 2)"}


@dataclass(frozen=True)
class RatingProblem(LocalProblem):
    """A bucket's local problem in iteration ``round``: rated items (positives, with ratings)
    and sampled unrated items (extra slots, masked) in one local item table."""

    round: int = 0


class RatingStep:
    """The client side of one run: its settings, the data (client side) and which users sample nothing
    (``abstains`` [U] bool: FedRec++'s denoisers; None: every user samples)."""

    def __init__(self, config: RatingConfig, env: RunEnv, abstains: torch.Tensor | None = None):
        self.config, self.env, self.abstains = config, env, abstains

    def lr_at(self, round_index: int) -> float:
        return self.config.lr * self.config.lr_decay ** round_index

    def mf_step(self, round_index: int) -> MFStep:
        """The public constants of this round's uploads, −γ_t((u'·v_i − r_ui)u' + λv_i): what an audit needs."""
        return MFStep(self.lr_at(round_index), self.env.backbone.config.l2)

    def unrated_counts(self, batch: ClientBatch) -> torch.Tensor:
        """[B] how many unrated items each client samples: ⌊ρ|I_u|⌋, at most its unrated items."""
        rated = batch.n_pos()
        counts = torch.minimum(torch.floor(rated * self.config.rho).long(), self.env.n_items - rated)
        if self.abstains is None:
            return counts
        return torch.where(self.abstains[batch.users], torch.zeros_like(counts), counts)

    def problems(self, users: torch.Tensor, round_index: int) -> list[LocalProblem]:
        env = self.env
        seed = derive_seed(env.sim.seed, "unrated", round_index)
        slots_per_row = 1 + math.ceil(self.config.rho)
        out: list[LocalProblem] = []
        for _, batch in env.client_batches(users, slots_per_row):
            unrated, mask = sample_unrated(batch.users, batch.pos, batch.pos_mask, self.unrated_counts(batch),
                                           env.n_items, seed, env.sim.max_slots)
            base = local_problem(batch, None, env.n_items, unrated, mask)
            out.append(RatingProblem(**vars(base), round=round_index))
        return out

    def step(self, problem: LocalProblem, user_table: torch.Tensor,
             item_table: torch.Tensor) -> tuple[ClientResult, torch.Tensor]:
        """Alg. 2 lines 1–10 for a bucket (one of ``problems``) from the private rows ``user_table`` [U, d] and
        the public item table → (uploads of I_u ∪ I'_u, new U_u [B, d], mean squared error [B]; which uploaded
        rows [R] are sampled items)."""
        assert isinstance(problem, RatingProblem), "a bucket of RatingStep.problems"
        lr, lam = self.lr_at(problem.round), self.env.backbone.config.l2
        batch = problem.batch
        user = user_table[batch.users]  # [B, d]
        ratings = cast(torch.Tensor, batch.ratings)  # explicit feedback (require_rating_model)
        table = item_table[problem.items]  # [B, L, d] the clients' copies of V
        rated = slot_rows(table, problem.pos_slot)  # [B, P, d]
        mask = batch.pos_mask.to(table.dtype)  # [B, P]
        n_rated = mask.sum(1)  # [B]
        error = (ratings - torch.einsum("bd,bpd->bp", user, rated)) * mask  # e_ui [B, P]
        loss = error.pow(2).sum(1) / n_rated
        new_user = user - lr * user_gradient(user, rated, error, n_rated, lam)  # Eq. 7

        target = torch.zeros(problem.items.shape, dtype=table.dtype, device=table.device)  # [B, L] r or r'
        client, column = batch.pos_mask.nonzero(as_tuple=True)
        target[client, problem.pos_slot[client, column]] = ratings[client, column]
        is_sampled = torch.zeros_like(problem.item_mask)
        if problem.extra_slot is not None and problem.extra_mask is not None and problem.extra_mask.any():
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
        return ClientResult(uploads, new_user, loss), is_sampled[client, slot]

    def virtual_ratings(self, problem: RatingProblem, user: torch.Tensor, rated: torch.Tensor,
                        n_rated: torch.Tensor, sampled: torch.Tensor) -> torch.Tensor:
        """Eq. 1 → [B, K] virtual ratings of the sampled items (rows ``sampled`` [B, K, d])."""
        batch, config = problem.batch, self.config
        ratings = cast(torch.Tensor, batch.ratings)
        if problem.round < config.t_predict:
            mean = (ratings * batch.pos_mask).sum(1) / n_rated  # [B]
            return mean.unsqueeze(1).expand(sampled.shape[:2])
        lr, lam = self.lr_at(problem.round), self.env.backbone.config.l2
        local = user.clone()  # U'_u ← U_u, trained T_local steps (Alg. 2 line 3)
        mask = batch.pos_mask.to(rated.dtype)
        for _ in range(config.t_local):
            error = (ratings - torch.einsum("bd,bpd->bp", local, rated)) * mask
            local = local - lr * user_gradient(local, rated, error, n_rated, lam)
        return torch.einsum("bd,bkd->bk", local, sampled)


class RatingClient(Client):
    """The rating methods' client program: ``RatingStep`` on the private rows and the downloaded item table
    (FedRec, FedMF; FedRec++ adds its relay)."""

    def __init__(self, config: RatingConfig, env: RunEnv, private: PrivateParams, view: ModelView,
                 abstains: torch.Tensor | None = None):
        super().__init__(config, env, private, view)
        self.rating = RatingStep(config, env, abstains)

    def problems(self, users: torch.Tensor, round_index: int, sent: torch.Tensor | None = None) -> list[LocalProblem]:
        return self.rating.problems(users, round_index)

    def step(self, problem: LocalProblem) -> ClientResult:
        return self.rating.step(problem, self.private.user, self.public.item)[0]


def user_gradient(user: torch.Tensor, rated: torch.Tensor, error: torch.Tensor, n_rated: torch.Tensor,
                  lam: float) -> torch.Tensor:
    """Eq. 7: mean over the rated items of (−e_ui V_i + λU_u) → [B, d] (error is 0 on padding)."""
    return -torch.einsum("bp,bpd->bd", error, rated) / n_rated.unsqueeze(1) + lam * user


def communication(uploads: Uploads) -> dict[str, float]:
    """Per iteration, in latent vectors and bytes (a row is a vector plus an int32 item id)."""
    vectors = float(torch.bincount(uploads.row_client, minlength=uploads.n_clients).double().mean())
    row_bytes = uploads.row_delta.shape[1] * uploads.row_delta.element_size() + 4
    return dict(comm_vectors_ordinary=vectors, comm_vectors_client=vectors,
                comm_bytes_ordinary=vectors * row_bytes, comm_bytes_client=vectors * row_bytes)
