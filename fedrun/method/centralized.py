"""The base of the centrally trained methods (``method=central``, ``svdpp``, ``median_quantized``): the same
backbone trained on all training data in one place — the "centralized" row of every paper table, and the
floor the federated runs are measured against. Options subclass ``CentralMethod`` (as federated ones subclass
``FederatedMethod``) and fill its two score hooks (``user_rows``, ``offsets``) or their own ranking.
How an epoch runs is written down in ``method=central``'s module (``fedrun info method=central``).
"""

from __future__ import annotations

from typing import Sequence, cast

import torch
import torch.nn.functional as F

from fedrun.backbone.config import SequentialConfig
from fedrun.backbone.losses import example_sq_norms, per_client_loss
from fedrun.backbone.sequential import SequentialBackbone, score_pairs, user_queries
from fedrun.core.seeding import derive_seed, generator
from fedrun.data.client_store import ClientStore
from fedrun.data.negatives import sample_negatives
from fedrun.kernels.env import RunEnv
from fedrun.method._central_tables import TABLES
from fedrun.method.base import Method, RoundStats
from fedrun.method.config import CentralConfig


class CentralMethod(Method):
    graph_backbones = True  # LightGCN: the whole training graph propagated per mini-batch
    unread = {"sim.local_epochs": "it trains centrally: a round is one epoch over every training pair, no clients"}

    def __init__(self, config: CentralConfig, env: RunEnv):
        super().__init__(config, env)
        private, public = env.backbone.init_params(env.n_users, env.n_items, generator(env.sim.seed, "init"))
        self.user = private.user.to(env.device).requires_grad_(True)
        self.item = public.item.to(env.device).requires_grad_(True)
        self.net = {k: v.to(env.device).requires_grad_(True) for k, v in public.net.items()}
        self.optimizer = config.optimizer.make([self.item, *self.net.values()], private=[self.user])
        self.num_negatives = 0 if env.backbone.config.loss == "mse" else config.num_negatives
        store = env.train
        self.pair_user = torch.repeat_interleave(torch.arange(store.n_users, device=env.device), store.sizes())
        self.pair_item, self.pair_rating = store.items, store.ratings
        self._positive_keys = store.sorted_keys()
        context = env.backbone.user_context
        self.tables = TABLES[context](env, config.contrast)  # what it scores with: the rows, or a graph's
        self.epoch = self.train_sequences if context == "sequence" else self.train_pairs  # its epoch

    def rounds_per_epoch(self) -> int:
        return 1

    def train_round(self, round_index: int) -> RoundStats:
        self.tables.reset()
        return self.epoch(round_index)

    def train_pairs(self, round_index: int) -> RoundStats:
        """One epoch over every training pair (ID-based and graph backbones)."""
        env, n_pairs = self.env, self.pair_user.numel()
        gen = generator(env.sim.seed, "central-epoch", round_index)  # CPU: same order on every device
        order = torch.randperm(n_pairs, generator=gen).to(env.device)
        seed = derive_seed(env.sim.seed, "central-negatives", round_index)
        self.tables.start_epoch(round_index, env.device)
        # The epoch's negatives in one draw: each is keyed by its training pair, so they equal per-batch draws,
        # and the batches below run without the host waiting on the device (no rejection round trips).
        epoch_negatives = (sample_negatives(self.pair_user[order], self.num_negatives, env.n_items,
                                            self._positive_keys, seed, draw_ids=order)  # [P, n]
                           if self.num_negatives else None)
        batch_negatives = (torch.split(epoch_negatives, self.config.batch_size) if epoch_negatives is not None
                           else [None] * -(-n_pairs // self.config.batch_size))
        total = torch.zeros((), dtype=torch.float64, device=env.device)  # summed on the device: no sync per batch
        batches = 0
        for rows, negatives in zip(torch.split(order, self.config.batch_size), batch_negatives):
            users, items = self.pair_user[rows], self.pair_item[rows]
            candidates = items.unsqueeze(1)  # [N, 1]
            if negatives is not None:
                candidates = torch.cat([candidates, negatives], 1)  # [N, 1 + n]
            raw = self.user_rows(users), self.item[candidates]  # [N, du], [N, 1 + n, di]: what L2 acts on
            user_rows, vectors, contrastive = self.tables.batch(*raw, self.user, self.item, users, items, candidates)
            scores = env.backbone.score(user_rows, vectors, self.net) + self.offsets(users, candidates)  # [N, 1 + n]
            neg = scores[:, 1:].unsqueeze(1) if self.num_negatives else None
            ratings = None if self.pair_rating is None else self.pair_rating[rows].unsqueeze(1)
            mask = torch.ones_like(items, dtype=torch.bool).unsqueeze(1)
            l2 = env.backbone.config.l2
            loss = per_client_loss(env.backbone.config.loss, scores[:, :1], neg, mask, ratings, l2,
                                   example_sq_norms(*raw, 1) if l2 else None).mean() + contrastive
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
            total, batches = total + loss.detach().double(), batches + 1
        return RoundStats(float(total) / max(batches, 1))

    def user_rows(self, users: torch.Tensor) -> torch.Tensor:
        """[N] → the user vectors the backbone scores with (SVD++ adds the implicit-feedback term)."""
        return self.user[users]

    def offsets(self, users: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor | float:
        """Terms added to every score [N, C] (SVD++: global mean and biases); none by default."""
        return 0.0

    def train_sequences(self, round_index: int) -> RoundStats:
        """One epoch over the users' sequences (sequential backbones)."""
        env, backbone = self.env, cast(SequentialBackbone, self.env.backbone)
        users = env.clients_with_data()
        gen = generator(env.sim.seed, "central-epoch", round_index)
        users = users[torch.randperm(users.numel(), generator=gen).to(env.device)]
        dropout = (generator(env.sim.seed, "dropout", round_index, env.device)
                   if cast(SequentialConfig, backbone.config).dropout else None)
        cloze = derive_seed(env.sim.seed, "cloze", round_index)
        seed = derive_seed(env.sim.seed, "central-negatives", round_index)
        total, batches = torch.zeros((), dtype=torch.float64, device=env.device), 0
        for chunk in torch.split(users, self.config.sequence_batch):
            batch = env.train.client_batch(chunk, backbone.max_len)
            view = backbone.train_view(chunk, batch.pos_mask, cloze, dropout)
            queries = backbone.encode(self.item[batch.pos], batch.pos_mask, view, self.net)[view.target]  # [N, d]
            targets = batch.pos[view.target]  # [N]
            if backbone.config.loss == "ce":
                loss = F.cross_entropy(queries @ self.item.T, targets)
            else:
                owners = chunk.unsqueeze(1).expand_as(batch.pos)  # [B, L]
                position = torch.arange(batch.pos.shape[1], device=env.device)
                draw = (owners * backbone.max_len + position)[view.target]  # one id per (user, position)
                negatives = sample_negatives(owners[view.target], self.config.num_negatives, env.n_items,
                                             self._positive_keys, seed, draw_ids=draw)
                scores = torch.einsum("nd,nkd->nk", queries, self.item[torch.cat([targets[:, None], negatives], 1)])
                ones = torch.ones_like(targets, dtype=torch.bool).unsqueeze(1)
                loss = per_client_loss(backbone.config.loss, scores[:, :1], scores[:, 1:].unsqueeze(1), ones,
                                       None).mean()
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
            total, batches = total + loss.detach().double(), batches + 1
        return RoundStats(float(total) / max(batches, 1))

    def state_dict(self) -> dict:
        return {"user": self.user, "item": self.item, "net": self.net, "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.tables.reset()
        with torch.no_grad():
            self.user.copy_(state["user"])
            self.item.copy_(state["item"])
            for name, tensor in self.net.items():
                tensor.copy_(state["net"][name])
        self.optimizer.load_state_dict(state["optimizer"])

    @torch.no_grad()
    def ranking_tables(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The user and item tables the model scores with: the parameters, or LightGCN's propagated ones."""
        return self.tables.ranking(self.user, self.item)

    @torch.no_grad()
    def score_users(self, users: torch.Tensor, history: Sequence[ClientStore] = ()) -> torch.Tensor:
        user, item = self.ranking_tables()
        queries = user_queries(self.env.backbone, user, history, users, item, self.net)
        return self.env.backbone.score_full(queries, item, self.net)

    @torch.no_grad()
    def score_pairs(self, users: torch.Tensor, items: torch.Tensor,
                    history: Sequence[ClientStore] = ()) -> torch.Tensor:
        user, item = self.ranking_tables()
        return score_pairs(self.env.backbone, user, history, users, items, item, self.net)
