"""The contrastive family of federated recommenders (Yuan et al., "Robust federated contrastive recommender
system against model poisoning attack" — ``papers/rcl4fedrec.txt`` §4.1, Algorithm 1), a module its options
compose: CL4FedRec (``method=cl4fedrec``), rCL4FedRec (its server's popularity regularizer, Eq. 14), and the
baselines SimGCL and UNION (§5.3), which are the same client step with other views (``user_cl`` /
``item_cl``). Each option subclasses ``ContrastiveMethod`` with its own config; none subclasses another. The
client program (``ContrastiveClient``) and the server program (``ContrastiveServer``) are the family's.
The equations and the choices where the paper is open are written down in the options' modules,
where ``fedrun info method=<option>`` shows them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar, cast

import torch
import torch.nn.functional as F

from fedrun.backbone.base import Backbone, PublicParams
from fedrun.backbone.losses import per_client_loss
from fedrun.core import hashrng
from fedrun.core.seeding import derive_seed, generator
from fedrun.errors import check
from fedrun.kernels.batching import LocalProblem
from fedrun.kernels.config import ClientOptimizer
from fedrun.kernels.local import problem_loss, slot_rows
from fedrun.method.client import Client
from fedrun.method.config import ContrastiveConfig
from fedrun.method.federated import ClientResult, Exchange, FederatedMethod, Needs
from fedrun.method.server import OptimizerServer
from fedrun.privacy.base import Privacy
from fedrun.types import Aggregate, RoundContext


@dataclass(frozen=True)
class ContrastiveProblem(LocalProblem):
    """A bucket's local problem with what the round's download brought: the synthetic users."""

    round: int = 0
    negative_users: torch.Tensor | None = None  # [S, du] the synthetic users' embeddings (public)
    item_offsets: tuple[torch.Tensor, torch.Tensor] | None = None  # the two item views' offsets [B, Lu, di]


# -- the loss terms (each per client, [B]) ------------------------------------------------------

def uniform_views(user: torch.Tensor, keys: torch.Tensor, seed: int, eta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Eq. 6: two noise vectors per row of ``user`` [B, d], each U(0, 1)^d ⊙ sign(u) scaled to norm η.
    ``keys`` [B] (a user id per row) make the draw a function of (seed, key) only."""
    B, d = user.shape
    coord = torch.arange(d, device=user.device)
    noise = []
    for view in (0, 1):
        bits = hashrng.randint(seed, [keys.unsqueeze(1), coord.unsqueeze(0), torch.tensor(view, device=user.device)],
                               1 << 24)  # [B, d]
        eps = (bits.to(user.dtype) + 0.5) / (1 << 24) * torch.sign(user.detach())
        noise.append(eta * F.normalize(eps, dim=-1))
    return noise[0], noise[1]


def info_nce(anchor: torch.Tensor, positive: torch.Tensor, negatives: torch.Tensor, tau: float) -> torch.Tensor:
    """−log e^{cos(a, p)/τ} / (e^{cos(a, p)/τ} + Σ_n e^{neg_n/τ}); anchor, positive [B, d], negatives [B, S]
    (cosines already) → [B]."""
    pos = F.cosine_similarity(anchor, positive, dim=-1) / tau  # [B]
    logits = torch.cat([pos.unsqueeze(1), negatives / tau], 1)
    return torch.logsumexp(logits, 1) - pos


def user_contrastive(user: torch.Tensor, noise: tuple[torch.Tensor, torch.Tensor], synthetic: torch.Tensor,
                     tau: float) -> torch.Tensor:
    """Eq. 7 per client [B]: views u + ε', u + ε'' against the synthetic users s_j [S, d] (frozen)."""
    negatives = F.normalize(user, dim=-1) @ F.normalize(synthetic, dim=-1).T  # [B, S]
    return info_nce(user + noise[0], user + noise[1], negatives, tau)


def item_contrastive(view1: torch.Tensor, view2: torch.Tensor, mask: torch.Tensor, tau: float,
                     reduction: str) -> torch.Tensor:
    """Eq. 10 per client [B]: view1, view2 [B, P, d] of its items, mask [B, P]; item k's positive is its
    other view, its negatives the other items' second views."""
    sim = F.normalize(view1, dim=-1) @ F.normalize(view2, dim=-1).transpose(1, 2) / tau  # [B, P, P]
    sim = sim.masked_fill(~mask.unsqueeze(1), float("-inf"))
    per_item = torch.logsumexp(sim, -1) - torch.diagonal(sim, dim1=1, dim2=2)  # [B, P]
    return reduce_items(torch.where(mask, per_item, torch.zeros_like(per_item)), mask, reduction)


def uniformity_penalty(items: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Eq. 12 per client [B]: (1/d)·‖corr(standardised V)‖_F over its local rows items [B, L, d] (mask [B, L])."""
    weight = mask.unsqueeze(-1).to(items.dtype)
    count = weight.sum(1, keepdim=True).clamp_min(2)
    centred = (items - (items * weight).sum(1, keepdim=True) / count) * weight
    std = (centred.pow(2).sum(1, keepdim=True) / (count - 1)).sqrt().clamp_min(1e-8)
    z = centred / std
    corr = z.transpose(1, 2) @ z / (count.squeeze(1).unsqueeze(-1) - 1)  # [B, d, d]
    return torch.linalg.matrix_norm(corr) / items.shape[-1]


def reduce_items(per_item: torch.Tensor, mask: torch.Tensor, reduction: str) -> torch.Tensor:
    total = (per_item * mask).sum(1)
    return total if reduction == "sum" else total / mask.sum(1).clamp_min(1)


def optimizer_first_step(grad: torch.Tensor, optimizer: ClientOptimizer) -> torch.Tensor:
    """The update a fresh client optimizer makes from ``grad`` (Adam: bias-corrected lr·g/(|g| + 1e-8))."""
    if optimizer.name == "adam":
        return -optimizer.lr * grad / (grad.abs() + 1e-8)
    return -optimizer.lr * grad


# -- the server's synthetic users ----------------------------------------------------------------

def draw_synthetic_items(popularity: torch.Tensor, n_users: int, n_items: int, sampling: str,
                         gen: torch.Generator) -> torch.Tensor:
    """Eq. 4: [S, N] item sets, N distinct items each, drawn ∝ ``popularity`` [I] (or uniformly)."""
    weights = popularity.to(torch.float64).clamp_min(0)
    if sampling == "uniform":
        weights = torch.ones_like(weights)
    weights = weights.expand(n_users, -1)
    return torch.multinomial(weights, n_items, replacement=False, generator=gen)


class ContrastiveServer(OptimizerServer):
    """CL4FedRec's server program: the public model, its optimizer and the synthetic users (Eq. 4–5,
    Alg. 1 l. 12), built from the public model, the backbone's architecture, the item popularity
    ``popularity`` [I] (the one statistic of the data it reads, handed over as a value) and the run's seed.
    After each epoch's last round it reports the item table's uniformity and refits the synthetic users."""

    def __init__(self, public: PublicParams, config: ContrastiveConfig, backbone: Backbone, popularity: torch.Tensor,
                 seed: int):
        super().__init__(public, config.server_optimizer)
        self.config, self.backbone, self.popularity, self.seed = config, backbone, popularity, seed
        device = public.item.device
        gen = generator(seed, "synthetic-users")
        self.synthetic_items = draw_synthetic_items(popularity, config.synthetic_users, config.synthetic_items,
                                                    config.synthetic_sampling, gen).to(device)  # [S, N]
        std = backbone.config.init_std
        self.synthetic = (torch.randn(config.synthetic_users, backbone.user_width, generator=gen) * std
                          ).to(device, public.item.dtype)  # [S, du]
        self.synthetic_fits = 0
        if config.user_cl == "synthetic":
            self.fit_synthetic_users()

    def step(self, aggregate: Aggregate, ctx: RoundContext) -> dict[str, float]:
        """Apply the aggregate; after the epoch's last round refit the synthetic users (Alg. 1 l. 12)."""
        metrics = super().step(aggregate, ctx)
        if ctx.last_of_epoch:
            metrics.update(self.end_of_epoch(ctx))
        return metrics

    def end_of_epoch(self, ctx: RoundContext) -> dict[str, float]:
        item = self.public.item.unsqueeze(0)  # [1, I, di]
        metrics = {"item_uniformity": float(uniformity_penalty(item, torch.ones(item.shape[:2], dtype=torch.bool,
                                                                                device=item.device)))}
        if self.config.user_cl == "synthetic":
            metrics["synthetic_fit_loss"] = self.fit_synthetic_users()
            # how popular a synthetic user's N items are (Eq. 4): the share of the training interactions they hold
            held = self.popularity[self.synthetic_items.cpu()].sum(1).to(torch.float64)  # [S]
            metrics["synthetic_item_share"] = float(held.mean() / self.popularity.sum().clamp_min(1))
        return metrics

    def fit_synthetic_users(self) -> float:
        """Eq. 5 on the public model: Adam on the synthetic users' rows only; returns the final loss."""
        config, item = self.config, self.public.item
        S, N = self.synthetic_items.shape
        gen = generator(self.seed, "synthetic-negatives", self.synthetic_fits, item.device)
        negatives = torch.randint(0, item.shape[0], (S, N, max(config.num_negatives, 1)), generator=gen,
                                  device=item.device)  # [S, N, n]
        self.synthetic_fits += 1
        item, net = item.detach(), {k: v.detach() for k, v in self.public.net.items()}
        candidates = torch.cat([self.synthetic_items.unsqueeze(-1), negatives], -1).reshape(S, -1)
        vectors = item[candidates]  # [S, N(1 + n), di]
        user = self.synthetic.clone().requires_grad_(True)
        opt = torch.optim.Adam([user], lr=config.synthetic_fit_lr)
        loss = torch.zeros(())
        mask = torch.ones(S, N, dtype=torch.bool, device=item.device)
        for _ in range(config.synthetic_fit_steps):
            opt.zero_grad(set_to_none=True)
            scores = self.backbone.score(user, vectors, net).reshape(S, N, -1)  # [S, N, 1 + n]
            loss = per_client_loss(self.backbone.config.loss, scores[..., 0], scores[..., 1:], mask, None).sum()
            loss.backward()
            opt.step()
        self.synthetic = user.detach()
        return float(loss.detach())


class ContrastiveClient(Client):
    """The family's client program: FedAvg's local training (``fedrun.method._training``) on Eq. 11, with the
    synthetic users it downloads and the views of its user row and item rows (UNION: its own item views)."""

    def problems(self, users: torch.Tensor, round_index: int, sent: torch.Tensor | None = None) -> list[LocalProblem]:
        """FedAvg's buckets, each with the synthetic users the round's clients downloaded (``sent``)."""
        fields = [f.name for f in dataclasses.fields(LocalProblem)]
        return [ContrastiveProblem(**{name: getattr(p, name) for name in fields}, round=round_index,
                                   negative_users=sent)
                for p in super().problems(users, round_index)]

    def step(self, problem: LocalProblem) -> ClientResult:
        """The views' item offsets (Eq. 8), then FedAvg's local step on Eq. 11."""
        problem = cast(ContrastiveProblem, problem)
        user0 = self.private.user[problem.batch.users]  # [B, du]
        problem = dataclasses.replace(problem, item_offsets=self.item_views(problem, user0))
        return self.local_step(problem, user0)

    def view_seed(self, round_index: int) -> int:
        return derive_seed(self.env.sim.seed, "cl-views", round_index)

    def item_views(self, problem: ContrastiveProblem, user: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Eq. 8: the offsets Δ', Δ'' [B, Lu, di] of the local item rows (``item_cl=step``), or the
        uniform-noise offsets (``noise``); None for the other views."""
        config = self.config
        item0 = self.public.item[problem.items]  # [B, Lu, di]
        keys = problem.batch.users
        if config.item_cl == "noise":
            seed = derive_seed(self.view_seed(problem.round), "items")
            B, Lu, di = item0.shape
            flat_keys = (keys.unsqueeze(1) * self.env.n_items + problem.items).reshape(-1)
            a, b = uniform_views(item0.reshape(B * Lu, di), flat_keys, seed, config.eta)
            return a.reshape(B, Lu, di), b.reshape(B, Lu, di)
        if config.item_cl != "step":
            return None
        noise = uniform_views(user, keys, self.view_seed(problem.round), config.eta)
        offsets = []
        for eps in noise:
            item = item0.detach().clone().requires_grad_(True)
            loss = problem_loss(self.env.backbone, problem, (user + eps).detach(), item, self.public.net,
                                config.loss_reduction)
            (grad,) = torch.autograd.grad(loss.sum(), item)
            if config.item_view_lr is None:
                step = optimizer_first_step(grad, config.optimizer)
            else:
                step = -config.item_view_lr * grad
            offsets.append(step * problem.item_mask.unsqueeze(-1))
        return offsets[0], offsets[1]

    def local_loss(self, problem: LocalProblem, user: torch.Tensor, item_table: torch.Tensor,
                   net: dict[str, torch.Tensor]) -> torch.Tensor:
        """Eq. 11 per client [B]: L_rec + λ1·L_uc + λ2·L_ic (+ α·L_uni, the proof of concept)."""
        problem, config = cast(ContrastiveProblem, problem), self.config
        loss = super().local_loss(problem, user, item_table, net)
        if config.user_cl == "synthetic" and config.lambda_user:
            noise = uniform_views(user, problem.batch.users, self.view_seed(problem.round), config.eta)
            synthetic = problem.negative_users
            assert synthetic is not None, "user_cl=synthetic: the round's download carries the synthetic users"
            loss = loss + config.lambda_user * user_contrastive(user, noise, synthetic, config.tau)
        if config.lambda_item and config.item_cl != "none":
            loss = loss + config.lambda_item * self.item_loss(problem, item_table)
        if config.uniformity_alpha:
            loss = loss + config.uniformity_alpha * uniformity_penalty(item_table, problem.item_mask)
        return loss

    def item_loss(self, problem: ContrastiveProblem, item_table: torch.Tensor) -> torch.Tensor:
        """Eq. 10 on the two views of the client's positives (offsets from ``item_views``)."""
        assert problem.item_offsets is not None, "the client step builds the item views before training"
        delta1, delta2 = problem.item_offsets
        view1 = slot_rows(item_table + delta1, problem.pos_slot)  # [B, P, di]
        view2 = slot_rows(item_table + delta2, problem.pos_slot)
        return item_contrastive(view1, view2, problem.batch.pos_mask, self.config.tau, self.config.loss_reduction)


class ContrastiveMethod(FederatedMethod):
    """The family's protocol: its client program (``ContrastiveClient``; UNION: its own) and server program
    (``ContrastiveServer``; rCL4FedRec: its calibrating server), the synthetic users downloaded each round."""

    client_program: ClassVar[type[ContrastiveClient]] = ContrastiveClient
    server: ContrastiveServer
    server_program: ClassVar[type[ContrastiveServer]] = ContrastiveServer  # rCL4FedRec: its calibrating server

    def __init__(self, config: ContrastiveConfig, env):
        check(config.synthetic_items <= env.n_items, "synthetic_items", config.synthetic_items,
              f"at most the {env.n_items} items of the catalogue")
        super().__init__(config, env)

    @classmethod
    def needs(cls, config: ContrastiveConfig) -> Needs:
        return dataclasses.replace(super().needs(config), server_reads=frozenset({"item_popularity"}))

    def make_server(self, public: PublicParams, statistics: dict[str, torch.Tensor]) -> ContrastiveServer:
        env = self.env
        return self.server_program(public, self.config, env.backbone, statistics["item_popularity"], env.sim.seed)

    def exchange(self, users: torch.Tensor, round_index: int, privacy: Privacy) -> Exchange:
        """The round's clients download the synthetic users' embeddings (|U_syn|·d floats)."""
        if self.config.user_cl != "synthetic":
            return Exchange()
        synthetic = self.server.synthetic  # [S, du]
        return Exchange(sent=synthetic, bytes_down=float(synthetic.numel() * synthetic.element_size()))

    # -- checkpoints ------------------------------------------------------------------------
    def state_dict(self) -> dict:
        server = self.server
        return {**super().state_dict(), "synthetic": server.synthetic, "synthetic_fits": server.synthetic_fits}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.server.synthetic = state["synthetic"].to(self.env.device)
        self.server.synthetic_fits = int(state["synthetic_fits"])
