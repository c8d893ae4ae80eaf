"""BERT4Rec (Sun et al., CIKM 2019): a bidirectional Transformer encoder over the item sequence
trained by the Cloze task — a random share ρ of the positions is replaced by a [mask]
token and each is predicted from both sides (§3.6); at inference [mask] is appended after
the history and its output is the next-item query.

    h⁰ = LN(e_item + p_position)  (dropout)                          §3.5, Eq. 6
    hˡ = LN(a + Dropout(FFN(a))),  a = LN(hˡ⁻¹ + Dropout(MH(hˡ⁻¹)))  post-LN blocks, Eq. 1–5, GELU
    q  = GELU(W_P h^L + b_P),   score(i) = ⟨q, e_i⟩                  Eq. 7, item embeddings shared

Attention keys are limited to the real positions (padding at the end). Public: item rows,
the [mask] token, position embeddings and all block weights; the weights may be one copy
per client ([B, *shape], ``base.linear``), the loops run over layers only.

Choices where the paper is open or differs: Eq. 7's output bias b^O per item is dropped
(items are embedding rows only, as FedCL's inner-product retrieval needs); no dropout inside
the attention weights; the Cloze positions are drawn per (seed, user, position), at least
one per client (its last item when the draw picks none); the paper's extra "mask the last
item only" training samples are not added.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from fedrun.backbone.base import init_linear, linear
from fedrun.backbone.config import BERT4RecConfig
from fedrun.backbone.sequential import SequenceView, SequentialBackbone, dropout, layer_norm
from fedrun.core import hashrng

_UNIT = 1 << 24


class BERT4Rec(SequentialBackbone):
    Config = BERT4RecConfig

    @property
    def history_len(self) -> int:
        return self.config.max_len - 1  # room for the appended [mask]

    def init_net(self, generator: torch.Generator) -> dict[str, torch.Tensor]:
        cfg, d = self.config, self.config.dim
        std = cfg.init_std
        net = {"mask_token": torch.randn(d, generator=generator) * std,
               "position": torch.randn(cfg.max_len, d, generator=generator) * std,
               "emb_ln.weight": torch.ones(d), "emb_ln.bias": torch.zeros(d)}
        shapes = {"qkv": (3 * d, d), "proj": (d, d), "ff1": (4 * d, d), "ff2": (d, 4 * d)}  # [out, in]
        for layer in range(cfg.n_layers):
            for name, (n_out, n_in) in shapes.items():
                net[f"l{layer}.{name}.weight"], net[f"l{layer}.{name}.bias"] = init_linear(n_out, n_in, generator)
            for name in ("ln1", "ln2"):
                net[f"l{layer}.{name}.weight"], net[f"l{layer}.{name}.bias"] = torch.ones(d), torch.zeros(d)
        net["head.weight"], net["head.bias"] = init_linear(d, d, generator)
        return net

    def train_view(self, users: torch.Tensor, mask: torch.Tensor, seed: int,
                   dropout: torch.Generator | None = None) -> SequenceView:
        B, L = mask.shape
        position = torch.arange(L, device=mask.device).expand(B, L)
        draw = hashrng.randint(seed, [users.unsqueeze(1).expand(B, L), position], _UNIT)
        corrupt = mask & (draw < int(self.config.mask_prob * _UNIT))
        none = ~corrupt.any(1)  # clients with no masked position mask their last item
        last = (mask.sum(1) - 1).clamp_min(0)
        corrupt[none, last[none]] = mask[none, last[none]]
        return SequenceView(corrupt, corrupt, dropout)

    def attention(self, x: torch.Tensor, mask: torch.Tensor, layer: int, net: dict[str, torch.Tensor]) -> torch.Tensor:
        B, L, d = x.shape
        heads = self.config.n_heads
        qkv = linear(x, net[f"l{layer}.qkv.weight"], net[f"l{layer}.qkv.bias"])  # [B, L, 3d]
        q, k, v = qkv.view(B, L, 3, heads, d // heads).permute(2, 0, 3, 1, 4)  # each [B, h, L, d/h]
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None, None, :])  # keys: real positions
        return linear(out.transpose(1, 2).reshape(B, L, d), net[f"l{layer}.proj.weight"], net[f"l{layer}.proj.bias"])

    def encode(self, rows: torch.Tensor, mask: torch.Tensor, view: SequenceView,
               net: dict[str, torch.Tensor]) -> torch.Tensor:
        p, gen = self.config.dropout, view.dropout
        L = rows.shape[1]
        token = net["mask_token"]
        token = token.unsqueeze(1) if token.dim() == 2 else token  # per-client [B, 1, d] or shared [d]
        x = torch.where(view.corrupt.unsqueeze(-1), token, rows) if view.corrupt is not None else rows
        position = net["position"]
        x = x + (position[:, :L] if position.dim() == 3 else position[:L])
        x = dropout(layer_norm(x, net["emb_ln.weight"], net["emb_ln.bias"]), p, gen)  # [B, L, d]
        for layer in range(self.config.n_layers):
            a = layer_norm(x + dropout(self.attention(x, mask, layer, net), p, gen),
                           net[f"l{layer}.ln1.weight"], net[f"l{layer}.ln1.bias"])
            ff = linear(F.gelu(linear(a, net[f"l{layer}.ff1.weight"], net[f"l{layer}.ff1.bias"])),
                        net[f"l{layer}.ff2.weight"], net[f"l{layer}.ff2.bias"])
            x = layer_norm(a + dropout(ff, p, gen), net[f"l{layer}.ln2.weight"], net[f"l{layer}.ln2.bias"])
        return F.gelu(linear(x, net["head.weight"], net["head.bias"]))  # [B, L, d]

    def infer(self, rows: torch.Tensor, mask: torch.Tensor, net: dict[str, torch.Tensor]) -> torch.Tensor:
        U, L, d = rows.shape
        count = mask.sum(1)  # [U] the [mask] goes right after the history
        user = torch.arange(U, device=rows.device)
        rows = torch.cat([rows, rows.new_zeros(U, 1, d)], 1)
        mask = torch.cat([mask, torch.zeros_like(mask[:, :1])], 1)
        mask[user, count] = True
        corrupt = torch.zeros_like(mask)
        corrupt[user, count] = True
        queries = self.encode(rows, mask, SequenceView(corrupt, corrupt), net)  # [U, L + 1, d]
        return queries[user, count]

