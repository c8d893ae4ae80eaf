"""The (ε, δ) a client has spent on releases through the Gaussian mechanism, composed over its releases.

A release adds N(0, (zΔ)²) to a sum in which the client's part is bounded by Δ (its clipped update): noise multiplier
z. Its Rényi DP at order α is α / (2z²) (Mironov, "Rényi Differential Privacy", CSF 2017, Prop. 7); k releases
compose to kα / (2z²), and RDP at order α gives (ε, δ)-DP with ε = kα/(2z²) + log(1/δ)/(α − 1) (ibid. Prop. 3).
The best order has a closed form: with a = k/(2z²) and L = log(1/δ), α* = 1 + √(L/a) and ε = a + 2√(aL) — the
bound zero-concentrated DP gives (Bun & Steinke 2016, Prop. 1.3).

No amplification by subsampling is claimed: which clients join a round is public here (the server samples them and
knows who sent what), so a client's rounds without it cost it nothing and its rounds with it cost the full release.
"""

from __future__ import annotations

import math


def gaussian_epsilon(releases: int, noise_multiplier: float, delta: float) -> float:
    """ε of ``releases`` Gaussian releases at noise multiplier z = ``noise_multiplier`` (σ over the sensitivity),
    at ``delta``: 0 for no release, ∞ without noise."""
    if releases <= 0:
        return 0.0
    if noise_multiplier <= 0:
        return math.inf
    rdp_rate = releases / (2.0 * noise_multiplier**2)  # a: RDP ε(α) = a·α
    log_inv_delta = math.log(1.0 / delta)
    return rdp_rate + 2.0 * math.sqrt(rdp_rate * log_inv_delta)
