"""What a client does to its own pairs before a round's local training, so that what it uploads
does not reveal which items it holds:

- **pseudo items** (FedGNN, Wu et al. 2021, §3.4; PerFedRec++ §4.2.2): a share of the client's
  pairs is replaced by random items it does not hold, trained as if held — their rows are
  uploaded beside the real ones. The authors' code *replaces* 10% of the pairs (not adds);
  fedrun does the same (REFERENCE §3);
- **interacted-item masking** (PerFedRec++ §4.2.2): a further share of the real pairs is
  treated as not held for the round (dropped from the positives and from the client's graph;
  they may then be drawn as negatives, as non-interacted items are).

Both are vectorized over a bucket: which pairs are chosen and which pseudo items replace them
are counter-based draws keyed by (seed, user, position), never by the bucket. A client with n ≥ 2
pairs replaces max(1, ⌊share · n⌋) of them (the authors' code) and masks ⌊share · n⌋ of the rest;
at least one real pair always stays.
"""

from __future__ import annotations

import torch

from fedrun.core import hashrng
from fedrun.core.seeding import derive_seed
from fedrun.data.negatives import sample_client_negatives
from fedrun.method.config import PairPerturbationConfig
from fedrun.types import ClientBatch


def perturb_round(batch: ClientBatch, config: PairPerturbationConfig, n_items: int, seed: int,
                  round_index: int) -> ClientBatch:
    """Round ``round_index``'s pairs of the bucket's clients, as ``config`` perturbs them (``seed``: the run's)."""
    if not config.perturbs_pairs:
        return batch
    seed = derive_seed(seed, "pseudo-pairs", round_index)
    return perturb_pairs(batch, n_items, seed, config.pseudo_share, config.mask_share)[0]


def share_counts(share: float, sizes: torch.Tensor, at_least_one: bool) -> torch.Tensor:
    """⌊share · n⌋ per client ([B] int64), at least 1 (``at_least_one``, share > 0) for n ≥ 2, at most n − 1."""
    counts = torch.floor(share * sizes.to(torch.float64)).to(torch.int64)
    if at_least_one and share > 0:
        counts = torch.where(sizes >= 2, counts.clamp_min(1), counts)
    return torch.minimum(counts, sizes - 1).clamp_min(0)


def perturb_pairs(batch: ClientBatch, n_items: int, seed: int, pseudo_share: float, mask_share: float
                  ) -> tuple[ClientBatch, torch.Tensor]:
    """The bucket's pairs with pseudo items in place of a ``pseudo_share`` of them and a ``mask_share``
    dropped → (the new batch, pseudo [B, P] bool: which positions now hold a pseudo item)."""
    pos, valid = batch.pos, batch.pos_mask
    B, P = pos.shape
    sizes = valid.sum(1)  # [B]
    position = torch.arange(P, device=pos.device)
    order_key = hashrng.randint(seed, [batch.users.unsqueeze(1), position.unsqueeze(0)], 1 << 62)  # [B, P]
    order_key = torch.where(valid, order_key, torch.full_like(order_key, 1 << 62))  # padding last
    rank = torch.argsort(torch.argsort(order_key, dim=1), dim=1)  # [B, P] the position's rank in its client
    n_pseudo = share_counts(pseudo_share, sizes, at_least_one=True)
    n_mask = torch.minimum(share_counts(mask_share, sizes, at_least_one=False), sizes - 1 - n_pseudo)
    pseudo = valid & (rank < n_pseudo.unsqueeze(1))
    masked = valid & (rank >= n_pseudo.unsqueeze(1)) & (rank < (n_pseudo + n_mask).unsqueeze(1))
    if bool(pseudo.any()):
        fresh = sample_client_negatives(batch.users, pos, valid, P, n_items,
                                        derive_seed(seed, "pseudo-items"))  # [B, P] items the client does not hold
        pos = torch.where(pseudo, fresh, pos)
    return ClientBatch(batch.users, torch.where(masked, torch.zeros_like(pos), pos), valid & ~masked,
                       batch.ratings), pseudo
