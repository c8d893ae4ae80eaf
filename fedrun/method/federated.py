"""The contract of a federated method: a client step and a server step, plus the protocol
phases a method declares. The round that calls them exists once, above the methods
(``fedrun.sim.round``); a method never owns privacy, attack or defense.

A method fills:
  - ``make_server``: its server program (``fedrun.method.server.Server``: the download view, its own
    aggregation if any, the server step), built from the public parameters and values the method
    hands it, never the env, client data or private rows;
  - ``problems`` / ``client_step``: the vectorized client step of a bucket → :class:`ClientResult`
    (uploads, the clients' new private rows, losses, per-client statistics) — values returned,
    nothing stashed on ``self``; ``local_loss`` where only the loss differs from plain training;
  - optionally ``exchange`` (a protocol phase before local training: FedCL's embedding exchange),
    ``client_protocol`` (a client-side phase after the client steps: FedRec++'s relay to its
    denoisers), ``observe_uploads`` (statistics of the uploads: audits, accounting), ``traffic``;
  - ``needs``: what the method requires of the other components (``Needs``), checked by
    ``fedrun.app.build.check_combination`` before any data is read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Sequence

import torch

from fedrun.backbone.base import PrivateParams, PublicParams
from fedrun.core.seeding import derive_seed, generator
from fedrun.data.client_store import ClientStore
from fedrun.data.negatives import sample_batch_negatives
from fedrun.data.statistics import server_statistics
from fedrun.defense.base import Defense
from fedrun.kernels.batching import LocalProblem, local_problem
from fedrun.kernels.env import RunEnv
from fedrun.kernels.guards import UploadSchema
from fedrun.kernels.local import ClientOptimizer, LocalResult, problem_loss, train_local
from fedrun.kernels.rows import LOCAL, RowReducer
from fedrun.kernels.sampling import ClientSampler
from fedrun.method._training import LocalTraining, LocalTrainingConfig
from fedrun.method.base import Method
from fedrun.method.context import context_for
from fedrun.method.fedsgd import FastRound
from fedrun.method.server import OptimizerServer, Server
from fedrun.privacy.base import Privacy
from fedrun.types import ClientBatch, RoundContext, Uploads


@dataclass(frozen=True)
class Needs:
    """What a method requires of the other components; each field, when set, says why (it ends the
    refusal "<group>=<option> cannot run with method=<name>: <why>")."""

    exact_sum: str | None = None  # its server rule needs Σ_c Δ_c exactly: a linear rule with unit weights
    plain_uploads: str | None = None  # uploads must reach the server as computed: no privacy transform
    no_attack: str | None = None  # malicious clients cannot join its protocol
    user_contexts: frozenset[str] = frozenset({"ids"})  # which backbone user contexts its client step handles
    # statistics of the training data its server program is handed (``fedrun.data.statistics``), as the
    # protocol's server knows them: e.g. item_popularity. Nothing else of the data reaches the server.
    server_reads: frozenset[str] = frozenset()


@dataclass(frozen=True)
class ClientResult:
    """One bucket's client step. ``uploads`` leave the clients; ``user`` [B, du] (the new private
    rows) stays on them — the round writes it back; ``loss`` [B]; ``stats``: per-client statistics
    ([B] or [1] tensors) that ``client_metrics`` summarises; ``relay``: what the bucket hands a
    client-side protocol phase (``client_protocol``), never the server."""

    uploads: Uploads
    user: torch.Tensor
    loss: torch.Tensor
    stats: dict[str, torch.Tensor] = field(default_factory=dict)
    relay: Any = None


@dataclass(frozen=True)
class Traffic:
    """Mean bytes per participating client each way, and any further accounting metrics."""

    up: float
    down: float
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Exchange:
    """What the server sends the round's clients before they train (e.g. FedCL's semi-hard
    negatives, [B, T]), what that exchange cost per client, and metrics it reports."""

    sent: torch.Tensor | None = None
    bytes_up: float = 0.0
    bytes_down: float = 0.0
    metrics: dict[str, float] = field(default_factory=dict)


class FederatedMethod(Method):
    num_negatives: int = 0
    has_fedsgd_path: ClassVar[bool] = False  # fast_round is a FedSGD pass (logged as run.fedsgd_fast_path)

    def __init__(self, config: Any, env: RunEnv):
        super().__init__(config, env)
        # FedAvg's local training (``fedrun.method._training``), composed when the option's config is its settings
        self.training = LocalTraining(config, env.backbone) if isinstance(config, LocalTrainingConfig) else None
        if self.training is not None:
            self.num_negatives = self.training.num_negatives
        private, public = env.backbone.init_params(env.n_users, env.n_items, generator(env.sim.seed, "init"))
        self.private = PrivateParams(private.user.to(env.device))  # client side
        self.context = context_for(env)  # how a user reaches the model: ids, sequence or graph (client side)
        statistics = server_statistics(self.needs(config).server_reads, env.split, env.n_items)
        self.server = self.make_server(
            PublicParams(public.item.to(env.device), {k: v.to(env.device) for k, v in public.net.items()}), statistics)
        self.prepared_for: int | None = None  # the server step prepare_ranking last ran for

    @property
    def public(self) -> PublicParams:
        """The public model as the clients download it."""
        return self.server.public

    @property
    def server_steps(self) -> int:
        """Server steps taken: the version of the public model (ranking is prepared once per version)."""
        return self.server.steps

    # -- declared capabilities -------------------------------------------------------------
    @classmethod
    def needs(cls, config: Any) -> Needs:
        """What this method requires of privacy, attack, defense and backbone (``Needs``); by default the
        ID context, and the graph one where its client step trains graph backbones (ego graphs)."""
        return Needs(user_contexts=frozenset({"ids", "graph"} if cls.graph_backbones else {"ids"}))

    @classmethod
    def l2_step_lr(cls, config: Any) -> float | None:
        return config.l2_step_lr() if isinstance(config, LocalTrainingConfig) else None

    @classmethod
    def offers(cls, config: Any) -> frozenset[str]:
        """What a malicious client of this protocol can use beyond the public model view:
        ``client_step`` — the benign client step run on fabricated data (``fabricated_step``)."""
        return frozenset({"model_view"})

    def fabricated_step(self, batch: ClientBatch, user: torch.Tensor, round_index: int) -> ClientResult:
        """The benign client step, as the protocol's client software runs it, for clients outside the
        split (an attacker's fabricated users, ids ≥ n_users) holding their own private rows ``user``
        [B, du]: their negatives drawn as a benign client's, then the same local training (the default
        client step; a method offers ``client_step`` only where that is its client's)."""
        negatives = None
        if self.num_negatives:
            negatives = sample_batch_negatives(batch.users, batch.pos, batch.pos_mask, self.num_negatives,
                                               self.env.n_items, self.negative_seed(round_index))
        return self.local_step(local_problem(batch, negatives, self.env.n_items), user)

    @classmethod
    def shares_embeddings(cls, config: Any) -> bool:
        """Whether clients upload a user embedding (what ``privacy`` target ``user_embedding`` protects)."""
        return False

    # -- hooks ---------------------------------------------------------------------------
    def make_server(self, public: PublicParams, statistics: dict[str, torch.Tensor]) -> Server:
        """The method's server program (``fedrun.method.server``), from the public parameters, the data
        ``statistics`` it declares (``Needs.server_reads``, by name) and the method's settings — never the
        env's client store or split, nor the private rows. By default, with FedAvg's local training, the
        public model and its ``server_optimizer``."""
        if self.training is None:
            raise NotImplementedError(f"{type(self).__name__} builds no server program")
        return OptimizerServer(public, self.training.config.server_optimizer)

    def round_clients(self) -> torch.Tensor:
        """[C] the clients the rounds sample from (default: every client with training data)."""
        return self.env.clients_with_data()

    def prepare_ranking(self) -> None:
        """Client-side work before ranking with the current public model (cold-start codes, fast
        adaptation); run once per server step by the scoring methods. By default the user context's (a
        graph propagates the union of the local graphs)."""
        self.context.prepare(self.private.user, self.public)

    def ensure_prepared(self) -> None:
        if self.prepared_for != self.server_steps:
            self.prepare_ranking()
            self.prepared_for = self.server_steps

    def upload_schema(self) -> UploadSchema:
        """The fields a client may upload (checked every round): deltas of the public item rows and
        weights, unless the protocol sends something else (MetaMF: gradients of its generated model)."""
        return UploadSchema.of_public(self.public)

    def exchange(self, users: torch.Tensor, round_index: int, privacy: Privacy) -> Exchange:
        """A protocol step before local training (server ↔ clients; ``privacy`` protects what the
        clients send in it); by default the user context's (a graph's clients refresh the embeddings they
        share), none for the others."""
        bytes_up = self.context.exchange(self.private.user, users, round_index, privacy)
        return Exchange() if bytes_up is None else Exchange(bytes_up=bytes_up)

    def local_loss(self, problem: LocalProblem, user: torch.Tensor, item_table: torch.Tensor,
                   net: dict[str, torch.Tensor]) -> torch.Tensor:
        """Per-client loss [B] on the clients' local copies (default: the backbone's loss, reduced as FedAvg's
        local training says where the method composes it)."""
        if self.training is not None:
            return self.training.loss(problem, user, item_table, net)
        return problem_loss(self.env.backbone, problem, user, item_table, net)

    def client_step(self, problem: LocalProblem) -> ClientResult:
        """Vectorized over the bucket's clients. Default: ``sim.local_epochs`` steps of
        ``config.optimizer`` on ``local_loss``; upload the deltas of the touched item rows and of
        the shared weights; the user row stays."""
        return self.local_step(problem, self.private.user[problem.batch.users])

    def local_step(self, problem: LocalProblem, user0: torch.Tensor) -> ClientResult:
        """The default client step from the clients' private rows ``user0`` [B, du]."""
        users = problem.batch.users
        item0 = self.download_rows(problem)  # [B, Lu, di]

        def loss_fn(user, item, net):
            return self.local_loss(problem, user, item, net)

        result = train_local(self.env.backbone, problem, user0, item0, self.public.net,
                             self.client_optimizer(problem), self.env.sim.local_epochs, loss_fn)
        self.keep_local(problem, item0, result)
        client, slot = problem.item_mask.nonzero(as_tuple=True)  # [R], [R]
        uploads = Uploads(users.numel(), client, problem.items[client, slot], result.item_delta[client, slot],
                          result.net_delta, problem.weight)
        return ClientResult(uploads, result.user, result.loss)

    def client_optimizer(self, problem: LocalProblem) -> ClientOptimizer:
        """The optimizer of the bucket's local steps (PerFedRec++: its own during pre-training)."""
        return self.config.optimizer

    def download_rows(self, problem: LocalProblem) -> torch.Tensor:
        """The item rows [B, Lu, di] the bucket's clients start local training from: the public model's
        (PerFedRec: its cluster's model)."""
        return self.public.item[problem.items]

    def keep_local(self, problem: LocalProblem, item0: torch.Tensor, result: LocalResult) -> None:
        """Client side, after local training: what the clients keep of their local models (PerFedRec's
        local predictor); nothing by default."""

    def round_users(self, sampler: ClientSampler, round_index: int) -> torch.Tensor:
        """[B] the round's clients (PerFedRec: cluster-proportional); the sampler's by default."""
        return sampler.users(round_index)

    def client_protocol(self, uploads: Uploads, results: list[ClientResult],
                        ctx: RoundContext) -> tuple[Uploads, dict[str, float]]:
        """A client-side phase after the client steps: the buckets' (privatized) ``uploads`` in bucket
        order and their ``results`` → (what the round's clients upload, metrics). Default: none."""
        return uploads, {}

    def client_metrics(self, stats: dict[str, list[torch.Tensor]]) -> dict[str, float]:
        """Per-round metrics from the buckets' ``ClientResult.stats``; none by default."""
        return {}

    def reducer(self) -> RowReducer:
        """How the round's exact sum is computed (``Needs.exact_sum`` methods; FedMF: a Paillier sum)."""
        return LOCAL

    def observe_uploads(self, uploads: Uploads, senders: torch.Tensor, ctx: RoundContext) -> dict[str, float]:
        """Server side: statistics of the benign uploads (``senders[c]``: the user id of upload client
        c, as the server of any FL protocol knows) — audits, accounting. None by default."""
        return {}

    def fast_path_exact(self) -> bool:
        """Whether ``fast_round`` gives exactly the general path's aggregate when the uploads reach a
        linear rule untransformed (a FedSGD pass: one local plain-SGD step)."""
        return self.has_fedsgd_path and self.fedsgd_exact()

    def fast_round(self, users: torch.Tensor, round_index: int, sent: torch.Tensor | None,
                   rule: Defense) -> FastRound | None:
        """Optional shortcut computing the aggregate directly under the linear ``rule`` (``sent``: what
        ``exchange`` gave the clients); None when not exact. By default FedAvg's local training's FedSGD pass
        (run only where ``fast_path_exact`` holds)."""
        if self.training is None:
            return None
        return self.training.fedsgd_round(self.env, self.public, self.private.user, users,
                                          self.negative_seed(round_index), rule)

    def fedsgd_exact(self) -> bool:
        """One plain-SGD local step with ``sim.fast_path=auto``: the client side of FedSGD's exactness (and,
        with FedAvg's local training, its loss on the rows themselves: ``LocalTraining.fedsgd_exact``)."""
        return (self.env.sim.fast_path == "auto" and self.env.sim.local_epochs == 1
                and self.config.optimizer.is_plain_sgd
                and (self.training is None or self.training.fedsgd_exact(self.context.per_example)))

    def problems(self, users: torch.Tensor, round_index: int, sent: torch.Tensor | None = None) -> list[LocalProblem]:
        """The round's buckets of local problems (``sent``: what ``exchange`` gave the clients)."""
        env = self.env
        seed = self.negative_seed(round_index)
        out = []
        for _, batch in env.client_batches(users, 1 + self.num_negatives):
            batch = self.prepare_batch(batch, round_index)
            negatives = None
            if self.num_negatives:
                negatives = sample_batch_negatives(batch.users, batch.pos, batch.pos_mask, self.num_negatives,
                                                   env.n_items, seed)
            out.append(local_problem(batch, negatives, env.n_items))
        return self.context.attach(out, round_index, sent)

    def prepare_batch(self, batch: ClientBatch, round_index: int) -> ClientBatch:
        """What the clients do to their own pairs before the round's training (FedGNN's pseudo items,
        PerFedRec++'s masking: ``fedrun.method._pseudo``); the pairs as they are by default."""
        return batch

    def negative_seed(self, round_index: int) -> int:
        """The seed of round ``round_index``'s negatives (keyed per client and position under it)."""
        if self.training is not None:
            round_index = self.training.negative_round(round_index)
        return derive_seed(self.env.sim.seed, "negatives", round_index)

    # -- accounting ------------------------------------------------------------------------
    def traffic(self, rows: torch.Tensor, uploads: Uploads | None) -> Traffic:
        """Bytes per client: ``rows`` [B] the item rows each client touched; ``uploads`` what the
        benign clients sent (None on a fast path, which builds none)."""
        up = self.upload_bytes(rows) if uploads is None else float(uploads.nbytes_per_client().mean())
        return Traffic(up, self.download_bytes(rows))

    def upload_bytes(self, rows: torch.Tensor) -> float:
        """Mean bytes a client uploads without privacy transforms: its touched rows [B] (int32 id +
        vector) and its weight deltas — what ``Uploads.nbytes_per_client`` counts on the general path."""
        return self._mean_bytes(rows, id_bytes=4)

    def download_bytes(self, rows: torch.Tensor) -> float:
        """Mean bytes a client downloads: the item rows it touches [B] and the shared weights."""
        return self._mean_bytes(rows, id_bytes=0)

    def _mean_bytes(self, rows: torch.Tensor, id_bytes: int) -> float:
        item = self.public.item
        dense = sum(v.numel() * v.element_size() for v in self.public.net.values())
        return float((rows.to(torch.float64) * (item.shape[1] * item.element_size() + id_bytes) + dense).mean())

    # -- state (checkpoints) ---------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"private_user": self.private.user, "server": self.server.state_dict(), **self.context.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        with torch.no_grad():
            self.private.user.copy_(state["private_user"])
        self.server.load_state_dict(state["server"])
        self.context.load_state_dict(state)
        self.prepared_for = None

    # -- evaluation (each client scores with its private row and the public model) --------
    @torch.no_grad()
    def user_queries(self, users: torch.Tensor, history: Sequence[ClientStore]) -> torch.Tensor:
        """[U] → what each client scores with, as its user context says: its private row, the query its
        history infers under the public model, or its propagated row (after ``prepare_ranking``)."""
        return self.context.queries(self.private.user, users, history, self.public)

    @torch.no_grad()
    def score_users(self, users: torch.Tensor, history: Sequence[ClientStore] = ()) -> torch.Tensor:
        self.ensure_prepared()
        return self.context.score_users(self.private.user, users, history, self.public)

    @torch.no_grad()
    def score_pairs(self, users: torch.Tensor, items: torch.Tensor,
                    history: Sequence[ClientStore] = ()) -> torch.Tensor:
        self.ensure_prepared()
        return self.context.score_pairs(self.private.user, users, items, history, self.public)
