"""Frozen containers passed between the simulator's phases.

The privacy boundary lives here: the server phase (``defense.aggregate``, the method's
server program ``method.server``) receives :class:`Uploads` / :class:`Aggregate` and the public
parameters only. ``ClientBatch`` (raw local data) and private parameters stay on the
client side of the round.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

import torch


@dataclass(frozen=True)
class ClientBatch:
    """B clients' local training data, padded to the bucket's longest client."""

    users: torch.Tensor  # [B] user ids
    pos: torch.Tensor  # [B, P] positive item ids (0 where padded)
    pos_mask: torch.Tensor  # [B, P] bool
    ratings: torch.Tensor | None  # [B, P] explicit ratings, or None

    @property
    def size(self) -> int:
        return int(self.users.numel())

    def n_pos(self) -> torch.Tensor:
        return self.pos_mask.sum(1)  # [B]


@dataclass(frozen=True)
class Uploads:
    """What B clients send to the server in one round.

    Item-row deltas are sparse triples: row r says client ``row_client[r]`` (its position
    in the round, not its user id) sends ``row_delta[r]`` for item ``row_item[r]``.
    Dense deltas of shared weights have a leading client dimension.
    """

    n_clients: int
    row_client: torch.Tensor  # [R] int64 in [0, n_clients)
    row_item: torch.Tensor  # [R] int64
    row_delta: torch.Tensor  # [R, di]
    dense: dict[str, torch.Tensor] = field(default_factory=dict)  # name → [n_clients, *shape]
    weight: torch.Tensor | None = None  # [n_clients] data size, for FedAvg weighting
    row_count: torch.Tensor | None = None  # [R] how many raters a row stands for (None: one each)

    @staticmethod
    def concat(parts: list["Uploads"]) -> "Uploads":
        if len(parts) == 1:
            return parts[0]
        offsets = torch.tensor([0] + [p.n_clients for p in parts[:-1]]).cumsum(0).tolist()
        names = parts[0].dense.keys()
        counts = None
        if any(p.row_count is not None for p in parts):
            counts = torch.cat([p.counts() for p in parts])
        return Uploads(
            n_clients=sum(p.n_clients for p in parts),
            row_client=torch.cat([p.row_client + off for p, off in zip(parts, offsets)]),
            row_item=join_rows([p.row_item for p in parts]),
            row_delta=join_rows([p.row_delta for p in parts]),
            dense={name: torch.cat([p.dense[name] for p in parts]) for name in names},
            weight=None if parts[0].weight is None else torch.cat([cast(torch.Tensor, p.weight) for p in parts]),
            row_count=counts,
        )

    def of_clients(self, keep: torch.Tensor) -> "Uploads":
        """The uploads of the clients with ``keep`` [n_clients] set, renumbered 0..k-1 in their order."""
        new_index = torch.cumsum(keep.long(), 0) - 1  # [n_clients]
        rows = keep[self.row_client]
        return Uploads(int(keep.sum()), new_index[self.row_client[rows]], self.row_item[rows], self.row_delta[rows],
                       {k: v[keep] for k, v in self.dense.items()}, None if self.weight is None else self.weight[keep],
                       None if self.row_count is None else self.row_count[rows])

    def to(self, device: torch.device) -> "Uploads":
        """The same uploads on ``device`` (what arrives at the server is on the server's device)."""
        def move(x):
            return None if x is None else x.to(device)
        return Uploads(self.n_clients, move(self.row_client), move(self.row_item), move(self.row_delta),
                       {k: v.to(device) for k, v in self.dense.items()}, move(self.weight), move(self.row_count))

    def counts(self) -> torch.Tensor:
        """[R] the raters behind each row (1 unless a protocol says otherwise: FedRec++'s denoisers)."""
        if self.row_count is not None:
            return self.row_count
        return torch.ones(self.row_item.shape, dtype=self.row_delta.dtype, device=self.row_delta.device)

    def nbytes_per_client(self) -> torch.Tensor:
        """[n_clients] bytes each client sends: its item rows (id + vector) and dense deltas."""
        row_bytes = self.row_delta.shape[1] * self.row_delta.element_size() + 4  # vector + int32 item id
        rows = torch.bincount(self.row_client, minlength=self.n_clients).to(torch.float64)
        dense = sum(t[0].numel() * t.element_size() for t in self.dense.values()) if self.dense else 0
        return rows * row_bytes + dense


def join_rows(parts: list[torch.Tensor]) -> torch.Tensor:
    """``torch.cat(parts)`` along dim 0; without a copy where the parts already lie back to back in one buffer, in
    order (the buckets' item ids and row deltas of a round, ``fedrun.kernels.batching.local_problems``): then the
    result is a view of that buffer, not a new tensor."""
    filled = [part for part in parts if part.shape[0]]  # an empty part adds nothing (and has no address)
    if not filled:
        return torch.cat(parts)
    first = filled[0]
    position, row = first.data_ptr(), first[0].numel() * first.element_size()  # bytes per row
    for part in filled:
        if not (part.is_contiguous() and part.dtype == first.dtype and part.device == first.device
                and part.shape[1:] == first.shape[1:] and part.data_ptr() == position
                and part.untyped_storage().data_ptr() == first.untyped_storage().data_ptr()):
            return torch.cat(parts)
        position += part.shape[0] * row
    shape = (sum(part.shape[0] for part in filled), *first.shape[1:])
    return first.as_strided(shape, torch.empty(shape, device="meta").stride())


@dataclass(frozen=True)
class EmbeddingUploads:
    """User embeddings clients share with the server (FedCL's federated negative sampling),
    after the client-side privacy mechanism. The server knows who uploaded (as in any FL
    protocol) but receives only these vectors, never the data they were inferred from."""

    users: torch.Tensor  # [B] the uploading clients' user ids
    vectors: torch.Tensor  # [B, d] perturbed embeddings

    def nbytes_per_client(self) -> float:
        return float(self.vectors.shape[1] * self.vectors.element_size())


@dataclass(frozen=True)
class ItemIdUploads:
    """The item ids clients hold, encrypted with one key shared by all clients (FedGNN's neighbour
    expansion, ``fedrun.kernels.ego``): the matching party can match equal ids across users but not
    read them. The simulation passes the ids themselves — a bijection changes no match."""

    users: torch.Tensor  # [N] the uploading client of each id
    items: torch.Tensor  # [N] (encrypted) item ids


@dataclass(frozen=True)
class Aggregate:
    """The server's view after aggregation: one delta per touched item row and per dense weight."""

    items: torch.Tensor  # [G] distinct item ids
    item_delta: torch.Tensor  # [G, di]
    dense: dict[str, torch.Tensor] = field(default_factory=dict)  # name → [*shape]
    count: torch.Tensor | None = None  # [G] raters behind each row (exact sums only)


@dataclass(frozen=True)
class RoundContext:
    """What every phase may know about the round (``n_clients``: the benign clients sampled;
    ``last_of_epoch``: the epoch's last round, after which epoch-level server work runs)."""

    round: int
    epoch: int
    n_clients: int
    last_of_epoch: bool = False


@dataclass(frozen=True)
class RelayedRows:
    """What the anonymous channel hands the denoising clients (FedRec++ Eq. 8): rows of gradient
    noise, each addressed to a denoiser. There is no sender field, and the channel shuffles the
    rows, so a denoiser cannot map noise to the client that sent it."""

    denoiser: torch.Tensor  # [N] index of the receiving denoiser in [0, η)
    item: torch.Tensor  # [N] item id
    delta: torch.Tensor  # [N, di]


@dataclass(frozen=True)
class DenoiserUploads:
    """What the denoisers send the server (FedRec++ Eq. 9, Alg. 2 line 19): per (denoiser, item)
    the summed noise it collected minus its own rated-item contribution, and the matching count
    (|U'_i^ũ| minus 1 where the denoiser rated i)."""

    denoiser: torch.Tensor  # [S] sender (a denoiser's index)
    item: torch.Tensor  # [S] item id
    delta: torch.Tensor  # [S, di]
    count: torch.Tensor  # [S] float
