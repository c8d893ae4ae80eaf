"""Clients' ego graphs for graph backbones: FedGNN's neighbour expansion (Wu et al. 2021, §3.3),
which PerFedRec++ §4.2.2 follows, built for a whole bucket of clients at once.

The protocol. Every client uploads the ids of the items it holds, encrypted with one key shared
by all clients (so the matching party can match ids without reading them — the simulation uses
the ids themselves: a bijection changes no match), and its user embedding, protected by the
privacy mechanism. The matching party (``NeighborDirectory``, server side) then answers a
client's encrypted item ids with the embeddings of the other users who hold them, anonymised
(no user ids leave it), with their degrees. A client's **ego graph** is

    nodes: the client (its private row), the items of its local table (its training items, any
           pseudo items, this round's negatives — public rows), the neighbour users sent back;
    edges: client–item for the items it links (training items, pseudo items), and neighbour–item
           for every neighbour of each item of the table (the training graph restricted to it).

Weights are LightGCN's 1/√(d_a d_b) with training degrees: an item's and a neighbour's as the
matching party counts them, the client's as the number of items it links. With every neighbour
sent (``neighbors=0``) the client's representation after K ≤ 2 layers, and an item's after
K ≤ 1, equal the global LightGCN's (tested): the ego graph holds the whole 2-hop neighbourhood
of the client. Deeper layers see the neighbours' other items only through the client's table.

``neighbors = n > 0`` draws n users per item (with replacement, keyed by client, item and draw,
never by the bucket) and weights each kept draw by d_i / n, so the sum over neighbours is
unbiased; draws of the client itself are dropped (its own edge is the client–item edge).

Block-diagonal layout over a bucket of B clients with local tables [B, Lu]: node b is client b,
node B + b·Lu + s is slot s of client b, then the bucket's distinct (client, neighbour) pairs.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Callable

import torch

from fedrun.backbone.lightgcn import EdgeOperator, edge_norm, propagate_edges
from fedrun.core import hashrng
from fedrun.core.seeding import derive_seed, generator
from fedrun.data.client_store import ClientStore
from fedrun.kernels.batching import LocalProblem
from fedrun.types import EmbeddingUploads, ItemIdUploads

Privatize = Callable[[torch.Tensor, torch.Generator], torch.Tensor]  # rows [B, d] → what leaves the clients


class NeighborDirectory:
    """Server side: which (encrypted) item ids each anonymous user uploaded, and the last embedding
    each user shared. Built from uploads only — ``ItemIdUploads`` and ``EmbeddingUploads``."""

    def __init__(self, ids: ItemIdUploads, n_users: int, n_items: int, embeddings: EmbeddingUploads):
        keys = torch.unique(ids.users * n_items + ids.items)  # distinct (user, item), sorted by user
        user, item = keys // n_items, keys % n_items
        order = torch.argsort(item, stable=True)  # by item, then user
        self.item_users = user[order]  # [nnz]
        self.item_degree = torch.bincount(item, minlength=n_items)  # [I]
        self.item_start = self.item_degree.cumsum(0) - self.item_degree  # [I]
        self.user_degree = torch.bincount(user, minlength=n_users)  # [U]
        self.shared = torch.zeros(n_users, embeddings.vectors.shape[1], device=embeddings.vectors.device)
        self.receive(embeddings)

    def receive(self, uploads: EmbeddingUploads) -> None:
        """The uploading users' shared embeddings replace their previous ones."""
        self.shared[uploads.users] = uploads.vectors.to(self.shared.dtype)

    def answer(self, asker: torch.Tensor, item: torch.Tensor, cap: int, seed: int) -> "NeighborAnswer":
        """For each query (``asker`` [F] the asking client's user id, ``item`` [F]) the other users who
        hold the item: every one of them (factor 1), or ``cap`` draws weighted d_i / cap. Neighbours
        are numbered per asker, anonymously: user ids never leave the directory."""
        degree, start = self.item_degree[item], self.item_start[item]  # [F]
        if cap and bool((degree > cap).any()):
            full = degree <= cap
            take = torch.where(full, degree, torch.full_like(degree, cap))  # [F]
            query = torch.repeat_interleave(torch.arange(item.numel(), device=item.device), take)  # [E]
            rank = torch.arange(query.numel(), device=item.device) - (take.cumsum(0) - take)[query]
            drawn = hashrng.randint(seed, [asker[query], item[query], rank], degree[query])  # [E] with replacement
            offset = torch.where(full[query], rank, drawn)
            factor = torch.where(full[query], 1.0, degree[query].to(torch.float32) / cap)
        else:
            query = torch.repeat_interleave(torch.arange(item.numel(), device=item.device), degree)  # [E]
            offset = torch.arange(query.numel(), device=item.device) - (degree.cumsum(0) - degree)[query]
            factor = torch.ones(query.numel(), device=item.device)
        user = self.item_users[start[query] + offset]
        keep = user != asker[query]
        query, user, factor = query[keep], user[keep], factor[keep]
        n_users = self.shared.shape[0]
        pair, node = torch.unique(asker[query] * n_users + user, return_inverse=True)  # per (asker, neighbour)
        return NeighborAnswer(query, node, self.shared[pair % n_users], self.user_degree[user], factor)


@dataclass(frozen=True)
class NeighborAnswer:
    """What the directory sends back: per edge, the query it answers, the (anonymous) neighbour node
    it leads to, the neighbour's degree and the sampling factor; the neighbours' shared rows."""

    query: torch.Tensor  # [E] index into the queries
    node: torch.Tensor  # [E] index into rows (one node per distinct neighbour of an asker)
    rows: torch.Tensor  # [V, d]
    degree: torch.Tensor  # [E]
    factor: torch.Tensor  # [E]


@dataclass(frozen=True)
class EgoGraphs:
    """A bucket's ego graphs as one block-diagonal edge list (see the module docstring)."""

    n_clients: int  # B
    width: int  # Lu
    neighbor_rows: torch.Tensor  # [V, d] the neighbours' shared embeddings (constants to the clients)
    neighbor_owner: torch.Tensor  # [V] the client (index into the bucket) each neighbour node belongs to
    neighbor_rank: torch.Tensor  # [V] its position among that client's neighbours (their order at the directory)
    src: torch.Tensor  # [E] edges in both directions, node indices
    dst: torch.Tensor  # [E]
    weight: torch.Tensor  # [E]
    answer_edges: torch.Tensor  # [B] neighbour–item edges the directory answered each client

    def download_bytes(self) -> torch.Tensor:
        """[B] the bytes each client received from the directory beside the model: each distinct neighbour's shared
        row once (float32), and per neighbour–item edge the neighbour's anonymous index and its degree (4 bytes each).
        The sampling factor d_i / n follows from the item's degree, which the client's table already holds."""
        rows = torch.bincount(self.neighbor_owner, minlength=self.n_clients).to(torch.float64)  # [B]
        row_bytes = self.neighbor_rows.shape[1] * self.neighbor_rows.element_size()
        return rows * row_bytes + self.answer_edges.to(torch.float64) * 8

    @classmethod
    def build(cls, directory: NeighborDirectory, users: torch.Tensor, items: torch.Tensor, item_mask: torch.Tensor,
              linked: torch.Tensor, cap: int, seed: int) -> "EgoGraphs":
        """users [B]; the local tables items / item_mask [B, Lu]; ``linked`` [B, Lu] the slots the
        client has an edge to; ``cap`` neighbours per item (0: all); ``seed`` keys the draws."""
        B, Lu = items.shape
        client, slot = item_mask.nonzero(as_tuple=True)  # [F] the valid slots
        item = items[client, slot]
        slot_node = B + client * Lu + slot  # [F]
        item_degree = directory.item_degree[item]  # [F] (item degrees are what the directory counts)
        # client–item edges
        link = linked[client, slot]
        own_degree = linked.sum(1)  # [B]
        w_own = edge_norm(own_degree[client[link]], item_degree[link])
        # neighbour–item edges (the directory's answer)
        answer = directory.answer(users[client], item, cap, seed)
        w_nb = answer.factor * edge_norm(answer.degree, item_degree[answer.query])
        a = torch.cat([client[link], B + B * Lu + answer.node])
        b = torch.cat([slot_node[link], slot_node[answer.query]])
        w = torch.cat([w_own, w_nb])
        owner = torch.zeros(answer.rows.shape[0], dtype=torch.int64, device=items.device)
        owner[answer.node] = client[answer.query]
        first = torch.full((B,), answer.rows.shape[0], dtype=torch.int64, device=items.device)
        first = first.scatter_reduce(0, owner, torch.arange(owner.numel(), device=items.device), "amin")
        answered = torch.bincount(client[answer.query], minlength=B)  # [B]
        return cls(B, Lu, answer.rows, owner, torch.arange(owner.numel(), device=items.device) - first[owner],
                   torch.cat([a, b]), torch.cat([b, a]), torch.cat([w, w]), answered)

    def propagate(self, user: torch.Tensor, item_table: torch.Tensor, layers: int
                  ) -> tuple[torch.Tensor, torch.Tensor]:
        """The clients' rows user [B, d] and local tables item_table [B, Lu, d] (leaves being trained)
        → their layer-mean representations in their own ego graphs: [B, d], [B, Lu, d]."""
        center, items, _ = self.propagate_all(user, item_table, layers)
        return center, items

    def propagate_all(self, user: torch.Tensor, item_table: torch.Tensor, layers: int,
                      perturb: Callable[[int, torch.Tensor], torch.Tensor] | None = None
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``propagate`` with the neighbours' representations too ([B, d], [B, Lu, d], [V, d]) and an
        optional per-layer ``perturb`` (``propagate_edges``)."""
        B, Lu, d = item_table.shape
        x0 = torch.cat([user, item_table.reshape(B * Lu, d), self.neighbor_rows.to(user.dtype)])  # [N, d]
        operator = self.operator if x0.dtype == self.weight.dtype and x0.device.type == "cpu" else None
        out = propagate_edges(x0, self.src, self.dst, self.weight, layers, perturb, operator)
        return out[:B], out[B:B + B * Lu].reshape(B, Lu, d), out[B + B * Lu:]

    @functools.cached_property
    def operator(self) -> EdgeOperator:
        """The edge list as CSR products, built once per bucket and round (every local step and view uses it)."""
        n_nodes = self.n_clients * (1 + self.width) + self.neighbor_rows.shape[0]
        return EdgeOperator.build(self.src, self.dst, self.weight, n_nodes)

    def node_keys(self, users: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per node, (its client's user id, a key naming the node within that client: 0 the client,
        1 + slot for its items, 2³² + rank for its neighbours) — the same whatever the bucket."""
        B, Lu = self.n_clients, self.width
        device = users.device
        slot = torch.arange(Lu, device=device).repeat(B)  # [B·Lu]
        owner = torch.cat([users, users.repeat_interleave(Lu), users[self.neighbor_owner]])
        key = torch.cat([torch.zeros(B, dtype=torch.int64, device=device), 1 + slot,
                         (1 << 32) + self.neighbor_rank])
        return owner, key


class EgoProtocol:
    """The client side of neighbour expansion for a federated method with a graph backbone:
    registration (every client's item ids and protected embedding, before its first round), each
    round's embedding refresh by the round's clients, and the ego graphs of a round's buckets."""

    def __init__(self, store: ClientStore, n_items: int, layers: int, cap: int, seed: int):
        self.store, self.n_items, self.layers, self.cap, self.seed = store, n_items, layers, cap, seed
        self.directory: NeighborDirectory | None = None
        self.restored: torch.Tensor | None = None  # the directory's shared rows from a checkpoint
        # embeddings each client has shared (registration and refreshes), in the checkpoint
        self.shared_count = torch.zeros(store.n_users, dtype=torch.int64)

    def refresh(self, private_user: torch.Tensor, users: torch.Tensor, round_index: int,
                privatize: Privatize) -> EmbeddingUploads:
        """Each of the round's clients ``users`` [B] uploads its row of ``private_user`` [U, d] (the
        clients' side) through ``privatize`` (the run's privacy mechanism for embeddings); before the
        first round every client registers (its item ids and its row). Returns the rows shared in this call, in
        the order they were sent: the registration's (every client, first call only) and then the round's."""
        device = private_user.device
        registered: EmbeddingUploads | None = None
        if self.directory is None:
            everyone = torch.arange(self.store.n_users, device=device)
            owner, _, items, _ = self.store.flat(everyone)
            first = generator(self.seed, "embedding-privacy-registration", 0, device)
            shared = privatize(private_user, first) if self.restored is None else self.restored
            self.directory = NeighborDirectory(ItemIdUploads(owner, items), self.store.n_users, self.n_items,
                                               EmbeddingUploads(everyone, shared))
            self.shared_count = self.shared_count.to(device) + (1 if self.restored is None else 0)
            if self.restored is None:  # a resumed run re-reads the rows it registered, it sends nothing new
                registered = EmbeddingUploads(everyone, shared)
        gen = generator(self.seed, "embedding-privacy", round_index, device)
        uploads = EmbeddingUploads(users, privatize(private_user[users], gen))
        self.directory.receive(uploads)
        self.shared_count[users] += 1
        if registered is None:
            return uploads
        return EmbeddingUploads(torch.cat([registered.users, users]), torch.cat([registered.vectors, uploads.vectors]))

    def state_dict(self) -> dict:
        return {} if self.directory is None else {"shared": self.directory.shared, "shared_count": self.shared_count}

    def load_state_dict(self, state: dict) -> None:
        """A resumed run's directory starts from the checkpoint's shared rows (registration is not redone), and its
        count of the rows each client shared from the checkpoint's (from zero for a checkpoint without it)."""
        self.directory, self.restored = None, state.get("shared")
        if "shared_count" in state:
            self.shared_count = state["shared_count"].clone().cpu()

    def attach(self, problem: LocalProblem, round_index: int, sent: torch.Tensor | None = None) -> "GraphProblem":
        """The bucket's problem with its ego graphs (the client links its positives; none with K = 0
        layers: MF, nothing propagates) and what the round's download ``sent`` every client."""
        fields = {f.name: getattr(problem, f.name) for f in dataclasses.fields(LocalProblem)}
        if self.layers == 0:
            return GraphProblem(**fields, ego=None, layers=0, round=round_index, sent=sent)
        linked = torch.zeros_like(problem.item_mask)
        B = linked.shape[0]
        rows = torch.arange(B, device=linked.device).unsqueeze(1).expand_as(problem.pos_slot)
        linked[rows[problem.batch.pos_mask], problem.pos_slot[problem.batch.pos_mask]] = True
        seed = derive_seed(self.seed, "ego-neighbors", round_index)
        if self.directory is None:
            raise RuntimeError("ego graphs are built after the round's refresh registered the clients")
        ego = EgoGraphs.build(self.directory, problem.batch.users, problem.items, problem.item_mask, linked,
                              self.cap, seed)
        return GraphProblem(**fields, ego=ego, layers=self.layers, round=round_index, sent=sent)


@dataclass(frozen=True)
class GraphProblem(LocalProblem):
    """A bucket's local problem with its clients' ego graphs: scores use the propagated rows."""

    ego: EgoGraphs | None = None
    layers: int = 0
    round: int = 0
    sent: torch.Tensor | None = None  # what the round's download brought every client (PerFedRec++: negatives)

    def context_bytes_down(self) -> torch.Tensor:
        """[B] what each client's ego graph brought it from the directory (``EgoGraphs.download_bytes``)."""
        return super().context_bytes_down() if self.ego is None else self.ego.download_bytes()

    def encode(self, user: torch.Tensor, item_table: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.ego is None:  # K = 0: the rows themselves
            return user, item_table
        return self.ego.propagate(user, item_table, self.layers)
