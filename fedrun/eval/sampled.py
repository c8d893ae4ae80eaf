"""Sampled ranking: each target is ranked against N negatives drawn once per user from the
items the user never interacted with (train, validation or test), fixed by ``seed`` — or, with
``negatives=split`` (and ``auto``, the default, wherever a split lists them), against the negatives the
dataset's own split files list (the LightFR code's FilmTrust split), so that a run ranks exactly the
candidates the authors' code ranked.

Only for comparing with papers that used it (LightFR: 49 negatives; NCF: 99). Ties are
broken pessimistically (the target ranks after every tied negative) or uniformly at
random — never in the target's favour. Metrics are averaged over (user, target) rows.
"""

from __future__ import annotations

from collections import defaultdict
from contextlib import contextmanager
from typing import Iterator, cast

import numpy as np
import torch

from fedrun.core import hashrng
from fedrun.core.seeding import derive_seed
from fedrun.data.client_store import ClientStore
from fedrun.data.interactions import Interactions
from fedrun.data.negatives import sample_negatives
from fedrun.errors import check
from fedrun.eval.base import Evaluator
from fedrun.eval.config import SampledConfig
from fedrun.eval.metrics import from_ranks
from fedrun.method.base import Method


class Sampled(Evaluator):
    Config = SampledConfig

    def __init__(self, config: SampledConfig, split, device, rating, bytes_per_pair=4):
        super().__init__(config, split, device, rating, bytes_per_pair)
        check(config.num_negatives < split.n_items, "eval.num_negatives", config.num_negatives,
              f"fewer than the catalogue's {split.n_items} items")
        parts = [p for p in (split.train, split.valid, split.test) if p is not None]
        every = Interactions(np.concatenate([p.user for p in parts]), np.concatenate([p.item for p in parts]),
                             split.n_users, split.n_items)
        self._all_keys = ClientStore.from_interactions(every, device).sorted_keys()
        # each user needs num_negatives items it never interacted with (else every draw repeats a few of them)
        keys = np.unique(every.user.astype(np.int64) * split.n_items + every.item)
        fewest = split.n_items - int(np.bincount(keys // split.n_items, minlength=split.n_users).max(initial=0))
        check(config.num_negatives <= fewest, "eval.num_negatives", config.num_negatives,
              f"at most {fewest}: the busiest user of this split interacted with all but {fewest} of the "
              f"{split.n_items} items, and its negatives must be items it never interacted with")
        self._negatives: dict[str, torch.Tensor] = {}
        self._draws: dict[str, int] = defaultdict(int)  # evaluations of each part so far (resample)
        self.listed = config.negatives == "split" or (config.negatives == "auto" and split.negatives is not None)
        self._listed = listed_negatives(split, config.num_negatives) if self.listed else {}

    @contextmanager
    def aside(self) -> Iterator[None]:
        """With ``resample`` the k-th evaluation of a part draws the k-th negatives: an evaluation aside (the
        floor's) must not shift the run's draws."""
        draws, negatives = dict(self._draws), dict(self._negatives)
        try:
            yield
        finally:
            self._draws, self._negatives = defaultdict(int, draws), negatives

    def negatives(self, part: str, users: torch.Tensor) -> torch.Tensor:
        if self.listed:
            listed = self._listed.get(part)
            check(listed is not None, "eval.negatives", "split",
                  f"a split whose files list {part} negatives (this split carved or lacks its {part} part's)")
            chosen = cast(torch.Tensor, listed)[users.cpu()]  # [U, N]
            check(bool((chosen >= 0).all()), "eval.negatives", "split",
                  f"drawn: some user with {part} targets has no {part} negatives listed in the split's files")
            return chosen.to(self.device)
        if self.config.resample:
            self._negatives.pop(part, None)
            self._draws[part] += 1
        if part not in self._negatives:
            seed = derive_seed(self.config.seed, f"sampled-eval-{part}", self._draws[part])
            self._negatives[part] = sample_negatives(users, self.config.num_negatives, self.split.n_items,
                                                     self._all_keys, seed)
        return self._negatives[part]  # [U, N]

    @torch.no_grad()
    def evaluate_ranking(self, method: Method, part: str) -> dict[str, float]:
        targets = self.stores[part]
        users = torch.nonzero(targets.sizes() > 0).squeeze(1)
        negatives = self.negatives(part, users)
        target_items, target_mask, _ = targets.gather(users)  # [U, T]
        n_users, n_neg = negatives.shape
        neg_scores = method.rank_pairs(users.repeat_interleave(n_neg), negatives.reshape(-1),
                                       self.history(part)).view(n_users, n_neg)
        t = target_items.shape[1]
        pos_scores = method.rank_pairs(users.repeat_interleave(t), target_items.reshape(-1),
                                       self.history(part)).view(n_users, t)
        greater = (neg_scores.unsqueeze(1) > pos_scores.unsqueeze(2)).sum(2)  # [U, T]
        equal = (neg_scores.unsqueeze(1) == pos_scores.unsqueeze(2)).sum(2)
        if self.config.ties == "pessimistic":
            ranks = greater + equal
        else:
            seed = derive_seed(self.config.seed, f"sampled-ties-{part}")
            slot = torch.arange(equal.shape[1], device=self.device).expand_as(equal)
            ranks = greater + hashrng.randint(seed, [users.unsqueeze(1).expand_as(equal), slot], 1 << 30) % (equal + 1)
        sums: dict[str, float] = defaultdict(float)
        rows = target_mask.reshape(-1)
        flat = from_ranks(ranks.reshape(-1, 1)[rows], torch.ones(int(rows.sum()), 1, dtype=torch.bool,
                                                                  device=self.device), self.config.ks,
                          self.config.metrics)
        for name, values in flat.items():
            sums[name] = float(values.mean())
        return dict(sums)


def listed_negatives(split, count: int) -> dict[str, torch.Tensor]:
    """The negatives the split's files list, by part → [n_users, count] (a user without a listed row has -1s);
    a named error unless every listing user has exactly ``count`` of them (``eval.num_negatives``)."""
    check(split.negatives is not None, "eval.negatives", "split",
          "drawn: this dataset's split lists no negatives (only filmtrust with dataset.variant=lightfr and "
          "dataset.split.protocol=predefined does, with no count filter)")
    table = {}
    for part, rows in split.negatives.items():
        per_user = np.bincount(rows.user, minlength=split.n_users)
        listing = per_user[per_user > 0]
        check(bool((listing == count).all()), "eval.num_negatives", count,
              f"{sorted(set(listing.tolist()))}: the number of {part} negatives the split lists per user "
              "(or eval.negatives=drawn to draw fedrun's own)")
        order = np.lexsort((np.arange(len(rows)), rows.user))  # by user, file order within a user
        items = np.full((split.n_users, count), -1, dtype=np.int64)
        items[per_user > 0] = rows.item[order].reshape(-1, count)
        table[part] = torch.from_numpy(items)
    return table
