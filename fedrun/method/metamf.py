"""MetaMF: meta matrix factorisation for federated rating prediction (Lin, Ren, Chen, Ren, Yu, Ma,
de Rijke, Cheng, SIGIR 2020, §3), a federated baseline of LightFR's Table 5.

Server (the meta network; every weight in ``public.net``):
  * collaborative memory: user u's embedding e_u and the memory M give c_u = e_uᵀM (Eq. 1–2);
  * meta recommender: from c_u, per layer l of the rating-prediction (RP) model, h = ReLU(W_h c_u + b_h),
    weights W_l = reshape(W_w h + b_w) and bias b_l = W_b h + b_b (Eq. 3–5); the private item embeddings
    by the rise-dimensional generation U_u = A_u B_u, A_u [m, s], B_u [s, f], both linear in
    ReLU(W c_u + b) (Eq. 6–8).
Client u (the prediction module, on the device): r̂_ui = W_2ᵀ ReLU(W_1ᵀ U_u[i] + b_1) + b_2 (Eq. 9) and
the mean squared error over its ratings (Eq. 10). It uploads ∂L_u/∂ of what it received — A_u's rows
of its rated items, B_u, W_1, b_1, W_2, b_2 — and the server back-propagates each client's upload
through the generator at that client's c_u (the uploads are per client: the generator's Jacobian
depends on c_u), averages over the round's clients and steps Adam on the meta network.

Vectorized: the round's clients are one batch through the generator; for training only the rated
rows of A_u matter, generated either with whole-A_u matmuls over chunks of clients or, on large
catalogues, from the gathered weight blocks of those rows (A_u[i] = W_A[i] h_A + b_A[i]); the
whole catalogue in chunks for ranking. Traffic: the client downloads A_u, B_u and the RP model
((m·s + s·f + f·h + h + h + 1) float32) and uploads the same shapes' gradients for its rated rows.

Settings: f = ``backbone.dim`` (32 in LightFR), L = 2 RP layers with h = f/4 = 8 hidden units and
s = 8 (LightFR Table 4: L = 2, h = 8, s = 8); user embedding 32, memory 128, generator hidden 512
(MetaMF's code defaults, not in LightFR). Open points: MetaMF trains users in mini-batches
centrally simulated; here a round's clients are one step of ``server_optimizer`` (Adam) on the mean
of their gradients; the user embeddings e_u sit on the server as in MetaMF (clients send their id,
never their ratings).
"""

from __future__ import annotations

import math
from typing import Sequence, cast

import torch
import torch.nn.functional as F

from fedrun.backbone.base import PublicParams
from fedrun.core.seeding import generator
from fedrun.data.client_store import ClientStore
from fedrun.defense.base import Defense
from fedrun.errors import check
from fedrun.kernels.batching import LocalProblem
from fedrun.kernels.guards import UploadSchema
from fedrun.method.client import Client, ClientResult
from fedrun.method.config import MetaMFConfig
from fedrun.method.federated import FederatedMethod, Needs
from fedrun.method.rating_scale import require_rating_model
from fedrun.method.server import OptimizerServer, Server
from fedrun.types import Aggregate, RoundContext, Uploads

RECEIVED = ("right", "w1", "b1", "w2", "b2")  # what a client receives besides A_u's rows (dense, per client)
DENSE_RATIO = 64  # generate whole A_u when B·m ≤ this × the rows wanted (BLAS matmul vs gathered blocks)


def linear(shape_in: int, shape_out: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """nn.Linear's default initialisation, seeded: weight [out, in], bias [out] ~ U(±1/√in)."""
    bound = 1.0 / math.sqrt(shape_in)
    weight = (torch.rand(shape_out, shape_in, generator=gen) * 2 - 1) * bound
    bias = (torch.rand(shape_out, generator=gen) * 2 - 1) * bound
    return weight, bias


def init_meta_network(n_users: int, n_items: int, dim: int, config: MetaMFConfig,
                      gen: torch.Generator) -> dict[str, torch.Tensor]:
    """The server's weights: user embeddings, memory, and three generators (RP layer 1, RP layer 2,
    item factors), each a hidden layer and its output heads."""
    rp_hidden, s, H = dim // 4, config.item_factors, config.hidden
    net = {"user_embedding": torch.randn(n_users, config.user_dim, generator=gen),
           "memory": torch.randn(config.user_dim, config.memory, generator=gen)
           * math.sqrt(2.0 / (config.user_dim + config.memory))}  # Xavier normal
    heads = {"rp1": {"weight": dim * rp_hidden, "bias": rp_hidden},
             "rp2": {"weight": rp_hidden, "bias": 1},
             "items": {"left": n_items * s, "right": s * dim}}
    for block, outputs in heads.items():
        net[f"{block}.hidden.w"], net[f"{block}.hidden.b"] = linear(config.memory, H, gen)
        for head, size in outputs.items():
            net[f"{block}.{head}.w"], net[f"{block}.{head}.b"] = linear(H, size, gen)
    return net


def hidden(net: dict[str, torch.Tensor], block: str, collab: torch.Tensor) -> torch.Tensor:
    return F.relu(F.linear(collab, net[f"{block}.hidden.w"], net[f"{block}.hidden.b"]))  # [B, H]


def head(net: dict[str, torch.Tensor], name: str, h: torch.Tensor) -> torch.Tensor:
    return F.linear(h, net[f"{name}.w"], net[f"{name}.b"])


def generate(net: dict[str, torch.Tensor], users: torch.Tensor, dim: int, s: int) -> dict[str, torch.Tensor]:
    """Per user [B]: the RP model and B_u, and the hidden state that generates A_u's rows."""
    collab = net["user_embedding"][users] @ net["memory"]  # c_u [B, mem]
    h1, h2, hi = (hidden(net, block, collab) for block in ("rp1", "rp2", "items"))
    B = users.numel()
    return {"w1": head(net, "rp1.weight", h1).view(B, dim, dim // 4), "b1": head(net, "rp1.bias", h1),
            "w2": head(net, "rp2.weight", h2).view(B, dim // 4, 1), "b2": head(net, "rp2.bias", h2),
            "right": head(net, "items.right", hi).view(B, s, dim), "h_items": hi}


def left_rows(net: dict[str, torch.Tensor], h_items: torch.Tensor, owner: torch.Tensor, items: torch.Tensor,
              s: int, chunk: int, dense: bool | None = None) -> torch.Tensor:
    """Rows A_u[i] = W_A[i] h_u + b_A[i] for pairs (owner r → row of h_items, item i) → [R, s].

    Two exact ways: generate each owner's whole A_u with one matmul and pick its rows (``dense``;
    BLAS-fast, B·m·s floats), or gather W_A's [s, H] block of every pair (R·s·H floats moved, no
    waste when the catalogue is large and few rows are wanted). ``None`` picks the cheaper one:
    dense when B·m ≤ 64·R, i.e. owners have rated more than 1/64 of the catalogue on average."""
    H, m = h_items.shape[1], net["items.left.b"].numel() // s
    if dense is None:
        dense = h_items.shape[0] * m <= DENSE_RATIO * items.numel()
    if dense:
        per = max(1, chunk * H // (m * s))  # owners per piece: chunk·H floats, as a gather piece
        order = torch.argsort(owner, stable=True)
        sorted_owner = owner[order]
        starts = torch.arange(0, h_items.shape[0] + per, per, device=owner.device)
        bounds = torch.searchsorted(sorted_owner, starts).tolist()
        pieces = []
        for k, lo in enumerate(range(0, h_items.shape[0], per)):
            a, b = bounds[k], bounds[k + 1]
            whole = head(net, "items.left", h_items[lo:lo + per]).view(-1, m, s)  # [per, m, s]
            pieces.append(whole[sorted_owner[a:b] - lo, items[order[a:b]]])
        rows = torch.cat(pieces) if pieces else h_items.new_zeros(0, s)
        return rows[torch.argsort(order)]  # back to the pairs' order
    weight = net["items.left.w"].view(-1, s, H)  # [m, s, H]
    bias = net["items.left.b"].view(-1, s)  # [m, s]
    parts = [torch.einsum("rsh,rh->rs", weight[items[lo:lo + chunk]], h_items[owner[lo:lo + chunk]])
             for lo in range(0, items.numel(), chunk)]
    return (torch.cat(parts) if parts else h_items.new_zeros(0, s)) + bias[items]


def predict(received: dict[str, torch.Tensor], rows: torch.Tensor) -> torch.Tensor:
    """The client's RP model (Eq. 9): rows of A_u [B, P, s] → ratings [B, P]."""
    embedding = rows @ received["right"]  # U_u[i] = A_u[i] B_u [B, P, f]
    layer1 = F.relu(embedding @ received["w1"] + received["b1"].unsqueeze(1))  # [B, P, h]
    return (layer1 @ received["w2"]).squeeze(-1) + received["b2"]  # [B, P]


class MetaMFServer(OptimizerServer):
    """MetaMF's server program: the meta network (A, its memory and the generators) is the public model;
    it back-propagates the clients' uploaded gradients through each client's generated model (``dim``: f)."""

    def __init__(self, public: PublicParams, config: MetaMFConfig, dim: int):
        super().__init__(public, config.server_optimizer)
        self.config, self.dim = config, dim

    def aggregate(self, uploads: Uploads, senders: torch.Tensor, defense: Defense,
                  ctx: RoundContext) -> Aggregate:
        """Σ_u J_u(θ)ᵀ g_u over the round's clients (g_u their uploaded gradients), divided by B, as
        descent directions for the server optimizer. Each client's rows live in its own generated
        model, so no per-row rule applies; the sum is exact (``Needs.exact_sum``: a linear rule with
        unit weights is all the defense may be)."""
        net = self.public.net
        dim, s = self.dim, self.config.item_factors
        params = {name: tensor.detach().requires_grad_(True) for name, tensor in net.items()}
        with torch.enable_grad():
            gen = generate(params, senders, dim, s)
            rows = left_rows(params, gen["h_items"], uploads.row_client, uploads.row_item, s,
                             self.config.chunk_rows)
            outputs = [gen[name] for name in RECEIVED] + [rows]
            upstream = [uploads.dense[name] for name in RECEIVED] + [uploads.row_delta]
            grads = torch.autograd.grad(outputs, list(params.values()), upstream, allow_unused=True)
        n = uploads.n_clients
        dense = {name: (-grad / n if grad is not None else torch.zeros_like(net[name]))
                 for name, grad in zip(params, grads)}
        item = self.public.item
        return Aggregate(torch.zeros(0, dtype=torch.long, device=item.device), item.new_zeros(0, item.shape[1]), dense)


class MetaMFClient(Client):
    """MetaMF's client program: the model the server generates for it from the downloaded meta network (its
    item rows and RP model), one gradient of Eq. 10 on it uploaded, and ranking with it."""

    def received(self, users: torch.Tensor, pos: torch.Tensor, pos_mask: torch.Tensor) -> dict[str, torch.Tensor]:
        """What the server sends clients ``users`` [B] (generated from their c_u), as the clients' own
        trainable copies; A_u only on the rated rows pos [B, P] (the others get no gradient)."""
        dim, s = self.env.backbone.config.dim, self.config.item_factors
        with torch.no_grad():
            gen = generate(self.public.net, users, dim, s)
            owner = torch.arange(users.numel(), device=users.device).unsqueeze(1).expand_as(pos)
            rows = left_rows(self.public.net, gen["h_items"], owner.reshape(-1), pos.reshape(-1), s,
                             self.config.chunk_rows).view(*pos.shape, s)
        out = {name: gen[name].detach().clone().requires_grad_(True) for name in RECEIVED}
        out["left"] = rows.clone().requires_grad_(True)  # [B, P, s]
        return out

    def step(self, problem: LocalProblem) -> ClientResult:
        batch = problem.batch
        received = self.received(batch.users, batch.pos, batch.pos_mask)
        mask = batch.pos_mask.to(received["left"].dtype)
        error = (predict(received, received["left"]) - cast(torch.Tensor, batch.ratings)) * mask  # [B, P]
        loss = error.pow(2).sum(1) / mask.sum(1)  # Eq. 10 per client [B]
        grads = torch.autograd.grad(loss.sum(), [received[name] for name in (*RECEIVED, "left")])
        client, column = batch.pos_mask.nonzero(as_tuple=True)
        uploads = Uploads(batch.size, client, batch.pos[client, column], grads[-1][client, column],
                          dict(zip(RECEIVED, grads[:-1])), problem.weight)
        return ClientResult(uploads, self.private.user[batch.users], loss.detach())

    @torch.no_grad()
    def score_pairs(self, users: torch.Tensor, items: torch.Tensor,
                    history: Sequence[ClientStore] = ()) -> torch.Tensor:
        unique, owner = torch.unique(users, return_inverse=True)
        dim, s = self.env.backbone.config.dim, self.config.item_factors
        gen = generate(self.public.net, unique, dim, s)
        rows = left_rows(self.public.net, gen["h_items"], owner, items, s, self.config.chunk_rows)  # [N, s]
        received = {name: gen[name][owner] for name in RECEIVED}  # per pair [N, ...]
        return predict(received, rows.unsqueeze(1)).squeeze(1)

    @torch.no_grad()
    def score_users(self, users: torch.Tensor, history: Sequence[ClientStore] = ()) -> torch.Tensor:
        """Each user's generated model over the whole catalogue, in chunks of users sized so that
        A_u and U_u of a chunk stay within ``chunk_rows`` · hidden floats."""
        net, config = self.public.net, self.config
        dim, s, m = self.env.backbone.config.dim, config.item_factors, self.env.n_items
        per_chunk = max(1, config.chunk_rows * config.hidden // (m * (s + dim)))
        out = []
        for lo in range(0, users.numel(), per_chunk):
            gen = generate(net, users[lo:lo + per_chunk], dim, s)
            left = head(net, "items.left", gen["h_items"]).view(-1, m, s)  # A_u [U, m, s]
            out.append(predict(gen, left))  # [U, m]
        return torch.cat(out)


class MetaMF(FederatedMethod):
    Config = MetaMFConfig
    client_program = MetaMFClient
    unread = {"backbone.l2": "its loss is Eq. 10's rating MSE alone, and its item rows are generated, not learned rows",
              "sim.local_epochs": "a round is one gradient of each client's loss, back-propagated by the server"}

    def __init__(self, config: MetaMFConfig, env):
        require_rating_model(env, "metamf")
        check(env.backbone.config.dim % 4 == 0, "backbone.dim", env.backbone.config.dim,
              "a multiple of 4 for method=metamf (its RP model has f/4 hidden units)")
        super().__init__(config, env)

    @classmethod
    def needs(cls, config: MetaMFConfig) -> Needs:
        why = "its server back-propagates each client's gradient as sent"
        return Needs(exact_sum=why, plain_uploads=why, no_attack=why)

    def make_server(self, public: PublicParams, statistics: dict[str, torch.Tensor]) -> Server:
        env, config = self.env, self.config
        net = init_meta_network(env.n_users, env.n_items, env.backbone.config.dim, config,
                                generator(env.sim.seed, "metamf_init"))
        public.net.update({name: tensor.to(public.item) for name, tensor in net.items()})
        public.item = public.item[:, :0].contiguous()  # MetaMF shares no item table: the generator makes them
        return MetaMFServer(public, config, env.backbone.config.dim)

    def upload_schema(self) -> UploadSchema:
        """Gradients of what the client received: A_u rows [s] and its B_u and RP model (per client)."""
        f, s = self.env.backbone.config.dim, self.config.item_factors
        h = f // 4
        return UploadSchema((s,), {"right": (s, f), "w1": (f, h), "b1": (h,), "w2": (h, 1), "b2": (1,)})

    # -- traffic --------------------------------------------------------------------------
    def model_floats(self) -> int:
        """Floats of one client's generated model: A_u [m, s], B_u [s, f], W_1, b_1, W_2, b_2."""
        f, s, m = self.env.backbone.config.dim, self.config.item_factors, self.env.n_items
        return m * s + s * f + f * (f // 4) + f // 4 + f // 4 + 1

    def download_bytes(self, rows: torch.Tensor) -> float:
        return float(4 * self.model_floats())
