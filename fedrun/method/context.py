"""The user context: how a client's user reaches the model, chosen by the backbone (``Backbone.user_context``,
DESIGN.md "The method contract"). A method's client program holds one and does not branch on it:

  - ``ids``: the user is its private row (MF, NCF, PMF);
  - ``sequence``: the user is the query its history infers under the public model (GRU4Rec, BERT4Rec);
  - ``graph``: the user is its row propagated over its ego graph (LightGCN; FedGNN's neighbour expansion,
    ``fedrun.kernels.ego``): the round's clients share protected embeddings before training, each bucket's
    problems carry the clients' ego graphs, and ranking propagates the union of the local graphs.

A context runs its exchange before local training (``exchange``), attaches what a bucket's problems need
(``attach``), prepares ranking after a server step (``prepare``) and answers the queries that score items
(``queries``, ``score_users``, ``score_pairs``); its state joins the method's checkpoint.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Sequence, cast

import torch

from fedrun.backbone.base import PublicParams
from fedrun.backbone.config import LightGCNConfig, SequentialConfig
from fedrun.backbone.lightgcn import BipartiteGraph
from fedrun.backbone.sequential import SequenceView, SequentialBackbone, infer_users, score_pairs
from fedrun.core.seeding import derive_seed, generator
from fedrun.data.client_store import ClientStore
from fedrun.kernels.batching import LocalProblem
from fedrun.kernels.ego import EgoProtocol
from fedrun.kernels.env import RunEnv
from fedrun.privacy.base import Privacy
from fedrun.types import ClientBatch, EmbeddingUploads


class UserContext:
    name: ClassVar[str]
    # Whether a client's loss is a sum over examples scored on the rows themselves, so that one FedSGD pass over
    # the unpadded examples is its gradient (a graph's clients score propagated rows, a sequence's positions
    # read the positions before them: no per-example pass).
    per_example: ClassVar[bool] = True
    # Whether the user is a different query at each position of its data (a sequence), which in-batch
    # negatives need (FedCL §3.2).
    per_position: ClassVar[bool] = False

    def __init__(self, env: RunEnv):
        self.env = env

    @property
    def history_limit(self) -> int | None:
        """The most recent items of a client's data that a round trains on (None: all of them)."""
        return None

    @property
    def query_width(self) -> int:
        """The width of what a user scores with: its row (``user_width``), or a query in item space."""
        return self.env.backbone.user_width

    def untruncated(self, batch: ClientBatch) -> ClientBatch:
        """A bucket's clients with all their training data (a round's batch may hold only the last
        ``history_limit`` items)."""
        return batch

    def exchange(self, private_user: torch.Tensor, users: torch.Tensor, round_index: int,
                 privacy: Privacy) -> EmbeddingUploads | None:
        """The context's step before local training → the user vectors the round's ``users`` send; None: none."""
        return None

    def spent(self, privacy: Privacy, shared: EmbeddingUploads) -> dict[str, float]:
        """The ε the clients have spent on the vectors their exchanges shared (basic composition), when the privacy
        mechanism protects them; none by default."""
        return {}

    def attach(self, problems: list[LocalProblem], round_index: int, sent: torch.Tensor | None) -> list[LocalProblem]:
        """The bucket problems with what the context adds to them (``sent``: what the round's download gave)."""
        return problems

    def prepare(self, private_user: torch.Tensor, public: PublicParams) -> None:
        """Work before ranking with the current model; none by default."""

    def queries(self, private_user: torch.Tensor, users: torch.Tensor, history: Sequence[ClientStore],
                public: PublicParams) -> torch.Tensor:
        """[U] → what each user scores with [U, du]."""
        raise NotImplementedError

    def score_users(self, private_user: torch.Tensor, users: torch.Tensor, history: Sequence[ClientStore],
                    public: PublicParams) -> torch.Tensor:
        """[U] → scores over the whole catalogue [U, I]."""
        return self.env.backbone.score_full(self.queries(private_user, users, history, public), public.item,
                                            public.net)

    def score_pairs(self, private_user: torch.Tensor, users: torch.Tensor, items: torch.Tensor,
                    history: Sequence[ClientStore], public: PublicParams) -> torch.Tensor:
        """users [N], items [N] → scores [N], each distinct user's query formed once (the backbone's own
        ``score_pairs``: a private row, or the query a history infers)."""
        return score_pairs(self.env.backbone, private_user, history, users, items, public.item, public.net)

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


class IdContext(UserContext):
    """The user is its private row."""

    name = "ids"

    def queries(self, private_user: torch.Tensor, users: torch.Tensor, history: Sequence[ClientStore],
                public: PublicParams) -> torch.Tensor:
        return private_user[users]


class SequenceContext(UserContext):
    """The user is the next-item query its history (the rows of ``history``, in order) infers under the public
    model; it holds no row of its own. A round trains each client on its last ``max_len`` items, position by
    position: each problem carries the positions it trains on (``SequenceView``: BERT4Rec's fresh Cloze draw
    per round, the dropout stream per bucket)."""

    name = "sequence"
    per_example = False
    per_position = True

    def __init__(self, env: RunEnv):
        super().__init__(env)
        self.backbone = cast(SequentialBackbone, env.backbone)

    @property
    def history_limit(self) -> int | None:
        return self.backbone.max_len

    @property
    def query_width(self) -> int:
        return self.env.backbone.item_width

    def untruncated(self, batch: ClientBatch) -> ClientBatch:
        return self.env.train.client_batch(batch.users)

    def attach(self, problems: list[LocalProblem], round_index: int, sent: torch.Tensor | None) -> list[LocalProblem]:
        return [dataclasses.replace(problem, sequence=self.view(problem.batch, round_index, bucket))
                for bucket, problem in enumerate(problems)]

    def view(self, batch: ClientBatch, round_index: int, bucket: int) -> SequenceView:
        """Which positions the bucket's clients train on this round (BERT4Rec: a fresh Cloze draw)."""
        backbone, seed = self.backbone, self.env.sim.seed
        gen = None
        if cast(SequentialConfig, backbone.config).dropout:
            gen = generator(seed, f"dropout-{bucket}", round_index, self.env.device)
        return backbone.train_view(batch.users, batch.pos_mask, derive_seed(seed, "cloze", round_index), gen)

    def queries(self, private_user: torch.Tensor, users: torch.Tensor, history: Sequence[ClientStore],
                public: PublicParams) -> torch.Tensor:
        return infer_users(self.backbone, history, users, public.item, public.net)


class GraphContext(UserContext):
    """The user is its row propagated over its ego graph (FedGNN §3.3; PerFedRec++ §4.2.2). Before local
    training the round's clients refresh the embeddings they share (registering first, before the first
    round), through the run's privacy mechanism for embeddings; each bucket's problems carry the clients' ego
    graphs; ranking propagates the union of the local graphs (the global LightGCN's layers)."""

    name = "graph"
    per_example = False

    def __init__(self, env: RunEnv):
        super().__init__(env)
        self.layers_config = cast(LightGCNConfig, env.backbone.config)
        config = self.layers_config
        self.ego = EgoProtocol(env.train, env.n_items, config.layers, config.neighbors, env.sim.seed)
        self.graph = BipartiteGraph.from_store(env.train)  # evaluation: the union of the local graphs
        self._tables: tuple[torch.Tensor, torch.Tensor] | None = None  # propagated (user, item) tables

    @property
    def tables(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The propagated (user [U, d], item [I, d]) tables of the model ``prepare`` last saw."""
        if self._tables is None:
            raise RuntimeError("the graph context ranks after prepare(): the method's ensure_prepared()")
        return self._tables

    def exchange(self, private_user: torch.Tensor, users: torch.Tensor, round_index: int,
                 privacy: Privacy) -> EmbeddingUploads | None:
        return self.ego.refresh(private_user, users, round_index, privacy.privatize_embeddings)

    def spent(self, privacy: Privacy, shared: EmbeddingUploads) -> dict[str, float]:
        """Registration and every refresh are separate releases of the client's row: the most any client spent."""
        epsilon = privacy.epsilon_per_upload(shared.vectors.shape[1])
        if epsilon is None or "user_embedding" not in privacy.targets:
            return {}
        return {"epsilon_spent_max": float(self.ego.shared_count.max()) * epsilon}

    def attach(self, problems: list[LocalProblem], round_index: int, sent: torch.Tensor | None) -> list[LocalProblem]:
        return [self.ego.attach(problem, round_index, sent) for problem in problems]

    def prepare(self, private_user: torch.Tensor, public: PublicParams) -> None:
        self._tables = self.graph.propagate(private_user, public.item, self.layers_config.layers)

    def queries(self, private_user: torch.Tensor, users: torch.Tensor, history: Sequence[ClientStore],
                public: PublicParams) -> torch.Tensor:
        return self.tables[0][users]

    def score_users(self, private_user: torch.Tensor, users: torch.Tensor, history: Sequence[ClientStore],
                    public: PublicParams) -> torch.Tensor:
        user, item = self.tables
        return user[users] @ item.T  # [U, I]

    def score_pairs(self, private_user: torch.Tensor, users: torch.Tensor, items: torch.Tensor,
                    history: Sequence[ClientStore], public: PublicParams) -> torch.Tensor:
        user, item = self.tables
        return (user[users] * item[items]).sum(1)

    def state_dict(self) -> dict[str, Any]:
        return {"ego": self.ego.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.ego.load_state_dict(state.get("ego", {}))


CONTEXTS: dict[str, type[UserContext]] = {context.name: context for context in (IdContext, SequenceContext,
                                                                                 GraphContext)}


def context_for(env: RunEnv) -> UserContext:
    """The user context the run's backbone chooses."""
    return CONTEXTS[env.backbone.user_context](env)
