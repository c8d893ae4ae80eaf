"""The federated round, written once. Methods fill ``make_server`` and, where they differ from
plain local training, ``local_loss``, ``client_step`` or ``exchange``.

Round t (DESIGN.md, "Data flow of one run"):
  1. sample clients (seeded per epoch) and bucket them by data size;
  2. per bucket, the vectorized client step → Uploads (+ the clients' new private rows,
     written back on the client side);
  3. privacy.apply → attack.inject → checks (declared fields only, finite values);
  4. server phase: defense.aggregate(Uploads) → server.step(Aggregate). The server object
     is built from public parameters only and receives nothing else.
When exact, steps 2–3 collapse into the FedSGD fast path (one backward, no copies).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Sequence

import torch

from fedrun.attack.base import Attack
from fedrun.backbone.base import PrivateParams, PublicParams
from fedrun.backbone.sequential import score_pairs, user_queries
from fedrun.data.client_store import ClientStore
from fedrun.data.negatives import sample_batch_negatives
from fedrun.defense.base import Defense
from fedrun.defense.mean import Mean
from fedrun.defense.sum import Sum
from fedrun.errors import ConfigError
from fedrun.method.base import Method, RoundStats
from fedrun.method.server import Server
from fedrun.privacy.base import Privacy
from fedrun.sim.batching import LocalProblem, bucketize, local_problem
from fedrun.sim.env import RunEnv
from fedrun.sim.guards import UploadSchema, check_finite, check_uploads
from fedrun.sim.local import problem_loss, train_local
from fedrun.sim.sampling import ClientSampler
from fedrun.sim.seeding import derive_seed, generator
from fedrun.types import Aggregate, RoundContext, Uploads


@dataclass(frozen=True)
class FastRound:
    """What a fast path returns: the aggregate, each client's loss [B], rows each client touched [B]."""

    aggregate: Aggregate
    losses: torch.Tensor
    rows_per_client: torch.Tensor


@dataclass(frozen=True)
class FedSGDPass:
    """The leaves of one FedSGD pass (DESIGN.md principle 4). With one local plain-SGD step, no
    upload transform, no attack and a linear rule, Σ_c w_c Δ_c / W per item row equals
    −η ∇(Σ_c w_c L_c) / W: every client's weighted loss backpropagates into these shared
    leaves once, with no per-client copies and no padding."""

    users: torch.Tensor  # [B] the round's clients
    pair_owner: torch.Tensor  # [Q] client (index into users) of each distinct (client, item) pair
    row_of_pair: torch.Tensor  # [Q] index into ``rows`` of each pair's item
    rows: torch.Tensor  # [G] the item ids the round touches
    weight: torch.Tensor  # [B] w_c, the defense's linear weight of each client
    row_weight: torch.Tensor  # [G] W per item row: Σ w_c over the clients that touch it (or 1)
    total_weight: torch.Tensor | float  # W for the shared weights
    item: torch.Tensor  # [G, di] leaf: the touched public item rows
    user: torch.Tensor  # [B, du] leaf: the clients' private rows (written back on the client side)
    net: dict[str, torch.Tensor]  # leaves: the public shared weights


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
    supports_sequential: ClassVar[bool] = False  # whether the client step handles sequential backbones

    def __init__(self, config: Any, env: RunEnv, *, privacy: Privacy, attack: Attack, defense: Defense):
        super().__init__(config, env)
        if env.backbone.sequential and not self.supports_sequential:
            raise ConfigError("backbone", type(env.backbone).__name__,
                              f"an ID-based backbone (mf, ncf, pmf, ...) for method {type(self).__name__}; "
                              "sequential backbones run with method=fedcl, bil or central")
        self.privacy, self.attack, self.defense = privacy, attack, defense
        if "user_embedding" in privacy.targets and not self.shares_embeddings(config):
            raise ConfigError("privacy.targets", list(privacy.targets),
                              f"[item_rows] for method {type(self).__name__} with these settings: it uploads no user "
                              "embedding, so the mechanism would protect nothing")
        private, public = env.backbone.init_params(env.n_users, env.n_items, generator(env.sim.seed, "init"))
        self.private = PrivateParams(private.user.to(env.device))  # client side
        self.server = self.make_server(
            PublicParams(public.item.to(env.device), {k: v.to(env.device) for k, v in public.net.items()}))
        clients = env.clients_with_data()
        self.sampler = ClientSampler(clients, env.sim.round_size(clients.numel()), env.sim.seed,
                                     env.sim.sampling == "independent")
        self.server_steps = 0  # server steps taken (the version of the public model)
        self.prepared_for: int | None = None  # the server step prepare_ranking last ran for

    @property
    def public(self) -> PublicParams:
        """The public model as the clients download it."""
        return self.server.public

    # -- hooks ---------------------------------------------------------------------------
    @classmethod
    def shares_embeddings(cls, config: Any) -> bool:
        """Whether clients upload a user embedding (what ``privacy`` target ``user_embedding`` protects)."""
        return False

    def make_server(self, public: PublicParams) -> Server:
        raise NotImplementedError

    def require_exact_sum(self, reason: str, attack: bool = True) -> None:
        """A named error unless the uploads reach the server as the clients computed them (privacy
        none; attack none, when ``attack``) and the defense is a plain sum or mean — for methods whose
        server rule needs exactly that (``reason`` completes the message)."""
        checks = [("privacy", self.privacy, not self.privacy.transforms_uploads),
                  ("defense", self.defense, isinstance(self.defense, (Sum, Mean)))]
        if attack:
            checks.append(("attack", self.attack, not self.attack.injects))
        for group, component, ok in checks:
            if not ok:
                allowed = "privacy=none, " + ("attack=none, " if attack else "") + "defense=mean or sum"
                raise ConfigError(group, type(component).__name__, f"{allowed} for method={reason}")

    def prepare_ranking(self) -> None:
        """Client-side work before ranking with the current public model (cold-start codes, fast
        adaptation); run once per server step by the scoring methods. None by default."""

    def ensure_prepared(self) -> None:
        if self.prepared_for != self.server_steps:
            self.prepare_ranking()
            self.prepared_for = self.server_steps

    def upload_schema(self) -> UploadSchema:
        """The fields a client may upload (checked every round): deltas of the public item rows and
        weights, unless the protocol sends something else (MetaMF: gradients of its generated model)."""
        return UploadSchema.of_public(self.public)

    def exchange(self, users: torch.Tensor, round_index: int) -> Exchange:
        """A protocol step before local training (server ↔ clients); none by default."""
        return Exchange()

    def local_loss(self, problem: LocalProblem, user: torch.Tensor, item_table: torch.Tensor,
                   net: dict[str, torch.Tensor]) -> torch.Tensor:
        """Per-client loss [B] on the clients' local copies (default: the backbone's loss)."""
        return problem_loss(self.env.backbone, problem, user, item_table, net)

    def client_step(self, problem: LocalProblem) -> tuple[Uploads, torch.Tensor, torch.Tensor]:
        """Vectorized over the bucket's clients → (uploads, new private rows [B, du], loss [B]).

        Default: ``sim.local_epochs`` steps of ``config.optimizer`` on ``local_loss``; upload the
        deltas of the touched item rows and of the shared weights; the user row stays."""
        users = problem.batch.users
        item0 = self.public.item[problem.items]  # [B, Lu, di]

        def loss_fn(user, item, net):
            return self.local_loss(problem, user, item, net)

        result = train_local(self.env.backbone, problem, self.private.user[users], item0, self.public.net,
                             self.config.optimizer, self.env.sim.local_epochs, loss_fn)
        client, slot = problem.item_mask.nonzero(as_tuple=True)  # [R], [R]
        uploads = Uploads(users.numel(), client, problem.items[client, slot], result.item_delta[client, slot],
                          result.net_delta, problem.weight)
        return uploads, result.user, result.loss

    def aggregate(self, uploads: Uploads, users: torch.Tensor, ctx: RoundContext) -> Aggregate:
        """The server phase: the clients' uploads (and who sent them: ``users[c]`` is the user id of
        upload client c, as the server of any FL protocol knows) → one aggregate. Default: the
        ``defense`` rule."""
        return self.defense.aggregate(uploads)

    def fast_round(self, users: torch.Tensor, round_index: int, sent: torch.Tensor | None = None
                   ) -> FastRound | None:
        """Optional FedSGD shortcut computing the aggregate directly (``sent``: what ``exchange``
        gave the clients); None when not exact."""
        return None

    def fedsgd_is_exact(self) -> bool:
        """Whether a FedSGD pass gives exactly the general path's aggregate (``FedSGDPass``)."""
        return (self.env.sim.fast_path == "auto" and self.env.sim.local_epochs == 1
                and self.config.optimizer.is_plain_sgd and not self.privacy.transforms_uploads
                and not self.attack.injects and self.defense.linear_weights(torch.ones(1)) is not None)

    def fedsgd_pass(self, users: torch.Tensor, pairs: torch.Tensor, data_size: torch.Tensor) -> FedSGDPass:
        """The leaves for the round's distinct ``client * n_items + item`` pairs [Q] (sorted; client
        an index into ``users``); ``data_size`` [B] what the general path's uploads weigh."""
        n_items = self.env.n_items
        pair_owner = pairs // n_items
        rows, row_of_pair = torch.unique(pairs % n_items, return_inverse=True)  # [G], [Q]
        weight = self.defense.linear_weights(data_size.to(self.public.item.dtype))  # [B]
        if self.defense.normalized:
            row_weight = weight.new_zeros(rows.numel()).index_add_(0, row_of_pair, weight[pair_owner])
            total_weight = weight.sum()
        else:
            row_weight, total_weight = torch.ones(rows.numel(), device=rows.device), 1.0
        net = {k: v.detach().clone().requires_grad_(True) for k, v in self.public.net.items()}
        return FedSGDPass(users, pair_owner, row_of_pair, rows, weight, row_weight, total_weight,
                          self.public.item[rows].requires_grad_(True), self.private.user[users].requires_grad_(True),
                          net)

    def fedsgd_result(self, step: FedSGDPass, losses: torch.Tensor) -> FastRound:
        """After ``backward`` of Σ_c w_c L_c: the clients' new private rows (written on the client
        side), the aggregate and the rows each client touched; ``losses`` [B] each client's L_c."""
        lr = self.config.optimizer.lr
        if step.user.grad is not None:  # (sequential backbones infer the user from the history instead)
            with torch.no_grad():
                self.private.user[step.users] = step.user - lr * step.user.grad / step.weight.unsqueeze(1)
        item_delta = -lr * step.item.grad / step.row_weight.unsqueeze(1)
        dense = {k: -lr * v.grad / step.total_weight for k, v in step.net.items()}
        rows_per_client = torch.bincount(step.pair_owner, minlength=step.users.numel())
        return FastRound(Aggregate(step.rows, item_delta, dense), losses, rows_per_client)

    # -- the round -----------------------------------------------------------------------
    def rounds_per_epoch(self) -> int:
        return self.sampler.rounds_per_epoch

    def problems(self, users: torch.Tensor, round_index: int, sent: torch.Tensor | None = None) -> list[LocalProblem]:
        """The round's buckets of local problems (``sent``: what ``exchange`` gave the clients)."""
        env = self.env
        sizes = env.train.sizes(users)
        seed = derive_seed(env.sim.seed, "negatives", round_index)
        out = []
        for index in bucketize(sizes, env.sim.buckets, env.sim.max_slots, 1 + self.num_negatives,
                               env.sim.min_bucket_clients):
            batch = env.train.client_batch(users[index])
            negatives = None
            if self.num_negatives:
                negatives = sample_batch_negatives(batch.users, batch.pos, batch.pos_mask, self.num_negatives,
                                                   env.n_items, seed)
            out.append(local_problem(batch, negatives, env.n_items))
        return out

    def train_round(self, round_index: int) -> RoundStats:
        users = self.sampler.users(round_index)
        ctx = RoundContext(round_index, round_index // self.rounds_per_epoch(), int(users.numel()))
        exchange = self.exchange(users, round_index)
        fast = self.fast_round(users, round_index, exchange.sent)
        if fast is not None:
            check_finite(self.private.user[users], f"the client step ({type(self).__name__})", round_index)
            aggregate, losses, rows = fast.aggregate, fast.losses, fast.rows_per_client
            bytes_up = self.upload_bytes(rows)
        else:
            problems = self.problems(users, round_index, exchange.sent)
            uploads, losses = self.client_phase(problems, ctx)
            rows = torch.cat([p.item_mask.sum(1) for p in problems])
            bytes_up = float(uploads.nbytes_per_client()[: ctx.n_clients].mean())
            senders = torch.cat([p.batch.users for p in problems])  # [B] in upload order (by bucket)
            aggregate = self.aggregate(uploads, senders, ctx)
        check_finite(aggregate.item_delta, f"the aggregate (defense={type(self.defense).__name__})", round_index)
        self.server.step(aggregate, ctx)
        self.server_steps += 1
        return RoundStats(float(losses.mean()), ctx.n_clients, bytes_up + exchange.bytes_up,
                          self.download_bytes(rows) + exchange.bytes_down, exchange.metrics)

    def client_phase(self, problems: list[LocalProblem], ctx: RoundContext) -> tuple[Uploads, torch.Tensor]:
        gen = generator(self.env.sim.seed, "privacy", ctx.round, self.env.device)
        component = f"the client step ({type(self).__name__})"
        parts, losses = [], []
        for problem in problems:
            uploads, new_user, loss = self.client_step(problem)
            check_finite(new_user, component, ctx.round)
            self.private.user[problem.batch.users] = new_user
            parts.append(self.privacy.apply(uploads, gen))
            losses.append(loss)
        uploads = self.attack.inject(Uploads.concat(parts), ctx)
        check_uploads(uploads, self.upload_schema(), ctx.round, component)
        return uploads, torch.cat(losses)

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
        return {"private_user": self.private.user, "server": self.server.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        with torch.no_grad():
            self.private.user.copy_(state["private_user"])
        self.server.load_state_dict(state["server"])
        self.prepared_for = None

    # -- evaluation (each client scores with its private row and the public model) --------
    @torch.no_grad()
    def user_queries(self, users: torch.Tensor, history: Sequence[ClientStore]) -> torch.Tensor:
        """[U] → what each client scores with: its private row, or (sequential backbones) the
        query its history infers under the public model."""
        return user_queries(self.env.backbone, self.private.user, history, users, self.public.item, self.public.net)

    @torch.no_grad()
    def score_users(self, users: torch.Tensor, history: Sequence[ClientStore] = ()) -> torch.Tensor:
        self.ensure_prepared()
        return self.env.backbone.score_full(self.user_queries(users, history), self.public.item, self.public.net)

    @torch.no_grad()
    def score_pairs(self, users: torch.Tensor, items: torch.Tensor,
                    history: Sequence[ClientStore] = ()) -> torch.Tensor:
        self.ensure_prepared()
        return score_pairs(self.env.backbone, self.private.user, history, users, items, self.public.item,
                           self.public.net)
