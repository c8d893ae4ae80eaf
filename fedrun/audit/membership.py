"""Target-item membership from the gradient of a known item (issue #65, attack 4): an honest-but-curious server reads
from the *direction* of a client's uploaded row for item t whether t is one of the client's items or a sampled
negative — what the ids alone cannot tell.

In a pairwise or pointwise implicit model a client's loss pulls the rows of its items towards its user vector and
pushes the rows of its negatives away from it. For MF the upload of item i is ±c_i·u (plus a small weight-decay term
along v_i): the rows of one client's upload lie on one line, its items on one side and its negatives on the other
(Yuan et al., "Interaction-level Membership Inference Attack Against Federated Recommender Systems", WWW 2023, use
the same signal with a planted target item; here every uploaded item is a target, no item is planted). The server
  1. finds each client's line: the top eigenvector w_c of Σ_i g_i g_iᵀ over the client's rows g_i of the round
     (power iteration, every client at once);
  2. scores each row by its cosine with w_c;
  3. orients the line. The eigenvector's sign is arbitrary, and nothing in one round's rows fixes it: flipping the
     user vector and swapping the two sides explains the same rows. What fixes it is the server's memory. A client
     uploads the rows of the items it holds round after round, while its negatives are redrawn: the sign is set so
     that the cosine rises with how often the client uploaded the item before. In a client's first round, with no
     history, it rises with the item's popularity instead (the rows the server has received for it): a client's
     items are drawn from what it holds, uniformly sampled negatives from the whole catalogue.

A row scoring above 0 is guessed to be one of the client's items. Metrics, against the clients' training items:
  - ``audit_sign_precision`` / ``_recall``: the guess over every uploaded row of every round. The baseline is the
    ids alone, which guess every uploaded row (precision ``audit_round_precision``, recall 1);
  - ``audit_sign_auc``: AUC of the oriented cosine, the client's items against the other uploaded rows, pooled
    over rows (0.5: the direction says nothing);
  - ``audit_line_auc``: AUC of |cos|, the rows on the client's line against those off it. Where the client's own rows
    are on the line and the others are not, the distance tells them apart whatever the side: FedRec's virtual ratings
    are the client's predictions, so their residual, the row's component along the line, is near 0;
  - ``audit_sign_item_precision`` / ``_recall``: one guess per (client, item) uploaded: the mean oriented cosine
    over its rounds above 0; recall is over all of the clients' items.
The attack assumes nothing about the method. Where the rows are not on one line (NCF's rows mix the MLP's
gradients; explicit MF's signs follow the rating residual, not membership) the direction says less, and the metrics
show how much.
"""

from __future__ import annotations

import torch

from fedrun.audit.rated_set import RatedSetInference
from fedrun.data.client_store import ClientStore
from fedrun.data.negatives import contains
from fedrun.types import Uploads

POWER_STEPS = 12  # power iterations for each client's line; the rows of an MF upload are on it after one


def client_lines(rows: torch.Tensor, client: torch.Tensor, n_clients: int) -> torch.Tensor:
    """The unit top eigenvector of Σ_i g_i g_iᵀ over each client's rows ``rows`` [R, d] (``client`` [R]): [B, d].
    Started from the rows flipped onto the all-ones side, which for rows on one line is the line itself."""
    flip = torch.where(rows.sum(1, keepdim=True) < 0, -1.0, 1.0)  # [R, 1]
    line = torch.zeros(n_clients, rows.shape[1], dtype=rows.dtype, device=rows.device)
    line.index_add_(0, client, rows * flip)  # [B, d]
    for _ in range(POWER_STEPS):
        line = torch.nn.functional.normalize(line, dim=1)
        along = (rows * line[client]).sum(1, keepdim=True)  # [R, 1] g_i · w_c
        line = torch.zeros_like(line).index_add_(0, client, rows * along)
    return torch.nn.functional.normalize(line, dim=1)


def agreement(cosine: torch.Tensor, evidence: torch.Tensor, client: torch.Tensor, n_clients: int) -> torch.Tensor:
    """[B] Σ_i cos_i (e_i − mean_c e) over each client's rows: positive when the cosine rises with the evidence."""
    size = torch.bincount(client, minlength=n_clients).clamp_min(1).double()
    mean = torch.zeros(n_clients, dtype=torch.float64, device=client.device).index_add_(0, client, evidence) / size
    return torch.zeros_like(mean).index_add_(0, client, cosine * (evidence - mean[client]))


class SignMembershipInference:
    """Each uploaded (client, item) row with its oriented cosine, kept until the end of the run is scored."""

    def __init__(self, n_users: int, n_items: int, device: torch.device):
        self.n_items = n_items
        self.history = RatedSetInference(n_users, n_items, device)  # the rounds each client uploaded each item in
        self.received = torch.zeros(n_items, dtype=torch.float64, device=device)  # [I] rows the server got per item
        self.keys: list[torch.Tensor] = []  # per round [R] user * n_items + item
        self.scores: list[torch.Tensor] = []  # per round [R] oriented cosine

    @torch.no_grad()
    def observe(self, uploads: Uploads, senders: torch.Tensor) -> None:
        if uploads.row_item.numel() == 0:
            return
        rows = uploads.row_delta.double()  # [R, d]
        client = uploads.row_client
        self.received.index_add_(0, uploads.row_item, torch.ones_like(uploads.row_item, dtype=torch.float64))
        line = client_lines(rows, client, uploads.n_clients)  # [B, d]
        cosine = (rows * line[client]).sum(1) / rows.norm(dim=1).clamp_min(1e-30)  # [R]
        before = self.history.times_uploaded(senders[client], uploads.row_item).double()  # [R]
        by_history = agreement(cosine, before, client, uploads.n_clients)  # [B]
        by_popularity = agreement(cosine, torch.log1p(self.received[uploads.row_item]), client, uploads.n_clients)
        orient = torch.where(torch.where(by_history != 0, by_history, by_popularity) < 0, -1.0, 1.0)  # [B]
        self.history.observe(uploads, senders)
        self.keys.append(senders[client] * self.n_items + uploads.row_item)
        self.scores.append((cosine * orient[client]).float())

    def score(self, truth: ClientStore) -> dict[str, float]:
        if not self.keys:
            return {}
        keys, scores = torch.cat(self.keys), torch.cat(self.scores).double()  # [N] every uploaded row of every round
        users = torch.unique(keys // self.n_items)  # [C] the clients seen
        rows, _, items, _ = truth.flat(users)
        true_keys = torch.sort(users[rows] * self.n_items + items.to(users.device)).values  # the truth: read here only
        member = contains(true_keys, keys)  # [N]
        guessed = scores > 0
        hits = float((guessed & member).sum())
        unique, slot = torch.unique(keys, return_inverse=True)  # one guess per (client, item)
        summed = torch.zeros(unique.numel(), dtype=torch.float64, device=keys.device).index_add_(0, slot, scores)
        item_guess = summed > 0  # the mean over its rounds above 0
        item_hits = float((item_guess & contains(true_keys, unique)).sum())
        return {
            "audit_sign_precision": hits / max(float(guessed.sum()), 1.0),
            "audit_sign_recall": hits / max(float(member.sum()), 1.0),
            "audit_sign_auc": pooled_auc(scores, member),
            "audit_line_auc": pooled_auc(scores.abs(), member),
            "audit_sign_item_precision": item_hits / max(float(item_guess.sum()), 1.0),
            "audit_sign_item_recall": item_hits / max(float(true_keys.numel()), 1.0),
        }


def pooled_auc(scores: torch.Tensor, positive: torch.Tensor) -> float:
    """The AUC of ``scores`` [N] for ``positive`` [N] against the rest, ties counted half (Mann–Whitney)."""
    n_pos, n_neg = int(positive.sum()), int((~positive).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    values, inverse = torch.unique(scores, return_inverse=True)  # ascending distinct scores
    pos = torch.bincount(inverse[positive], minlength=values.numel()).double()
    neg = torch.bincount(inverse[~positive], minlength=values.numel()).double()
    below = torch.cumsum(neg, 0) - neg  # negatives strictly below each score
    return float((pos * (below + 0.5 * neg)).sum()) / (n_pos * n_neg)
