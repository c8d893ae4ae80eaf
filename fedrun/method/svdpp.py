"""SVD++ (Koren, KDD 2008, Eq. 15), trained centrally: the "SVD++" row of LightFR's Table 5.

r̂_ui = μ + b_u + b_i + q_iᵀ(p_u + |N(u)|^(−½) Σ_{j∈N(u)} y_j), with μ the mean training rating,
user and item biases, user factors p_u (``user``), item factors q_i (``item``) and implicit item
factors y_j; N(u) is the set of items u rated in training (the implicit feedback of "who rated
what"). Trained as the centralized row (``method=central``): every rating once per epoch in
mini-batches, squared error plus ``backbone.l2`` on the vectors each rating uses — q_i and the whole
user vector p_u + |N(u)|^(−½) Σ y_j (Koren regularises p_u and every y_j separately, and the biases);
the biases are not regularised — with Adam.

Open points: LightFR gives the dimension (f = 32), 50 epochs, batch 512 and nothing else; the y_j
are initialised like q_i, the biases at 0; early stopping is not used (as for the PMF row).
"""

from __future__ import annotations

from typing import Sequence

import torch

from fedrun.backbone.mf import MF
from fedrun.core.seeding import generator
from fedrun.data.client_store import ClientStore
from fedrun.errors import ConfigError
from fedrun.method.centralized import CentralMethod
from fedrun.method.config import CentralConfig
from fedrun.method.rating_scale import require_rating_model


class SVDpp(CentralMethod):
    Config = CentralConfig
    graph_backbones = False

    def __init__(self, config: CentralConfig, env):
        require_rating_model(env, "svdpp")
        if not isinstance(env.backbone, MF):
            raise ConfigError("backbone", type(env.backbone).__name__, "backbone=pmf for method=svdpp")
        super().__init__(config, env)
        dim, std = env.backbone.config.dim, env.backbone.config.init_std
        self.implicit = (torch.randn(env.n_items, dim, generator=generator(env.sim.seed, "svdpp-implicit")) * std
                         ).to(env.device).requires_grad_(True)  # y_j
        self.user_bias = torch.zeros(env.n_users, device=env.device, requires_grad=True)  # b_u
        self.item_bias = torch.zeros(env.n_items, device=env.device, requires_grad=True)  # b_i
        self.mean = float(torch.as_tensor(env.split.train.rating).mean())  # μ
        self.optimizer = config.optimizer.make([self.item, self.implicit, self.item_bias],
                                               private=[self.user, self.user_bias])

    def implicit_term(self, users: torch.Tensor) -> torch.Tensor:
        """[N] → |N(u)|^(−½) Σ_{j∈N(u)} y_j [N, d], computed once per distinct user."""
        unique, inverse = torch.unique(users, return_inverse=True)
        owner, _, items, _ = self.env.train.flat(unique)
        total = torch.zeros(unique.numel(), self.implicit.shape[1], device=users.device, dtype=self.implicit.dtype)
        total = total.index_add(0, owner, self.implicit[items])  # [U, d]
        norm = self.env.train.sizes(unique).clamp_min(1).to(total.dtype).rsqrt().unsqueeze(1)
        return (total * norm)[inverse]

    def user_rows(self, users: torch.Tensor) -> torch.Tensor:
        return self.user[users] + self.implicit_term(users)  # p_u + |N(u)|^(−½) Σ y_j

    def offsets(self, users: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
        return self.mean + self.user_bias[users].unsqueeze(1) + self.item_bias[candidates]  # [N, C]

    def state_dict(self) -> dict:
        return {**super().state_dict(), "implicit": self.implicit, "user_bias": self.user_bias,
                "item_bias": self.item_bias}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        with torch.no_grad():
            for name in ("implicit", "user_bias", "item_bias"):
                getattr(self, name).copy_(state[name])

    @torch.no_grad()
    def score_users(self, users: torch.Tensor, history: Sequence[ClientStore] = ()) -> torch.Tensor:
        items = torch.arange(self.env.n_items, device=users.device)
        return self.user_rows(users) @ self.item.T + self.offsets(users, items.expand(users.numel(), -1))

    @torch.no_grad()
    def score_pairs(self, users: torch.Tensor, items: torch.Tensor,
                    history: Sequence[ClientStore] = ()) -> torch.Tensor:
        scores = (self.user_rows(users) * self.item[items]).sum(1)
        return scores + self.offsets(users, items.unsqueeze(1)).squeeze(1)
