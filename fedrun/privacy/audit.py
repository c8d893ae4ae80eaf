"""An empirical check of what item ids in uploads reveal: an honest-but-curious server guesses
each client's rated items from the ids of the item rows it uploads (FedRec's hybrid filling
hides I_u among ρ|I_u| sampled unrated items; FedRec++ §"Privacy Analysis").

Two guesses, both computed from the server's view alone (who uploaded which item ids):
  - ``round``: every item the client uploaded this round is rated — precision 1/(1+ρ) by design;
  - ``intersect``: the items the client uploaded in *every* round it took part in so far. Rated
    items are uploaded every time while the sampled ones are redrawn, so the intersection
    shrinks to I_u as a client's rounds accumulate.
Precision = |guess ∩ I_u| / |guess|, recall = |guess ∩ I_u| / |I_u|, pooled over the clients
guessed so far. Only the *scoring* reads the clients' true items; the guesses never do.
"""

from __future__ import annotations

import torch

from fedrun.data.negatives import contains
from fedrun.types import Uploads


class MembershipAudit:
    def __init__(self, rated_keys: torch.Tensor, rated_per_user: torch.Tensor, n_items: int):
        self.rated_keys = rated_keys  # sorted user * n_items + item of every training rating (truth, for scoring)
        self.rated_per_user = rated_per_user  # [n_users]
        self.n_items = n_items
        self.guess = torch.zeros(0, dtype=torch.int64, device=rated_keys.device)  # sorted keys: the intersection
        self.seen = torch.zeros_like(rated_per_user, dtype=torch.bool)  # users guessed so far

    def observe(self, users: torch.Tensor, uploads: Uploads, audited: torch.Tensor | None = None) -> dict[str, float]:
        """One round of uploads (``users`` [B]: the round's clients; ``audited`` [B] bool: whose
        uploads to audit, default all) → this round's audit metrics."""
        row = torch.ones_like(uploads.row_client, dtype=torch.bool) if audited is None else audited[uploads.row_client]
        users_in_round = users if audited is None else users[audited]
        keys = torch.unique(users[uploads.row_client[row]] * self.n_items + uploads.row_item[row])  # sorted
        senders = torch.zeros_like(self.seen)
        senders[users_in_round] = True
        previous_owner = self.guess // self.n_items
        kept = self.guess[~senders[previous_owner] | contains(keys, self.guess)]  # intersect for this round's senders
        first_time = ~self.seen[keys // self.n_items]
        self.guess = torch.sort(torch.cat([kept, keys[first_time]])).values
        self.seen |= senders
        metrics = self._score(keys, users_in_round, "round")
        metrics.update(self._score(self.guess, torch.nonzero(self.seen).squeeze(1), "intersect"))
        return metrics

    def _score(self, guess: torch.Tensor, users: torch.Tensor, name: str) -> dict[str, float]:
        hits = float(contains(self.rated_keys, guess).sum())
        rated = float(self.rated_per_user[users].sum())
        return {f"audit_{name}_precision": hits / max(guess.numel(), 1),
                f"audit_{name}_recall": hits / max(rated, 1.0)}
