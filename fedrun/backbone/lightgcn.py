"""LightGCN (He et al., SIGIR 2020): user and item embeddings propagated over the normalised
user–item graph, no transforms, no non-linearity.

    e^(k+1)_u = Σ_{i ∈ N(u)} e^(k)_i / √(|N(u)| |N(i)|),   e^(k+1)_i likewise over N(i)   (Eq. 3)
    e_u = mean_{k=0..K} e^(k)_u,  e_i likewise (α_k = 1/(K+1), Eq. 4);   ŷ_ui = ⟨e_u, e_i⟩   (Eq. 5)

With K = 0 layers it is MF (the layer mean of e^(0) is e^(0)): the perfedrecpp presets run their MF
rows that way, so every row shares one backbone and the report pairs them.

Parameters are the layer-0 embeddings: a private row per user, a public row per item (MF's
split); the score of the propagated representations is MF's inner product. The L2 term
(``l2``) acts on the layer-0 rows an example uses, as in the paper (Eq. 6) — LightGCN's
``decay`` of 1e-4 on ½(‖u‖² + ‖i‖² + ‖j‖²) is ``l2 = 5e-5`` here.

Two ways to propagate, both here as plain tensor functions:

- ``BipartiteGraph``: the whole normalised graph as two sparse CSR products (centralized
  training, evaluation) — one product per direction and layer;
- ``propagate_edges``: any graph given as a weighted edge list — the clients' ego graphs,
  block-diagonal over a bucket of clients (``fedrun.kernels.ego``): on the CPU as CSR products
  (``EdgeOperator``), elsewhere by segment sums (``SegmentSums``); the same sums in the same order.

Open points (the paper leaves them to the code): normalisation uses the training graph's
degrees; readout is the layer mean; embeddings start from N(0, ``init_std``²) (the authors'
code: std 0.1).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Callable

import torch

from fedrun.backbone.config import LightGCNConfig
from fedrun.backbone.mf import MF
from fedrun.data.client_store import ClientStore


class LightGCN(MF):
    Config = LightGCNConfig
    losses = ("bpr", "bce")

    @property
    def user_context(self) -> str:
        return "graph"


@dataclass(frozen=True)
class BipartiteGraph:
    """The symmetric-normalised user–item graph as ``norm`` [U, I] (CSR, values 1/√(d_u d_i)) and
    its transpose [I, U]; ``user_degree`` [U] and ``item_degree`` [I] are the training degrees."""

    norm: torch.Tensor
    norm_t: torch.Tensor
    user_degree: torch.Tensor
    item_degree: torch.Tensor

    @classmethod
    def from_store(cls, store: ClientStore) -> "BipartiteGraph":
        """The graph of a client store's distinct (user, item) pairs (duplicates count once)."""
        keys = store.sorted_keys().unique()
        return cls.from_edges(keys // store.n_items, keys % store.n_items, (store.n_users, store.n_items))

    @classmethod
    def from_edges(cls, user: torch.Tensor, item: torch.Tensor, shape: tuple[int, int]) -> "BipartiteGraph":
        """The graph of the distinct edges (user [E], item [E]), normalised on their own degrees."""
        user_degree = torch.bincount(user, minlength=shape[0])
        item_degree = torch.bincount(item, minlength=shape[1])
        value = edge_norm(user_degree[user], item_degree[item])
        return cls(sparse_csr(user, item, value, shape), sparse_csr(item, user, value, shape[::-1]),
                   user_degree, item_degree)

    def propagate(self, user: torch.Tensor, item: torch.Tensor, layers: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Layer-0 tables user [U, d], item [I, d] → the layer means (Eq. 3–4), differentiable."""
        users, items = self.layers(user, item, layers)
        return torch.stack(users).mean(0), torch.stack(items).mean(0)

    def layers(self, user: torch.Tensor, item: torch.Tensor, layers: int,
               perturb: Callable[[int, torch.Tensor], torch.Tensor] | None = None
               ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Every layer's tables e^(0..K) of users [U, d] and items [I, d]; ``perturb(k, x)`` (SimGCL's
        noise) changes layer k's output before the next layer uses it."""
        users, items = [user], [item]
        for k in range(1, layers + 1):
            next_user = GraphProduct.apply(self.norm, self.norm_t, items[-1])  # [U, d]
            next_item = GraphProduct.apply(self.norm_t, self.norm, users[-1])  # [I, d]
            if perturb is not None:
                next_user, next_item = perturb(k, next_user), perturb(k, next_item)
            users.append(next_user)
            items.append(next_item)
        return users, items

    def dropped(self, keep: torch.Tensor) -> "BipartiteGraph":
        """The graph of the kept edges ``keep`` [nnz] (in ``norm``'s order), renormalised on their degrees
        (SGL's edge dropout)."""
        user, item = self.norm.to_sparse_coo().coalesce().indices()
        return BipartiteGraph.from_edges(user[keep], item[keep], (int(self.norm.shape[0]), int(self.norm.shape[1])))

    @property
    def n_edges(self) -> int:
        return int(self.norm._nnz())


class GraphProduct(torch.autograd.Function):
    """``matrix @ dense`` for a constant sparse ``matrix`` whose transpose is already built: the backward
    product is ``transpose @ grad``. Autograd's own backward transposes the CSR matrix at every call;
    this one gives the same numbers (bit for bit on CPU, ``tests/test_lightgcn.py``) 2.7× faster for
    forward plus backward (Gowalla-sized random graph, one CPU thread)."""

    @staticmethod
    def forward(ctx, matrix: torch.Tensor, transpose: torch.Tensor, dense: torch.Tensor) -> torch.Tensor:
        ctx.transpose = transpose
        return torch.sparse.mm(matrix, dense)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[None, None, torch.Tensor]:
        return None, None, torch.sparse.mm(ctx.transpose, grad)


def sparse_csr(row: torch.Tensor, col: torch.Tensor, value: torch.Tensor, shape: tuple[int, int]) -> torch.Tensor:
    """A CSR matrix (twice as fast as COO in ``sparse.mm`` forward and backward on CPU, measured on
    Gowalla); torch's "beta" notice for CSR is silenced here, once."""
    coo = torch.sparse_coo_tensor(torch.stack([row, col]), value, shape, check_invariants=False).coalesce()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return coo.to_sparse_csr()


def edge_norm(degree_a: torch.Tensor, degree_b: torch.Tensor) -> torch.Tensor:
    """1 / √(d_a d_b) per edge (degrees of at least 1: an edge's own ends have it)."""
    return (degree_a.clamp_min(1).to(torch.float32) * degree_b.clamp_min(1).to(torch.float32)).rsqrt()


def csr_in_edge_order(row: torch.Tensor, col: torch.Tensor, value: torch.Tensor, n_nodes: int) -> torch.Tensor:
    """The [N, N] CSR matrix with entry ``value[e]`` at (row[e], col[e]); each row's entries in edge order,
    duplicates kept (not coalesced: a product then sums them in the edge list's order)."""
    order = torch.argsort(row, stable=True)  # [E]
    crow = torch.zeros(n_nodes + 1, dtype=torch.int64, device=row.device)
    crow[1:] = torch.bincount(row, minlength=n_nodes).cumsum(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch's "beta" notice for CSR
        return torch.sparse_csr_tensor(crow, col[order], value[order], (n_nodes, n_nodes), check_invariants=False)


@dataclass(frozen=True)
class EdgeOperator:
    """x ↦ (Σ_{(u→v)} w·x[u])_v for a weighted directed edge list, as a CSR matrix and its transpose
    (``GraphProduct``'s backward). On the CPU the product walks each row's entries in stored order,
    i.e. in edge order, which is also the order in which segment sums over the edge list (``index_add``
    forward, ``index_put`` backward) add them on one thread: the same bits forward and backward where
    MKL's kernel walks a row in stored order (its reference path, ``MKL_CBWR=COMPATIBLE``, and the machines
    that recorded W13), equal to rounding where its vectorised path adds in another order (an AVX-512
    Xeon: float32 relative 8e-5 at most; ``tests/test_lightgcn.py``). 3× faster (a PerFedRec++ bucket's ego
    graphs, one thread: 3.4 ms against 9.7–12.7 ms for two layers forward and backward), and independent of
    the thread count, which the segment sums' backward is not."""

    matrix: torch.Tensor  # [N, N] CSR: row v holds the edges into v
    transpose: torch.Tensor  # [N, N] CSR: row u holds the edges out of u

    @classmethod
    def build(cls, src: torch.Tensor, dst: torch.Tensor, weight: torch.Tensor, n_nodes: int) -> "EdgeOperator":
        return cls(csr_in_edge_order(dst, src, weight, n_nodes), csr_in_edge_order(src, dst, weight, n_nodes))

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return GraphProduct.apply(self.matrix, self.transpose, x)  # [N, d]


@dataclass(frozen=True)
class SegmentSums:
    """The same map as ``EdgeOperator`` by segment sums over the edge list (``index_add``): any device."""

    src: torch.Tensor  # [E]
    dst: torch.Tensor  # [E]
    weight: torch.Tensor  # [E]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(x).index_add(0, self.dst, x[self.src] * self.weight.to(x.dtype).unsqueeze(1))


def propagate_edges(x0: torch.Tensor, src: torch.Tensor, dst: torch.Tensor, weight: torch.Tensor,
                    layers: int, perturb: Callable[[int, torch.Tensor], torch.Tensor] | None = None,
                    operator: Callable[[torch.Tensor], torch.Tensor] | None = None) -> torch.Tensor:
    """Node features x0 [N, d] over a weighted directed edge list (both directions listed for an
    undirected graph): x^(k+1)[v] = Σ_{(u→v)} w·x^(k)[u]; returns the layer mean [N, d], differentiable.
    ``perturb(k, x)``: what layer k's output becomes before it is used and read out (SimGCL-style
    noise views: PerFedRec++ Eq. 3). ``operator``: the edge list's map x ↦ Σ w·x[u] when the caller keeps
    one (an ``EdgeOperator`` in x0's dtype); otherwise an ``EdgeOperator`` on the CPU and ``SegmentSums`` on
    other devices: the operator breaks torch's CSR invariants (sorted, distinct columns per row), which the
    CPU kernel does not need; whether cuSPARSE does is unchecked."""
    if operator is None:
        operator = (EdgeOperator.build(src, dst, weight.to(x0.dtype), x0.shape[0]) if x0.device.type == "cpu"
                    else SegmentSums(src, dst, weight))
    out, x = x0, x0
    for k in range(1, layers + 1):
        x = operator(x)  # [N, d]
        if perturb is not None:
            x = perturb(k, x)
        out = out + x
    return out / (layers + 1)
