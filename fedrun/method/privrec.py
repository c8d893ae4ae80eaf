"""PrivRec: fast-adapting, privacy-preserving federated recommendation (Wang, Yin, Chen, Yu, Zhou,
Zhang, VLDB J. 2021), in the form LightFR's Table 5 compares against: matrix factorisation on
explicit ratings, first-order meta-learning (Reptile) and user-level differential privacy
(DP-PrivRec: clipping bound S = 50, noise multiplier z = 1 [LightFR Table 4]).

Meta parameters θ = (u₀, V): a shared initial user vector u₀ [d] (``public.net["user_init"]``) and
the item matrix V. No user row persists between rounds: personalisation is fast adaptation.

Client u in round t (vectorized over the round's clients):
  1. θ_u ← θ on its rated items; k = ``local_steps`` full-batch steps of ``optimizer`` on its mean
     squared rating error (+ the backbone's l2) — Reptile's inner loop. Ratings are min-max scaled
     to [0, 1] over the training ratings (LightFR's preprocessing, as for LightFR and FCF), so one
     inner learning rate serves 0.5–4 and 1–5 scales alike; predictions are mapped back;
  2. Δ_u = θ_u − θ: its rated rows of V and u₀'s change, clipped jointly to ‖Δ_u‖₂ ≤ S (on the client).
Server (DP-FedAvg's Gaussian mechanism, McMahan et al. 2018, which DP-PrivRec applies):
  θ ← θ + β (Σ_u Δ_u + N(0, (zS)² I)) / B, noise on every coordinate of V and u₀, B = the round's clients.
Inference (each client, on its device): the same k steps from the final θ on its training ratings;
it ranks with the adapted user vector against V (adapting its rated rows of V too, as Reptile's
inner loop does, changes only items the evaluation masks).

Open points: PrivRec's own model is a DNN over user/item features with a two-stage schedule
(privacy-relaxed item embeddings first); LightFR runs it as an MF baseline without saying how, so
fedrun keeps only what defines it — Reptile over (u₀, V) and user-level DP with Table 4's z and
S — and no second stage. k = 5 inner steps (not stated; LightFR's E = 1 would make Reptile plain
FedSGD with no adaptation), β = 1, inner lr chosen on FilmTrust validation (docs/reproductions/lightfr.md).
The privacy guarantee: each round is one Gaussian release of the sum at noise multiplier z with respect to one
user (add or remove its clipped update, sensitivity S), so a client's rounds compose as RDP
(``fedrun.privacy.accountant``): ``dp_epsilon_spent_max`` is the ε at ``delta`` of the client that took part most
often, with no amplification by subsampling (the server knows who joined each round). The paper's moments
accountant would count the same releases; its δ is not stated (1e-5 here, an open point).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence, cast

import torch

from fedrun.backbone.base import PrivateParams, PublicParams
from fedrun.core.seeding import generator
from fedrun.data.client_store import ClientStore
from fedrun.kernels.batching import LocalProblem, local_problem
from fedrun.kernels.config import ServerOptimizerConfig
from fedrun.kernels.local import train_local
from fedrun.method.client import Client, ClientResult, ModelView
from fedrun.method.config import PrivRecConfig
from fedrun.method.federated import FederatedMethod, Needs
from fedrun.method.rating_scale import RatingScale, require_rating_model
from fedrun.method.server import OptimizerServer, Server
from fedrun.privacy.accountant import gaussian_epsilon
from fedrun.types import Aggregate, RoundContext, Uploads

USER_INIT = "user_init"


def clip_clients(uploads: Uploads, bound: float) -> tuple[Uploads, torch.Tensor]:
    """Scale each client's whole update (its rows and dense deltas together) to L2 norm ≤ bound
    → (clipped uploads, each client's norm before clipping [B])."""
    sq = torch.zeros(uploads.n_clients, dtype=uploads.row_delta.dtype, device=uploads.row_delta.device)
    sq.index_add_(0, uploads.row_client, uploads.row_delta.pow(2).sum(1))
    for delta in uploads.dense.values():
        sq += delta.reshape(uploads.n_clients, -1).pow(2).sum(1)
    norm = sq.sqrt()  # [B]
    scale = torch.clamp(bound / norm.clamp_min(1e-30), max=1.0)  # [B]
    dense = {name: delta * scale.view(-1, *([1] * (delta.dim() - 1))) for name, delta in uploads.dense.items()}
    rows = uploads.row_delta * scale[uploads.row_client].unsqueeze(1)
    return Uploads(uploads.n_clients, uploads.row_client, uploads.row_item, rows, dense, uploads.weight), norm


class NoisyMeanServer(OptimizerServer):
    """PrivRec's server program: user-level DP on the exact sum of the clipped updates, then Reptile's
    outer step (SGD at ``server_lr``). ``sigma`` = z·S, the noise std on the sum; ``seed``: the run's,
    whose "dp_noise" stream draws each round's noise."""

    def __init__(self, public: PublicParams, config: ServerOptimizerConfig, sigma: float, seed: int):
        super().__init__(public, config)
        self.sigma, self.seed = sigma, seed

    def step(self, aggregate: Aggregate, ctx: RoundContext) -> dict[str, float]:
        return super().step(self.noisy_mean(aggregate, ctx), ctx)

    def noisy_mean(self, aggregate: Aggregate, ctx: RoundContext) -> Aggregate:
        """The aggregate is Σ of the clipped updates; the server adds N(0, (zS)²) to every coordinate of
        θ and divides by the round's B clients, over the whole of V."""
        item = self.public.item
        total = torch.zeros_like(item)  # [m, d]
        total[aggregate.items] = aggregate.item_delta
        user_total = aggregate.dense[USER_INIT].clone()  # [d]
        if self.sigma > 0:
            gen = generator(self.seed, "dp_noise", ctx.round, item.device)
            total += self.sigma * torch.randn(total.shape, generator=gen, device=item.device, dtype=item.dtype)
            user_total += self.sigma * torch.randn(user_total.shape, generator=gen, device=item.device,
                                                   dtype=item.dtype)
        n = ctx.n_clients
        return Aggregate(torch.arange(item.shape[0], device=item.device), total / n, {USER_INIT: user_total / n})


class PrivRecClient(Client):
    """PrivRec's client program: Reptile's inner loop from the downloaded θ = (V, u₀) on its scaled ratings,
    its whole update clipped to ``clip``; before ranking, every client adapts θ on its own ratings.
    ``scale``: the training ratings' scale (min-max to [0, 1])."""

    def __init__(self, config: PrivRecConfig, env, private: PrivateParams, view: ModelView, scale: RatingScale):
        super().__init__(config, env, private, view)
        self.scale = scale

    def adapt(self, problem: LocalProblem):
        """Reptile's inner loop for a bucket: k steps from θ on the clients' scaled ratings."""
        ratings = self.scale(cast(torch.Tensor, problem.batch.ratings))  # a rating model's batches carry ratings
        problem = replace(problem, batch=replace(problem.batch, ratings=ratings))
        users = problem.batch.users
        start = self.public.net[USER_INIT].expand(users.numel(), -1)  # [B, d]
        return train_local(self.env.backbone, problem, start, self.public.item[problem.items], {},
                           self.config.optimizer, self.config.local_steps)

    def step(self, problem: LocalProblem) -> ClientResult:
        result = self.adapt(problem)
        users = problem.batch.users
        client, slot, items = problem.real_rows()  # [R] each
        user_delta = result.user - self.public.net[USER_INIT]  # [B, d]
        uploads = Uploads(users.numel(), client, items, result.row_delta(client, slot),
                          {USER_INIT: user_delta}, problem.weight)
        clipped, norm = clip_clients(uploads, self.config.clip)
        return ClientResult(clipped, result.user, result.loss, {"update_norm": norm})

    def metrics(self, stats: dict[str, list[torch.Tensor]]) -> dict[str, float]:
        norms = torch.cat(stats["update_norm"])  # [B] the round's clients' update norms before clipping
        return {"update_norm_mean": float(norms.mean()),
                "clipped_fraction": float((norms > self.config.clip).double().mean())}

    @torch.no_grad()
    def prepare_ranking(self) -> None:
        """Every client adapts θ on its own training ratings (Reptile's inner loop) before ranking."""
        env = self.env
        users = env.clients_with_data()
        for _, batch in env.client_batches(users, 1):
            problem = local_problem(batch, None, env.n_items)
            with torch.enable_grad():
                self.private.user[problem.batch.users] = self.adapt(problem).user

    @torch.no_grad()
    def score_users(self, users: torch.Tensor, history: Sequence[ClientStore] = ()) -> torch.Tensor:
        return self.scale.inverse(super().score_users(users, history))

    @torch.no_grad()
    def score_pairs(self, users: torch.Tensor, items: torch.Tensor,
                    history: Sequence[ClientStore] = ()) -> torch.Tensor:
        return self.scale.inverse(super().score_pairs(users, items, history))


class PrivRec(FederatedMethod):
    Config = PrivRecConfig
    unread = {"sim.local_epochs": "its clients take method.local_steps inner steps (Reptile's k)"}

    def __init__(self, config: PrivRecConfig, env):
        require_rating_model(env, "privrec")
        self.scale = RatingScale.of_training(env, "privrec")
        super().__init__(config, env)
        self.ledgers["dp_releases"] = torch.zeros(env.n_users, dtype=torch.int64)

    @classmethod
    def needs(cls, config: PrivRecConfig) -> Needs:
        why = "its server adds the DP noise to the plain sum and its user-level DP (clip, noise) is built in"
        return Needs(exact_sum=why, plain_uploads=why)

    def make_server(self, public: PublicParams, statistics: dict[str, torch.Tensor]) -> Server:
        dim = public.item.shape[1]
        start = torch.randn(dim, generator=generator(self.env.sim.seed, USER_INIT)) * self.env.backbone.config.init_std
        public.net[USER_INIT] = start.to(public.item)  # u₀, meta-learned with V
        return NoisyMeanServer(public, ServerOptimizerConfig("sgd", self.config.server_lr),
                               self.config.noise * self.config.clip, self.env.sim.seed)

    def observe_uploads(self, uploads: Uploads, senders: torch.Tensor, ctx: RoundContext) -> dict[str, float]:
        """User-level DP accounting: each sender's update entered one Gaussian release of the round's sum."""
        releases = self.ledgers["dp_releases"]  # [U] the rounds each client's update entered (in the checkpoint)
        releases[senders.cpu()] += 1
        if self.config.noise == 0:
            return {}  # no DP: nothing to account
        return {"dp_epsilon_spent_max": gaussian_epsilon(int(releases.max()), self.config.noise, self.config.delta),
                "dp_delta": self.config.delta}

    def make_client(self, private: PrivateParams) -> PrivRecClient:
        return PrivRecClient(self.config, self.env, private, self.server, self.scale)

    def describe(self) -> dict:
        return {"dp_noise_std_on_sum": self.config.noise * self.config.clip, "rating_scale": str(self.scale)}
