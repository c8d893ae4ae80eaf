"""The server side of FedCL's federated negative sampling (Wu et al. 2022, §3.1, Alg. 1 l. 10–14).

The server keeps the latest perturbed embedding of every user who has uploaded (open point:
with 16 users per round and C = 25 clusters, clustering needs the users of past rounds too),
reclusters them every ``recluster_every`` rounds, and for each of the round's clients:
  1. takes its cluster centroid c_i (a client whose embedding changed since the last
     clustering gets the nearest centroid; ``clustering=none``: its own embedding);
  2. retrieves the R% items of highest relevance to c_i (inner product with the item
     embeddings through Faiss or torch; the backbone's own score when it is not an
     inner product, e.g. NeuMF) — recomputed every round, since the items move;
  3. draws T of them uniformly without replacement, independently per client
     (``hardest=true``: the T most relevant items, the "globally hardest" variant of Fig. 3).

It is built from its config and the (public) backbone, and receives only
``EmbeddingUploads`` and the public parameters — never client data or private rows.
"""

from __future__ import annotations

import math
import time
from typing import cast

import torch

from fedrun.backbone.base import Backbone, PublicParams
from fedrun.core.seeding import derive_seed, generator
from fedrun.kernels.guards import check_finite
from fedrun.retrieval.cluster import Clusters, check_preaggregation, cluster
from fedrun.retrieval.config import HardNegativeConfig
from fedrun.retrieval.search import top_k_relevant
from fedrun.types import EmbeddingUploads


class HardNegativeServer:
    def __init__(self, config: HardNegativeConfig, backbone: Backbone, n_users: int, dim: int, seed: int,
                 device: torch.device):
        if config.clustering == "ward":
            check_preaggregation(n_users, config.ward_max_points)
        self.config, self.backbone, self.seed = config, backbone, seed
        self.cache = torch.zeros(n_users, dim, device=device)  # latest perturbed embedding per user
        self.known = torch.zeros(n_users, dtype=torch.bool, device=device)
        self.assign = torch.full((n_users,), -1, dtype=torch.int64, device=device)  # -1: not in the clustering
        self.centroids: torch.Tensor | None = None  # [C', d]
        self.cluster_seconds = 0.0  # time spent clustering (logged)

    def receive(self, uploads: EmbeddingUploads, round_index: int) -> None:
        check_finite(uploads.vectors, "the uploaded user embeddings", round_index)  # before they reach the cache
        self.cache[uploads.users] = uploads.vectors
        self.known[uploads.users] = True
        self.assign[uploads.users] = -1
        if self.config.clustering != "none" and (self.centroids is None
                                                 or round_index % self.config.recluster_every == 0):
            self._recluster(round_index)

    def _recluster(self, round_index: int) -> None:
        started = time.perf_counter()
        users = torch.nonzero(self.known).squeeze(1)
        cfg = self.config
        found: Clusters = cluster(self.cache[users], cfg.clustering, cfg.n_clusters,
                                  derive_seed(self.seed, "clustering", round_index), cfg.ward_max_points,
                                  cfg.pre_clusters)
        self.assign.fill_(-1)
        self.assign[users] = found.assign
        self.centroids = found.centroids
        self.cluster_seconds += time.perf_counter() - started

    def queries(self, users: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The round's users [B] → (query vectors [Q, d], query of each user [B])."""
        if self.config.clustering == "none":
            return self.cache[users], torch.arange(users.numel(), device=users.device)
        assign = self.assign[users]
        centroids = cast(torch.Tensor, self.centroids)  # (clustering on: fitted before any round's query)
        stale = assign < 0
        if stale.any():  # uploaded since the last clustering: nearest centroid
            assign = assign.clone()
            assign[stale] = torch.cdist(self.cache[users[stale]], centroids).argmin(1)
        return centroids, assign

    def hard_sets(self, queries: torch.Tensor, public: PublicParams, k: int) -> torch.Tensor:
        """[Q, k] the k items most relevant to each query (sorted by item id)."""
        return top_k_relevant(self.backbone, queries, public, k, self.config.search)

    @torch.no_grad()
    def negatives(self, users: torch.Tensor, public: PublicParams, round_index: int) -> torch.Tensor:
        """[B] → [B, T] semi-hard negative item ids sent to each client this round."""
        cfg, n_items = self.config, public.item.shape[0]
        queries, query_of = self.queries(users)
        if cfg.hardest:  # the T most relevant items themselves (as a set, sorted by id)
            return self.hard_sets(queries, public, cfg.semi_hard)[query_of]  # [B, T]
        k = max(cfg.semi_hard, math.ceil(cfg.hard_ratio * n_items))
        hard = self.hard_sets(queries, public, k)[query_of]  # [B, k]
        gen = generator(self.seed, "semi-hard", round_index, users.device)
        picks = torch.rand(users.numel(), k, generator=gen, device=users.device).topk(cfg.semi_hard, dim=1).indices
        return hard.gather(1, picks)  # [B, T] distinct items per client

    def state_dict(self) -> dict:
        return {"cache": self.cache, "known": self.known, "assign": self.assign, "centroids": self.centroids}

    def load_state_dict(self, state: dict) -> None:
        self.cache.copy_(state["cache"])
        self.known.copy_(state["known"])
        self.assign.copy_(state["assign"])
        self.centroids = state["centroids"]
