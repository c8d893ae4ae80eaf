"""Full ranking over the whole catalogue (the default protocol; Krichene & Rendle 2020).

Users are scored in chunks sized so a chunk's ``[U, n_items]`` scores (and the backbone's
intermediate tensors) stay within ``memory_mb``; the user's training items (and validation
items at test time) are masked to −inf; ties are broken pessimistically (exact, see
``metrics.pessimistic_ranks``).
"""

from __future__ import annotations

from collections import defaultdict
from typing import cast

import torch

from fedrun.data.splits import Split
from fedrun.errors import check
from fedrun.eval.base import Evaluator
from fedrun.eval.config import FullConfig
from fedrun.eval.metrics import from_ranks, pessimistic_ranks
from fedrun.method.base import Method


class Full(Evaluator):
    Config = FullConfig

    def __init__(self, config: FullConfig, split: Split, device: torch.device, rating: bool, bytes_per_pair: int = 4):
        super().__init__(config, split, device, rating, bytes_per_pair)
        check(max(config.ks) < split.n_items, "eval.ks", list(config.ks),
              f"cut-offs below the catalogue's {split.n_items} items (a cut-off of every item makes every hit 1)")

    def chunk_users(self, n_items: int) -> int:
        return max(1, (cast(FullConfig, self.config).memory_mb << 20) // (n_items * self.bytes_per_pair))

    @torch.no_grad()
    def evaluate_ranking(self, method: Method, part: str) -> dict[str, float]:
        targets = self.stores[part]
        users = torch.nonzero(targets.sizes() > 0).squeeze(1)
        chunks = torch.split(users, self.chunk_users(self.split.n_items))
        owners = self.world.owners([1] * len(chunks))  # a sharded run: each rank ranks its chunks of users
        mine = {c: self.chunk_sums(method, part, chunk) for c, chunk in enumerate(chunks)
                if owners[c] == self.world.rank}
        sums: dict[str, float] = defaultdict(float)
        for chunk_sums in self.world.gather_results(mine, len(chunks), self.device):  # in chunk order: the same
            for name, total in chunk_sums.items():                                   # sums on any rank count
                sums[name] += total
        return {name: total / max(users.numel(), 1) for name, total in sums.items()}

    def chunk_sums(self, method: Method, part: str, chunk: torch.Tensor) -> dict[str, float]:
        """Each metric summed over the users ``chunk`` [U], ranked over every item, their history masked."""
        scores = method.score_users(chunk, self.history(part))  # [U, I]
        for store in self.masks(part):
            rows, _, items, _ = store.flat(chunk)  # unpadded: a long history costs only its length
            scores[rows, items] = float("-inf")
        target_items, target_mask, _ = self.stores[part].gather(chunk)  # [U, T]
        ranks = pessimistic_ranks(scores, target_items, target_mask, max(self.config.ks))
        return {name: float(values.sum())
                for name, values in from_ranks(ranks, target_mask, self.config.ks, self.config.metrics).items()}
