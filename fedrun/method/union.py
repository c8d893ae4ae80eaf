"""UNION's item contrastive learning in federated recommendation: the baseline of rCL4FedRec §5.3
(Yu et al., "Untargeted attack against federated recommendation systems via poisonous item
embeddings and the defense", AAAI 2023 — ``papers/rcl4fedrec.txt`` describes it).

"It naively treats clients' all interacted items as positive samples and non-interacted items as
negative samples to build item views, and it only considers the item contrastive learning."
fedrun's reading (open in the text): for each interacted item k of the client,
    L_k = −log P_k / (P_k + Σ_{n ∈ N_k} e^{cos(v_k, v_n)/τ}),   P_k = Σ_{j ∈ D_i∖k} e^{cos(v_k, v_j)/τ},
N_k the non-interacted items sampled for k this round (its ``num_negatives`` negatives, as L_rec draws
them); summed (or averaged, ``loss_reduction``) over k and weighted λ2; no user contrastive term.
Everything else is the contrastive family's client step (``fedrun.method._contrastive``).
Measured: contrasting each k with all of the client's negatives instead (5|D_i| of them) made a round
on ML-1M about 7× slower than CL4FedRec's; the per-positive negatives cost as much as Eq. 10.
"""

from __future__ import annotations

from typing import cast

import torch
import torch.nn.functional as F

from fedrun.kernels.local import slot_rows
from fedrun.method._contrastive import (
    ContrastiveClient,
    ContrastiveMethod,
    ContrastiveProblem,
    reduce_items,
)
from fedrun.method.config import UnionConfig


def union_contrastive(anchors: torch.Tensor, mask: torch.Tensor, negatives: torch.Tensor, tau: float,
                      reduction: str) -> torch.Tensor:
    """UNION's item views per client [B]: anchors [B, P, d] the client's interacted items (mask [B, P]),
    negatives [B, P, n, d] the non-interacted items sampled for each; the other interacted items are the
    positives: −log Σ_{j ≠ k} e^{cos(v_k, v_j)/τ} / (Σ_{j ≠ k} e^{cos(v_k, v_j)/τ} + Σ_n e^{cos(v_k, v_n)/τ})."""
    unit = F.normalize(anchors, dim=-1)
    sim = unit @ unit.transpose(1, 2) / tau  # [B, P, P]
    eye = torch.eye(anchors.shape[1], dtype=torch.bool, device=anchors.device)
    pos = sim.masked_fill(~mask.unsqueeze(1) | eye, float("-inf"))
    neg = torch.einsum("bpd,bpnd->bpn", unit, F.normalize(negatives, dim=-1)) / tau  # [B, P, n]
    valid = mask & (mask.sum(1, keepdim=True) >= 2)  # an item needs another interacted item
    positive = torch.logsumexp(pos, -1)  # [B, P]
    per_item = torch.logsumexp(torch.cat([pos, neg], -1), -1) - positive
    return reduce_items(torch.where(valid, per_item, torch.zeros_like(per_item)), valid, reduction)


class UnionClient(ContrastiveClient):
    """The family's client program with UNION's item views in place of Eq. 10."""

    def item_loss(self, problem: ContrastiveProblem, item_table: torch.Tensor) -> torch.Tensor:
        neg_slot = cast(torch.Tensor, problem.neg_slot)  # UNION's client draws negatives (num_negatives ≥ 1)
        B, P, n = neg_slot.shape
        anchors = slot_rows(item_table, problem.pos_slot)  # [B, P, di]
        negatives = slot_rows(item_table, neg_slot.reshape(B, P * n)).reshape(B, P, n, -1)  # [B, P, n, di]
        return union_contrastive(anchors, problem.batch.pos_mask, negatives, self.config.tau,
                                 self.config.loss_reduction)


class Union(ContrastiveMethod):
    Config = UnionConfig
    client_program = UnionClient
