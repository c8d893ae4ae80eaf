"""Rating inference from consecutive real-valued uploads (issue #65, attack 2): FedMF's attack on plaintext
gradients (Chai et al. 2020, §3.1), as LightFR restates it (Eq. 22–23).

An explicit-MF client with row u and ratings r_ui steps u' = u − γ(−(1/n)Σ_i e_i v_i + λu), e_i = r_ui − u·v_i
(Eq. 7 of FedRec), and uploads for each rated item −γ((u'·v_i − r_ui)u' + λv_i). The server knows γ, λ and the
item rows v_i it sent, so from one upload it reads h_i = (u'·v_i − r_ui)u': every h_i of a client is parallel to u'.
With u' = a·w (w the direction of the h_i, a unknown), c_i = h_i·w = (u'·v_i − r_ui)·a and

    r_ui = a (w·v_i) − c_i / a                                                        (Eq. 23 in these terms)

which leaves one unknown per client and round. The client's next round q (same rated items, its row unchanged in
between) gives it: with p the earlier round,

    u'_q = a A − B / a,   A = (1 − γ_q λ) w_p + (γ_q/n) Σ_i (w_p·(v_i^p − v_i^q)) v_i^q,   B = (γ_q/n) Σ_i c_i^p v_i^q

and u'_q = b w_q, so (ab) w_q − a² A = −B: d equations linear in (ab, a²), solved by least squares per client
(LightFR's Eq. 22 solves the same system coordinate by coordinate by an iterative method). a = √(a²) up to its
sign, which flips every inferred rating; the attacker, who knows ratings are positive, takes the sign that makes
their mean positive. The rated set is taken to be the items the client uploaded in both rounds — exactly I_u for
FedMF; for FedRec's hybrid filling a superset of it, which the attack does not know how to remove.

The metric is the MAE of the inferred ratings against the truth (over the inferred pairs that are true ratings),
against the MAE of predicting every rating by the mean training rating; coverage is the share of the clients'
training ratings inferred. The truth is read only by ``score``.
"""

from __future__ import annotations

import torch

from fedrun.audit.base import CodeStep, MFStep
from fedrun.data.client_store import ClientStore
from fedrun.data.negatives import contains
from fedrun.types import Uploads


class RatingInference:
    """The inferred ratings (the latest of each client and item) and their score."""

    def __init__(self, n_items: int, device: torch.device):
        self.n_items = n_items
        self.inferred_keys = torch.zeros(0, dtype=torch.int64, device=device)  # [N] sorted user * n_items + item
        self.inferred = torch.zeros(0, dtype=torch.float64, device=device)  # [N] the latest inferred r_ui

    def record(self, keys: torch.Tensor, ratings: torch.Tensor) -> None:
        """Add the inferred ``ratings`` of ``keys`` (distinct), replacing earlier inferences of the same pairs."""
        kept = ~contains(keys.sort().values, self.inferred_keys)
        merged = torch.cat([self.inferred_keys[kept], keys])
        order = torch.argsort(merged)
        self.inferred_keys, self.inferred = merged[order], torch.cat([self.inferred[kept], ratings])[order]

    def score(self, truth: ClientStore) -> dict[str, float]:
        if truth.ratings is None:
            return {}
        users = torch.unique(self.inferred_keys // self.n_items)
        if users.numel() == 0:
            return {"audit_rating_coverage": 0.0}
        rows, _, items, ratings = truth.flat(users.cpu())
        assert ratings is not None
        true_keys = (users.cpu()[rows] * self.n_items + items).to(self.inferred_keys.device)
        order = torch.argsort(true_keys)
        true_keys, true_ratings = true_keys[order], ratings.to(true_keys.device)[order].double()
        rated = contains(true_keys, self.inferred_keys)  # inferred pairs that are true ratings
        slot = torch.searchsorted(true_keys, self.inferred_keys[rated])
        target = true_ratings[slot]
        mean = float(truth.ratings.double().mean())
        return {
            "audit_rating_mae": float((self.inferred[rated] - target).abs().mean()) if rated.any() else float("nan"),
            "audit_rating_mean_mae": float((target - mean).abs().mean()) if rated.any() else float("nan"),
            "audit_rating_coverage": float(rated.sum()) / truth.ratings.numel(),
        }


class MFRatingInference(RatingInference):
    def __init__(self, n_users: int, n_items: int, dim: int, device: torch.device):
        super().__init__(n_items, device)
        self.direction = torch.zeros(n_users, dim, dtype=torch.float64, device=device)  # [U, d] w of the last round
        self.keys = torch.zeros(0, dtype=torch.int64, device=device)  # [K] sorted keys of the clients' last rounds
        self.along = torch.zeros(0, dtype=torch.float64, device=device)  # [K] c_i = h_i·w
        self.rows = torch.zeros(0, dim, dtype=torch.float64, device=device)  # [K, d] v_i as the server sent it

    @torch.no_grad()
    def observe(self, uploads: Uploads, senders: torch.Tensor, item_table: torch.Tensor, step: MFStep) -> None:
        owner = senders[uploads.row_client]  # [R] user ids
        keys = owner * self.n_items + uploads.row_item
        rows = item_table[uploads.row_item].double()  # [R, d] v_i^q
        h = -uploads.row_delta.double() / step.lr - step.l2 * rows  # [R, d] (u'·v_i − r_ui) u'
        direction = largest_row_direction(owner, h, self.direction.shape[0])  # [U, d] w_q (zero: not a sender)
        along = (h * direction[owner]).sum(1)  # [R] c_i^q
        self.infer(owner, keys, rows, direction, step)
        # keep this round's view for the senders' next round
        keep = ~torch.isin(self.keys // self.n_items, senders)
        order = torch.argsort(torch.cat([self.keys[keep], keys]))
        self.keys = torch.cat([self.keys[keep], keys])[order]
        self.along = torch.cat([self.along[keep], along])[order]
        self.rows = torch.cat([self.rows[keep], rows])[order]
        self.direction[senders] = direction[senders]

    def infer(self, owner: torch.Tensor, keys: torch.Tensor, rows: torch.Tensor, direction: torch.Tensor,
              step: MFStep) -> None:
        """Solve each sender's previous round from this one (the module docstring's system)."""
        if self.keys.numel() == 0:
            return
        found = contains(self.keys, keys)  # [R] uploaded in the client's previous round too
        if not found.any():
            return
        slot = torch.searchsorted(self.keys, keys[found])
        user, v_q, v_p, c_p = owner[found], rows[found], self.rows[slot], self.along[slot]  # [M], [M, d] ...
        w_p = self.direction[user]  # [M, d]
        n_users, dim = self.direction.shape
        n = torch.zeros(n_users, dtype=torch.float64, device=keys.device).index_add_(0, user, torch.ones_like(c_p))
        scale = step.lr / n.clamp_min(1.0)  # [U] γ_q / n
        drift = ((w_p * (v_p - v_q)).sum(1, keepdim=True) * v_q)  # [M, d]
        a_vec = (1 - step.lr * step.l2) * self.direction + scale.unsqueeze(1) * torch.zeros(
            n_users, dim, dtype=torch.float64, device=keys.device).index_add_(0, user, drift)  # [U, d] A
        b_vec = scale.unsqueeze(1) * torch.zeros_like(a_vec).index_add_(0, user, c_p.unsqueeze(1) * v_q)  # [U, d] B
        solved = torch.unique(user)
        w_q, a_u, b_u = direction[solved], a_vec[solved], b_vec[solved]
        # least squares for (y, x) = (ab, a²) in y·w_q − x·A = −B
        design = torch.stack([w_q, -a_u], dim=2)  # [S, d, 2]
        solution = torch.linalg.lstsq(design, -b_u.unsqueeze(2)).solution.squeeze(2)  # [S, 2]
        a_sq = torch.zeros(n_users, dtype=torch.float64, device=keys.device)
        a_sq[solved] = solution[:, 1]
        valid = a_sq[user] > 0
        a = a_sq[user].clamp_min(1e-300).sqrt()  # [M]
        ratings = a * (w_p * v_p).sum(1) - c_p / a  # [M] Eq. 23
        total = torch.zeros(n_users, dtype=torch.float64, device=keys.device).index_add_(0, user, ratings)
        ratings = torch.where(total[user] < 0, -ratings, ratings)  # the sign of a: ratings are positive
        self.record(keys[found][valid], ratings[valid])


class CodeRatingInference(RatingInference):
    """LightFR's Agg_grad uploads, one round suffices: a client uploads Δd_i = (R_ui − s_ui) b_u + α_d d_i per rated
    item (Eq. 12, code units), b_u ∈ {±1}^f its private code, s_ui = b_u·d_i, R_ui = f(2r_ui − 1) with r_ui the
    rating min-max scaled over the training ratings (a public range). The server knows d_i and α_d, so it reads
    h_i = (R_ui − s_ui) b_u: the signs of any non-zero h_i are ±b_u, and then R_ui − s_ui = h_i·b_u / f and
    R_ui = (R_ui − s_ui) + b_u·d_i. Flipping b_u flips R_ui; the attacker takes the sign that puts the client's
    ratings above the middle of the scale on average. LightFR's §3.4.3 argues the binary codes make Eq. 22
    unsolvable; this inversion needs no Eq. 22."""

    @torch.no_grad()
    def observe(self, uploads: Uploads, senders: torch.Tensor, item_table: torch.Tensor, step: CodeStep) -> None:
        owner = senders[uploads.row_client]  # [R]
        codes = item_table[uploads.row_item].double()  # [R, f] d_i as downloaded
        h = uploads.row_delta.double() - step.item_self * codes  # [R, f] (R − s) b_u
        n_users = int(senders.max()) + 1
        user_code = torch.sign(largest_row_direction(owner, h, n_users))[owner]  # [R, f] ±b_u (0: no signal)
        bits = h.shape[1]
        scaled = ((h * user_code).sum(1) / bits + (user_code * codes).sum(1)) / bits  # [R] 2r − 1, up to sign
        total = torch.zeros(n_users, dtype=torch.float64, device=h.device).index_add_(0, owner, scaled)
        scaled = torch.where(total[owner] < 0, -scaled, scaled)  # ratings above the scale's middle on average
        ratings = step.low + (scaled + 1) / 2 * (step.high - step.low)
        self.record(owner * self.n_items + uploads.row_item, ratings)


def largest_row_direction(owner: torch.Tensor, h: torch.Tensor, n_users: int) -> torch.Tensor:
    """[U, d] the unit direction of each client's largest row of ``h`` [R, d] (rows of client ``owner`` [R])."""
    norm = h.norm(dim=1)  # [R]
    order = torch.argsort(-norm, stable=True)
    order = order[torch.argsort(owner[order], stable=True)]  # by client, largest first
    first = torch.ones_like(order, dtype=torch.bool)
    first[1:] = owner[order][1:] != owner[order][:-1]
    best = order[first]
    direction = torch.zeros(n_users, h.shape[1], dtype=h.dtype, device=h.device)
    direction[owner[best]] = h[best] / norm[best].clamp_min(1e-300).unsqueeze(1)
    return direction
