"""Neural collaborative filtering (He et al., WWW 2017): GMF, MLP and NeuMF.

GMF: ŷ = h_gᵀ (p_u ⊙ q_i) (Eq. 9). MLP: ŷ = h_mᵀ φ_L(...φ_1([p_u; q_i])) with ReLU
(Eq. 10). NeuMF: ŷ = hᵀ [p^G_u ⊙ q^G_i ; φ_L(...)] with separate GMF and MLP embeddings
(Eq. 11–12). Scores are logits (the sigmoid sits in the loss).

Private: the user embedding row (GMF and MLP parts concatenated). Public: the item
embedding row (same layout) and the tower + prediction weights. The first MLP layer is
applied to the user and item halves separately (W₁[p; q] = W₁ᵘp + W₁ⁱq), which lets
full ranking compute the user half once per user instead of once per pair.
"""

from __future__ import annotations

import torch

from fedrun.backbone.base import Backbone, init_linear, linear
from fedrun.backbone.config import NCFConfig

# Pairs per tower block in full ranking: a block's intermediates ([pairs, h1] floats) fit a CPU's
# L2/L3 cache (16k pairs × 64 × 4 B = 4 MB). On CUDA larger blocks amortise the kernel launches;
# 1M pairs keeps FedCL's first layer at 256 MB, the default eval.memory_mb (not yet measured on a GPU).
CPU_BLOCK_PAIRS, CUDA_BLOCK_PAIRS = 1 << 14, 1 << 20


class NCF(Backbone):
    Config = NCFConfig
    losses = ("bce", "bpr")

    def __init__(self, config: NCFConfig):
        super().__init__(config)
        self.gmf_dim = config.dim if config.variant in ("gmf", "neumf") else 0
        self.mlp_dim = config.layers[0] // 2 if config.variant in ("mlp", "neumf") else 0

    @property
    def user_width(self) -> int:
        return self.gmf_dim + self.mlp_dim

    @property
    def item_width(self) -> int:
        return self.gmf_dim + self.mlp_dim

    def init_net(self, generator: torch.Generator) -> dict[str, torch.Tensor]:
        net: dict[str, torch.Tensor] = {}
        layers, scheme = self.config.layers, self.config.linear_init
        if self.mlp_dim:
            for k, (n_in, n_out) in enumerate(zip(layers[:-1], layers[1:])):
                net[f"mlp{k}.weight"], net[f"mlp{k}.bias"] = init_linear(n_out, n_in, generator, scheme)
        head_in = self.gmf_dim + (layers[-1] if self.mlp_dim else 0)
        net["head.weight"], net["head.bias"] = init_linear(1, head_in, generator, scheme)
        return net

    def _tower(self, hidden: torch.Tensor, net: dict[str, torch.Tensor]) -> torch.Tensor:
        """hidden = W₁ᵘp + W₁ⁱq + b₁ before ReLU → output of the last MLP layer."""
        n_layers = len(self.config.layers) - 1
        hidden = torch.relu(hidden)
        for k in range(1, n_layers):
            hidden = torch.relu(linear(hidden, net[f"mlp{k}.weight"], net[f"mlp{k}.bias"]))
        return hidden

    def _first_layer(self, net: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        weight = net["mlp0.weight"]  # [h, 2m] or [B, h, 2m]
        return weight[..., : self.mlp_dim], weight[..., self.mlp_dim:], net["mlp0.bias"]

    def score(self, user: torch.Tensor, item: torch.Tensor, net: dict[str, torch.Tensor]) -> torch.Tensor:
        g = self.gmf_dim
        head_w, head_b = net["head.weight"], net["head.bias"]  # [1, g + h_L] or [B, 1, g + h_L]
        # one split, not two slices: a slice's backward fills a zero tensor of the whole input per slice (a fifth of
        # a W1 round); the split's concatenates its parts' gradients, the same values
        user_gmf, user_mlp = torch.split(user[:, None], [g, user.shape[-1] - g], -1)  # [B, 1, g], [B, 1, m]
        item_gmf, item_mlp = torch.split(item, [g, item.shape[-1] - g], -1)  # [B, L, g], [B, L, m]
        parts = []
        if g:
            parts.append(user_gmf * item_gmf)  # [B, L, g]
        if self.mlp_dim:
            if len(self.config.layers) == 1:
                parts.append(torch.cat([user_mlp.expand(-1, item.shape[1], -1), item_mlp], -1))
            else:
                w_user, w_item, bias = self._first_layer(net)
                hidden = linear(user_mlp, w_user, None) + linear(item_mlp, w_item, bias)  # [B, L, h1]
                parts.append(self._tower(hidden, net))
        features = parts[0] if len(parts) == 1 else torch.cat(parts, -1)  # [B, L, g + h_L]
        return linear(features, head_w, head_b).squeeze(-1)  # [B, L]

    def score_full(self, user: torch.Tensor, item: torch.Tensor, net: dict[str, torch.Tensor]) -> torch.Tensor:
        g = self.gmf_dim
        head_w, head_b = net["head.weight"][0], net["head.bias"]  # [g + h_L], [1]
        scores = head_b.expand(user.shape[0], item.shape[0]).clone()  # [U, I]
        if g:
            scores += (user[:, :g] * head_w[:g]) @ item[:, :g].T  # the GMF head is linear in p ⊙ q
        if self.mlp_dim:
            if len(self.config.layers) == 1:
                user_part = user[:, g:] @ head_w[g:g + self.mlp_dim, None]  # [U, 1]
                scores += user_part + item[:, g:] @ head_w[g + self.mlp_dim:]  # [U, 1] + [I]
            else:
                self._add_tower_scores(scores, user[:, g:], item[:, g:], net)
        return scores

    def _add_tower_scores(self, scores: torch.Tensor, user: torch.Tensor, item: torch.Tensor,
                          net: dict[str, torch.Tensor]) -> None:
        """scores [U, I] += h_mᵀ φ_L(...φ_1(W₁ᵘp_u + W₁ⁱq_i + b₁)) for every pair, in place.

        The tower runs over blocks of a few users so its [pairs, h] intermediates stay in cache
        (~5× faster on a CPU than one pass over a whole evaluation chunk; docs/benchmarks.md W8)."""
        w_user, w_item, bias = self._first_layer(net)
        user_part = user @ w_user.T  # [U, h1]
        item_part = item @ w_item.T + bias  # [I, h1]
        head_w = net["head.weight"][0, self.gmf_dim:]  # [h_L]
        n_items = item.shape[0]
        block_pairs = CUDA_BLOCK_PAIRS if scores.device.type == "cuda" else CPU_BLOCK_PAIRS
        block = max(1, block_pairs // n_items)  # users per block
        for start in range(0, user.shape[0], block):
            hidden = (user_part[start:start + block, None] + item_part).relu_()  # [u, I, h1]
            hidden = hidden.view(-1, hidden.shape[-1])  # [u·I, h1]
            for k in range(1, len(self.config.layers) - 1):
                hidden = torch.addmm(net[f"mlp{k}.bias"], hidden, net[f"mlp{k}.weight"].T).relu_()  # [u·I, h_k+1]
            scores[start:start + block] += (hidden @ head_w).view(-1, n_items)

    def query_vectors(self, user: torch.Tensor, net: dict[str, torch.Tensor]) -> torch.Tensor | None:
        """GMF alone is an inner product: h_gᵀ(p ⊙ q) = ⟨h_g ⊙ p, q⟩ (+ the head bias)."""
        if self.mlp_dim:
            return None
        return user * net["head.weight"][0]
