"""GRU4Rec (Hidasi et al., ICLR 2016), in the form sequential-recommendation benchmarks use it
(S3-Rec, RecBole): item embeddings → dropout → one GRU layer → a dense layer back to the
embedding size; the state after items 1..t is the query for item t+1, scored by inner
product with the (shared) item embeddings.

    r_t = σ(W_ir x_t + b_ir + W_hr h_{t−1} + b_hr)     z_t = σ(W_iz x_t + b_iz + W_hz h_{t−1} + b_hz)
    n_t = tanh(W_in x_t + b_in + r_t ⊙ (W_hn h_{t−1} + b_hn))     h_t = (1 − z_t) ⊙ n_t + z_t ⊙ h_{t−1}

(``torch.nn.GRU``'s equations and weight layout, checked against it in the tests.) Written
out step by step so the weights may be one copy per client ([B, *shape]): the loop runs
over the L positions, never over clients. Shared weights (central training, the FedSGD fast
path, ranking) run torch's fused GRU instead, the same equations (1.5–2.5× faster on CPU).
Public: item rows and all network weights.

Choices: hidden size = ``dim``; the paper's session-parallel mini-batches and TOP1/BPR
losses are replaced by the per-position next-item objective of the sequential benchmarks
(every item after the first is a target), the loss set by the method (FedCL: Eq. 1).
"""

from __future__ import annotations

import functools
from typing import cast

import torch
from torch.func import functional_call

from fedrun.backbone.base import init_linear, linear
from fedrun.backbone.config import SequentialConfig
from fedrun.backbone.sequential import SequenceView, SequentialBackbone, dropout


@functools.lru_cache(maxsize=None)
def gru_template(dim: int) -> torch.nn.GRU:
    """A weightless ``torch.nn.GRU`` (meta device): ``fused_gru`` hands it the shared weights per call."""
    return torch.nn.GRU(dim, dim, batch_first=True, device="meta")


class GRU4Rec(SequentialBackbone):
    Config = SequentialConfig

    def init_net(self, generator: torch.Generator) -> dict[str, torch.Tensor]:
        d = self.config.dim
        bound = d ** -0.5  # torch.nn.GRU's uniform(−1/√h, 1/√h)
        net = {name: (torch.rand(*shape, generator=generator) * 2 - 1) * bound
               for name, shape in (("gru.w_ih", (3 * d, d)), ("gru.w_hh", (3 * d, d)),
                                   ("gru.b_ih", (3 * d,)), ("gru.b_hh", (3 * d,)))}
        net["out.weight"], net["out.bias"] = init_linear(d, d, generator)
        return net

    def hidden_states(self, rows: torch.Tensor, net: dict[str, torch.Tensor],
                      gen: torch.Generator | None = None) -> torch.Tensor:
        """rows [B, L, d] → GRU states h_1..h_L [B, L, d] (padding at the end never feeds back)."""
        p = cast(SequentialConfig, self.config).dropout
        rows = dropout(rows, p, gen)
        w_hh, b_hh = net["gru.w_hh"], net["gru.b_hh"]
        if w_hh.dim() == 2:  # one shared copy: torch's fused GRU
            return dropout(self.fused_gru(rows, net), p, gen)
        x_gates = linear(rows, net["gru.w_ih"], net["gru.b_ih"])  # [B, L, 3d]
        B, L, _ = rows.shape
        h = rows.new_zeros(B, self.config.dim)
        states = []
        for t in range(L):
            h_gates = linear(h.unsqueeze(1), w_hh, b_hh).squeeze(1)  # [B, 3d]
            x_r, x_z, x_n = x_gates[:, t].chunk(3, -1)
            h_r, h_z, h_n = h_gates.chunk(3, -1)
            reset, update = torch.sigmoid(x_r + h_r), torch.sigmoid(x_z + h_z)
            h = (1 - update) * torch.tanh(x_n + reset * h_n) + update * h
            states.append(h)
        return dropout(torch.stack(states, 1), p, gen)  # [B, L, d]

    def fused_gru(self, rows: torch.Tensor, net: dict[str, torch.Tensor]) -> torch.Tensor:
        """rows [B, L, d] → states [B, L, d] through ``torch.nn.GRU`` holding the shared weights."""
        weights = {"weight_ih_l0": net["gru.w_ih"], "weight_hh_l0": net["gru.w_hh"],
                   "bias_ih_l0": net["gru.b_ih"], "bias_hh_l0": net["gru.b_hh"]}
        return functional_call(gru_template(self.config.dim), weights, (rows,))[0]

    def train_view(self, users: torch.Tensor, mask: torch.Tensor, seed: int,
                   dropout: torch.Generator | None = None) -> SequenceView:
        target = mask.clone()
        target[:, 0] = False  # the first item has no prefix to predict it from
        return SequenceView(target, None, dropout)

    def encode(self, rows: torch.Tensor, mask: torch.Tensor, view: SequenceView,
               net: dict[str, torch.Tensor]) -> torch.Tensor:
        states = linear(self.hidden_states(rows, net, view.dropout), net["out.weight"], net["out.bias"])
        return torch.cat([torch.zeros_like(states[:, :1]), states[:, :-1]], 1)  # query for item t: state after t−1

    def infer(self, rows: torch.Tensor, mask: torch.Tensor, net: dict[str, torch.Tensor]) -> torch.Tensor:
        states = self.hidden_states(rows, net)  # [U, L, d]
        last = (mask.sum(1) - 1).clamp_min(0)  # [U] the last real position
        final = states[torch.arange(rows.shape[0], device=rows.device), last]  # [U, d]
        return linear(final, net["out.weight"], net["out.bias"])
