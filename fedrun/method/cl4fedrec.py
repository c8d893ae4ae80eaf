"""CL4FedRec: contrastive learning for federated recommendation (Yuan et al., "Robust federated contrastive
recommender system against model poisoning attack" — ``papers/rcl4fedrec.txt`` §4.1, Algorithm 1 without
l. 11). The protocol is the contrastive family's (``fedrun.method._contrastive``, which rCL4FedRec, SimGCL and UNION
compose too): the server's synthetic users (Eq. 4–5), the user views against them (Eq. 6–7), the
item views one step of L_rec apart (Eq. 8–10), L = L_rec + λ1·L_uc + λ2·L_ic (Eq. 11) on FedAvg's local
training. CL4FedRec is that protocol with both views and the paper's settings; rCL4FedRec adds the server's
regularizer (``method=rcl4fedrec``).

Server, before training and after every global epoch (Alg. 1 l. 2, 12):
  - synthetic users: each holds N items drawn ∝ item popularity (Eq. 4; ``synthetic_sampling=uniform``
    is Table 5's "random synthetic users"); its embedding s_j is fitted to them on the current public
    model, item rows and tower frozen (Eq. 5); the round's clients download {s_j} as negative users.
Client (vectorized over the bucket; the private row u_i never leaves):
  - user views u' = u + ε', u'' = u + ε'' with ε = normalise(U(0, 1)^d ⊙ sign(u)) · η (Eq. 6);
    L_uc = −log e^{cos(u', u'')/τ} / (e^{cos(u', u'')/τ} + Σ_j e^{cos(u, s_j)/τ})        (Eq. 7)
  - item views V' = V + Δ', V'' = V + Δ'' where Δ is one step of L_rec on the client's local item
    rows under u' (resp. u''), model otherwise as downloaded (Eq. 8–9);
    L_ic = Σ_{k ∈ D_i} −log e^{cos(v'_k, v''_k)/τ} / Σ_{j ∈ D_i} e^{cos(v'_k, v''_j)/τ}   (Eq. 10)
  - L = L_rec + λ1·L_uc + λ2·L_ic (Eq. 11), trained like FedAvg's client (``fedrun.method._training``): item-row and
    tower deltas uploaded, the server aggregates them (``defense``) and applies ``server_optimizer``.

Choices where the paper is open (each a config field, logged with the run):
  - Reductions: Eq. 1 and Eq. 10 are sums over the client's examples and items; ``loss_reduction``
    applies to both (``sum``: the paper's equations; ``mean``: both divided by the client's count).
  - Views are drawn once per round per client, from counter-based noise keyed by (seed, round, user),
    so a client's views do not depend on which clients share its bucket; the item views come from the
    downloaded model; with several local steps the same noise serves every step (its signs follow the
    current user row, Eq. 6).
  - The backbone's loss is the recommendation loss of the paper's Eq. 1 (BCE with sampled negatives
    under NCF); the loss's own fields (``loss_reduction``, ``num_negatives``) are FedAvg's.
  - The item-view step Δ = −``item_view_lr``·∇_V L_rec (null: the client optimizer's own first step —
    for Adam lr·g/(|g| + 1e-8), for SGD lr·g); Δ is a constant of the view (no gradient through it),
    and D_i in Eq. 10 is the client's training positives (its sampled negatives only enter L_rec).
  - Eq. 7 contrasts the synthetic users with u itself (not a view), as written.
  - Popularity (Eq. 4) is the training split's interaction count per item, the public statistic the
    server holds; N items per synthetic user without replacement; the item sets are drawn once.
  - The fit (Eq. 5): ``synthetic_fit_steps`` Adam steps at ``synthetic_fit_lr`` on BCE with
    ``num_negatives`` uniform negatives per item (redrawn per fit), warm-started from the previous
    s_j; s⁰ ~ N(0, init_std²) as any user row. The download costs |U_syn|·d floats per client.
"""

from __future__ import annotations

from fedrun.method._contrastive import ContrastiveMethod
from fedrun.method.config import CL4FedRecConfig


class CL4FedRec(ContrastiveMethod):
    Config = CL4FedRecConfig
