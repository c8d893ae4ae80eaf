"""Sequential backbones: the user representation is inferred from the local history by a
shared encoder; items are shared embedding rows; score(u, i) = ⟨q_u, e_i⟩.

Nothing is private per user beyond the history itself (``user_width = 0``): a client's
"user embedding" (what FedCL uploads, what evaluation ranks with) is the encoder's query
for the next item after its history, computed on the client from its own data.

Training works position by position on each client's last ``max_len`` items, left-aligned
(``[B, L]``, padding at the end): ``train_view`` says which positions are prediction
targets (GRU4Rec: every item after the first; BERT4Rec: the masked ones) and ``encode``
gives the query that predicts each target from the sequence. Network weights are plain
tensors, shared ``[*shape]`` or one copy per client ``[B, *shape]`` (``base.linear``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from fedrun.backbone.base import Backbone
from fedrun.backbone.mf import MF
from fedrun.data.client_store import ClientStore, recent_history
from fedrun.errors import check


@dataclass(frozen=True)
class SequenceView:
    """How one batch of sequences is trained: which positions are targets, which inputs are
    replaced by the mask token (BERT4Rec), and the generator of dropout masks."""

    target: torch.Tensor  # [B, L] bool
    corrupt: torch.Tensor | None  # [B, L] bool, or None
    dropout: torch.Generator | None = None


class SequentialBackbone(MF):
    """Subclasses implement ``train_view``, ``encode`` and ``infer``. The "user" a sequential
    backbone scores with is its query vector, so scores are MF's inner products ⟨q, e_i⟩."""

    losses = ("ce", "bce", "bpr")
    sequential = True

    @property
    def user_width(self) -> int:
        return 0

    @property
    def max_len(self) -> int:
        return self.config.max_len

    @property
    def history_len(self) -> int:
        """How many of the most recent items ``infer`` reads."""
        return self.config.max_len

    def train_view(self, users: torch.Tensor, mask: torch.Tensor, seed: int,
                   dropout: torch.Generator | None = None) -> SequenceView:
        raise NotImplementedError

    def encode(self, rows: torch.Tensor, mask: torch.Tensor, view: SequenceView,
               net: dict[str, torch.Tensor]) -> torch.Tensor:
        """rows [B, L, d] the sequence's item embeddings, mask [B, L] → queries [B, L, d]: the
        representation that predicts the item at each target position."""
        raise NotImplementedError

    def infer(self, rows: torch.Tensor, mask: torch.Tensor, net: dict[str, torch.Tensor]) -> torch.Tensor:
        """rows [U, L, d] of the last ``history_len`` items, mask [U, L] → the next-item query [U, d]."""
        raise NotImplementedError


def dropout(x: torch.Tensor, p: float, gen: torch.Generator | None) -> torch.Tensor:
    """Inverted dropout with a seeded generator (no generator or p = 0: identity, e.g. at inference)."""
    if gen is None or p == 0:
        return x
    keep = torch.rand(x.shape, generator=gen, device=x.device) >= p
    return x * keep / (1 - p)


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """LayerNorm over the last dim with a shared [d] or per-client [B, d] affine (x [B, L, d])."""
    x = torch.nn.functional.layer_norm(x, x.shape[-1:], eps=eps)
    if weight.dim() == 2:
        return x * weight.unsqueeze(1) + bias.unsqueeze(1)
    return x * weight + bias


@torch.no_grad()
def infer_users(backbone: SequentialBackbone, stores: Sequence[ClientStore], users: torch.Tensor, item: torch.Tensor,
                net: dict[str, torch.Tensor], chunk: int = 512) -> torch.Tensor:
    """users [U] → their next-item queries [U, d], each inferred from its own history (the rows of
    ``stores`` in order, last ``history_len`` kept), in chunks of ``chunk`` users."""
    check(len(stores) > 0, "history", "[]", f"the users' histories: {type(backbone).__name__} infers users from them")
    out = []
    for part in torch.split(users, chunk):
        items, mask = recent_history(list(stores), part, backbone.history_len)  # [u, L]
        out.append(backbone.infer(item[items], mask, net))
    return torch.cat(out) if out else item.new_zeros(0, item.shape[1])


def user_queries(backbone: Backbone, user_table: torch.Tensor, stores: Sequence[ClientStore], users: torch.Tensor,
                 item: torch.Tensor, net: dict[str, torch.Tensor]) -> torch.Tensor:
    """[U] → what each user scores with: its row of ``user_table`` (ID-based backbones), or the
    query its history (the rows of ``stores``) infers under ``item`` / ``net`` (sequential)."""
    if backbone.sequential:
        return infer_users(backbone, stores, users, item, net)
    return user_table[users]


def score_pairs(backbone: Backbone, user_table: torch.Tensor, stores: Sequence[ClientStore], users: torch.Tensor,
                items: torch.Tensor, item: torch.Tensor, net: dict[str, torch.Tensor]) -> torch.Tensor:
    """users [N], items [N] → scores [N], each distinct user's query formed once."""
    distinct, index = torch.unique(users, return_inverse=True)
    queries = user_queries(backbone, user_table, stores, distinct, item, net)  # [U', du]
    return backbone.score(queries[index], item[items].unsqueeze(1), net)[:, 0]
