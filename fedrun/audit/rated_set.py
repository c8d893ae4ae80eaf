"""Rated-set inference from upload ids (issue #65, attack 1): an honest-but-curious server guesses each client's
training items from which item rows it uploads.

The server's view is the (client, item) pairs of the rows it receives. The auditor counts, per client, the rounds it
took part in (``rounds[u]``) and the rounds in which it uploaded each item (``count[u, i]``). From those counts alone:
  - **round**: every item a client uploads in a round is one of its items. Precision and recall are pooled over every
    (client, round): Σ count·[i ∈ I_u] / Σ count and Σ count·[i ∈ I_u] / Σ rounds[u]·|I_u|;
  - **intersect**: the items a client uploaded in *every* round it took part in (``count == rounds``). Items it
    holds are uploaded each time, while sampled or filler items are redrawn (FedRec's ρ, pseudo items). So the
    intersection shrinks towards I_u as the client's rounds accumulate;
  - **AUC**: the score of item i for client u is count[u, i] / rounds[u] (0 for items it never uploaded). The AUC is
    that of the client's items against the others, per client with ties counted half, averaged over the clients.

The baseline is the base rate Σ|I_u| / (clients × |I|), the precision of guessing items at random (and an AUC of
0.5). For FedAvg the round guess is exact up to its negatives: a client uploads the rows of its positives and
sampled negatives. The truth (the training items) is read only by ``score``.
"""

from __future__ import annotations

import torch

from fedrun.data.client_store import ClientStore
from fedrun.data.negatives import contains
from fedrun.types import Uploads


class RatedSetInference:
    """Per-client counts of the rounds taken part in and of the rounds each item was uploaded in."""

    def __init__(self, n_users: int, n_items: int, device: torch.device):
        self.n_items = n_items
        self.rounds = torch.zeros(n_users, dtype=torch.int64, device=device)  # [U] rounds each client took part in
        self.keys = torch.zeros(0, dtype=torch.int64, device=device)  # [K] sorted user * n_items + item uploaded
        self.counts = torch.zeros(0, dtype=torch.int64, device=device)  # [K] rounds in which it was uploaded

    def observe(self, uploads: Uploads, senders: torch.Tensor) -> None:
        self.rounds[senders] += 1  # a round's senders are distinct clients
        keys = torch.unique(senders[uploads.row_client] * self.n_items + uploads.row_item)  # a row once per round
        merged, slot = torch.unique(torch.cat([self.keys, keys]), return_inverse=True)
        counts = torch.zeros_like(merged).index_add_(0, slot, torch.cat([self.counts, torch.ones_like(keys)]))
        self.keys, self.counts = merged, counts

    def times_uploaded(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        """[N] the rounds observed so far in which client ``users[n]`` uploaded item ``items[n]``."""
        keys = users * self.n_items + items
        if self.keys.numel() == 0:
            return torch.zeros_like(keys)
        slot = torch.searchsorted(self.keys, keys).clamp_max(self.keys.numel() - 1)
        return torch.where(self.keys[slot] == keys, self.counts[slot], 0)

    def score(self, truth: ClientStore, blind: bool = False) -> dict[str, float]:
        """``blind``: the uploads did not tell which items a client holds (a row for every item, FedMF's FullText),
        so the guess is every item: precision the base rate, recall 1, AUC 0.5."""
        users = torch.nonzero(self.rounds > 0).squeeze(1)  # [C] the clients the server has seen
        if users.numel() == 0 or (self.keys.numel() == 0 and not blind):
            return {}  # no client uploaded an item row: nothing to guess from
        held = truth.sizes().to(self.rounds.device)[users]  # [C] |I_u|
        base_rate = float(held.sum()) / (users.numel() * self.n_items)
        if blind:
            return {"audit_clients": float(users.numel()), "audit_base_rate": base_rate,
                    "audit_round_precision": base_rate, "audit_round_recall": 1.0,
                    "audit_intersect_precision": base_rate, "audit_intersect_recall": 1.0, "audit_auc": 0.5}
        rows, _, items, _ = truth.flat(users)
        true_keys = torch.sort(users[rows] * self.n_items + items).values  # the truth: read here only
        positive = contains(true_keys, self.keys)  # [K] an uploaded (client, item) is one of its items
        owner = self.keys // self.n_items
        hits = (self.counts * positive).sum()
        every_round = self.counts == self.rounds[owner]
        intersect_hits = (every_round & positive).sum()
        return {
            "audit_clients": float(users.numel()),
            "audit_base_rate": base_rate,
            "audit_round_precision": float(hits) / max(float(self.counts.sum()), 1.0),
            "audit_round_recall": float(hits) / max(float((self.rounds[users] * held).sum()), 1.0),
            "audit_intersect_precision": float(intersect_hits) / max(float(every_round.sum()), 1.0),
            "audit_intersect_recall": float(intersect_hits) / max(float(held.sum()), 1.0),
            "audit_auc": self.auc(users, held, owner, positive),
        }

    def auc(self, users: torch.Tensor, held: torch.Tensor, owner: torch.Tensor, positive: torch.Tensor) -> float:
        """Mean over clients of the AUC of score count / rounds, items never uploaded scoring 0 (ties: half)."""
        n_users = self.rounds.numel()
        n_pos = torch.zeros(n_users, dtype=torch.float64, device=owner.device)
        n_pos[users] = held.double()
        n_neg = self.n_items - n_pos
        width = int(self.counts.max()) + 2 if self.counts.numel() else 2
        neg_keys = torch.sort(owner[~positive] * width + self.counts[~positive]).values  # [N] sorted (user, count)
        neg_seen = torch.bincount(owner[~positive], minlength=n_users).double()  # [U] negatives uploaded
        pos_seen = torch.bincount(owner[positive], minlength=n_users).double()
        zero_neg = n_neg - neg_seen  # negatives never uploaded: score 0
        key = owner[positive] * width + self.counts[positive]  # [P] each uploaded positive's (user, count)
        first = torch.searchsorted(neg_keys, owner[positive] * width)  # the user's first negative
        below = torch.searchsorted(neg_keys, key) - first  # uploaded negatives with a lower count
        tied = torch.searchsorted(neg_keys, key, right=True) - first - below
        wins = torch.zeros(n_users, dtype=torch.float64, device=owner.device)
        wins.index_add_(0, owner[positive], (zero_neg[owner[positive]] + below.double() + 0.5 * tied.double()))
        wins += (n_pos - pos_seen) * 0.5 * zero_neg  # positives never uploaded tie with the negatives never uploaded
        valid = (n_pos[users] > 0) & (n_neg[users] > 0)
        per_user = wins[users][valid] / (n_pos[users][valid] * n_neg[users][valid])
        return float(per_user.mean()) if per_user.numel() else float("nan")
