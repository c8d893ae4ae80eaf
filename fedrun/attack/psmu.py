"""PSMU: poisoning with synthetic malicious users (Yuan, Yang, Nguyen, Tong, Wang, Chen, Yin, SIGIR
2023, "Manipulating federated recommender systems: poisoning with synthetic users and its
countermeasures"), one of the two attacks rCL4FedRec evaluates (its §2 and §5: "leverages randomly
constructed users to generate poisoned gradients and further improve target items' competition by
adding their alternative items").

The attack's code is not public; this module is a design from those descriptions, every open step a
config field. Each malicious client holds s synthetic users (``synthetic_users``, 10):

1. Randomly constructed users: each has a random profile of ``profile_size`` items (uniform, the
   targets excluded) and as many random negatives, drawn once from the attack's seed; its embedding
   starts N(0, ``init_std``²).
2. Each round it joins, the client first fits its users to their profiles under the downloaded model:
   ``fit_steps`` plain gradient steps at ``fit_lr`` on BCE (profile items 1, negatives 0) w.r.t. the
   user embeddings only, continuing from the last round's fit (a synthetic user behaves like a benign
   client that keeps its private row).
3. Alternative items: each synthetic user's ``n_alternatives`` highest-scored items (targets excluded)
   — the items a target must overtake for a user like this one.
4. The upload: the gradient of Σ_t Σ_{j ∈ Alt(u)} −log σ(ŝ(u, t) − ŝ(u, j)) averaged over the client's
   users, w.r.t. the target rows, the alternative rows and every shared weight, as a client delta
   −lr × gradient (``lr`` null: the method's client lr). Vectorized: every malicious client's users,
   profiles and alternatives are one batch; the rows a client uploads are its distinct items.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from fedrun.attack.a_ra import ARA
from fedrun.attack.base import AttackSetup
from fedrun.attack.config import PSMUConfig
from fedrun.backbone.base import PublicParams
from fedrun.core.seeding import generator
from fedrun.errors import check
from fedrun.types import RoundContext, Uploads


class PSMU(ARA):
    Config = PSMUConfig

    def setup(self, setup: AttackSetup) -> None:
        super().setup(setup)
        config, T = self.config, self.targets.numel()
        n_items = setup.n_items
        check(config.profile_size + config.n_alternatives + T <= n_items, "attack.profile_size",
              config.profile_size, f"with n_alternatives and the targets at most the {n_items} items")
        draws = generator(setup.seed, "attack-profiles")
        weight = torch.ones(n_items)
        weight[self.targets.cpu()] = 0
        shape = (self.n_clients * config.synthetic_users, 2 * config.profile_size)
        picked = torch.multinomial(weight.expand(shape[0], -1), shape[1], replacement=False, generator=draws)
        picked = picked.view(self.n_clients, config.synthetic_users, 2, config.profile_size).to(setup.device)
        self.profile, self.negatives = picked[:, :, 0], picked[:, :, 1]  # [M, s, P] each, disjoint
        self.fit_lr = config.fit_lr if config.fit_lr is not None else self.lr

    def fit(self, view: PublicParams, clients: torch.Tensor) -> torch.Tensor:
        """[M', s, du] the clients' users after ``fit_steps`` BCE steps on their profiles (kept)."""
        users = self.users[clients]  # [M', s, du]
        M, s, du = users.shape
        items = torch.cat([self.profile[clients], self.negatives[clients]], 2).view(M * s, -1)  # [M's, 2P]
        rows = view.item[items].detach()  # [M's, 2P, di] frozen
        labels = torch.cat([torch.ones(self.config.profile_size), torch.zeros(self.config.profile_size)]).to(rows)
        net = {k: v.detach() for k, v in view.net.items()}
        flat = users.reshape(M * s, du).detach()
        with torch.enable_grad():
            for _ in range(self.config.fit_steps):  # the attacker's optimizer steps, all users at once
                flat = flat.requires_grad_(True)
                scores = self.backbone.score(flat, rows, net)  # [M's, 2P]
                loss = F.binary_cross_entropy_with_logits(scores, labels.expand_as(scores), reduction="none").mean(1)
                (gradient,) = torch.autograd.grad(loss.sum(), flat)
                flat = (flat - self.fit_lr * gradient).detach()
        self.users[clients] = flat.view(M, s, du)
        return flat.view(M, s, du)

    def alternatives(self, view: PublicParams, users: torch.Tensor) -> torch.Tensor:
        """users [M', s, du] → [M', s, A] each user's top-scored items, the targets excluded."""
        M, s, du = users.shape
        with torch.no_grad():
            scores = self.backbone.score_full(users.reshape(M * s, du), view.item, view.net)  # [M's, I]
            scores[:, self.targets] = -torch.inf
            return scores.topk(self.config.n_alternatives, dim=1).indices.view(M, s, -1)

    def craft(self, view: PublicParams, ctx: RoundContext) -> Uploads | None:
        clients = self.joining(ctx)
        if clients.numel() == 0:
            return None
        users = self.fit(view, clients)  # [M', s, du]
        rivals = self.alternatives(view, users)  # [M', s, A]
        M, s, du = users.shape
        T, A = self.targets.numel(), rivals.shape[2]
        items = torch.cat([self.targets.expand(M, s, T), rivals], 2)  # [M', s, T + A]
        with torch.enable_grad():
            rows = view.item[items].detach().requires_grad_(True)  # [M', s, T + A, di]
            net = {k: v.detach().unsqueeze(0).repeat(M, *([1] * v.dim())).requires_grad_(True)
                   for k, v in view.net.items()}  # each client's own copy
            scores = self.backbone.score(users.reshape(M * s, du), rows.reshape(M * s, T + A, -1),
                                         {k: v.repeat_interleave(s, 0) for k, v in net.items()})  # [M's, T + A]
            target, rival = scores[:, :T], scores[:, T:]
            loss = F.softplus(rival.unsqueeze(1) - target.unsqueeze(2)).sum((1, 2)).view(M, s).mean(1)  # [M']
            grads = torch.autograd.grad(loss.sum(), [rows, *net.values()], allow_unused=True)
        client = torch.arange(M, device=items.device).view(M, 1, 1).expand_as(items).reshape(-1)
        keys, inverse = torch.unique(client * view.item.shape[0] + items.reshape(-1), return_inverse=True)
        summed = grads[0].new_zeros(keys.numel(), grads[0].shape[-1]).index_add_(
            0, inverse, grads[0].reshape(-1, grads[0].shape[-1]))  # one row per (client, item)
        dense = {k: -self.lr * (g if g is not None else torch.zeros_like(net[k])) for k, g in zip(net, grads[1:])}
        n_items = view.item.shape[0]
        return Uploads(M, keys // n_items, keys % n_items, -self.lr * summed, dense, torch.ones(M, device=keys.device))
