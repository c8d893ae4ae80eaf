"""Personalized federated recommendation with user clusters (PerFedRec, Luo et al., CIKM 2022, as PerFedRec++
states it: Luo et al., TIST 2024, §4.2–4.3), on LightGCN over the clients' ego graphs — a module its options
compose: PerFedRec (``method=perfedrec``, Algorithm 1 without the pre-training stage) and PerFedRec++
(``method=perfedrecpp``, with it). Each subclasses ``PersonalizedMethod``; neither subclasses the other.
The equations and the choices where the paper is open are written down in the options' modules,
where ``fedrun info method=<option>`` shows them.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, cast

import torch

from fedrun.backbone.base import PrivateParams, PublicParams
from fedrun.defense.base import Defense
from fedrun.errors import check
from fedrun.kernels.batching import LocalProblem
from fedrun.kernels.config import ServerOptimizerConfig
from fedrun.kernels.local import LocalResult
from fedrun.kernels.sampling import ClientSampler
from fedrun.method._clusters import ClusterModels
from fedrun.method.client import Client, ClientResult, ModelView
from fedrun.method.config import PersonalizedConfig
from fedrun.method.context import GraphContext
from fedrun.method.federated import Exchange, FederatedMethod, Needs
from fedrun.method.server import OptimizerServer
from fedrun.privacy.base import Privacy
from fedrun.types import Aggregate, RoundContext, Uploads


class ClusterServer(OptimizerServer):
    """PerFedRec's server program: the global model and the cluster models (Eq. 11). Each round the
    global model takes the aggregate of every upload and, once users are clustered, cluster k's table
    takes the aggregate of its members' (both through the run's defense; the cluster tables with lr 1)."""

    def __init__(self, public: PublicParams, config: ServerOptimizerConfig, clusters: ClusterModels):
        super().__init__(public, config)
        self.clusters = clusters
        self.pending: list[Aggregate | None] | None = None  # the clusters' aggregates, applied by ``step``

    def aggregate(self, uploads: Uploads, senders: torch.Tensor, defense: Defense,
                  ctx: RoundContext) -> Aggregate | None:
        """The global aggregate of every upload, and each cluster's of its members' (applied in ``step``)."""
        if not self.clusters.ready:
            return None
        self.pending = self.clusters.aggregate(uploads, senders, lambda part: defense.aggregate(part, ctx))
        return defense.aggregate(uploads, ctx)

    def step(self, aggregate: Aggregate, ctx: RoundContext) -> dict[str, float]:
        metrics = super().step(aggregate, ctx)
        if self.pending is not None:
            self.clusters.step(self.pending, lr=1.0)
            self.pending = None
        return metrics


class PersonalizedClient(Client):
    """The family's client program: FedAvg's (with the pseudo items and masking) from the global or its
    cluster's downloaded model, the local representation it keeps, and Eq. 6's mixture at prediction.
    ``clusters``: the server's user clusters and cluster models, as the clients download them."""

    def __init__(self, config: PersonalizedConfig, env, private: PrivateParams, view: ModelView,
                 clusters: ClusterModels):
        super().__init__(config, env, private, view)
        self.clusters = clusters
        self.local_user = torch.zeros_like(private.user)  # the local model's representation
        self.has_local = torch.zeros(env.n_users, dtype=torch.bool, device=env.device)
        self._cluster_tables: list[tuple[torch.Tensor, torch.Tensor]] = []

    def download_rows(self, problem: LocalProblem) -> torch.Tensor:
        if self.config.train_from == "global" or not self.clusters.ready:
            return super().download_rows(problem)
        cluster = self.clusters.labels[problem.batch.users]  # [B]
        return self.clusters.tables[cluster.unsqueeze(1), problem.items]  # [B, Lu, di]

    @torch.no_grad()
    def keep_local(self, problem: LocalProblem, item0: torch.Tensor, result: LocalResult) -> torch.Tensor:
        """[B, d] the local representation each client keeps (Eq. 6's local term)."""
        return problem.encode(result.user, item0 + result.item_delta)[0]

    def write_back(self, users: torch.Tensor, result: ClientResult) -> None:
        super().write_back(users, result)
        if result.kept is not None:
            self.local_user[users] = result.kept
            self.has_local[users] = True

    # -- prediction (Eq. 6) ------------------------------------------------------------------------
    def prepare_ranking(self) -> None:
        super().prepare_ranking()  # the global model's tables
        layers = self.env.backbone.config.layers
        self._cluster_tables = [] if not self.clusters.ready else [
            self.context.graph.propagate(self.private.user, table, layers) for table in self.clusters.tables]

    def mixture(self, users: torch.Tensor) -> torch.Tensor:
        """[U, 3] the normalised α of (local, cluster, global) each user has."""
        alpha = torch.tensor(self.config.alpha, dtype=torch.float32, device=users.device)
        have = torch.stack([self.has_local[users], torch.full_like(users, self.clusters.ready, dtype=torch.bool),
                            torch.ones_like(users, dtype=torch.bool)], 1)
        weights = alpha * have
        return weights / weights.sum(1, keepdim=True)

    @torch.no_grad()
    def score_users(self, users: torch.Tensor, history=()) -> torch.Tensor:
        return self._score(users, None)

    @torch.no_grad()
    def score_pairs(self, users: torch.Tensor, items: torch.Tensor, history=()) -> torch.Tensor:
        return self._score(users, items)

    def _score(self, users: torch.Tensor, items: torch.Tensor | None) -> torch.Tensor:
        """Scores [U, I] (or [U] for the pairs ``items``) of Eq. 6's mixture."""
        w = self.mixture(users)  # [U, 3]
        user_g, item_g = self.context.tables

        def score(user_rows: torch.Tensor, item_table: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
            if items is None:
                return user_rows @ item_table.T
            return (user_rows * item_table[items[rows]]).sum(1)

        everyone = torch.arange(users.numel(), device=users.device)
        out = score(w[:, 2:3] * user_g[users], item_g, everyone)  # (weights fold into the queries: linear)
        local = w[:, 0:1] * self.local_user[users]
        if not self.clusters.ready:  # the local representation against the global model's items
            return out + score(local, item_g, everyone)
        cluster = self.clusters.labels[users]
        for k, (user_k, item_k) in enumerate(self._cluster_tables):
            rows = (cluster == k).nonzero().squeeze(1)
            if rows.numel():
                query = w[rows, 1:2] * user_k[users[rows]] + local[rows]  # [n, d]
                out[rows] += score(query, item_k, rows)
        return out

    # -- state -----------------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {**super().state_dict(), "local_user": self.local_user, "has_local": self.has_local}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        with torch.no_grad():
            self.local_user.copy_(state["local_user"])
            self.has_local.copy_(state["has_local"])


class PersonalizedMethod(FederatedMethod):
    """The family's protocol: its client program (``PersonalizedClient``) and server program
    (``ClusterServer``), cluster-proportional selection, the server's k-means on the shared embeddings."""

    graph_backbones = True  # LightGCN over each client's ego graph (fedrun.kernels.ego)
    client_program: ClassVar[type[PersonalizedClient]] = PersonalizedClient  # PerFedRec++: its pre-training

    def __init__(self, config: PersonalizedConfig, env):
        super().__init__(config, env)
        n_clients = int(self.round_clients().numel())
        check(config.clusters <= n_clients, "method.clusters", config.clusters,
              f"at most the {n_clients} clients with training data")

    def make_server(self, public: PublicParams, statistics: dict[str, torch.Tensor]) -> ClusterServer:
        clusters = ClusterModels(self.config.clusters, self.env.sim.seed, self.config.clustering)
        return ClusterServer(public, self.config.server_optimizer, clusters)

    def make_client(self, private: PrivateParams) -> PersonalizedClient:
        return self.client_program(self.config, self.env, private, self.server, self.clusters)

    @property
    def clusters(self) -> ClusterModels:
        """The server's user clusters and cluster models: what the round's clients download (their
        cluster's table) and how the server selects them."""
        return cast(ClusterServer, self.server).clusters

    @classmethod
    def needs(cls, config: PersonalizedConfig) -> Needs:
        why = "its cluster models take the aggregate of each cluster's members, which fabricated clients are not"
        return Needs(no_attack=why, user_contexts=frozenset({"graph"}))

    # -- the round ---------------------------------------------------------------------------------
    def round_users(self, sampler: ClientSampler, round_index: int) -> torch.Tensor:
        if self.config.selection == "cluster" and self.clusters.ready:
            return self.clusters.select(sampler.clients, sampler.per_round, round_index)
        return sampler.users(round_index)

    def exchange(self, users: torch.Tensor, round_index: int, privacy: Privacy) -> Exchange:
        """The clients refresh their shared embeddings (the graph context's exchange); the server refits its
        clusters on the shared embeddings every ``recluster_every`` rounds from ``first_cluster_round``."""
        exchange = super().exchange(users, round_index, privacy)
        start, every = self.first_cluster_round(), self.config.recluster_every
        if round_index >= start and (round_index - start) % every == 0:
            self.clusters.fit(self.shared_embeddings(), self.round_clients(), self.public.item, round_index)
        if not self.clusters.ready:
            return exchange
        sizes = self.clusters.sizes(self.round_clients()).float()
        metrics = {"cluster_size_min": float(sizes.min()), "cluster_size_max": float(sizes.max())}
        return dataclasses.replace(exchange, metrics={**exchange.metrics, **metrics})

    def shared_embeddings(self) -> torch.Tensor:
        """[U, d] the embeddings the clients share (protected, FedGNN §3.3): what the server clusters."""
        return cast(GraphContext, self.client.context).ego.directory.shared

    def first_cluster_round(self) -> int:
        return self.config.cluster_from

    def check_length(self, rounds: int) -> None:
        """The clusters must form inside the run (else it is FedGNN under the family's name)."""
        check(self.first_cluster_round() < rounds, "method.cluster_from", self.config.cluster_from,
              f"a round before the run's last ({rounds} rounds): the clusters never form otherwise")

    # -- state -----------------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {**super().state_dict(), "clusters": self.clusters.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.clusters.load_state_dict(state["clusters"])
