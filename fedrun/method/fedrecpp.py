"""FedRec++: lossless federated recommendation with explicit feedback (Liang, Pan, Ming, AAAI 2021).

FedRec (``method=fedrec``) hides a client's rated items I_u among ρ|I_u| sampled unrated items
with virtual ratings, at the price of gradient noise. FedRec++ removes that noise exactly:

  - η denoising clients Ũ are drawn once, at random (Alg. 1 line 1);
  - an ordinary client uploads ∇V(u,i), i ∈ I_u ∪ I'_u, to the server as in FedRec (Eq. 4) and
    sends its noise ∇V^N(u,i) = ∇V(u,i), i ∈ I'_u (Eq. 8), to one random denoiser over an
    anonymous channel (``fedrun.sim.channel``: the denoiser learns no sender);
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

import torch

from fedrun.defense.mean import Mean
from fedrun.errors import ConfigError, check
from fedrun.method.fedrec import FedRec, FedRecConfig, RatingProblem
from fedrun.sim import hashrng
from fedrun.sim.channel import AnonymousChannel
from fedrun.sim.guards import check_finite
from fedrun.sim.rows import sum_by_key
from fedrun.sim.seeding import derive_seed, generator
from fedrun.types import Aggregate, ClientBatch, DenoiserUploads, RelayedRows, RoundContext, Uploads


@dataclass
class FedRecPPConfig(FedRecConfig):
    denoisers: str = "1"  # η: a number of clients, or a share of them written n/k (n/4, n/2)


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


def denoised_mean(uploads: Uploads, relayed: DenoiserUploads) -> Aggregate:
    """Server side, Eq. 4–6: Σ of the ordinary uploads minus the denoisers' Σ, divided per item by
    |U_i| = (rows uploaded for i) − Σ_ũ count; items with |U_i| = 0 get no update."""
    item = torch.cat([uploads.row_item, relayed.item])
    delta = torch.cat([uploads.row_delta, -relayed.delta])
    count = torch.cat([torch.ones_like(uploads.row_item, dtype=delta.dtype), -relayed.count.to(delta.dtype)])
    items, total, raters = sum_by_key(item, delta, count)  # [G], [G, di], |U_i| [G]
    kept = raters > 0.5  # |U_i| is a whole number; 0 where only noise touched i
    return Aggregate(items[kept], total[kept] / raters[kept].unsqueeze(1))


class FedRecPP(FedRec):
    Config = FedRecPPConfig

    def __init__(self, config: FedRecPPConfig, env, **components):
        super().__init__(config, env, **components)
        if self.privacy.transforms_uploads:
            raise ConfigError("privacy", type(self.privacy).__name__,
                              "privacy=none for method=fedrecpp: the denoising arithmetic is exact only on "
                              "unperturbed gradients")
        if not (isinstance(self.defense, Mean) and self.defense.config.weighting == "uniform"):
            raise ConfigError("defense", type(self.defense).__name__,
                              "defense=mean (weighting uniform) for method=fedrecpp: Eq. 6 divides by |U_i|")
        clients = env.clients_with_data()
        self.n_denoisers = denoiser_count(config.denoisers, clients.numel())
        order = torch.randperm(clients.numel(), generator=generator(env.sim.seed, "denoisers")).to(clients.device)
        self.role = torch.full((env.n_users,), -1, dtype=torch.int64, device=env.device)  # denoiser index or −1
        self.role[clients[order[: self.n_denoisers]]] = torch.arange(self.n_denoisers, device=env.device)
        self.channel = AnonymousChannel()
        self.held: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []  # denoisers' own rows
        self.sent_rows: list[torch.Tensor] = []  # [B] per bucket: each ordinary client's rows (server + channel)

    def describe(self) -> dict:
        return {**super().describe(), "n_denoisers": self.n_denoisers}

    # -- client side -----------------------------------------------------------------------
    def unrated_counts(self, batch: ClientBatch) -> torch.Tensor:
        counts = super().unrated_counts(batch)
        return torch.where(self.role[batch.users] >= 0, torch.zeros_like(counts), counts)  # denoisers sample none

    def client_step(self, problem: RatingProblem) -> tuple[Uploads, torch.Tensor, torch.Tensor]:
        uploads, new_user, loss, sampled = self.rating_step(problem)
        if self.n_denoisers == 0:
            return uploads, new_user, loss
        users = problem.batch.users
        role = self.role[users][uploads.row_client]  # [R]
        own = role >= 0  # rows of denoisers: held until they have collected the noise
        self.held.append((role[own], uploads.row_item[own], uploads.row_delta[own]))
        noise = sampled & ~own
        route = hashrng.randint(derive_seed(self.env.sim.seed, "denoiser-route", problem.round), [users],
                                self.n_denoisers)  # [B] each client's denoiser this iteration
        self.channel.send(route[uploads.row_client[noise]], uploads.row_item[noise], uploads.row_delta[noise])
        ordinary = ~own
        rows = torch.bincount(uploads.row_client[ordinary], minlength=uploads.n_clients)
        relayed = torch.bincount(uploads.row_client[noise], minlength=uploads.n_clients)
        self.sent_rows.append((rows + relayed)[self.role[users] < 0])
        return (Uploads(uploads.n_clients, uploads.row_client[ordinary], uploads.row_item[ordinary],
                        uploads.row_delta[ordinary], {}, uploads.weight), new_user, loss)

    def collect(self, rows: RelayedRows) -> DenoiserUploads:
        """The denoisers' COLLECTING step (Alg. 2 lines 16–19), vectorized over denoisers: from the
        rows the channel delivered, per (denoiser, item) Σ received noise − own row (Eq. 9) and
        |U'_i^ũ| − own rating."""
        held = [torch.cat(parts) for parts in zip(*self.held)] if self.held else [rows.denoiser[:0], rows.item[:0],
                                                                                 rows.delta[:0]]
        self.held = []
        n_items = self.env.n_items
        key = torch.cat([rows.denoiser * n_items + rows.item, held[0] * n_items + held[1]])
        delta = torch.cat([rows.delta, -held[2]])
        count = torch.cat([torch.ones_like(rows.item), -torch.ones_like(held[1])]).to(delta.dtype)
        keys, summed, counts = sum_by_key(key, delta, count)
        return DenoiserUploads(keys // n_items, keys % n_items, summed, counts)

    def ordinary(self, users: torch.Tensor) -> torch.Tensor:
        return self.role[users] < 0  # denoisers upload only Eq. 9 sums, after collecting

    # -- server side -----------------------------------------------------------------------
    def aggregate(self, uploads: Uploads, users: torch.Tensor, ctx: RoundContext) -> Aggregate:
        if self.n_denoisers == 0:
            return super().aggregate(uploads, users, ctx)
        self.audit_uploads(uploads, users)
        width = self.public.item.shape[1]
        rows = self.channel.deliver(generator(self.env.sim.seed, "channel", ctx.round), width, self.env.device)
        relayed = self.collect(rows)  # client side (denoisers) → their uploads
        check_finite(relayed.delta, "the denoising clients (FedRecPP)", ctx.round)
        self.log_communication(rows, relayed)
        return denoised_mean(uploads, relayed)

    def log_communication(self, rows: RelayedRows, relayed: DenoiserUploads) -> None:
        """Per iteration, in latent vectors (the paper's unit) and bytes: a row is a vector plus an
        int32 item id; a denoiser's uploaded row also carries its float32 count."""
        ordinary = torch.cat(self.sent_rows).double()  # [B_ordinary] rows to the server + to the channel
        self.sent_rows = []
        received = torch.bincount(rows.denoiser, minlength=self.n_denoisers).double()  # [η]
        uploaded = torch.bincount(relayed.denoiser, minlength=self.n_denoisers).double()  # [η]
        row_bytes = self.public.item.shape[1] * self.public.item.element_size() + 4
        denoiser = received + uploaded
        denoiser_bytes = denoiser * row_bytes + uploaded * 4
        clients = ordinary.numel() + self.n_denoisers
        self.round_metrics.update(
            comm_vectors_ordinary=float(ordinary.mean()) if ordinary.numel() else 0.0,
            comm_vectors_denoiser=float(denoiser.mean()),
            comm_vectors_client=float(ordinary.sum() + denoiser.sum()) / clients,
            comm_bytes_ordinary=float(ordinary.mean()) * row_bytes if ordinary.numel() else 0.0,
            comm_bytes_denoiser=float(denoiser_bytes.mean()),
            comm_bytes_client=float(ordinary.sum() * row_bytes + denoiser_bytes.sum()) / clients,
        )
