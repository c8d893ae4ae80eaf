"""FCF: federated collaborative filtering for implicit feedback (Ammad-ud-din, Ivannikova, Khan,
Oyomno, Fu, Tan, Flanagan, arXiv:1901.09888, 2019, Eq. 1–7), the first federated baseline of
LightFR's Table 5.

Weighted matrix factorisation (Hu, Koren, Volinsky 2008): p_ui = 1 for an observed interaction,
0 otherwise, with confidence c_ui = 1 + α r_ui (r_ui the rating min-max scaled to [0, 1]; 1 for
implicit data), cost J = Σ_u Σ_i c_ui (p_ui − x_uᵀy_i)² + λ(Σ_u ‖x_u‖² + Σ_i ‖y_i‖²) over *all* items.

Client u in round t (vectorized over the round's clients):
  1. x_u = (YᵀC^uY + λI)⁻¹ YᵀC^u p(u) (Eq. 4), with YᵀC^uY = YᵀY + Σ_{i∈I_u} α r_ui y_i y_iᵀ, so the
     only per-client work is over its rated items (YᵀY is one [f, f] matrix of the public Y);
  2. uploads f(u, i) = c_ui (p_ui − x_uᵀy_i) x_u for every item i of the catalogue (Eq. 6) — a dense
     [m, f] matrix: FCF hides which items the user rated by sending them all.
Server: ∂J/∂y_i = −2 Σ_u f(u, i) + 2λ y_i (Eq. 7), applied by ``server_optimizer`` (the FCF paper
uses Adam's adaptive rates).

Computation: for an unrated item f(u, i) = −(x_u x_uᵀ) y_i, so Σ_u f(u, ·) = −Y (XᵀX) + Σ over the
rated pairs of (c_ui(1 − s_ui) + s_ui) x_u — exactly the sum of the dense uploads, without ever
materialising B × m × f numbers (tests check it against a per-client loop that does). The
traffic is accounted as the dense matrices FCF sends (m·f float32 each way). Because the path
needs the sum to be exact, FCF refuses upload-transforming privacy, attacks and robust defenses.

Open points: α and λ are not given for rating data (FCF's own data are counts): α = 1 and λ =
backbone ``l2``; the server applies one optimizer step per round to the sum over the round's
clients (FCF applies each round's summed gradient; E = 1); users are solved afresh each round
(closed form, so the local epoch count does not matter).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedrun.backbone.base import PublicParams
from fedrun.backbone.pmf import PMF
from fedrun.defense.base import Defense
from fedrun.errors import ConfigError
from fedrun.kernels.config import ServerOptimizerConfig
from fedrun.method.client import Client
from fedrun.method.config import FCFConfig
from fedrun.method.federated import FederatedMethod, Needs
from fedrun.method.fedsgd import FastRound
from fedrun.method.rating_scale import RatingScale
from fedrun.method.server import OptimizerServer, Server
from fedrun.types import Aggregate, ClientBatch, RoundContext


@dataclass(frozen=True)
class SolvedClients:
    """One bucket's client step: new user factors [B, f], each client's cost [B], and the
    coefficient of x_u in the sum of uploads for each rated pair [B, P] (0 on padding)."""

    user: torch.Tensor
    loss: torch.Tensor
    rated_coef: torch.Tensor


class FCFServer(OptimizerServer):
    """Adds the item regulariser to the clients' summed data term: −∂J/∂Y = 2Σ_u f(u, ·) − 2λY."""

    def __init__(self, public: PublicParams, config: ServerOptimizerConfig, l2: float):
        super().__init__(public, config)
        self.l2 = l2

    def step(self, aggregate: Aggregate, ctx: RoundContext) -> dict[str, float]:
        delta = aggregate.item_delta - 2 * self.l2 * self.public.item[aggregate.items]
        return super().step(Aggregate(aggregate.items, delta, aggregate.dense), ctx)


class FCFClient(Client):
    """FCF's clients: FedAvg's program, whose buckets the closed-form pass (``FCF.fast_round``) solves instead."""

    unshardable = "its clients' closed-form solves and their sum are one pass over the round, not a step per bucket"


class FCF(FederatedMethod):
    Config = FCFConfig
    client_program = FCFClient
    unread = {"sim.local_epochs": "its clients solve their rows in closed form and send one item gradient a round"}

    def __init__(self, config: FCFConfig, env):
        if not isinstance(env.backbone, PMF):
            raise ConfigError("backbone", type(env.backbone).__name__,
                              "backbone=pmf for method=fcf (inner-product MF fitted by a weighted squared loss)")
        self.scale = RatingScale.of_training(env, "fcf") if env.split.train.rating is not None else None
        super().__init__(config, env)

    @classmethod
    def needs(cls, config: FCFConfig) -> Needs:
        why = "its server sums the clients' dense gradients (Eq. 7), computed exactly without materialising them"
        return Needs(exact_sum=why, plain_uploads=why, no_attack=why, no_audit=why)

    def fast_path_exact(self) -> bool:
        return True  # the closed-form sum is FCF's only path

    def make_server(self, public: PublicParams, statistics: dict[str, torch.Tensor]) -> Server:
        return FCFServer(public, self.config.server_optimizer, self.env.backbone.config.l2)

    def describe(self) -> dict:
        return {"confidence": f"1 + {self.config.alpha:g} * r, r {self.scale or 'implicit (1)'}"}

    # -- client side -----------------------------------------------------------------------
    def confidence(self, batch: ClientBatch) -> torch.Tensor:
        """[B, P] c_ui − 1 = α r_ui on the rated items (0 on padding)."""
        mask = batch.pos_mask.to(self.public.item.dtype)
        rating = mask if self.scale is None or batch.ratings is None else self.scale(batch.ratings) * mask
        return self.config.alpha * rating

    def solve(self, batch: ClientBatch, gram: torch.Tensor) -> SolvedClients:
        """Eq. 4 for a bucket of clients, and their cost J_u and upload coefficients."""
        lam = self.env.backbone.config.l2
        mask = batch.pos_mask.to(gram.dtype)  # [B, P]
        rated = self.public.item[batch.pos]  # [B, P, f]
        extra = self.confidence(batch)  # [B, P] c − 1
        eye = torch.eye(gram.shape[0], dtype=gram.dtype, device=gram.device)
        lhs = gram + torch.einsum("bp,bpf,bpg->bfg", extra, rated, rated) + lam * eye  # [B, f, f]
        rhs = torch.einsum("bp,bpf->bf", (1 + extra) * mask, rated)  # Yᵀ C^u p(u) [B, f]
        user = torch.linalg.solve(lhs, rhs)  # [B, f]
        score = torch.einsum("bf,bpf->bp", user, rated)  # s_ui on the rated items [B, P]
        conf = 1 + extra
        # J_u: Σ_all s² = x_uᵀ(YᵀY)x_u, corrected on the rated items to c(1 − s)²
        loss = (torch.einsum("bf,fg,bg->b", user, gram, user)
                + ((conf * (1 - score).pow(2) - score.pow(2)) * mask).sum(1) + lam * user.pow(2).sum(1))
        rated_coef = (conf * (1 - score) + score) * mask  # f(u, i) + (x_uᵀy_i) x_u, over x_u
        return SolvedClients(user, loss, rated_coef)

    def fast_round(self, users: torch.Tensor, round_index: int, sent: torch.Tensor | None, rule: Defense) -> FastRound:
        """The round: every client's Eq. 4, then Σ_u f(u, ·) over the whole catalogue (module docstring)."""
        env, item = self.env, self.public.item
        gram = item.T @ item  # [f, f] YᵀY
        upload_sum = torch.zeros_like(item)  # [m, f] Σ_u f(u, ·)
        user_gram = torch.zeros_like(gram)  # Σ_u x_u x_uᵀ
        losses = []
        for _, batch in env.client_batches(users, gram.shape[0]):
            solved = self.solve(batch, gram)
            self.client.private.user[batch.users] = solved.user  # stays on the client
            user_gram += solved.user.T @ solved.user
            client, column = batch.pos_mask.nonzero(as_tuple=True)
            upload_sum.index_add_(0, batch.pos[client, column],
                                  solved.rated_coef[client, column, None] * solved.user[client])
            losses.append(solved.loss)
        upload_sum -= item @ user_gram
        all_items = torch.arange(env.n_items, device=item.device)
        rows = torch.full((users.numel(),), env.n_items, device=item.device)
        return FastRound(Aggregate(all_items, 2 * upload_sum), torch.cat(losses), rows)

    def upload_bytes(self, rows: torch.Tensor) -> float:
        """A client uploads f(u, i) for every item: a dense [m, f] float32 matrix (no ids)."""
        return float(self.public.item.numel() * self.public.item.element_size())

    def download_bytes(self, rows: torch.Tensor) -> float:
        """A client downloads the whole item matrix Y (it solves Eq. 4 with YᵀY and ranks on device)."""
        return float(self.public.item.numel() * self.public.item.element_size())
