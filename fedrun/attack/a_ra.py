"""A-ra: model poisoning with random approximation (Rong, He, Chen, Zhang, Li, Ren, Li, IJCAI 2022,
"Poisoning deep learning based recommender model in federated learning scenarios"), as the A-hum
authors' code runs it (``../shared/REFERENCE.md`` §2).

Each malicious client approximates benign users with s synthetic users (``synthetic_users``, 10),
u ~ N(0, σ²) with σ = ``init_std`` (0.01), from the attack's own seed. ``synthetic_draw=per_upload`` (the
default) draws them afresh for every upload, as the code does (``AttackClient.train_`` re-initialises its
user embedding before each of the s users); ``once`` draws them once and keeps them (fedrun's reading
before session 54, and the setting of the equivalence records). Every round it joins, a malicious client
uploads the gradient of the
"like the target" loss BCE(score(u, t), 1) = softplus(−score), averaged over its s users and summed
over the targets, w.r.t. the targets' item rows and every shared weight, as a client's delta:
−lr × gradient (``lr`` null: the method's client learning rate, so the server treats it as it treats
a benign delta). The model view is the one the round's clients download.

Vectorized: every malicious client's users and targets are one batch; each client differentiates
its own copy of the shared weights (``[M, *shape]``), so the gradients are per client without a loop.
Open points (config fields): the number of malicious clients is ⌊fraction × n_users⌋, at least 1
(the code's int(n_users × fraction)); ``participation=per_epoch`` (the default) lets each join once per
epoch at its place among the benign clients shuffled with it, as the code deals them; ``sampled`` lets each
join a round with the benign clients' probability, ``every_round`` every server step (a stress setting).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from fedrun.attack.base import Attack, AttackSetup
from fedrun.attack.config import ARAConfig
from fedrun.backbone.base import PublicParams
from fedrun.core.seeding import generator
from fedrun.types import RoundContext, Uploads


class ARA(Attack):
    Config = ARAConfig
    needs = frozenset({"model_view", "fabricated_data"})

    def setup(self, setup: AttackSetup) -> None:
        config = self.config
        self.backbone, self.targets = setup.backbone, setup.targets.to(setup.device)
        self.lr = config.lr if config.lr is not None else setup.client_lr
        self.enlist(setup)
        self.seed = setup.seed
        self.users = self.draw_users(0).to(setup.device)  # [M, s, du]

    def draw_users(self, step: int) -> torch.Tensor:
        """[M, s, du] every malicious client's synthetic users, N(0, σ²), draw ``step`` of the attack's stream."""
        shape = (self.n_clients, self.config.synthetic_users, self.backbone.user_width)
        return torch.randn(shape, generator=generator(self.seed, "attack-users", step)) * self.config.init_std

    def drawn(self, clients: torch.Tensor, ctx: RoundContext) -> torch.Tensor:
        """[M', s, du] the joining clients' synthetic users for this round's uploads: the ones drawn at set-up
        (``once``), or a fresh draw for the round (``per_upload``: a client uploads at most once a round)."""
        if self.config.synthetic_draw == "once":
            return self.users[clients]
        return self.draw_users(ctx.round + 1).to(self.users.device)[clients]

    def synthetic(self, view: PublicParams, clients: torch.Tensor, ctx: RoundContext) -> torch.Tensor:
        """[M', s, du] the users a malicious client approximates benign users with (A-ra: as drawn)."""
        return self.drawn(clients, ctx)

    def target_scores(self, users: torch.Tensor, rows: torch.Tensor, net: dict[str, torch.Tensor]) -> torch.Tensor:
        """users [N, du], rows [N, T, di], net shared or [N, *shape] → scores of the targets [N, T]."""
        return self.backbone.score(users, rows, net)

    def craft(self, view: PublicParams, ctx: RoundContext) -> Uploads | None:
        clients = self.joining(ctx)
        if clients.numel() == 0:
            return None
        with torch.enable_grad():
            users = self.synthetic(view, clients, ctx).detach()  # [M', s, du]
            M, s, du = users.shape
            T = self.targets.numel()
            rows = view.item[self.targets].detach().unsqueeze(0).repeat(M, 1, 1).requires_grad_(True)  # [M', T, di]
            net = {k: v.detach().unsqueeze(0).repeat(M, *([1] * v.dim())).requires_grad_(True)
                   for k, v in view.net.items()}  # each client's own copy
            scores = self.target_scores(users.reshape(M * s, du), rows.repeat_interleave(s, 0),
                                        {k: v.repeat_interleave(s, 0) for k, v in net.items()})  # [M's, T]
            loss = F.softplus(-scores).view(M, s, T).sum(2).mean(1)  # BCE(t, 1) per client [M']
            grads = torch.autograd.grad(loss.sum(), [rows, *net.values()], allow_unused=True)
        row_delta = -self.lr * grads[0]  # [M', T, di]
        dense = {k: -self.lr * (g if g is not None else torch.zeros_like(net[k]))
                 for k, g in zip(net, grads[1:])}
        client = torch.arange(M, device=rows.device).repeat_interleave(T)
        return Uploads(M, client, self.targets.repeat(M), row_delta.reshape(M * T, -1), dense,
                       torch.ones(M, device=rows.device))
