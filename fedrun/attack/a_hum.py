"""A-hum: model poisoning with hard user mining (Rong et al., IJCAI 2022), as the A-hum authors'
code runs it (``../shared/REFERENCE.md`` §2).

As A-ra (``fedrun.attack.a_ra``), but before crafting its upload every round each malicious client
mines its s synthetic users into "hard" users who dislike the targets: ``mining_steps`` (30) plain
gradient steps at ``mining_lr`` (0.001, the code's model lr; null: the upload's lr) on BCE(score(u, t), 0)
= softplus(score) w.r.t. the user embeddings only, with the downloaded item rows and shared weights
frozen. Mining starts every round from that round's synthetic users (``synthetic_draw``: fresh ones, as
the code; the code keeps no mined state between rounds). Vectorized over every malicious client's users
at once. A backbone whose score is linear in the user row (MF) gives the step's gradient in closed form,
Σ_t σ(score_t)·∂score_t/∂u (``Backbone.user_score_grad``); the others go through autograd, one small graph
per step.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from fedrun.attack.a_ra import ARA
from fedrun.attack.config import AHumConfig
from fedrun.backbone.base import PublicParams
from fedrun.types import RoundContext


class AHum(ARA):
    Config = AHumConfig

    def synthetic(self, view: PublicParams, clients: torch.Tensor, ctx: RoundContext) -> torch.Tensor:
        users = self.drawn(clients, ctx)  # [M', s, du]
        M, s, du = users.shape
        step = self.config.mining_lr if self.config.mining_lr is not None else self.lr
        rows = view.item[self.targets].detach().unsqueeze(0).expand(M * s, -1, -1)  # [M's, T, di] frozen
        net = {k: v.detach() for k, v in view.net.items()}
        flat = users.reshape(M * s, du).detach()
        for _ in range(self.config.mining_steps):
            flat = flat - step * self.mining_gradient(flat, rows, net)
        return flat.view(M, s, du)

    def mining_gradient(self, flat: torch.Tensor, rows: torch.Tensor, net: dict[str, torch.Tensor]) -> torch.Tensor:
        """∂/∂u of Σ_t BCE(score(u, t), 0) = Σ_t softplus(score_t), each synthetic user its own [M's, du]."""
        if self.backbone.linear_in_user:  # closed form: softplus' = σ
            with torch.no_grad():
                weight = torch.sigmoid(self.target_scores(flat, rows, net))  # [M's, T]
                return self.backbone.user_score_grad(flat, rows, net, weight)
        with torch.enable_grad():
            flat = flat.detach().requires_grad_(True)
            (gradient,) = torch.autograd.grad(F.softplus(self.target_scores(flat, rows, net)).sum(), flat)
        return gradient.detach()
