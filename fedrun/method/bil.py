"""BIL: a batch-insensitive loss for federated retrieval with limited negatives (Ning, Singhal,
Zhou, Prakash, 2021, arXiv:2108.07931) — FedCL's "+BIL" baseline rows (Wu et al. 2022, §4.2 (c)).

Each client trains on its local positives only: the loss does not depend on which other
items happen to be in its batch (hence "batch-insensitive"), and a spread-out regulariser
keeps item embeddings from collapsing onto one direction (Zhang et al. 2017's global
orthogonality term, as FedAwS uses it for positive-only federated learning):

    L_i = mean_j −log σ(s(u_i, p_j))  +  λ · mean_{k ≠ l} ⟨v_k, v_l⟩²,

the second mean over the pairs of distinct items in the client's local item table.

Open points and choices: Ning et al. study several batch-insensitive losses; FedCL names
"local positives only" and gives no formula, so this is one documented reading
(``spread_weight`` = λ). Everything else — sampling, server Adam, one local step — is
FedCL's training (``method=fedcl``), so the rows differ only in the loss.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from fedrun.errors import check_positive
from fedrun.method.fedcl import FedCL, FedCLConfig
from fedrun.sim.batching import LocalProblem
from fedrun.sim.local import slot_rows


@dataclass
class BILConfig(FedCLConfig):
    local_negatives: int = 0  # positives only
    semi_hard: int = 0
    spread_weight: float = 1.0  # λ of the spread-out regulariser

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive("spread_weight", self.spread_weight, allow_zero=True)


def spread_out(item_table: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """item_table [B, Lu, d], mask [B, Lu] → [B] mean of ⟨v_k, v_l⟩² over distinct valid pairs.

    Σ_{k,l} ⟨v_k, v_l⟩² = ‖VᵀV‖²_F, so the sum costs [B, d, d], not [B, Lu, Lu]; the k = l
    terms Σ_k ‖v_k‖⁴ are taken out."""
    vectors = item_table * mask.unsqueeze(-1).to(item_table.dtype)  # [B, Lu, d]
    all_pairs = torch.bmm(vectors.transpose(1, 2), vectors).pow(2).sum((1, 2))  # [B]
    diagonal = vectors.pow(2).sum(-1).pow(2).sum(1)  # [B]
    n = mask.sum(1).to(item_table.dtype)
    return (all_pairs - diagonal) / (n * (n - 1)).clamp_min(1)


def positive_only_loss(scores: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """scores [B, P] of each client's positives, weight [B, P] which count → [B] mean of −log σ(score)."""
    weight = weight.to(scores.dtype)
    return (F.softplus(-scores) * weight).sum(1) / weight.sum(1).clamp_min(1)


class BIL(FedCL):
    Config = BILConfig
    needs_negatives = False
    unpadded_fast_path = False  # the spread-out term couples a client's item rows: the bucketed pass

    def local_loss(self, problem: LocalProblem, user: torch.Tensor, item_table: torch.Tensor,
                   net: dict[str, torch.Tensor]) -> torch.Tensor:
        if problem.sequence is not None:  # one query per target position
            queries, rows = self.sequence_queries(problem, item_table, net)
            scores, weight = (queries * rows).sum(-1), problem.sequence.target  # [B, P]
        else:
            scores = self.env.backbone.score(user, slot_rows(item_table, problem.pos_slot), net)  # [B, P]
            weight = problem.batch.pos_mask
        loss = positive_only_loss(scores, weight)
        if self.config.spread_weight:
            loss = loss + self.config.spread_weight * spread_out(item_table, problem.item_mask)
        return loss
