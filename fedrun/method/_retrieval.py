"""Federated training of a retrieval model as FedCL trains it (Wu, Wu, Qi, Huang, Xie, 2022 — ``papers/fedcl.txt``,
Algorithm 1), a module its options compose: FedCL (``method=fedcl``: Eq. 1 over local, in-batch and semi-hard
negatives; with none of the server's, the "+Fed" baseline) and BIL (``method=bil``: FedCL's "+BIL" rows, the
same training with a positives-only loss). Each subclasses ``RetrievalMethod``; neither subclasses the other.
The equations and the choices where the paper is open are written down in the options' modules,
where ``fedrun info method=<option>`` shows them.
"""

from __future__ import annotations

from typing import ClassVar, cast

import torch

from fedrun.backbone.base import PrivateParams, PublicParams
from fedrun.backbone.losses import example_sq_norms, mean_l2
from fedrun.backbone.sequential import SequenceView, SequentialBackbone
from fedrun.core import hashrng
from fedrun.core.seeding import derive_seed, generator
from fedrun.data.negatives import sample_client_negatives
from fedrun.defense.base import Defense
from fedrun.errors import ConfigError, check
from fedrun.kernels.batching import LocalProblem, local_problem
from fedrun.kernels.local import slot_rows
from fedrun.kernels.rows import gather_rows
from fedrun.method import fedsgd
from fedrun.method.client import Client, ModelView
from fedrun.method.config import RetrievalConfig
from fedrun.method.federated import Exchange, FederatedMethod, Needs
from fedrun.method.server import OptimizerServer, Server
from fedrun.privacy.base import Privacy
from fedrun.retrieval.hard_negatives import HardNegativeServer
from fedrun.types import ClientBatch, EmbeddingUploads


def mixup_loss(pos: torch.Tensor, mask: torch.Tensor, local: torch.Tensor | None, semi: torch.Tensor | None,
               semi_valid: torch.Tensor | None, in_batch: torch.Tensor | None) -> torch.Tensor:
    """FedCL Eq. 1 per client, averaged over its positives → [B].

    pos [B, P] scores of the positives, mask [B, P] which positives are training targets;
    local [B, P, n] scores of each positive's local negatives; semi [B, T] (shared by the
    client's positives) or [B, P, T] scores of the semi-hard negatives, semi_valid [B, T]
    which of them count; in_batch [B, P, P] scores of positive j's user representation
    against the client's other items k, −inf where k must not count (k = j, padding, a
    repeat of j's item: the caller masks them).
    """
    B, P = pos.shape
    parts = [pos.unsqueeze(-1)]
    if local is not None:
        parts.append(local)
    if semi is not None:
        semi = semi.unsqueeze(1).expand(B, P, -1) if semi.dim() == 2 else semi
        if semi_valid is not None:
            semi = semi.masked_fill(~semi_valid.unsqueeze(1), float("-inf"))
        parts.append(semi)
    if in_batch is not None:
        parts.append(in_batch)
    logits = torch.cat(parts, -1)  # [B, P, 1 + n + T + P]
    per_positive = torch.logsumexp(logits, -1) - pos  # −log softmax of the positive, [B, P]
    weight = mask.to(pos.dtype)
    return (per_positive * weight).sum(1) / weight.sum(1).clamp_min(1)


class RetrievalClient(Client):
    """The family's client program: its user embedding inferred and uploaded for the exchange, the local
    negative store, Eq. 1 over local, in-batch and semi-hard negatives (``local_loss``; BIL: its own)."""

    needs_negatives: ClassVar[bool] = True  # Eq. 1 is a softmax over the positive and its negatives

    def __init__(self, config: RetrievalConfig, env, private: PrivateParams, view: ModelView):
        super().__init__(config, env, private, view)
        backbone = env.backbone
        check(backbone.config.loss != "mse", "backbone.loss", "mse", "a ranking loss: FedCL is contrastive")
        per_position = self.context.per_position  # a sequence: the user is a different query at each position
        if config.in_batch == "on" and not per_position:
            raise ConfigError("method.in_batch", "on", f"off or auto for {type(backbone).__name__}: in-batch negatives "
                              "need a user representation that differs per positive (FedCL §3.2)")
        self.in_batch = config.in_batch == "on" or (config.in_batch == "auto" and per_position)
        check(not self.needs_negatives or config.semi_hard + config.local_negatives > 0 or self.in_batch,
              "method.semi_hard", config.semi_hard,
              "> 0, or local_negatives > 0, or in-batch negatives: the softmax needs negatives")
        self.n_local, self.n_semi = config.local_negatives, config.semi_hard
        self.num_negatives = self.n_local  # slots per positive beyond itself, for bucketing

    def user_embeddings(self, users: torch.Tensor) -> torch.Tensor:
        """[B] → each client's user embedding: its private row [B, du] (ID-based), or the query
        its training history infers under the public model [B, d] (sequential, §3.1)."""
        return self.queries(users, [self.env.train])

    def upload_embeddings(self, users: torch.Tensor, round_index: int, privacy: Privacy) -> EmbeddingUploads:
        """The exchange's upload (§3.1): each client's user embedding, through the privacy mechanism for them."""
        gen = generator(self.env.sim.seed, "embedding-privacy", round_index, self.env.device)
        return EmbeddingUploads(users, privacy.privatize_embeddings(self.user_embeddings(users), gen))

    def problems(self, users: torch.Tensor, round_index: int, sent: torch.Tensor | None = None) -> list[LocalProblem]:
        """Buckets of clients, each with its local negatives per positive [B, P, n] and the
        semi-hard negatives the server sent it [B, T], deduplicated into one local item table."""
        env, limit = self.env, self.context.history_limit  # a sequence trains on its last max_len items
        sizes = env.train.sizes(users)
        if limit is not None:
            sizes = sizes.clamp_max(limit)
        out = []
        for index, batch in env.client_batches(users, 1 + self.num_negatives, sizes, limit):
            local = self.local_negatives(batch, round_index) if self.n_local else None
            out.append(local_problem(batch, local, env.n_items, None if sent is None else sent[index]))
        return self.context.attach(out, round_index, sent)

    def local_negatives(self, batch, round_index: int) -> torch.Tensor:
        """[B, P, n]: for each positive, n picks (with replacement) from the client's fixed store
        (drawn once from the items outside the client's whole history)."""
        B, P = batch.pos.shape
        owner = torch.arange(B, device=batch.users.device).repeat_interleave(P)
        position = torch.arange(P, device=batch.users.device).repeat(B)
        history = self.context.untruncated(batch)
        return self.store_picks(self.local_store(history), batch.users, owner, position, round_index).view(
            B, P, self.n_local)

    def local_store(self, history: ClientBatch) -> torch.Tensor:
        """[B, S] each client's simulated local negative store, from its whole (untruncated) training
        history; the same every round (draw k of a user is keyed by the user and k alone)."""
        env = self.env
        return sample_client_negatives(history.users, history.pos, history.pos_mask, self.config.local_store,
                                       env.n_items, derive_seed(env.sim.seed, "local-store"))

    def store_picks(self, store: torch.Tensor, users: torch.Tensor, owner: torch.Tensor, position: torch.Tensor,
                    round_index: int) -> torch.Tensor:
        """[R, n]: the local negatives of positives (owner [R] into ``users``, position [R] within
        its client), pick k of a positive keyed by (round, user, position·n + k)."""
        n = self.n_local
        seed = derive_seed(self.env.sim.seed, "local-picks", round_index)
        user = users[owner].repeat_interleave(n)
        slot = (position.unsqueeze(1) * n + torch.arange(n, device=owner.device)).reshape(-1)
        picks = hashrng.randint(seed, [user, slot], self.config.local_store).view(-1, n)  # [R, n]
        return store[owner.unsqueeze(1), picks]

    def local_loss(self, problem: LocalProblem, user: torch.Tensor, item_table: torch.Tensor,
                   net: dict[str, torch.Tensor]) -> torch.Tensor:
        """Eq. 1 for every client of the bucket, scored with each client's local copies → [B]."""
        if problem.sequence is not None:
            return self.sequence_loss(problem, item_table, net)
        B = item_table.shape[0]
        P = problem.pos_slot.shape[1]
        slots = [problem.pos_slot]
        if self.n_local:
            slots.append(cast(torch.Tensor, problem.neg_slot).reshape(B, -1))  # [B, P·n]: n_local > 0 draws them
        if self.n_semi:
            slots.append(cast(torch.Tensor, problem.extra_slot))  # [B, T]: the semi-hard negatives sent
        rows = slot_rows(item_table, torch.cat(slots, 1))  # [B, S, di]
        scores = self.env.backbone.score(user, rows, net)  # [B, S]
        pos = scores[:, :P]
        local = scores[:, P: P + P * self.n_local].view(B, P, self.n_local) if self.n_local else None
        semi = scores[:, P + P * self.n_local:] if self.n_semi else None
        loss = mixup_loss(pos, problem.batch.pos_mask, local, semi, self.semi_valid(problem), None)
        l2 = self.env.backbone.config.l2
        if not l2:
            return loss
        sq_norms = example_sq_norms(user, rows[:, :P * (1 + self.n_local)], P)  # [B, P]
        return loss + mean_l2(l2, sq_norms, problem.batch.pos_mask)

    def semi_valid(self, problem: LocalProblem) -> torch.Tensor | None:
        """[B, T] which semi-hard negatives count: not the client's own positives (``exclude_positives``)."""
        if not (self.n_semi and self.config.exclude_positives):
            return None
        mask = problem.batch.pos_mask
        B, P = mask.shape
        is_positive = torch.zeros_like(problem.item_mask)  # [B, Lu]
        owner = torch.arange(B, device=mask.device).unsqueeze(1).expand(B, P)
        is_positive[owner[mask], problem.pos_slot[mask]] = True
        return ~is_positive.gather(1, cast(torch.Tensor, problem.extra_slot))

    def sequence_queries(self, problem: LocalProblem, item_table: torch.Tensor,
                         net: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Sequential backbones → (the query predicting each position [B, P, d], the sequence's rows [B, P, d])."""
        rows = slot_rows(item_table, problem.pos_slot)  # [B, P, d]
        backbone = cast(SequentialBackbone, self.env.backbone)  # a sequence context's backbone
        return backbone.encode(rows, problem.batch.pos_mask, cast(SequenceView, problem.sequence), net), rows

    def sequence_loss(self, problem: LocalProblem, item_table: torch.Tensor,
                      net: dict[str, torch.Tensor]) -> torch.Tensor:
        """Eq. 1 with a query per target position (§3.2): its positive, its local negatives, the
        client's semi-hard negatives and, in-batch, the client's other items."""
        sequence = problem.sequence
        assert sequence is not None, "a sequence context's problems carry their positions"
        queries, rows = self.sequence_queries(problem, item_table, net)
        B, P, d = rows.shape
        pos = (queries * rows).sum(-1)  # [B, P]
        local = semi = in_batch = None
        if self.n_local:
            neg_slot = cast(torch.Tensor, problem.neg_slot).reshape(B, -1)  # [B, P·n]
            negatives = slot_rows(item_table, neg_slot).view(B, P, self.n_local, d)
            local = torch.einsum("bpd,bpnd->bpn", queries, negatives)
        if self.n_semi:
            sent = slot_rows(item_table, cast(torch.Tensor, problem.extra_slot))  # [B, T, d]
            semi = torch.einsum("bpd,btd->bpt", queries, sent)  # [B, P, T]
        if self.in_batch:
            slot, mask = problem.pos_slot, problem.batch.pos_mask
            others = mask.unsqueeze(1) & (slot.unsqueeze(2) != slot.unsqueeze(1))  # not j's own item, not padding
            if self.config.in_batch_scope == "past":  # [P, P]: k < p, the items seen before target p
                others = others & torch.ones(P, P, dtype=torch.bool, device=slot.device).tril(-1)
            in_batch = torch.einsum("bpd,bkd->bpk", queries, rows).masked_fill(~others, float("-inf"))
        return mixup_loss(pos, sequence.target, local, semi, self.semi_valid(problem), in_batch)


class RetrievalMethod(FederatedMethod):
    """The family's protocol: its client program (``RetrievalClient``; BIL: its own), the user-embedding
    exchange with the server's semi-hard negatives, the FedSGD pass."""

    client_program: ClassVar[type[RetrievalClient]] = RetrievalClient
    unpadded_fast_path: ClassVar[bool] = True  # local_loss is Eq. 1 per positive (subclasses may differ)
    has_fedsgd_path = True
    client: RetrievalClient

    def __init__(self, config: RetrievalConfig, env):
        super().__init__(config, env)
        self.hard_server = None
        if config.semi_hard:
            n_clients = int(env.clients_with_data().numel())
            check(config.clustering == "none" or config.n_clusters <= n_clients, "method.n_clusters",
                  config.n_clusters, f"at most the {n_clients} clients with training data")
            check(config.semi_hard <= env.n_items, "method.semi_hard", config.semi_hard,
                  f"at most the catalogue's {env.n_items} items")
            self.hard_server = HardNegativeServer(config, env.backbone, env.n_users, self.client.context.query_width,
                                                  env.sim.seed, env.device)
        self.embedding_uploads = torch.zeros(env.n_users, dtype=torch.int64, device=env.device)

    @classmethod
    def needs(cls, config: RetrievalConfig) -> Needs:
        return Needs(user_contexts=frozenset({"ids", "sequence"}))

    @classmethod
    def l2_step_lr(cls, config: RetrievalConfig) -> float | None:
        """Each positive's L2 holds ‖u‖² and the loss is their mean (Eq. 1), so a plain-SGD step shrinks u
        by 2·lr·l2 through it: at the default lr 10, l2 must stay under .05."""
        return config.optimizer.private_lr if config.optimizer.is_plain_sgd else None

    @classmethod
    def shares_embeddings(cls, config: RetrievalConfig) -> bool:
        return config.semi_hard > 0

    def describe(self) -> dict:
        return {"in_batch_negatives": self.client.in_batch}

    def clear_private_uploads(self, privacy: Privacy) -> list[str]:
        """The exchange uploads every sampled client's user embedding (§3.1): in the clear unless the privacy
        mechanism covers ``user_embedding`` (the paper's LDP)."""
        return ["user_embedding"] if self.hard_server is not None and "user_embedding" not in privacy.targets else []

    def make_server(self, public: PublicParams, statistics: dict[str, torch.Tensor]) -> Server:
        return OptimizerServer(public, self.config.server_optimizer)

    # -- the round: embeddings up, semi-hard negatives down (before local training) ----------------
    def exchange(self, users: torch.Tensor, round_index: int, privacy: Privacy) -> Exchange:
        if self.hard_server is None:  # the "+Fed" row: no exchange
            return Exchange()
        embeddings = self.client.upload_embeddings(users, round_index, privacy)
        self.embedding_uploads[users] += 1
        self.hard_server.receive(embeddings, round_index)  # server side: uploads only
        hard = self.hard_server.negatives(users, self.public, round_index)  # [B, T] sent to the clients
        metrics = {"cluster_seconds_total": self.hard_server.cluster_seconds}
        epsilon = privacy.epsilon_per_upload(embeddings.vectors.shape[1])
        if epsilon is not None and "user_embedding" in privacy.targets:
            metrics["epsilon_spent_max"] = float(self.embedding_uploads.max()) * epsilon
        return Exchange(hard, embeddings.nbytes_per_client(), 4.0 * self.client.n_semi, metrics,  # T int32 item ids
                        shared=embeddings)

    # -- FedSGD fast path ------------------------------------------------------------------------
    def fast_round(self, users: torch.Tensor, round_index: int, sent: torch.Tensor | None, rule: Defense):
        """The round as one FedSGD pass (``FedSGDPass``) under the linear ``rule``: unpadded for Eq. 1
        on ID-based backbones, per bucket otherwise. Same draws and same model as the general path."""
        if not self.client.context.per_example or not self.unpadded_fast_path:
            return self.bucketed_fast_round(users, round_index, sent, rule)
        return self.unpadded_fast_round(users, round_index, sent, rule)

    def unpadded_fast_round(self, users: torch.Tensor, round_index: int, sent: torch.Tensor | None, rule: Defense):
        """Σ_c w_c L_c with L_c Eq. 1's mean over client c's positives is Σ_e (w_c / |D_c|)·ℓ_e:
        each positive e is scored against its local negatives and its client's semi-hard
        negatives ``sent`` [B, T] (scored once per client in a chunk), with no per-client copies
        of the shared weights and no padding to the round's largest client."""
        env, client, B = self.env, self.client, users.numel()
        owner, position, items, _ = env.train.flat(users)  # [N] each
        sizes = env.train.sizes(users).to(self.public.item.dtype)  # [B]
        candidates = items.unsqueeze(1)  # [N, 1 + n]: the positive, then its local negatives
        if client.n_local:
            store = client.local_store(env.train.client_batch(users))  # [B, S]
            local = client.store_picks(store, users, owner, position, round_index)
            candidates = torch.cat([candidates, local], 1)
        keys = [(owner.unsqueeze(1) * env.n_items + candidates).reshape(-1)]
        if sent is not None:
            sent_keys = torch.arange(B, device=users.device).unsqueeze(1) * env.n_items + sent  # [B, T]
            keys.append(sent_keys.reshape(-1))
        pairs, pair_of = torch.unique(torch.cat(keys), return_inverse=True)
        step = fedsgd.leaves(users, pairs, sizes, rule, self.public, client.private.user, env.n_items)
        n_scored = candidates.numel()
        example_pair = pair_of[:n_scored].view_as(candidates)  # [N, 1 + n]
        semi_valid = None
        if sent is not None:
            sent_pair = pair_of[n_scored:].view(B, -1)  # [B, T]
            if self.config.exclude_positives:
                semi_valid = ~torch.isin(sent_keys, owner * env.n_items + items)  # [B, T]
        width = candidates.shape[1] + (0 if sent is None else sent.shape[1])

        l2 = env.backbone.config.l2

        def example_loss(chunk: torch.Tensor) -> torch.Tensor:
            chunk_owner = owner[chunk]
            user = gather_rows(step.user, chunk_owner)  # [n, du]
            rows = gather_rows(step.item, step.row_of_pair[example_pair[chunk]])  # [n, 1 + n_local, di]
            scores = env.backbone.score(user, rows, step.net)  # [n, 1 + n_local]
            semi = valid = None
            if sent is not None:
                clients, client_of = torch.unique(chunk_owner, return_inverse=True)  # the chunk's clients
                semi = env.backbone.score(gather_rows(step.user, clients),
                                          gather_rows(step.item, step.row_of_pair[sent_pair[clients]]),
                                          step.net)[client_of]  # [n, T]
                valid = None if semi_valid is None else semi_valid[chunk_owner]
            local = scores[:, 1:].unsqueeze(1) if client.n_local else None  # [n, 1, n_local]
            ones = torch.ones(chunk.numel(), 1, dtype=torch.bool, device=chunk.device)
            loss = mixup_loss(scores[:, :1], ones, local, semi, valid, None)  # [n]
            return loss + l2 * example_sq_norms(user, rows, 1)[:, 0] if l2 else loss

        losses = fedsgd.over_examples(step, owner, sizes, width, example_loss, env.sim.max_slots)  # [B]: Eq. 1
        return fedsgd.result(step, losses, self.config.optimizer, client.private.user)

    def bucketed_fast_round(self, users: torch.Tensor, round_index: int, sent: torch.Tensor | None, rule: Defense):
        """The general path's buckets and ``local_loss`` as one FedSGD pass per bucket (``fedsgd.over_buckets``:
        sequential backbones, BIL)."""
        client = self.client
        problems = client.problems(users, round_index, sent)
        step, losses = fedsgd.over_buckets(problems, rule, self.public, client.private.user, self.env.n_items,
                                           client.local_loss)
        return fedsgd.result(step, losses, self.config.optimizer, client.private.user)

    # -- state -------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        state = {**super().state_dict(), "embedding_uploads": self.embedding_uploads}
        if self.hard_server is not None:
            state["hard_server"] = self.hard_server.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.embedding_uploads.copy_(state["embedding_uploads"])
        if self.hard_server is not None:
            self.hard_server.load_state_dict(state["hard_server"])
