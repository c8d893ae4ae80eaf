"""FedRec: federated PMF on explicit ratings with hybrid filling (Lin, Liang, Pan, Ming, IEEE
Intelligent Systems 2020), as restated in FedRec++ (Liang, Pan, Ming, AAAI 2021, Eq. 1–3, 7).

Client u in iteration t (vectorized over the round's clients; γ_t = γ·0.9^t):
  1. sample I'_u: ρ|I_u| distinct items it has not rated (fresh every iteration; Alg. 2 line 2);
  2. virtual ratings r'_ui (Eq. 1): the user's mean rating while t < T_predict, else U'_u·V_i
     with U'_u a local copy of U_u trained T_local full-batch steps of Eq. 7 (Alg. 2 line 3);
  3. ∇U_u = mean_{i∈I_u}(−e_ui V_i + λU_u) (Eq. 7); U_u ← U_u − γ_t ∇U_u (stays on the client);
  4. ∇V(u,i) = (U_u·V_i − r_ui)U_u + λV_i for i ∈ I_u ∪ I'_u, r'_ui for the sampled ones (Eq. 3),
     uploaded as item-row deltas −γ_t ∇V(u,i).
Server: the mean over the rows' uploaders, V_i ← V_i − γ_t Σ ∇V / |U_i ∪ U'_i| (Eq. 2) —
``defense=mean`` (uniform) and a plain SGD server step of 1.

Open points and choices: the item gradients use U_u after its step (the order of Alg. 2,
lines 5–8); U'_u also steps with γ_t; |I'_u| = ⌊ρ|I_u|⌋, capped at the client's number of
unrated items; the learning rate decays per round (one round = one iteration of Alg. 1, so
``sim.clients_per_round`` = c and the number of rounds = T). λ is the backbone's ``l2`` (α).
Gradients are computed in closed form (PMF's squared loss), not through autograd
(``fedrun.method._rating``, the step FedRec++ and FedMF compose too).
"""

from __future__ import annotations

import torch

from fedrun.audit.base import ServerView
from fedrun.backbone.base import PublicParams
from fedrun.kernels.config import ServerOptimizerConfig
from fedrun.method._rating import UNREAD, RatingClient, communication
from fedrun.method.config import FedRecConfig
from fedrun.method.federated import FederatedMethod
from fedrun.method.rating_scale import require_rating_model
from fedrun.method.server import OptimizerServer, Server
from fedrun.types import RoundContext, Uploads


class FedRec(FederatedMethod):
    Config = FedRecConfig
    unread = UNREAD
    client_program = RatingClient  # FedRec's client step (``fedrun.method._rating``)
    client: RatingClient

    def __init__(self, config: FedRecConfig, env):
        require_rating_model(env, "fedrec")
        super().__init__(config, env)

    def make_server(self, public: PublicParams, statistics: dict[str, torch.Tensor]) -> Server:
        return OptimizerServer(public, ServerOptimizerConfig("sgd", 1.0))  # deltas already carry −γ_t

    def describe(self) -> dict:
        return {"lr_schedule": f"{self.config.lr}*{self.config.lr_decay}^round"}

    # -- server side -----------------------------------------------------------------------
    def server_view(self, ctx: RoundContext) -> ServerView:
        """The uploads are explicit-MF gradients at the round's γ_t (Eq. 3), the sampled items' included."""
        return ServerView(self.public, mf_step=self.client.rating.mf_step(ctx.round))

    def observe_uploads(self, uploads: Uploads, senders: torch.Tensor, ctx: RoundContext) -> dict[str, float]:
        """The traffic in latent vectors (the paper's unit)."""
        return communication(uploads)
