"""FedRec++: lossless federated recommendation with explicit feedback (Liang, Pan, Ming, AAAI 2021).

FedRec (``method=fedrec``) hides a client's rated items I_u among ρ|I_u| sampled unrated items
with virtual ratings, at the price of gradient noise. FedRec++ removes that noise exactly:

  - η denoising clients Ũ are drawn once, at random (Alg. 1 line 1);
  - an ordinary client uploads ∇V(u,i), i ∈ I_u ∪ I'_u, to the server as in FedRec (Eq. 4) and
    sends its noise ∇V^N(u,i) = ∇V(u,i), i ∈ I'_u (Eq. 8), to one random denoiser over an
    anonymous channel (``fedrun.method._channel``: the denoiser learns no sender);
  - a denoiser samples nothing, holds its own ∇V(ũ,i), i ∈ I_ũ, and after collecting uploads
    ∇V^S(ũ,i) = Σ_{u→ũ} ∇V^N(u,i) − ∇V(ũ,i) with the counts |U'_i^ũ| (Eq. 9, Alg. 2 l. 16–19);
  - the server subtracts: ∇V_i ← Σ_ord ∇V(u,i) − Σ_ũ ∇V^S(ũ,i) (Eq. 5), divides by
    |U_i| = |U_i ∪ U'_i| − Σ_ũ |U'_i^ũ| and steps V_i ← V_i − γ ∇V_i / |U_i| (Eq. 6).
The result is FedRec with ρ = 0 — the same model up to floating-point summation order (a test
asserts it on ml-100k) — whatever ρ is.

Open points and choices:
  - the denoiser's count also subtracts 1 for each item it rated itself (as its gradient in
    Eq. 9 does): otherwise |U_i| would omit the denoisers' own ratings while ∇V_i includes them,
    and the model would not equal FedRec with ρ = 0;
  - an ordinary client picks its denoiser uniformly at random every iteration ("we randomly
    assign ordinary clients to denoising clients");
  - with c < n clients per iteration, every denoiser collects in every iteration and trains
    only in iterations it is sampled for;
  - η ≤ n/2 (RQ3: with more denoisers than ordinary clients, denoisers' rated items are exposed).
Items no ordinary or denoising client rated this iteration (|U_i| = 0) are not updated.
Communication per iteration (Table 3) is logged in the paper's unit, one latent vector, and in
bytes: an ordinary client sends |I_u ∪ I'_u| rows to the server and |I'_u| to its denoiser; a
denoiser receives the noise routed to it and uploads one row per (item) it holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import torch

from fedrun.audit.base import ServerView
from fedrun.backbone.base import PrivateParams, PublicParams
from fedrun.core import hashrng
from fedrun.core.seeding import derive_seed, generator
from fedrun.errors import ConfigError, check
from fedrun.kernels.batching import LocalProblem
from fedrun.kernels.config import ServerOptimizerConfig
from fedrun.kernels.guards import check_finite
from fedrun.kernels.rows import sum_by_key
from fedrun.method._channel import AnonymousChannel
from fedrun.method._rating import UNREAD, RatingClient, RatingProblem, communication
from fedrun.method.client import ClientResult, ModelView
from fedrun.method.config import FedRecPPConfig
from fedrun.method.federated import FederatedMethod, Needs
from fedrun.method.rating_scale import require_rating_model
from fedrun.method.server import OptimizerServer, Server
from fedrun.types import Aggregate, DenoiserUploads, RelayedRows, RoundContext, Uploads


def denoiser_count(spec: str | int, n_clients: int) -> int:
    """η from ``1`` / ``"n/4"`` → a number of clients in [0, n/2]."""
    text = str(spec).replace(" ", "")
    try:
        eta = n_clients // int(text[2:]) if text.startswith("n/") else int(text)
    except (ValueError, ZeroDivisionError):
        raise ConfigError("method.denoisers", spec, "an integer or n/k (e.g. 1, n/4, n/2)") from None
    check(0 <= eta <= n_clients // 2, "method.denoisers", spec,
          f"between 0 and n/2 = {n_clients // 2} clients (more denoisers than ordinary clients would expose "
          "the denoisers' rated items, FedRec++ RQ3)")
    return eta


@dataclass(frozen=True)
class RelayPart:
    """What one bucket hands the relay phase, on the client side: the denoisers' own rows (held until
    they have collected), the noise rows the ordinary clients post to the channel, and the rows each
    ordinary client sends (to the server and the channel), for the communication count."""

    held: tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # denoiser index [H], item [H], row [H, di]
    posted: tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # receiving denoiser [N], item [N], row [N, di]
    sent_rows: torch.Tensor  # [B_ordinary]


def denoised_mean(aggregate: Aggregate) -> Aggregate:
    """Server side, Eq. 4–6, on the exact sum of the ordinary rows and the denoisers' negated sums:
    divide per item by |U_i| = (rows uploaded for i) − Σ_ũ count; items with |U_i| = 0 get no update."""
    raters = aggregate.count  # |U_i| [G]
    assert raters is not None, "FedRec++'s server needs the exact sum's counts (Needs.exact_sum)"
    kept = raters > 0.5  # |U_i| is a whole number; 0 where only noise touched i
    return Aggregate(aggregate.items[kept], aggregate.item_delta[kept] / raters[kept].unsqueeze(1))


class DenoisingServer(OptimizerServer):
    """FedRec++'s server program: the denoised mean (Eq. 4–6) applied with plain SGD at lr 1 (the
    deltas already carry −γ_t)."""

    def step(self, aggregate: Aggregate, ctx: RoundContext) -> dict[str, float]:
        return super().step(denoised_mean(aggregate), ctx)


class FedRecPPClient(RatingClient):
    """FedRec++'s client program: FedRec's step, the denoisers (``role`` [U]: a denoiser's index or −1, the
    protocol's public assignment) sampling nothing, and the relay phase after the steps."""

    def __init__(self, config: FedRecPPConfig, env, private: PrivateParams, view: ModelView, role: torch.Tensor,
                 n_denoisers: int):
        super().__init__(config, env, private, view, abstains=role >= 0)  # denoisers sample none
        self.role, self.n_denoisers = role, n_denoisers

    def step(self, problem: LocalProblem) -> ClientResult:
        """FedRec's step; then the rows the denoisers hold back and the noise rows the ordinary clients route
        to their denoisers this iteration (``RelayPart``), kept out of what goes to the server."""
        result, sampled = self.rating.step(problem, self.private.user, self.public.item)
        if self.n_denoisers == 0:
            return result
        uploads, new_user, loss = result.uploads, result.user, result.loss
        users = problem.batch.users
        role = self.role[users][uploads.row_client]  # [R]
        own = role >= 0  # rows of denoisers: held until they have collected the noise
        noise = sampled & ~own
        seed = derive_seed(self.env.sim.seed, "denoiser-route", cast(RatingProblem, problem).round)
        route = hashrng.randint(seed, [users], self.n_denoisers)  # [B] each client's denoiser this iteration
        ordinary = ~own
        rows = torch.bincount(uploads.row_client[ordinary], minlength=uploads.n_clients)
        relayed = torch.bincount(uploads.row_client[noise], minlength=uploads.n_clients)
        relay = RelayPart((role[own], uploads.row_item[own], uploads.row_delta[own]),
                          (route[uploads.row_client[noise]], uploads.row_item[noise], uploads.row_delta[noise]),
                          (rows + relayed)[self.role[users] < 0])
        to_server = Uploads(uploads.n_clients, uploads.row_client[ordinary], uploads.row_item[ordinary],
                            uploads.row_delta[ordinary], {}, uploads.weight)
        return ClientResult(to_server, new_user, loss, relay=relay)

    def protocol(self, uploads: Uploads, results: list[ClientResult],
                 ctx: RoundContext) -> tuple[Uploads, dict[str, float]]:
        """The relay (Alg. 2 lines 11–19), on the client side: the ordinary clients' noise goes through
        the anonymous channel to the denoisers, which collect it and upload Eq. 9's sums — appended to
        the round's uploads as η further clients, negated, with their counts negated."""
        if self.n_denoisers == 0:
            return uploads, {}
        channel = AnonymousChannel()
        for result in results:
            channel.send(*result.relay.posted)
        width = self.public.item.shape[1]
        rows = channel.deliver(generator(self.env.sim.seed, "channel", ctx.round), width, self.env.device)
        relayed = self.collect(rows, [r.relay.held for r in results])
        check_finite(relayed.delta, "the denoising clients (FedRecPP)", ctx.round)
        metrics = self.relay_communication(rows, relayed, torch.cat([r.relay.sent_rows for r in results]))
        denoisers = Uploads(self.n_denoisers, relayed.denoiser, relayed.item, -relayed.delta, {},
                            torch.ones(self.n_denoisers, dtype=relayed.delta.dtype, device=relayed.delta.device),
                            -relayed.count.to(relayed.delta.dtype))
        return Uploads.concat([uploads, denoisers]), metrics

    def collect(self, rows: RelayedRows, held: list[tuple[torch.Tensor, ...]]) -> DenoiserUploads:
        """The denoisers' COLLECTING step (Alg. 2 lines 16–19), vectorized over denoisers: from the
        rows the channel delivered, per (denoiser, item) Σ received noise − own row (Eq. 9) and
        |U'_i^ũ| − own rating; ``held``: the denoisers' own rows, per bucket."""
        own = [torch.cat(parts) for parts in zip(*held)] if held else [rows.denoiser[:0], rows.item[:0],
                                                                       rows.delta[:0]]
        n_items = self.env.n_items
        key = torch.cat([rows.denoiser * n_items + rows.item, own[0] * n_items + own[1]])
        delta = torch.cat([rows.delta, -own[2]])
        count = torch.cat([torch.ones_like(rows.item), -torch.ones_like(own[1])]).to(delta.dtype)
        keys, summed, counts = sum_by_key(key, delta, count)
        return DenoiserUploads(keys // n_items, keys % n_items, summed, counts)

    def relay_communication(self, rows: RelayedRows, relayed: DenoiserUploads,
                            ordinary: torch.Tensor) -> dict[str, float]:
        """Per iteration, in latent vectors (the paper's unit) and bytes: a row is a vector plus an
        int32 item id; a denoiser's uploaded row also carries its float32 count. ``ordinary`` [B_ord]:
        the rows each ordinary client sent to the server and to the channel."""
        ordinary = ordinary.double()
        received = torch.bincount(rows.denoiser, minlength=self.n_denoisers).double()  # [η]
        uploaded = torch.bincount(relayed.denoiser, minlength=self.n_denoisers).double()  # [η]
        row_bytes = self.public.item.shape[1] * self.public.item.element_size() + 4
        denoiser = received + uploaded
        denoiser_bytes = denoiser * row_bytes + uploaded * 4
        clients = ordinary.numel() + self.n_denoisers
        return dict(
            comm_vectors_ordinary=float(ordinary.mean()) if ordinary.numel() else 0.0,
            comm_vectors_denoiser=float(denoiser.mean()),
            comm_vectors_client=float(ordinary.sum() + denoiser.sum()) / clients,
            comm_bytes_ordinary=float(ordinary.mean()) * row_bytes if ordinary.numel() else 0.0,
            comm_bytes_denoiser=float(denoiser_bytes.mean()),
            comm_bytes_client=float(ordinary.sum() * row_bytes + denoiser_bytes.sum()) / clients,
        )


class FedRecPP(FederatedMethod):
    Config = FedRecPPConfig
    unread = UNREAD

    def __init__(self, config: FedRecPPConfig, env):
        require_rating_model(env, "fedrecpp")
        clients = env.clients_with_data()
        self.n_denoisers = denoiser_count(config.denoisers, clients.numel())
        order = torch.randperm(clients.numel(), generator=generator(env.sim.seed, "denoisers")).to(clients.device)
        self.role = torch.full((env.n_users,), -1, dtype=torch.int64, device=env.device)  # denoiser index or −1
        self.role[clients[order[: self.n_denoisers]]] = torch.arange(self.n_denoisers, device=env.device)
        super().__init__(config, env)

    @classmethod
    def needs(cls, config: FedRecPPConfig) -> Needs:
        return Needs(exact_sum="its server subtracts the denoisers' sums and divides by |U_i| (Eq. 5-6)",
                     plain_uploads="the denoising arithmetic is exact only on unperturbed gradients")

    def make_server(self, public: PublicParams, statistics: dict[str, torch.Tensor]) -> Server:
        return DenoisingServer(public, ServerOptimizerConfig("sgd", 1.0))

    def make_client(self, private: PrivateParams) -> FedRecPPClient:
        return FedRecPPClient(self.config, self.env, private, self.server, self.role, self.n_denoisers)

    def describe(self) -> dict:
        return {"lr_schedule": f"{self.config.lr}*{self.config.lr_decay}^round", "n_denoisers": self.n_denoisers}

    # -- server side -----------------------------------------------------------------------------
    def server_view(self, ctx: RoundContext) -> ServerView:
        """An ordinary client's uploads are FedRec's explicit-MF gradients at γ_t (Eq. 4), its sampled items' virtual
        ratings included: the denoising removes their noise from the sum, not from what each client sends. The
        denoisers' Eq. 9 sums are no client's gradient (the audit is handed the clients' own uploads)."""
        return ServerView(self.public, mf_step=cast(FedRecPPClient, self.client).rating.mf_step(ctx.round))

    def observe_uploads(self, uploads: Uploads, senders: torch.Tensor, ctx: RoundContext) -> dict[str, float]:
        """The traffic, unless the relay counts it."""
        return communication(uploads) if self.n_denoisers == 0 else {}
