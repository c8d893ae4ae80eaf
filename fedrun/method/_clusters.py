"""Cluster-level models (PerFedRec, Luo et al. CIKM 2022; PerFedRec++ §4.3), server side.

- **User clustering** (§4.3.1): k-means (scikit-learn) over the embeddings the users shared
  (``EmbeddingUploads``: the server never sees a private row). Each refit starts from the
  previous centroids, so cluster k stays cluster k across refits and keeps its model (the
  authors' code refits from scratch with a fixed seed, which can permute the labels under the
  cluster models).
- **Cluster models** (§4.3.3): one item table per cluster, stacked ``[C, I, d]``, created as
  copies of the global table at the first fit; each round, cluster k's table takes the
  aggregate (through the run's defense) of the uploads of the round's clients in cluster k.
- **Client selection** (§4.3.2): "within each cluster, a few random users are selected in
  proportion to the cluster size": cluster k contributes round(B·|k|/n) clients (largest
  remainders), drawn without replacement by a seeded generator per round.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch
from sklearn.cluster import KMeans

from fedrun.core.seeding import derive_seed, generator
from fedrun.types import Aggregate, Uploads


class ClusterModels:
    def __init__(self, n_clusters: int, seed: int, kind: str = "kmeans"):
        self.n_clusters, self.seed, self.kind = n_clusters, seed, kind  # kind: kmeans | random (Table 5's ablation)
        self.labels: torch.Tensor | None = None  # [U] cluster of every user (after the first fit)
        self.tables: torch.Tensor | None = None  # [C, I, d]
        self.centers: np.ndarray | None = None  # [C, d]

    @property
    def ready(self) -> bool:
        return self.labels is not None

    def fit(self, shared: torch.Tensor, clients: torch.Tensor, global_item: torch.Tensor, round_index: int) -> None:
        """k-means over the shared rows [U, d] of the ``clients`` [n] → every user's cluster (``random``:
        a uniformly random cluster per user, drawn afresh at each fit)."""
        if self.tables is None:
            self.tables = global_item.detach().unsqueeze(0).repeat(self.n_clusters, 1, 1)
        if self.kind == "random":
            gen = generator(self.seed, "random-clusters", round_index)
            self.labels = torch.randint(self.n_clusters, (shared.shape[0],), generator=gen).to(shared.device)
            return
        points = shared[clients].detach().double().cpu().numpy()
        init = "k-means++" if self.centers is None else self.centers
        kmeans = KMeans(self.n_clusters, init=init, n_init=1,
                        random_state=derive_seed(self.seed, "kmeans", round_index) % (2 ** 32)).fit(points)
        self.centers = kmeans.cluster_centers_
        labels = kmeans.predict(shared.detach().double().cpu().numpy())
        self.labels = torch.as_tensor(labels, dtype=torch.int64, device=shared.device)

    def sizes(self, clients: torch.Tensor) -> torch.Tensor:
        return torch.bincount(self.labels[clients], minlength=self.n_clusters)  # [C]

    def select(self, clients: torch.Tensor, per_round: int, round_index: int) -> torch.Tensor:
        """[B] clients, cluster k contributing round(B·|k|/n) (largest remainders) drawn without replacement."""
        label = self.labels[clients]
        sizes = self.sizes(clients).double()
        quota = per_round * sizes / sizes.sum()
        counts = quota.floor().long()
        short = per_round - int(counts.sum())
        if short > 0:
            counts[torch.argsort(quota - counts, descending=True, stable=True)[:short]] += 1
        gen = generator(self.seed, "cluster-selection", round_index)
        chosen = []
        for k in range(self.n_clusters):  # C ≤ a handful: a loop over clusters, not clients
            members = clients[label == k]
            order = torch.randperm(members.numel(), generator=gen).to(members.device)
            chosen.append(members[order[:int(counts[k])]])
        return torch.cat(chosen)

    def aggregate(self, uploads: Uploads, senders: torch.Tensor,
                  rule: Callable[[Uploads], Aggregate]) -> list[Aggregate | None]:
        """Per cluster, the ``rule``'s aggregate (the run's defense) of its members' uploads (None: no
        member this round)."""
        cluster = self.labels[senders]  # [B] in upload order
        out = []
        for k in range(self.n_clusters):
            members = cluster == k
            out.append(rule(uploads.of_clients(members)) if bool(members.any()) else None)
        return out

    @torch.no_grad()
    def step(self, aggregates: list[Aggregate | None], lr: float) -> None:
        for k, aggregate in enumerate(aggregates):
            if aggregate is not None:
                self.tables[k].index_add_(0, aggregate.items, aggregate.item_delta, alpha=lr)

    def state_dict(self) -> dict:
        centers = None if self.centers is None else torch.from_numpy(self.centers.copy())  # a checkpoint holds tensors
        return {"labels": self.labels, "tables": self.tables, "centers": centers}

    def load_state_dict(self, state: dict) -> None:
        self.labels, self.tables = state["labels"], state["tables"]
        self.centers = None if state["centers"] is None else state["centers"].double().cpu().numpy()

