"""Local differential privacy for uploaded vectors: norm clipping plus calibrated noise.

FedCL (Wu et al. 2022, §3.1, Algorithm 1 line 7, after Qi et al. 2020): each client clips
its user embedding to L1 norm δ and adds Laplace(0, 2δ/ε) noise per coordinate:
û = clip(u, δ) + Laplace(0, 2δ/ε). Any two clipped vectors differ by at most 2δ in L1, so
the Laplace mechanism with scale Δ₁/ε = 2δ/ε makes one upload ε-LDP.

Generalised here (the same argument, other norms):
  - clip to ‖x‖_p ≤ δ with p ∈ {1, 2, ∞}: x · min(1, δ / ‖x‖_p);
  - Laplace noise: scale = Δ₁ / ε with Δ₁ = 2δ · c₁(p), c₁ = 1, √d, d for p = 1, 2, ∞
    (the largest L1 norm of a vector of L_p norm 1 in d dimensions) → ε-LDP;
  - Gaussian noise (classical analysis, Dwork & Roth 2014, Thm A.1, tight for ε ≤ 1):
    σ = Δ₂ · √(2 ln(1.25 / δ_dp)) / ε with Δ₂ = 2δ · c₂(p), c₂ = 1, 1, √d → (ε, δ_dp)-LDP.
Accounting: every protected vector costs ε; over a run the guarantee composes
additively (basic composition), which the method reports per user.

FedGNN and PerFedRec++ (Eq. 10) state the Laplace scale λ and the L∞ clip δ instead of ε
(their ε = 2δ/λ is per coordinate): ``scale`` sets λ directly, and the ε reported is then the
one the mechanism gives a whole vector, 2δ·c₁(p)/λ (2δd/λ under L∞).
"""

from __future__ import annotations

import math

import torch

from fedrun.privacy.base import Privacy
from fedrun.privacy.config import LDPConfig
from fedrun.types import Uploads


def clip_rows(vectors: torch.Tensor, norm: str, bound: float | torch.Tensor) -> torch.Tensor:
    """vectors [N, d] → each row scaled to ‖row‖_p ≤ bound (rows already inside are unchanged)."""
    if norm == "linf":  # the same values as vector_norm's (a maximum rounds nothing), 50× faster on CPU
        size = vectors.abs().amax(dim=1, keepdim=True)  # [N, 1]
    else:  # L1 stays vector_norm's, though 15× slower than abs().sum(): the sum's order would move the rounding
        size = torch.linalg.vector_norm(vectors, ord={"l1": 1.0, "l2": 2.0}[norm], dim=1, keepdim=True)  # [N, 1]
    return vectors * torch.clamp(bound / size.clamp_min(1e-30), max=1.0)


def l1_spread(norm: str, dim: int) -> float:
    """c₁(p): the largest L1 norm of a d-dimensional vector of L_p norm 1."""
    return {"l1": 1.0, "l2": math.sqrt(dim), "linf": float(dim)}[norm]


def noise_scale(config: LDPConfig, dim: int) -> float:
    """Laplace scale b or Gaussian σ per coordinate for d-dimensional vectors (module docstring)."""
    if config.scale is not None:
        return config.scale
    if config.mechanism == "laplace":
        return 2 * config.clip * l1_spread(config.norm, dim) / config.epsilon
    spread = {"l1": 1.0, "l2": 1.0, "linf": math.sqrt(dim)}[config.norm]
    return 2 * config.clip * spread * math.sqrt(2 * math.log(1.25 / config.delta)) / config.epsilon


def sample_noise(shape: torch.Size, mechanism: str, scale: float, generator: torch.Generator,
                 device: torch.device) -> torch.Tensor:
    if mechanism == "gaussian":
        return torch.randn(shape, generator=generator, device=device).mul_(scale)
    # Laplace by inversion: u ~ U(-1/2, 1/2), x = -b · sign(u) · ln(1 - 2|u|). torch.rand is on [0, 1):
    # a draw of exactly 0 (2⁻²⁴ in float32: a few times per long FedCL run) would give u = -1/2 and
    # x = -∞, so it becomes the smallest positive draw (every other draw unchanged). In place on the draw, one
    # buffer besides the signs (item-row LDP perturbs every upload: 9 temporaries of its size were a third of the
    # mechanism's time); the same bits, as sign(u) = ±1 makes each product exact but the last
    uniform = torch.rand(shape, generator=generator, device=device).clamp_min_(torch.finfo().eps / 2).sub_(0.5)
    sign = uniform.sign()
    return uniform.abs_().mul_(-2).log1p_().mul_(sign).mul_(-scale)


class LDP(Privacy):
    Config = LDPConfig

    @property
    def targets(self) -> tuple[str, ...]:
        return tuple(self.config.targets)

    @property
    def transforms_uploads(self) -> bool:  # type: ignore[override]
        return "item_rows" in self.config.targets

    def perturb(self, vectors: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """vectors [N, d], each a separate protected vector → clip(x, δ) + noise, [N, d]."""
        clipped = clip_rows(vectors, self.config.norm, self.config.clip)
        scale = noise_scale(self.config, vectors.shape[1])
        return sample_noise(vectors.shape, self.config.mechanism, scale, generator, vectors.device).add_(clipped)

    def privatize_embeddings(self, vectors: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        return self.perturb(vectors, generator) if "user_embedding" in self.config.targets else vectors

    def apply(self, uploads: Uploads, generator: torch.Generator) -> Uploads:
        if "item_rows" not in self.config.targets:
            return uploads
        return Uploads(uploads.n_clients, uploads.row_client, uploads.row_item,
                       self.perturb(uploads.row_delta, generator), uploads.dense, uploads.weight)

    def epsilon_per_upload(self, dim: int) -> float:
        """ε of one protected vector: the configured one, or with ``scale`` set, 2δ·c₁(p)/λ for d = ``dim``."""
        config = self.config
        if config.scale is None:
            return config.epsilon
        return 2 * config.clip * l1_spread(config.norm, dim) / config.scale
