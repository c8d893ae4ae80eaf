"""Interaction inference from shared user representations (issue #65, attack 3): an honest-but-curious server ranks
the catalogue with the user vector a client sent it and guesses the top K as the client's items.

FedCL uploads each sampled client's (LDP-perturbed) user embedding for its semi-hard negatives (§3.1); FedGNN,
PerFedRec and PerFedRec++ share their (protected) user embeddings for the neighbour expansion and the clusters. The
server holds the public model, so it can score every item for the received vector exactly as the backbone scores
it — the same retrieval the semi-hard negatives use (an inner product with the item rows when the backbone's score
is one, the backbone's full score otherwise). The model was trained to rank each client's items high for its own
vector, so an unperturbed vector gives them away; LDP noise of scale 2δ/ε pushes the guess towards a random one.

The guess is the top K under the public model of the round the vector was received (the latest vector of each
client). The metric is recall@K of the client's training items, averaged over the clients seen, and of its held-out
(test) items: a sequential backbone's shared vector is the next-item query, which points at the items to come more
than at the history. The baseline is the K most popular training items guessed for every client (the best guess
that ignores the upload); a random guess scores K / |I|.
"""

from __future__ import annotations

import torch

from fedrun.backbone.base import Backbone, PublicParams
from fedrun.data.client_store import ClientStore
from fedrun.data.negatives import contains
from fedrun.retrieval.search import top_k_relevant
from fedrun.types import EmbeddingUploads


class SharedEmbeddingInference:
    def __init__(self, n_users: int, n_items: int, k: int, backbone: Backbone, device: torch.device):
        self.n_items, self.k, self.backbone = n_items, k, backbone
        self.guess = torch.full((n_users, k), -1, dtype=torch.int64, device=device)  # [U, K] -1: nothing received

    @torch.no_grad()
    def observe(self, shared: EmbeddingUploads, public: PublicParams) -> None:
        """``shared`` in the order it was sent; a client that sent twice (a graph's registration, then the round's
        refresh) is guessed from its latest vector."""
        order = torch.arange(shared.users.numel(), device=shared.users.device)
        last = torch.full((self.guess.shape[0],), -1, dtype=torch.int64, device=order.device)
        last.scatter_reduce_(0, shared.users, order, "amax")
        latest = last[shared.users] == order  # [N]
        # [B, K] the semi-hard negatives' own retrieval, exact (torch)
        self.guess[shared.users[latest]] = top_k_relevant(self.backbone, shared.vectors[latest], public, self.k,
                                                          "torch")

    def score(self, truth: ClientStore, held_out: ClientStore | None = None) -> dict[str, float]:
        """Recall@K of the clients' training items (``truth``) and of their held-out items (``held_out``: for a
        sequential backbone the shared vector is the next-item query, which points at the items to come)."""
        users = torch.nonzero(self.guess[:, 0] >= 0).squeeze(1)  # [C] the clients whose vector the server has
        if users.numel() == 0:
            return {}  # the protocol shares no user vectors
        popular = torch.bincount(truth.items.to(users.device), minlength=self.n_items).topk(self.k).indices  # [K]
        metrics = {"audit_shared_clients": float(users.numel()),
                   f"audit_shared_random_recall_at_{self.k}": self.k / self.n_items}
        for name, store in (("", truth), ("heldout_", held_out)):
            if store is not None:
                metrics.update(self.recall(users, store, popular, name))
        return metrics

    def recall(self, users: torch.Tensor, store: ClientStore, popular: torch.Tensor, name: str) -> dict[str, float]:
        """Mean over the clients holding any item of ``store`` of recall@K: the guess's and popularity's."""
        held = store.sizes().to(users.device)[users].double()  # [C] |I_u|
        users, held = users[held > 0], held[held > 0]
        if users.numel() == 0:
            return {}
        rows, _, items, _ = store.flat(users)
        true_keys = torch.sort(users[rows] * self.n_items + items.to(users.device)).values  # the truth: read here only
        k = self.k
        recalls = {}
        for guesser, guess in (("", self.guess[users]), ("popularity_", popular.expand(users.numel(), k))):
            keys = users.unsqueeze(1) * self.n_items + guess  # [C, K]
            hits = contains(true_keys, keys.reshape(-1)).view_as(keys).sum(1).double()  # [C]
            recalls[f"audit_shared_{name}{guesser}recall_at_{k}"] = float((hits / held).mean())
        return recalls
