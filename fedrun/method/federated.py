"""The contract of a federated method: a client program and a server program, plus the protocol
phases a method declares. The round that calls them exists once, above the methods
(``fedrun.sim.round``); a method never owns privacy, attack or defense.

A method is a client program, a server program and its declared needs:
  - ``make_server``: its server program (``fedrun.method.server.Server``: the download view, its own
    aggregation if any, the server step), built from the public parameters and values the method
    hands it, never the env, client data or private rows;
  - ``make_client``: its client program (``fedrun.method.client.Client``: the private rows and the user
    context; the problems and the vectorized client step of a bucket → ``ClientResult``; optionally a
    client-side phase after the steps), built from the private rows and the server's model view only;
  - ``needs``: what the method requires of the other components (``Needs``), checked by
    ``fedrun.app.build.check_combination`` before any data is read;
  - optionally the protocol's phases that involve both sides: ``exchange`` before local training (FedCL's
    embeddings up, semi-hard negatives down), ``round_users`` (PerFedRec's cluster-proportional
    selection), ``prepare_ranking``; and the server's view of the round: ``observe_uploads`` (audits,
    accounting), ``traffic``, ``reducer``, the FedSGD pass (``fast_round``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Sequence

import torch

from fedrun.audit.base import ServerView
from fedrun.backbone.base import PrivateParams, PublicParams
from fedrun.core.seeding import generator
from fedrun.data.client_store import ClientStore
from fedrun.data.statistics import server_statistics
from fedrun.defense.base import Defense
from fedrun.kernels.env import RunEnv
from fedrun.kernels.guards import UploadSchema
from fedrun.kernels.rows import LOCAL, RowReducer
from fedrun.kernels.sampling import ClientSampler
from fedrun.method.base import Method
from fedrun.method.client import Client, ClientResult, Exchange
from fedrun.method.config import LocalTrainingConfig
from fedrun.method.fedsgd import FastRound
from fedrun.method.server import OptimizerServer, Server
from fedrun.privacy.base import Privacy
from fedrun.types import RoundContext, Uploads

__all__ = ["ClientResult", "Exchange", "FederatedMethod", "Needs", "Traffic"]  # the contract's names, in one place


@dataclass(frozen=True)
class Needs:
    """What a method requires of the other components; each field, when set, says why (it ends the
    refusal "<group>=<option> cannot run with method=<name>: <why>")."""

    exact_sum: str | None = None  # its server rule needs Σ_c Δ_c exactly: a linear rule with unit weights
    plain_uploads: str | None = None  # uploads must reach the server as computed: no privacy transform
    no_attack: str | None = None  # malicious clients cannot join its protocol
    no_audit: str | None = None  # an audit (``audit=server``) cannot see what its server receives
    user_contexts: frozenset[str] = frozenset({"ids"})  # which backbone user contexts its client step handles
    # statistics of the training data its server program is handed (``fedrun.data.statistics``), as the
    # protocol's server knows them: e.g. item_popularity. Nothing else of the data reaches the server.
    server_reads: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Traffic:
    """Mean bytes per participating client each way, and any further accounting metrics."""

    up: float
    down: float
    metrics: dict[str, float] = field(default_factory=dict)


class FederatedMethod(Method):
    has_fedsgd_path: ClassVar[bool] = False  # fast_round is a FedSGD pass (logged as run.fedsgd_fast_path)
    client_program: ClassVar[type[Client]] = Client  # the default ``make_client`` builds one

    def __init__(self, config: Any, env: RunEnv):
        super().__init__(config, env)
        private, public = env.backbone.init_params(env.n_users, env.n_items, generator(env.sim.seed, "init"))
        statistics = server_statistics(self.needs(config).server_reads, env.split, env.n_items)
        self.server = self.make_server(
            PublicParams(public.item.to(env.device), {k: v.to(env.device) for k, v in public.net.items()}), statistics)
        self.client = self.make_client(PrivateParams(private.user.to(env.device)))
        self.prepared_for: int | None = None  # the server step prepare_ranking last ran for
        # the server's privacy ledgers (name → per-client ε spent), kept in the checkpoint so a resumed run's
        # accounting goes on from where it stopped; the round registers the ones it keeps
        self.ledgers: dict[str, torch.Tensor] = {}

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
        ``client_step`` — the benign client step run on fabricated data (``Client.fabricated_step``)."""
        return frozenset({"model_view"})

    @classmethod
    def shares_embeddings(cls, config: Any) -> bool:
        """Whether clients upload a user embedding (what ``privacy`` target ``user_embedding`` protects)."""
        return False

    # -- the two programs ------------------------------------------------------------------
    def make_server(self, public: PublicParams, statistics: dict[str, torch.Tensor]) -> Server:
        """The method's server program (``fedrun.method.server``), from the public parameters, the data
        ``statistics`` it declares (``Needs.server_reads``, by name) and the method's settings — never the
        env's client store or split, nor the private rows. By default, with FedAvg's local training, the
        public model and its ``server_optimizer``."""
        if not isinstance(self.config, LocalTrainingConfig):
            raise NotImplementedError(f"{type(self).__name__} builds no server program")
        return OptimizerServer(public, self.config.server_optimizer)

    def make_client(self, private: PrivateParams) -> Client:
        """The method's client program (``fedrun.method.client``) from the clients' private rows and the
        server's model view (``self.server`` as a ``ModelView``): ``client_program`` by default."""
        return self.client_program(self.config, self.env, private, self.server)

    # -- the protocol's phases that involve both sides --------------------------------------
    def round_clients(self) -> torch.Tensor:
        """[C] the clients the rounds sample from (default: every client with training data)."""
        return self.env.clients_with_data()

    def round_users(self, sampler: ClientSampler, round_index: int) -> torch.Tensor:
        """[B] the round's clients (PerFedRec: cluster-proportional); the sampler's by default."""
        return sampler.users(round_index)

    def exchange(self, users: torch.Tensor, round_index: int, privacy: Privacy) -> Exchange:
        """A protocol step before local training (server ↔ clients; ``privacy`` protects what the
        clients send in it); by default the client program's part of it alone."""
        return self.client.exchange(users, round_index, privacy)

    def prepare_ranking(self) -> None:
        """Work before ranking with the current public model; the client program's by default."""
        self.client.prepare_ranking()

    def ensure_prepared(self) -> None:
        if self.prepared_for != self.server_steps:
            self.prepare_ranking()
            self.prepared_for = self.server_steps

    # -- the server's view of the round -----------------------------------------------------
    def upload_schema(self) -> UploadSchema:
        """The fields a client may upload (checked every round): deltas of the public item rows and
        weights, unless the protocol sends something else (MetaMF: gradients of its generated model)."""
        return UploadSchema.of_public(self.public)

    def reducer(self) -> RowReducer:
        """How the round's exact sum is computed (``Needs.exact_sum`` methods; FedMF: a Paillier sum)."""
        return LOCAL

    def server_view(self, ctx: RoundContext) -> ServerView:
        """What the server reads of the round besides the senders' ids (what an audit sees): the public model the
        clients downloaded; by default the uploads' ids and values are in the clear, and they are not explicit-MF
        gradients (FedMF and FedRec say so: ``MFStep``)."""
        return ServerView(self.public)

    def observe_uploads(self, uploads: Uploads, senders: torch.Tensor, ctx: RoundContext) -> dict[str, float]:
        """Server side: statistics of the benign uploads (``senders[c]``: the user id of upload client
        c, as the server of any FL protocol knows) — audits, accounting. None by default."""
        return {}

    # -- the FedSGD pass -------------------------------------------------------------------
    def fast_path_exact(self) -> bool:
        """Whether ``fast_round`` gives exactly the general path's aggregate when the uploads reach a
        linear rule untransformed (a FedSGD pass: one local plain-SGD step)."""
        return self.has_fedsgd_path and self.fedsgd_exact()

    def fast_round(self, users: torch.Tensor, round_index: int, sent: torch.Tensor | None,
                   rule: Defense) -> FastRound | None:
        """Optional shortcut computing the aggregate directly under the linear ``rule`` (``sent``: what
        ``exchange`` gave the clients); None when not exact. By default FedAvg's local training's FedSGD pass
        (run only where ``fast_path_exact`` holds)."""
        client = self.client
        if client.training is None:
            return None
        return client.training.fedsgd_round(self.env, self.public, client.private.user, users,
                                            client.negative_seed(round_index), rule)

    def fedsgd_exact(self) -> bool:
        """One plain-SGD local step with ``sim.fast_path=auto``: the client side of FedSGD's exactness (and,
        with FedAvg's local training, its loss on the rows themselves: ``LocalTraining.fedsgd_exact``)."""
        training = self.client.training
        return (self.env.sim.fast_path == "auto" and self.env.sim.local_epochs == 1
                and self.config.optimizer.is_plain_sgd
                and (training is None or training.fedsgd_exact(self.client.context.per_example)))

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

    # -- state (checkpoints): the client program's and the server program's -------------------
    def state_dict(self) -> dict[str, Any]:
        ledgers = {"ledgers": dict(self.ledgers)} if self.ledgers else {}
        return {**self.client.state_dict(), "server": self.server.state_dict(), **ledgers}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.client.load_state_dict(state)
        self.server.load_state_dict(state["server"])
        for name, spent in state.get("ledgers", {}).items():  # a checkpoint from before the ledgers: from zero
            if name in self.ledgers:
                self.ledgers[name].copy_(spent)
        self.prepared_for = None

    # -- evaluation: the client program scores, once ranking is prepared for the model version --
    @torch.no_grad()
    def score_users(self, users: torch.Tensor, history: Sequence[ClientStore] = ()) -> torch.Tensor:
        self.ensure_prepared()
        return self.client.score_users(users, history)

    @torch.no_grad()
    def score_pairs(self, users: torch.Tensor, items: torch.Tensor,
                    history: Sequence[ClientStore] = ()) -> torch.Tensor:
        self.ensure_prepared()
        return self.client.score_pairs(users, items, history)
