"""Median-quantised MF: LightFR_init of LightFR's ablation (Zhang et al., TOIS 2023, §4.2.2, Table 7) —
"binary codes by directly conducting median quantization on real-valued features learned by MF
without the collaborative optimization procedure between the server and clients".

Training is the centralized row's (``method=central``, e.g. PMF's squared loss on the ratings, with
``backbone.dim`` = f, the code length). For scoring, each latent dimension is cut at its median —
over the users for user codes, over the items for item codes — b_uk = sign(U_uk − med_k(U)),
d_ik = sign(V_ik − med_k(V)), and items are ranked by b_uᵀd_i, i.e. by Hamming similarity.

Open points: the paper does not say which MF nor which medians; fedrun quantises the PMF that the
PMF row trains (same epochs, optimizer), per dimension, with values equal to the median mapped to
+1 (so a code is never 0). ``cut=zero`` (b = sign(U)) keeps what centring removes — a dimension
shared by all users or items, which a bias-free PMF uses for the rating level — and is reported
beside the paper's median cut.
"""

from __future__ import annotations

from typing import Sequence

import torch

from fedrun.backbone.mf import MF
from fedrun.data.client_store import ClientStore
from fedrun.errors import ConfigError
from fedrun.method.centralized import CentralMethod
from fedrun.method.config import CentralConfig, MedianQuantizedConfig


def quantize(factors: torch.Tensor, cut: str = "median") -> torch.Tensor:
    """[n, f] real factors → [n, f] codes in {±1}, each column cut at its median (or at 0)."""
    threshold = factors.median(dim=0).values if cut == "median" else torch.zeros(factors.shape[1])  # [f]
    return torch.where(factors >= threshold.to(factors), 1.0, -1.0)


class MedianQuantized(CentralMethod):
    Config = MedianQuantizedConfig
    graph_backbones = False

    def __init__(self, config: CentralConfig, env):
        if not isinstance(env.backbone, MF):
            raise ConfigError("backbone", type(env.backbone).__name__,
                              "an inner-product MF backbone (pmf or mf) for method=median_quantized")
        super().__init__(config, env)

    def codes(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The binary user and item codes of the current factors."""
        return quantize(self.user.detach(), self.config.cut), quantize(self.item.detach(), self.config.cut)

    @torch.no_grad()
    def score_users(self, users: torch.Tensor, history: Sequence[ClientStore] = ()) -> torch.Tensor:
        user, item = self.codes()
        return user[users] @ item.T  # [U, I] b_uᵀd_i

    @torch.no_grad()
    def score_pairs(self, users: torch.Tensor, items: torch.Tensor,
                    history: Sequence[ClientStore] = ()) -> torch.Tensor:
        user, item = self.codes()
        return (user[users] * item[items]).sum(1)  # [N]
