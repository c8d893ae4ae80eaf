"""Centralized graph contrastive learning on LightGCN: the SGL, SimGCL and XSimGCL rows of
PerFedRec++ Table 4 (``method=central method.contrast.kind=...``), with the hyperparameters the
PerFedRec++ authors ran them with (their SELFRec configuration files; 2 layers, batch 256).

Each adds λ · (InfoNCE over the batch's distinct users + over its distinct positive items) to
the recommendation loss, between two views of every node (cosine similarity, temperature τ;
the other nodes of the batch are the negatives):

- **SGL** (Wu et al., SIGIR 2021, edge dropout "ED"): two subgraphs per epoch, each keeping every
  edge with probability 1 − ``drop`` and renormalised; the views are LightGCN on each
  (λ 0.1, drop 0.1, τ 0.2). Recommendation and ranking use the whole graph.
- **SimGCL** (Yu et al., SIGIR 2022, Eq. 7): each view adds sign(e) ⊙ ε·Δ/‖Δ‖, Δ ~ U(0, 1)^d, to
  every layer's output; the readout skips the layer-0 input ("we skip the input embedding");
  recommendation and ranking use the unperturbed forward (λ 0.1, ε 0.1, τ 0.2).
- **XSimGCL** (Yu et al., TKDE 2023): one perturbed forward serves the recommendation loss and
  the final view; the other view is its layer l* output (cross-layer contrast; λ 0.2, ε 0.2,
  τ 0.15, l* = 1). Ranking uses the unperturbed forward.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from fedrun.backbone.lightgcn import BipartiteGraph
from fedrun.core.seeding import generator
from fedrun.errors import check
from fedrun.method.config import ContrastConfig


def info_nce(view1: torch.Tensor, view2: torch.Tensor, tau: float) -> torch.Tensor:
    """Mean over rows of −log e^{cos(a_i, b_i)/τ} / Σ_j e^{cos(a_i, b_j)/τ}; views [N, d]."""
    logits = F.normalize(view1, dim=-1) @ F.normalize(view2, dim=-1).T / tau  # [N, N]
    return (torch.logsumexp(logits, 1) - logits.diagonal()).mean()


class GraphContrast:
    """The views and the contrastive term of one centralized run (``CentralMethod`` calls it per batch)."""

    def __init__(self, config: ContrastConfig, graph: BipartiteGraph, layers: int, seed: int):
        check(config.kind == "none" or layers >= 1, "backbone.layers", layers,
              f">= 1 for method.contrast.kind={config.kind} (the views are propagations)")
        check(config.kind != "xsimgcl" or config.layer <= layers, "method.contrast.layer", config.layer,
              f"at most backbone.layers = {layers}")
        self.config, self.graph, self.layers, self.seed = config, graph, layers, seed
        self.subgraphs: tuple[BipartiteGraph, BipartiteGraph] | None = None
        self.noise: torch.Generator | None = None

    @property
    def active(self) -> bool:
        return self.config.kind != "none"

    @property
    def skip_input(self) -> bool:
        return self.config.kind in ("simgcl", "xsimgcl")

    def start_epoch(self, round_index: int, device: torch.device) -> None:
        """SGL's two subgraphs of the epoch; the epoch's noise stream."""
        self.noise = generator(self.seed, "contrast-noise", round_index, device)
        if self.config.kind == "sgl":
            gen = generator(self.seed, "sgl-edges", round_index)
            keep = [torch.rand(self.graph.n_edges, generator=gen) >= self.config.drop for _ in range(2)]
            self.subgraphs = (self.graph.dropped(keep[0].to(device)), self.graph.dropped(keep[1].to(device)))

    def readout(self, layers: list[torch.Tensor]) -> torch.Tensor:
        kept = layers[1:] if self.skip_input and len(layers) > 1 else layers
        return torch.stack(kept).mean(0)

    def tables(self, user: torch.Tensor, item: torch.Tensor, graph: BipartiteGraph | None = None,
               noisy: bool = False) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        perturb = self.perturb if noisy else None
        return (graph or self.graph).layers(user, item, self.layers, perturb)

    def perturb(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        delta = torch.rand(x.shape, generator=self.noise, device=x.device)
        return x + torch.sign(x) * F.normalize(delta, dim=-1) * self.config.eps

    def forward(self, user: torch.Tensor, item: torch.Tensor, users: torch.Tensor, items: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The tables the batch's recommendation loss scores with [U, d], [I, d], and λ · the contrastive
        term over the batch's distinct ``users`` and positive ``items``."""
        kind, config = self.config.kind, self.config
        users, items = users.unique(), items.unique()
        if kind == "xsimgcl":
            layer_users, layer_items = self.tables(user, item, noisy=True)
            final_user, final_item = self.readout(layer_users), self.readout(layer_items)
            term = (info_nce(final_user[users], layer_users[config.layer][users], config.tau)
                    + info_nce(final_item[items], layer_items[config.layer][items], config.tau))
            return final_user, final_item, config.weight * term
        clean_user, clean_item = self.tables(user, item)
        if kind == "sgl":
            if self.subgraphs is None:
                raise RuntimeError("SGL's two subgraphs are drawn by start_epoch, before the epoch's batches")
            views = [self.tables(user, item, graph) for graph in self.subgraphs]
        else:  # simgcl
            views = [self.tables(user, item, noisy=True) for _ in range(2)]
        (u1, i1), (u2, i2) = [(self.readout(v[0]), self.readout(v[1])) for v in views]
        term = info_nce(u1[users], u2[users], config.tau) + info_nce(i1[items], i2[items], config.tau)
        return self.readout(clean_user), self.readout(clean_item), config.weight * term

    def ranking(self, user: torch.Tensor, item: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        layer_users, layer_items = self.tables(user, item)
        return self.readout(layer_users), self.readout(layer_items)
