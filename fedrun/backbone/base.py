"""Backbone interface: parameters split into private (per user) and public (shared), and
functional scoring that works with shared or per-client (batched) network weights.

Parameters are plain tensors, not ``nn.Module`` state, so the simulator can gather a
client batch's slices (``[B, du]`` user rows, ``[B, L, di]`` item rows, ``[B, *shape]``
network copies), train them as leaves and scatter the results.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import torch

from fedrun.backbone.config import LINEAR_INITS, BackboneConfig
from fedrun.errors import check, check_choice


@dataclass
class PrivateParams:
    """Parameters that never leave their client: one row per user."""

    user: torch.Tensor  # [n_users, du]


@dataclass
class PublicParams:
    """Parameters the server holds and shares: item rows and dense network weights."""

    item: torch.Tensor  # [n_items, di]
    net: dict[str, torch.Tensor] = field(default_factory=dict)

    def clone(self) -> "PublicParams":
        return PublicParams(self.item.clone(), {k: v.clone() for k, v in self.net.items()})


class Backbone:
    """A scoring model. Subclasses set the widths, create ``net`` and implement ``score``."""

    Config: ClassVar[type] = BackboneConfig
    losses: ClassVar[tuple[str, ...]] = ("bpr", "bce")
    sequential: ClassVar[bool] = False  # users inferred from their histories (GRU4Rec, BERT4Rec), no private rows
    binary_codes: ClassVar[bool] = False  # ±1 codes trained by discrete steps, not gradients (BinaryMF: LightFR)
    linear_in_user: ClassVar[bool] = False  # score linear in the user row: ``user_score_grad`` in closed form

    @property
    def user_context(self) -> str:
        """What a user is to this model: ``ids`` (a private row per user) or ``sequence`` (inferred from
        the user's history) — declared so ``fedrun.app.build`` can match it with a method's client step."""
        return "sequence" if self.sequential else "ids"

    def __init__(self, config: BackboneConfig):
        self.config = config
        check(config.loss in self.losses, "backbone.loss", config.loss,
              f"one of {', '.join(self.losses)} for backbone {type(self).__name__}")

    @property
    def rating_model(self) -> bool:
        """Whether ``eval.kind=auto`` reports rating errors (MAE / RMSE) rather than ranking metrics."""
        return self.config.loss == "mse"

    @property
    def user_width(self) -> int:
        return self.config.dim

    @property
    def item_width(self) -> int:
        return self.config.dim

    def init_net(self, generator: torch.Generator) -> dict[str, torch.Tensor]:
        return {}

    def init_params(self, n_users: int, n_items: int, generator: torch.Generator) -> tuple[PrivateParams, PublicParams]:
        std = self.config.init_std
        user = torch.randn(n_users, self.user_width, generator=generator) * std
        item = torch.randn(n_items, self.item_width, generator=generator) * std
        return PrivateParams(user), PublicParams(item, self.init_net(generator))

    def score(self, user: torch.Tensor, item: torch.Tensor, net: dict[str, torch.Tensor]) -> torch.Tensor:
        """user [B, du], item [B, L, di], net weights shared or with a leading [B] → scores [B, L]."""
        raise NotImplementedError

    def score_full(self, user: torch.Tensor, item: torch.Tensor, net: dict[str, torch.Tensor]) -> torch.Tensor:
        """user [U, du], the whole item table [I, di], shared net → scores [U, I]."""
        return self.score(user, item.unsqueeze(0).expand(user.shape[0], -1, -1), net)

    def user_score_grad(self, user: torch.Tensor, item: torch.Tensor, net: dict[str, torch.Tensor],
                        weight: torch.Tensor) -> torch.Tensor:
        """Σ_l weight[b, l] · ∂score(u_b, i_bl)/∂u_b [B, du] in closed form (user [B, du], item [B, L, di],
        weight [B, L]); backbones that declare ``linear_in_user`` implement it."""
        raise NotImplementedError(f"{type(self).__name__} has no closed-form user gradient")

    def query_vectors(self, user: torch.Tensor, net: dict[str, torch.Tensor]) -> torch.Tensor | None:
        """user [U, du] → [U, di] vectors q with score(u, i) = ⟨q, v_i⟩ + a per-user constant, when the
        backbone's score is an inner product with the item row (inner-product search applies); else None."""
        return None

    def full_score_bytes_per_pair(self) -> int:
        """Peak bytes ``score_full`` needs per (user, item) pair (sets the evaluator's chunk size)."""
        return 4


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x [B, L, in] (or [N, in]) times a shared [out, in] or per-client [B, out, in] weight."""
    if weight.dim() == 3:
        out = torch.bmm(x, weight.transpose(1, 2))  # [B, L, out]
        return out if bias is None else out + bias.unsqueeze(1)
    return torch.nn.functional.linear(x, weight, bias)


def init_linear(n_out: int, n_in: int, generator: torch.Generator,
                scheme: str = "glorot") -> tuple[torch.Tensor, torch.Tensor]:
    """Uniform weight, zero bias: Glorot (bound √(6 / (n_in + n_out))) or Kaiming for ReLU
    (bound √(6 / n_in), PyTorch's ``kaiming_uniform_(nonlinearity='relu')``)."""
    check_choice("linear_init", scheme, LINEAR_INITS)
    bound = (6.0 / (n_in + (n_out if scheme == "glorot" else 0))) ** 0.5
    weight = (torch.rand(n_out, n_in, generator=generator) * 2 - 1) * bound
    return weight, torch.zeros(n_out)
