"""What a centralized method scores with, chosen by the backbone's user context — the centralized counterpart of
``fedrun.method.context`` (a central method has no clients, so no exchange or ego graphs):

  - ``RowTables`` (``ids`` and ``sequence``): the parameters as they are (a sequence's queries are the backbone's
    own encoding of each history, ``CentralMethod.train_sequences``);
  - ``GraphTables`` (``graph``): LightGCN's propagation of the whole training graph, for every mini-batch and for
    ranking (once per model state), with SGL / SimGCL / XSimGCL's views and contrastive term when
    ``method.contrast`` asks for them.
"""

from __future__ import annotations

from typing import ClassVar, cast

import torch

from fedrun.backbone.config import LightGCNConfig
from fedrun.backbone.lightgcn import BipartiteGraph
from fedrun.errors import check
from fedrun.kernels.env import RunEnv
from fedrun.method.config import ContrastConfig
from fedrun.method.graph_contrast import GraphContrast

Batch = tuple[torch.Tensor, torch.Tensor, torch.Tensor | float]  # user rows [N, du], item rows [N, C, di], extra loss


class RowTables:
    """The rows themselves."""

    contexts: ClassVar[tuple[str, ...]] = ("ids", "sequence")

    def __init__(self, env: RunEnv, contrast: ContrastConfig):
        check(contrast.kind == "none", "method.contrast.kind", contrast.kind,
              f"none for backbone {type(env.backbone).__name__} (graph contrastive learning needs a graph backbone)")

    def start_epoch(self, round_index: int, device: torch.device) -> None:
        pass

    def batch(self, user_rows: torch.Tensor, item_rows: torch.Tensor, user: torch.Tensor, item: torch.Tensor,
              users: torch.Tensor, items: torch.Tensor, candidates: torch.Tensor) -> Batch:
        """The rows a mini-batch scores with: ``user_rows`` [N, du] and ``item_rows`` [N, C, di] as given."""
        return user_rows, item_rows, 0.0

    def ranking(self, user: torch.Tensor, item: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return user, item

    def reset(self) -> None:
        pass


class GraphTables(RowTables):
    """LightGCN on the whole training graph (every mini-batch propagates it), with the contrastive views."""

    contexts = ("graph",)

    def __init__(self, env: RunEnv, contrast: ContrastConfig):
        self.layers = cast(LightGCNConfig, env.backbone.config).layers
        self.graph = BipartiteGraph.from_store(env.train)
        self.contrast = GraphContrast(contrast, self.graph, self.layers, env.sim.seed)
        self.tables: tuple[torch.Tensor, torch.Tensor] | None = None  # propagated tables of the current model

    def start_epoch(self, round_index: int, device: torch.device) -> None:
        self.contrast.start_epoch(round_index, device)

    def batch(self, user_rows: torch.Tensor, item_rows: torch.Tensor, user: torch.Tensor, item: torch.Tensor,
              users: torch.Tensor, items: torch.Tensor, candidates: torch.Tensor) -> Batch:
        """The propagated rows of the batch's ``users`` [N] and ``candidates`` [N, C] (positives ``items`` [N]),
        and λ · the contrastive term when views are on."""
        contrastive: torch.Tensor | float = 0.0
        if self.contrast.active:
            user_table, item_table, contrastive = self.contrast.forward(user, item, users, items)
        else:
            user_table, item_table = self.graph.propagate(user, item, self.layers)
        return user_table[users], item_table[candidates], contrastive

    def ranking(self, user: torch.Tensor, item: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.tables is None:  # once per model state, not per evaluation chunk
            self.tables = self.contrast.ranking(user, item)
        return self.tables

    def reset(self) -> None:
        self.tables = None


TABLES: dict[str, type[RowTables]] = {context: tables for tables in (RowTables, GraphTables)
                                      for context in tables.contexts}
