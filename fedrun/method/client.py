"""The client program of a federated method (DESIGN.md, "The method contract").

A ``Client`` holds what stays on the clients: their private rows, their user context (ids, sequence or
graph: ``fedrun.method.context``) and whatever else a protocol keeps on them. It reads the server only
through the model view the clients download (``ModelView``: the public parameters and their version),
never the server's state or step. In the round (``fedrun.sim.round``) it

  - takes its part of the exchange before local training (``exchange``: a graph's clients refresh the
    embeddings they share);
  - builds the round's buckets of local problems from the client store (``problems``);
  - takes the vectorized client step of a bucket (``step``) → :class:`ClientResult`: the uploads that
    leave the clients, their new private rows (the round writes them back here), losses, statistics;
  - runs a client-side phase after the steps, if its protocol has one (``protocol``: FedRec++'s relay);

and at evaluation it prepares ranking and scores items for its users (``prepare_ranking``,
``score_users``, ``score_pairs``). Its state joins the method's checkpoint.

The default program is FedAvg's client, with the pieces an option's config composes: FedAvg's local
training (``fedrun.method._training``) and the pseudo items / masking (``fedrun.method._pseudo``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, Sequence

import torch

from fedrun.backbone.base import PrivateParams, PublicParams
from fedrun.core.seeding import derive_seed
from fedrun.data.client_store import ClientStore
from fedrun.data.negatives import sample_batch_negatives, sample_bucket_negatives
from fedrun.kernels.batching import LocalProblem, local_problem, local_problems
from fedrun.kernels.config import ClientOptimizer
from fedrun.kernels.env import RunEnv
from fedrun.kernels.local import LocalResult, problem_loss, train_local
from fedrun.method._pseudo import perturb_round
from fedrun.method._training import LocalTraining
from fedrun.method.config import LocalTrainingConfig, PairPerturbationConfig
from fedrun.method.context import context_for
from fedrun.privacy.base import Privacy
from fedrun.types import ClientBatch, EmbeddingUploads, RoundContext, Uploads


class ModelView(Protocol):
    """What the clients read of the server program: the public model a round downloads and its version
    (the server steps taken). The server program satisfies it; nothing else of the server reaches a client."""

    @property
    def public(self) -> PublicParams: ...

    @property
    def steps(self) -> int: ...


@dataclass(frozen=True)
class ClientResult:
    """One bucket's client step. ``uploads`` leave the clients; ``user`` [B, du] (the new private
    rows) stays on them — the round writes it back; ``loss`` [B]; ``stats``: per-client statistics
    ([B] or [1] tensors) that ``Client.metrics`` summarises; ``relay``: what the bucket hands a
    client-side protocol phase (``Client.protocol``), never the server; ``kept``: what the clients keep of
    their local models beside their private rows (PerFedRec's local representation), written back with them
    (``Client.write_back``)."""

    uploads: Uploads
    user: torch.Tensor
    loss: torch.Tensor
    stats: dict[str, torch.Tensor] = field(default_factory=dict)
    relay: Any = None
    kept: Any = None


@dataclass(frozen=True)
class Exchange:
    """What the server sends the round's clients before they train (e.g. FedCL's semi-hard
    negatives, [B, T]), what that exchange cost per client, and metrics it reports; ``shared``: the
    user vectors the clients sent the server in it (FedCL's, a graph's), as the server received them."""

    sent: torch.Tensor | None = None
    bytes_up: float = 0.0
    bytes_down: float = 0.0
    metrics: dict[str, float] = field(default_factory=dict)
    shared: EmbeddingUploads | None = None


class Client:
    """FedAvg's client program (module docstring); options with their own client subclass it."""

    # Why its step cannot run on another process than the rest of the round (fedrun.sim.distributed), or None:
    # a step that keeps state beside its ``ClientResult`` would keep it on the rank that stepped the bucket only.
    unshardable: ClassVar[str | None] = None

    def __init__(self, config: Any, env: RunEnv, private: PrivateParams, view: ModelView):
        self.config, self.env, self.private, self.view = config, env, private, view
        # FedAvg's local training (``fedrun.method._training``), composed when the option's config is its settings
        self.training = LocalTraining(config, env.backbone) if isinstance(config, LocalTrainingConfig) else None
        self.num_negatives = 0 if self.training is None else self.training.num_negatives
        self.context = context_for(env)  # how a user reaches the model: ids, sequence or graph

    @property
    def public(self) -> PublicParams:
        """The public model as the clients download it."""
        return self.view.public

    # -- before local training -----------------------------------------------------------------
    def exchange(self, users: torch.Tensor, round_index: int, privacy: Privacy) -> Exchange:
        """The clients' part of the protocol step before local training (``privacy`` protects what they send
        in it): the user context's (a graph's clients refresh the embeddings they share), none for the others."""
        shared = self.context.exchange(self.private.user, users, round_index, privacy)
        if shared is None:
            return Exchange()
        return Exchange(bytes_up=shared.nbytes_per_client(), metrics=self.context.spent(privacy, shared), shared=shared)

    def problems(self, users: torch.Tensor, round_index: int, sent: torch.Tensor | None = None) -> list[LocalProblem]:
        """The round's buckets of local problems (``sent``: what the exchange gave the clients): the negatives of
        every bucket drawn, and every client's local table de-duplicated, once for the round; the rows they upload get
        one buffer (``local_problems``)."""
        env = self.env
        batches = [self.prepare_batch(batch, round_index)
                   for _, batch in env.client_batches(users, 1 + self.num_negatives)]
        negatives: list[torch.Tensor | None] = [None] * len(batches)
        if self.num_negatives:
            negatives = list(sample_bucket_negatives([(b.users, b.pos, b.pos_mask) for b in batches],
                                                     self.num_negatives, env.n_items, self.negative_seed(round_index)))
        return self.context.attach(local_problems(batches, negatives, env.n_items, uploaded=self.public.item),
                                   round_index, sent)

    def prepare_batch(self, batch: ClientBatch, round_index: int) -> ClientBatch:
        """What the clients do to their own pairs before the round's training: the pseudo items and masking
        (``fedrun.method._pseudo``) where the option's config composes them; the pairs as they are otherwise."""
        if isinstance(self.config, PairPerturbationConfig):
            return perturb_round(batch, self.config, self.env.n_items, self.env.sim.seed, round_index)
        return batch

    def negative_seed(self, round_index: int) -> int:
        """The seed of round ``round_index``'s negatives (keyed per client and position under it)."""
        if self.training is not None:
            round_index = self.training.negative_round(round_index)
        return derive_seed(self.env.sim.seed, "negatives", round_index)

    # -- the client step ---------------------------------------------------------------------------
    def step(self, problem: LocalProblem) -> ClientResult:
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
        kept = self.keep_local(problem, item0, result)
        client, slot, items = problem.real_rows()  # [R] each
        uploads = Uploads(users.numel(), client, items, result.row_delta(client, slot, out=problem.upload_rows),
                          result.net_delta, problem.weight)
        return ClientResult(uploads, result.user, result.loss, kept=kept)

    def local_loss(self, problem: LocalProblem, user: torch.Tensor, item_table: torch.Tensor,
                   net: dict[str, torch.Tensor]) -> torch.Tensor:
        """Per-client loss [B] on the clients' local copies (default: the backbone's loss, reduced as FedAvg's
        local training says where the option composes it)."""
        if self.training is not None:
            return self.training.loss(problem, user, item_table, net)
        return problem_loss(self.env.backbone, problem, user, item_table, net)

    def client_optimizer(self, problem: LocalProblem) -> ClientOptimizer:
        """The optimizer of the bucket's local steps (PerFedRec++: its own during pre-training)."""
        return self.config.optimizer

    def download_rows(self, problem: LocalProblem) -> torch.Tensor:
        """The item rows [B, Lu, di] the bucket's clients start local training from: the public model's
        (PerFedRec: its cluster's model)."""
        return self.public.item.index_select(0, problem.items.reshape(-1)).view(*problem.items.shape, -1)

    def keep_local(self, problem: LocalProblem, item0: torch.Tensor, result: LocalResult) -> Any:
        """After local training: what the clients keep of their local models (PerFedRec's local
        predictor), as ``ClientResult.kept``; nothing by default."""
        return None

    def write_back(self, users: torch.Tensor, result: ClientResult) -> None:
        """The bucket's clients [B] keep their new private rows (and ``result.kept``, where the program keeps
        more). The round calls it once every bucket has stepped: a step only returns, so any process can take it
        (``fedrun.sim.distributed``)."""
        self.private.user[users] = result.user

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

    # -- after the client steps --------------------------------------------------------------------
    def protocol(self, uploads: Uploads, results: list[ClientResult],
                 ctx: RoundContext) -> tuple[Uploads, dict[str, float]]:
        """A client-side phase after the client steps: the buckets' (privatized) ``uploads`` in bucket
        order and their ``results`` → (what the round's clients upload, metrics). Default: none."""
        return uploads, {}

    def metrics(self, stats: dict[str, list[torch.Tensor]]) -> dict[str, float]:
        """Per-round metrics from the buckets' ``ClientResult.stats``; none by default."""
        return {}

    # -- evaluation (each client scores with its private row and the public model) -----------------
    def prepare_ranking(self) -> None:
        """Work before ranking with the current public model (cold-start codes, fast adaptation); run once
        per server step (``FederatedMethod.ensure_prepared``). By default the user context's (a graph
        propagates the union of the local graphs)."""
        self.context.prepare(self.private.user, self.public)

    @torch.no_grad()
    def queries(self, users: torch.Tensor, history: Sequence[ClientStore]) -> torch.Tensor:
        """[U] → what each client scores with, as its user context says: its private row, the query its
        history infers under the public model, or its propagated row (after ``prepare_ranking``)."""
        return self.context.queries(self.private.user, users, history, self.public)

    @torch.no_grad()
    def score_users(self, users: torch.Tensor, history: Sequence[ClientStore] = ()) -> torch.Tensor:
        """users [U] → scores over the whole catalogue [U, I] (after ``prepare_ranking``)."""
        return self.context.score_users(self.private.user, users, history, self.public)

    @torch.no_grad()
    def score_pairs(self, users: torch.Tensor, items: torch.Tensor,
                    history: Sequence[ClientStore] = ()) -> torch.Tensor:
        """users [N], items [N] → scores [N] (after ``prepare_ranking``)."""
        return self.context.score_pairs(self.private.user, users, items, history, self.public)

    # -- state (checkpoints) -----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"private_user": self.private.user, **self.context.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        with torch.no_grad():
            self.private.user.copy_(state["private_user"])
        self.context.load_state_dict(state)
