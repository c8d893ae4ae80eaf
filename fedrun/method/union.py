"""UNION's item contrastive learning in federated recommendation: the baseline of rCL4FedRec §5.3
(Yu et al., "Untargeted attack against federated recommendation systems via poisonous item
embeddings and the defense", AAAI 2023 — ``papers/rcl4fedrec.txt`` describes it).

"It naively treats clients' all interacted items as positive samples and non-interacted items as
negative samples to build item views, and it only considers the item contrastive learning."
fedrun's reading (open in the text): for each interacted item k of the client,
    L_k = −log Σ_{j ∈ D_i∖k} e^{cos(v_k, v_j)/τ} / Σ_{j ∈ (D_i ∪ N_i)∖k} e^{cos(v_k, v_j)/τ},
N_i the client's sampled negatives of the round (its non-interacted items it holds); summed (or
averaged, ``loss_reduction``) over k and weighted λ2; no user contrastive term. Everything else is
CL4FedRec's client step (``CL4FedRec``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F

from fedrun.errors import check
from fedrun.method.cl4fedrec import CL4FedRec, CL4FedRecConfig, ContrastiveProblem, reduce_items
from fedrun.sim.local import slot_rows


@dataclass
class UnionConfig(CL4FedRecConfig):
    user_cl: str = "none"
    item_cl: str = "union"
    item_views: ClassVar[tuple[str, ...]] = ("union", "none")

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.num_negatives >= 1, "num_negatives", self.num_negatives,
              "an integer >= 1 (UNION's negative items are the client's sampled negatives)")


def union_contrastive(anchors: torch.Tensor, anchor_slot: torch.Tensor, anchor_mask: torch.Tensor,
                      items: torch.Tensor, is_pos: torch.Tensor, is_neg: torch.Tensor, tau: float,
                      reduction: str) -> torch.Tensor:
    """UNION's item views per client [B]: for each interacted item k (anchors [B, P, d] at local slots
    anchor_slot [B, P], anchor_mask [B, P]) the client's other interacted items are positives and its
    non-interacted ones negatives (items [B, L, d] its local table, is_pos / is_neg [B, L]):
    −log Σ_{j ∈ D_i∖k} e^{cos(v_k, v_j)/τ} / Σ_{j ∈ (D_i ∪ N_i)∖k} e^{cos(v_k, v_j)/τ}."""
    sim = F.normalize(anchors, dim=-1) @ F.normalize(items, dim=-1).transpose(1, 2) / tau  # [B, P, L]
    slots = torch.arange(items.shape[1], device=items.device)
    others = slots.view(1, 1, -1) != anchor_slot.unsqueeze(-1)  # [B, P, L]: j ≠ k
    pos = sim.masked_fill(~(is_pos.unsqueeze(1) & others), float("-inf"))
    every = sim.masked_fill(~((is_pos | is_neg).unsqueeze(1) & others), float("-inf"))
    valid = anchor_mask & (is_pos.sum(1, keepdim=True) >= 2)  # an item needs another interacted item
    per_item = torch.logsumexp(every, -1) - torch.logsumexp(pos, -1)  # [B, P]
    return reduce_items(torch.where(valid, per_item, torch.zeros_like(per_item)), valid, reduction)


class Union(CL4FedRec):
    Config = UnionConfig

    def item_loss(self, problem: ContrastiveProblem, item_table: torch.Tensor) -> torch.Tensor:
        is_pos = torch.zeros(problem.item_mask.shape, dtype=torch.int32, device=item_table.device).scatter_reduce(
            1, problem.pos_slot, problem.batch.pos_mask.to(torch.int32), "amax") > 0  # [B, Lu]
        anchors = slot_rows(item_table, problem.pos_slot)  # [B, P, di]
        return union_contrastive(anchors, problem.pos_slot, problem.batch.pos_mask, item_table, is_pos,
                                 problem.item_mask & ~is_pos, self.config.tau, self.config.loss_reduction)
