"""rCL4FedRec: CL4FedRec with the server's popularity-based contrastive regularizer (Yuan et al.,
``papers/rcl4fedrec.txt`` §4.2.3, Eq. 14; Algorithm 1 l. 11).

After every global epoch the server splits the items by popularity into the hot set (the
``hot_items`` most interacted, 100 in the paper) and the normal set, samples V_sp from the normal
set and minimises on the public item table
    L_reg = Σ_{v_i ∈ V_hot} −log e^{1/τ} / Σ_{v_j ∈ V_sp} e^{cos(v_i, v_j)/τ},
which pushes the sampled normal items away from the hot ones, so that a poisoned target cannot
pass for a popular item. Then the synthetic users are refitted (l. 12), as in CL4FedRec.

Choices where the paper is open (config fields): |V_sp| (``reg_sample``: by default 0, every normal item;
n > 0 draws n uniformly without replacement each epoch with its own seed. The paper says "a subset sampled
from the normal item set". Measured on ML-1M under A-hum, 3 seeds: with 1,000 drawn the target escaped in
epochs whose draw missed it, with every normal item it never did, at the same accuracy); the optimiser of Eq. 14
(``reg_steps`` fresh-Adam steps at ``reg_lr``, by default the paper's one learning rate); every row
in the loss moves (hot and sampled normal rows); popularity = the training split's counts.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from fedrun.backbone.base import Backbone, PublicParams
from fedrun.core.seeding import generator
from fedrun.errors import check
from fedrun.method._contrastive import ContrastiveMethod, ContrastiveServer
from fedrun.method.config import RCL4FedRecConfig
from fedrun.types import RoundContext


def regularizer_loss(hot: torch.Tensor, normal: torch.Tensor, tau: float) -> torch.Tensor:
    """Eq. 14: hot [H, d], normal [M, d] → Σ_i (logsumexp_j cos(v_i, v_j)/τ − 1/τ)."""
    sim = F.normalize(hot, dim=-1) @ F.normalize(normal, dim=-1).T / tau  # [H, M]
    return (torch.logsumexp(sim, 1) - 1.0 / tau).sum()


class CalibratingServer(ContrastiveServer):
    """rCL4FedRec's server program: CL4FedRec's, plus Eq. 14 on the public item table after every epoch
    (Alg. 1 l. 11), with the hot and normal sets split by the item popularity it was handed."""

    def __init__(self, public: PublicParams, config: RCL4FedRecConfig, backbone: Backbone,
                 popularity: torch.Tensor, seed: int):
        super().__init__(public, config, backbone, popularity, seed)
        order = torch.argsort(popularity, descending=True, stable=True)
        self.hot = order[:config.hot_items].to(public.item.device)  # [H]
        self.normal = order[config.hot_items:].to(public.item.device)  # [I − H]

    def end_of_epoch(self, ctx: RoundContext) -> dict[str, float]:
        metrics = self.calibrate(ctx.epoch) if self.config.regularizer else {}
        return {**metrics, **super().end_of_epoch(ctx)}

    def calibrate(self, epoch: int) -> dict[str, float]:
        """Alg. 1 l. 11: ``reg_steps`` Adam steps of Eq. 14 on the hot rows and this epoch's V_sp."""
        config, item = self.config, self.public.item
        sample = self.normal
        if 0 < config.reg_sample < self.normal.numel():
            gen = generator(self.seed, "regularizer", epoch)
            sample = self.normal[torch.randperm(self.normal.numel(), generator=gen)[:config.reg_sample].to(item.device)]
        rows = torch.cat([self.hot, sample])
        table = item[rows].clone().requires_grad_(True)  # [H + M, d]
        opt = torch.optim.Adam([table], lr=config.reg_lr)
        losses = []
        for _ in range(config.reg_steps):
            opt.zero_grad(set_to_none=True)
            loss = regularizer_loss(table[:self.hot.numel()], table[self.hot.numel():], config.tau)
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
        with torch.no_grad():
            item[rows] = table.detach()
            after = float(regularizer_loss(item[self.hot], item[sample], config.tau))
        return {"regularizer_loss_before": losses[0], "regularizer_loss_after": after}


class RCL4FedRec(ContrastiveMethod):
    Config = RCL4FedRecConfig
    server_program = CalibratingServer

    def __init__(self, config: RCL4FedRecConfig, env):
        check(config.hot_items < env.n_items, "hot_items", config.hot_items,
              f"fewer than the {env.n_items} items of the catalogue")
        super().__init__(config, env)
