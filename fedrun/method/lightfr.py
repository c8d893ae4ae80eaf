"""LightFR: federated discrete optimization of binary codes (Zhang, Luo, Wu, He, Li, TOIS 2023,
§3.2–3.3, Eq. 5–17, Alg. 1).

Client u in round t (vectorized over the round's clients; sequential only over the f bits, as
discrete coordinate descent requires):
  1. with D_t fixed, update the private code b_u bit by bit, b_uk ← sign(F(b*_uk, b_uk)) (Eq. 9–10),
     sweeping the f bits until no bit changes (at most ``max_sweeps`` sweeps);
  2. ``aggregation=grad``: upload Δd^u_ik for every rated item and bit (Eq. 12);
     ``aggregation=para``: update a local copy of each rated item's code by the same DCD on Eq. 11
     and upload the copies D^u.
Server: ``grad`` — D ← sign(F(Σ_u ΔD^u − balance term, D)) (Eq. 16); ``para`` — D_i ←
sign(F(Σ_u D^u_i, D_i)) over the clients that uploaded row i (Eq. 17). Uploads are sign data.

Everything is computed in integer "code units": scores s_ui = b_uᵀd_i ∈ [−f, f] and targets
R_ui = f(2r_ui − 1), with r_ui the rating min-max scaled to [0, 1] over the training ratings. Then
R_ui − s_ui = 2f(r_ui − sim(b_u, d_i)), and each update of the paper, multiplied by 2f² (which
leaves its sign unchanged), reads

  b*_uk = Σ_i (R_ui − s_ui) d_ik + α|Ω_u| b_uk − β Σ_{k'≠k} b_uk'      (user bit, Eq. 9)
  Δd^u_ik = (R_ui − s_ui) b_uk + α_d d_ik                               (item gradient, Eq. 12)
  d*_ik = Σ_u Δd^u_ik + γ d_ik − β Σ_{k'≠k} d_ik'                       (server bit, Eq. 14/16)

``rule`` picks the constants (an open point: the paper's equations and its authors' code differ):
  * ``paper`` — Eq. 9, 12, 16 as printed: the bit-k-excluded residual gives α = α_d = 1, the
    balance constraint β = 4f²λ (λ Σ_{k'} over the bits of one code, Eq. 8), γ = 0.
  * ``code`` — the authors' public code (hongleizhang/LightFR): the full residual (α_d = 0) plus a
    "stay" term 2λ|Ω_u|b_uk for users (α = 2λ) and c·d_ik for items, c the round's number of
    clients (γ = 1 per client); no balance term (β = 0). The code's c counts every sampled client,
    raters of i or not (``len`` of a 0/1 column; the user side counts the user's ratings), which
    freezes items with few raters on large datasets: ``item_stay=raters`` instead sends the stay
    term with each rating, 2λ d_ik per rater (α_d = 2λ, γ = 0), mirroring the user side.
With ``rule=paper`` and λ = 0.6 the balance term outweighs the data term (|β| ≥ 4f²λ ≫ |Ω_u|·2f)
and codes stop learning (docs/reproductions/lightfr.md); ``code`` is the default for that reason.

``targets`` picks which ratings train (another open point: §4.1.1 splits "the positive samples" and
never says which ratings are positive):
  * ``code`` (default) — the authors' code stores R as an integer and treats a rating as observed only
    where that integer is positive, so ratings at or below the scale's midpoint never enter a fit (on
    FilmTrust 0.5–2.0 of 0.5–4, on 1–5 scales 1–3). Their code computes R on the split file's
    0.01–1.01 scale, 0.02f above fedrun's min-max R; the set of ratings kept is the same on FilmTrust.
  * ``scaled`` — every training rating enters the fit with its real-valued R.
``stay_count`` is |Ω_u| in the user's stay term 2λ|Ω_u|·b_uk when not every rating trains: ``rated`` (default)
counts all the user's training ratings, as Eq. 9's Ω_u does and as the authors' code does (its count also adds
the 100 validation and test rows of its files, listed negatives included, which fedrun does not copy);
``trained`` counts only the ratings that enter the fit.
Run beside the authors' code on its own FilmTrust files, ``code`` reproduces both the code's and the
paper's HR@10/NDCG@10 and ``scaled`` falls to the code's own level when the code is made to train on
every rating (docs/reproductions/lightfr.md, "The authors' code as an oracle").

Other choices: the server's data term uses the Δd the clients computed with D_t (the paper's
matrix form, Eq. 16); the authors' code instead re-runs DCD sweeps at the server on raw ratings,
which a server holding uploads only cannot do. The server still updates bits in order k = 1..f so
the balance term sees the bits already updated. ``para``'s local item update uses α = 1 (paper) or
2λ (code) for its one rating, and Eq. 17 sums over the row's uploaders only (summing all clients'
unchanged copies would outvote every update). Clients are sampled without replacement
(``sim.clients_per_round`` = p; the authors' code samples with replacement). The server rule is
Eq. 16/17 itself, so ``defense`` takes no part: mean (the default) and sum are accepted, robust
rules are refused.

Cold-start clients (§3.3.3, Eq. 18–19): ``cold_users`` > 0 holds that fraction of the clients out
of every round (drawn once from the training seed); before ranking, each of them fits its code to
its own ratings against the final D by the same DCD without regulariser or balance term — Eq. 19's
bit-excluded residual, i.e. α = 1 per rating and β = 0 in code units — so no existing code is
retrained. Cold-start items (Eq. 20–21): ``cold_items`` > 0 withholds that fraction of the rated
items from every round (their ratings never enter a client step, as for items that arrive after
training); before ranking, the trained clients that rated one upload Δd^u_ik = (R − s) b_uk + d_ik
(Eq. 21's bit-excluded residual: α_d = 1, no balance, no stay term) and the server sets the item's
bits to the sign of their sum, repeated with the new codes until no bit changes (≤ ``max_sweeps``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import torch

from fedrun.audit.base import CodeStep, ServerView
from fedrun.backbone.base import PrivateParams, PublicParams
from fedrun.backbone.binary_mf import BinaryMF
from fedrun.core.seeding import generator
from fedrun.errors import ConfigError, check
from fedrun.kernels.batching import LocalProblem
from fedrun.kernels.rows import sum_by_key
from fedrun.method.client import Client, ClientResult, ModelView
from fedrun.method.config import LightFRConfig
from fedrun.method.federated import FederatedMethod, Needs, Traffic
from fedrun.method.rating_scale import RatingScale
from fedrun.method.server import Server
from fedrun.types import Aggregate, RoundContext, Uploads


@dataclass(frozen=True)
class DCDWeights:
    """The constants of the three bit updates in code units (module docstring)."""

    user_self: float  # α: weight of |Ω_u| b_uk in b*_uk
    item_self: float  # α_d: d_ik added to each Δd^u_ik (grad) / weight of d_ik in a local item update (para)
    balance: float  # β: weight of Σ_{k'≠k} over the other bits of the same code
    server_stay: float  # γ per client of the round: weight c·d_ik in the server's d*_ik

    @staticmethod
    def of(rule: str, lam: float, bits: int, aggregation: str, item_stay: str = "clients") -> "DCDWeights":
        if rule == "paper":
            return DCDWeights(1.0, 1.0, 4.0 * bits * bits * lam, 0.0)
        if aggregation == "para" or item_stay == "raters":  # the stay term travels with each rating
            return DCDWeights(2.0 * lam, 2.0 * lam, 0.0, 0.0)
        return DCDWeights(2.0 * lam, 0.0, 0.0, 1.0)


def sign_keep(value: torch.Tensor, old: torch.Tensor) -> torch.Tensor:
    """sign(F(value, old)) of Eq. 10/15: the sign of ``value``, or ``old`` where value is 0."""
    return torch.where(value > 0, 1.0, torch.where(value < 0, -1.0, old)).to(old.dtype)


def dcd_codes(codes: torch.Tensor, partners: torch.Tensor, target: torch.Tensor, mask: torch.Tensor,
              self_weight: torch.Tensor, balance: float, max_sweeps: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Discrete coordinate descent on N independent codes (Eq. 9–10 / 11–12).

    codes [N, f] ±1, each fitted to its partners' codes [N, P, f] (items for a user, the user for
    an item copy) with targets [N, P] in code units where mask [N, P]; self_weight [N] multiplies
    the code's own bit (α|Ω|). Bit k: c*_k = Σ_p (R − s) e_pk + self_weight c_k − β Σ_{k'≠k} c_k'.
    Sweeps the bits in order until no code changes → (new codes, scores [N, P], sweeps run)."""
    codes = codes.clone()
    maskf = mask.to(codes.dtype)
    score = torch.einsum("nf,npf->np", codes, partners)  # [N, P] s = cᵀe
    total = codes.sum(1)  # [N] Σ_k c_k
    sweeps = 0
    for sweeps in range(1, max_sweeps + 1):  # noqa: B007 - the count of sweeps taken is returned
        changed = False
        for k in range(codes.shape[1]):
            column = partners[:, :, k]  # [N, P]
            bit = codes[:, k]
            star = ((target - score) * maskf * column).sum(1) + self_weight * bit - balance * (total - bit)
            new = sign_keep(star, bit)
            step = new - bit  # [N] in {−2, 0, 2}
            if bool(step.any()):
                score += step.unsqueeze(1) * column
                total += step
                codes[:, k] = new
                changed = True
        if not changed:
            break
    return codes, score, sweeps


def held_out(candidates: torch.Tensor, size: int, fraction: float, seed: int, name: str, what: str) -> torch.Tensor:
    """A seeded draw of round(fraction · |candidates|) of the ids ``candidates`` → mask [size] (all
    False for fraction 0); a fraction leaving none held out or none in training is named."""
    held = torch.zeros(size, dtype=torch.bool, device=candidates.device)
    if fraction == 0:
        return held
    n_held = round(fraction * candidates.numel())
    check(0 < n_held < candidates.numel(), f"method.{name}", fraction,
          f"a fraction leaving at least one cold and one training id among {candidates.numel()} {what}")
    order = torch.randperm(candidates.numel(), generator=generator(seed, name)).to(candidates.device)
    held[candidates[order[:n_held]]] = True
    return held


class LightFRServer(Server):
    """Holds the item codes D and applies Eq. 16 (grad) or Eq. 17 (para) to aggregates."""

    def __init__(self, public: PublicParams, weights: DCDWeights, aggregation: str):
        super().__init__(public)
        self.weights, self.aggregation = weights, aggregation

    def step(self, aggregate: Aggregate, ctx: RoundContext) -> dict[str, float]:
        """The aggregate is Σ over each row's uploaders (Eq. 16's Σ_u ΔD^u, Eq. 17's Σ_u D^u); the
        server takes the sign."""
        codes = self.public.item  # [m, f]
        before = codes.clone()
        if self.aggregation == "para":  # Eq. 17: majority of the uploaded copies, ties keep the bit
            codes[aggregate.items] = sign_keep(aggregate.item_delta, codes[aggregate.items])
        else:  # Eq. 16, bit by bit so the balance term sees the bits already updated
            data = torch.zeros_like(codes)
            data[aggregate.items] = aggregate.item_delta
            w = self.weights
            total = codes.sum(1)  # [m]
            for k in range(codes.shape[1]):
                bit = codes[:, k]
                star = data[:, k] + w.server_stay * ctx.n_clients * bit - w.balance * (total - bit)
                new = sign_keep(star, bit)
                total += new - bit
                codes[:, k] = new
        return {"item_bits_flipped": float((codes != before).double().mean())}


class LightFRClient(Client):
    """LightFR's client program: DCD on its binary user code against the downloaded item codes, the rated
    items' rows it uploads, and the cold-start clients' codes fitted before ranking (Eq. 18–19).
    ``cold`` [U] / ``cold_item`` [I]: the held-out cold-start clients and items (public to the protocol)."""

    def __init__(self, config: LightFRConfig, env, private: PrivateParams, view: ModelView, scale: RatingScale,
                 weights: DCDWeights, cold: torch.Tensor, cold_item: torch.Tensor):
        super().__init__(config, env, private, view)
        self.scale, self.weights, self.cold, self.cold_item = scale, weights, cold, cold_item

    def targets(self, ratings: torch.Tensor) -> torch.Tensor:
        """Ratings → code-unit targets R = f(2r − 1), r min-max scaled to [0, 1]; ``targets=code``
        truncates them to integers, as the authors' code stores them."""
        target = self.env.backbone.config.dim * (2.0 * self.scale(ratings) - 1.0)
        return target.trunc() if self.config.targets == "code" else target

    def trains(self, ratings: torch.Tensor) -> torch.Tensor:
        """Which ratings enter the fit: all (``targets=scaled``), or those with R > 0 (``targets=code``:
        the authors' code marks a rating observed when its integer target is positive, so ratings at or
        below the scale's midpoint are treated as unrated — FilmTrust's 0.5–2.0)."""
        if self.config.targets == "scaled":
            return torch.ones_like(ratings, dtype=torch.bool)
        return self.targets(ratings) > 0

    def step(self, problem: LocalProblem) -> ClientResult:
        """Alg. 1 lines 13–22 for a bucket: E epochs of DCD on the user codes (and, Agg_para, on the local
        item copies); upload Eq. 12's rows (Agg_grad) or the updated copies (Agg_para)."""
        batch, w, config = problem.batch, self.weights, self.config
        ratings = cast(torch.Tensor, batch.ratings)  # [B, P] (a rating model's batches)
        mask = batch.pos_mask & ~self.cold_item[batch.pos] & self.trains(ratings)  # [B, P] (cold items come later)
        target = self.targets(ratings) * mask  # [B, P]
        items = self.public.item[batch.pos]  # [B, P, f] the downloaded D_t rows of the rated items
        user = self.private.user[batch.users]  # [B, f]
        n_rated = mask.sum(1).to(user.dtype)  # [B] the ratings that train
        rated = batch.pos_mask & ~self.cold_item[batch.pos]  # [B, P] every rating, trained or not (targets=code)
        n_stay = n_rated if config.stay_count == "trained" else rated.sum(1).to(user.dtype)  # |Ω_u| of the stay term
        sweeps = []
        for _ in range(self.env.sim.local_epochs):  # E epochs of Alg. 1 (lines 13-22)
            user, score, run = dcd_codes(user, items, target, mask, w.user_self * n_stay, w.balance,
                                         config.max_sweeps)
            sweeps.append(run)
            if config.aggregation == "para":
                items, score = self.local_item_codes(user, items, target, mask)
        residual = (target - score) * mask  # [B, P] R − s
        f = user.shape[1]
        loss = (residual / (2 * f)).pow(2).sum(1) / n_rated.clamp_min(1)  # mean (r − sim)² per client
        client, column = mask.nonzero(as_tuple=True)  # [Rw]
        if config.aggregation == "para":
            rows = items[client, column]  # [Rw, f] the updated copies D^u
        else:  # Eq. 12: Δd^u_ik = (R − s) b_uk + α_d d_ik
            rows = residual[client, column].unsqueeze(1) * user[client] + w.item_self * items[client, column]
        uploads = Uploads(batch.size, client, batch.pos[client, column], rows, {}, problem.weight)
        return ClientResult(uploads, user, loss, {"dcd_sweeps_user": torch.tensor([float(max(sweeps))])})

    def metrics(self, stats: dict[str, list[torch.Tensor]]) -> dict[str, float]:
        return {"dcd_sweeps_user": float(torch.cat(stats["dcd_sweeps_user"]).max())}

    def local_item_codes(self, user: torch.Tensor, items: torch.Tensor, target: torch.Tensor,
                         mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Agg_para's local step (Eq. 11): DCD on each rated item's copy against the one user code →
        (copies [B, P, f], scores [B, P])."""
        B, P, f = items.shape
        partners = user.unsqueeze(1).expand(B, P, f).reshape(B * P, 1, f)
        self_weight = torch.full((B * P,), self.weights.item_self, dtype=user.dtype, device=user.device)
        copies, score, _ = dcd_codes(items.reshape(B * P, f), partners, target.reshape(B * P, 1),
                                     mask.reshape(B * P, 1), self_weight, self.weights.balance,
                                     self.config.max_sweeps)
        return copies.view(B, P, f), score.view(B, P)

    @torch.no_grad()
    def cold_start_codes(self, users: torch.Tensor) -> torch.Tensor:
        """Eq. 18–19 on the clients ``users`` [U]: their codes fitted bit by bit to their training
        ratings against the current D (α = 1 per rating, no balance term) → [U, f]."""
        batch = self.env.train.client_batch(users)
        ratings = cast(torch.Tensor, batch.ratings)  # [U, P]
        mask = batch.pos_mask & self.trains(ratings)
        n_rated = mask.sum(1).to(self.public.item.dtype)
        target = self.targets(ratings) * mask  # [U, P]
        codes, _, _ = dcd_codes(self.private.user[users], self.public.item[batch.pos], target, mask, n_rated, 0.0,
                                self.config.max_sweeps)
        return codes

    def prepare_ranking(self) -> None:
        """Before ranking, the cold-start clients fit their codes to the current D (Eq. 19)."""
        if bool(self.cold.any()):
            users = torch.nonzero(self.cold).squeeze(1)
            self.private.user[users] = self.cold_start_codes(users)


class LightFR(FederatedMethod):
    Config = LightFRConfig
    binary_backbones = True
    client: LightFRClient

    def __init__(self, config: LightFRConfig, env):
        if not isinstance(env.backbone, BinaryMF):
            raise ConfigError("backbone", type(env.backbone).__name__, "backbone=binary-mf for method=lightfr")
        self.scale = RatingScale.of_training(env, "lightfr (Eq. 5 fits ratings)")
        self.weights = DCDWeights.of(config.rule, config.balance, env.backbone.config.dim, config.aggregation,
                                     config.item_stay)
        clients = env.clients_with_data()
        rated = torch.nonzero(torch.bincount(env.train.items, minlength=env.n_items) > 0).squeeze(1)
        self.cold = held_out(clients, env.n_users, config.cold_users, env.sim.seed, "cold_users", "clients")
        self.cold_item = held_out(rated, env.n_items, config.cold_items, env.sim.seed, "cold_items", "rated items")
        super().__init__(config, env)

    @classmethod
    def needs(cls, config: LightFRConfig) -> Needs:
        return Needs(exact_sum="its uploads are signs and its server rule is Eq. 16/17 (a sum and a sign)",
                     plain_uploads="its uploads are signs and its server rule is Eq. 16/17 (a sum and a sign)")

    def round_clients(self) -> torch.Tensor:
        """The clients with data that are not cold-start clients (those never train)."""
        clients = self.env.clients_with_data()
        return clients[~self.cold[clients]]

    def make_server(self, public: PublicParams, statistics: dict[str, torch.Tensor]) -> Server:
        return LightFRServer(public, self.weights, self.config.aggregation)

    def server_view(self, ctx: RoundContext) -> ServerView:
        """Agg_grad's uploads are Eq. 12's rows (α_d and the rating range are public); Agg_para's are code copies."""
        if self.config.aggregation != "grad":
            return ServerView(self.public)
        return ServerView(self.public, code_step=CodeStep(self.weights.item_self, self.scale.low, self.scale.high))

    def make_client(self, private: PrivateParams) -> LightFRClient:
        return LightFRClient(self.config, self.env, private, self.server, self.scale, self.weights, self.cold,
                             self.cold_item)

    def describe(self) -> dict:
        w = self.weights
        return {"dcd_weights": f"alpha={w.user_self:g} alpha_d={w.item_self:g} beta={w.balance:g} "
                               f"gamma={w.server_stay:g}",
                "rating_scale": str(self.scale)}

    # -- before ranking: the cold-start items' codes (server and raters), then the clients' ---------------
    @torch.no_grad()
    def cold_item_codes(self) -> torch.Tensor:
        """Eq. 20–21 for the cold-start items: their trained raters upload Δd^u_i = (R − s) b_u + d_i
        with the current d_i, the server takes the sign of the sum; repeated until no bit changes →
        the items' codes [C, f] (rows of ``torch.nonzero(self.cold_item)``)."""
        env = self.env
        users = torch.nonzero(~self.cold & (env.train.sizes() > 0)).squeeze(1)
        owner, _, items, ratings = env.train.flat(users)
        ratings = cast(torch.Tensor, ratings)  # LightFR fits ratings (RatingScale.of_training refused others)
        keep = self.cold_item[items] & self.client.trains(ratings)
        raters, items, target = users[owner[keep]], items[keep], self.client.targets(ratings[keep])  # rows [R]
        codes = self.public.item.clone()
        for _ in range(self.config.max_sweeps):
            user = self.client.private.user[raters]  # [R, f] each rater's own code (client side)
            residual = target - (user * codes[items]).sum(1)  # R − s [R]
            uploads = residual.unsqueeze(1) * user + codes[items]  # Eq. 21's Δd^u_i [R, f]
            ids, total, _ = sum_by_key(items, uploads, torch.ones_like(residual))
            new = sign_keep(total, codes[ids])  # the server's step
            changed = bool((new != codes[ids]).any())
            codes[ids] = new
            if not changed:
                break
        return codes[self.cold_item]

    def prepare_ranking(self) -> None:
        """Before ranking: cold-start items get codes from the trained clients' uploads (Eq. 21),
        then cold-start clients fit theirs to D (Eq. 19, the client program)."""
        if bool(self.cold_item.any()):
            self.public.item[self.cold_item] = self.cold_item_codes()
        super().prepare_ranking()

    # -- accounting ------------------------------------------------------------------------
    def traffic(self, rows: torch.Tensor, uploads: Uploads | None) -> Traffic:
        if uploads is None:
            raise RuntimeError("LightFR has no fast path: its round always builds the sign rows it uploads")
        sent = torch.bincount(uploads.row_client, minlength=uploads.n_clients).double()
        return Traffic(float(sent.mean()) * self.upload_row_bytes(), self.download_bytes(rows))

    def upload_row_bytes(self) -> int:
        """One uploaded row as sent: int32 item id + packed signs (+ a float32 residual for grad, whose
        row is e_ui·b_u + α_d d_i: one scalar and the f signs of b_u, D_i being known to the server)."""
        code = cast(BinaryMF, self.env.backbone).code_bytes()
        return 4 + code + (4 if self.config.aggregation == "grad" else 0)

    def download_bytes(self, rows: torch.Tensor) -> float:
        """A client downloads the whole packed item matrix D (it ranks the catalogue on device)."""
        return float(self.env.n_items * cast(BinaryMF, self.env.backbone).code_bytes())
