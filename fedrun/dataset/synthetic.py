"""A seeded synthetic dataset with power-law activity and popularity and a latent taste structure.

Users' history lengths follow a discretized log-normal; each user draws distinct items
with probability ∝ popularity_i · exp(⟨p_u, q_i⟩ / temperature), so models can learn more
than popularity. Rows are in draw order (a usable time order); ``ratings=true`` adds
ratings 1–5 from the same latent factors plus noise. Made for tests and quick runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedrun.data.files import DataFile
from fedrun.data.interactions import Interactions
from fedrun.dataset.base import Dataset, DatasetConfig
from fedrun.errors import check, check_positive, check_seed


@dataclass
class SyntheticConfig(DatasetConfig):
    n_users: int = 500
    n_items: int = 1000
    mean_length: float = 20.0  # mean interactions per user
    min_length: int = 5
    popularity_exponent: float = 1.0  # Zipf exponent of item popularity
    latent_dim: int = 8
    temperature: float = 0.5
    ratings: bool = False
    seed: int = 0  # generator seed (the split has its own seed)

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.n_users >= 2, "n_users", self.n_users, "an integer >= 2")
        check(self.n_items >= 10, "n_items", self.n_items, "an integer >= 10")
        check(self.min_length >= 1, "min_length", self.min_length, "an integer >= 1")
        check(self.mean_length >= self.min_length, "mean_length", self.mean_length,
              f"a number >= min_length ({self.min_length})")
        check(self.mean_length < self.n_items / 2, "mean_length", self.mean_length,
              f"a number < n_items / 2 ({self.n_items / 2})")
        check_positive("temperature", self.temperature)
        check(self.latent_dim >= 1, "latent_dim", self.latent_dim, "an integer >= 1")
        check_seed("seed", self.seed)


class Synthetic(Dataset):
    Config = SyntheticConfig
    name = "synthetic"
    source = "generated from its seed and settings; no file"

    def files(self) -> list[DataFile]:
        return []

    def digest(self) -> str:
        cfg = self.config  # every generator field: the parse cache is keyed by this
        fields = (cfg.n_users, cfg.n_items, cfg.mean_length, cfg.min_length, cfg.popularity_exponent,
                  cfg.latent_dim, cfg.temperature, int(cfg.ratings), cfg.seed)
        return "synthetic-" + "-".join(map(str, fields))

    def load_parts(self) -> dict[str, Interactions]:
        return self.read({})

    def read(self, paths: dict[str, Path]) -> dict[str, Interactions]:
        cfg = self.config
        rng = np.random.default_rng(cfg.seed)
        sigma = 1.0
        mu = np.log(max(cfg.mean_length - cfg.min_length, 1e-3)) - sigma**2 / 2
        lengths = cfg.min_length + np.floor(rng.lognormal(mu, sigma, cfg.n_users)).astype(np.int64)
        lengths = np.minimum(lengths, cfg.n_items // 2)
        popularity = 1.0 / np.arange(1, cfg.n_items + 1) ** cfg.popularity_exponent
        popularity = popularity[rng.permutation(cfg.n_items)]
        user_f = rng.normal(size=(cfg.n_users, cfg.latent_dim)) / np.sqrt(cfg.latent_dim)
        item_f = rng.normal(size=(cfg.n_items, cfg.latent_dim))
        log_pop = np.log(popularity)
        # Gumbel top-k = sampling without replacement ∝ exp(logits); the draw order is the time order.
        # Users in chunks of at most ~4M logits (large catalogues); same draws as one [U, I] block.
        longest = int(lengths.max())
        ranked = np.empty((cfg.n_users, longest), dtype=np.int64)  # [U, longest]
        chunk = max(1, 4_000_000 // cfg.n_items)
        for start in range(0, cfg.n_users, chunk):
            rows = slice(start, min(start + chunk, cfg.n_users))
            logits = log_pop[None, :] + user_f[rows] @ item_f.T / cfg.temperature  # [c, I]
            gumbel = logits + rng.gumbel(size=logits.shape)
            top = np.argpartition(-gumbel, longest - 1, axis=1)[:, :longest]  # longest ≤ n_items / 2
            order = np.argsort(-np.take_along_axis(gumbel, top, 1), axis=1)
            ranked[rows] = np.take_along_axis(top, order, 1)
        users = np.repeat(np.arange(cfg.n_users), lengths)
        position = np.concatenate([np.arange(n) for n in lengths])
        items = ranked[users, position]
        rating = None
        if cfg.ratings:
            affinity = (user_f[users] * item_f[items]).sum(1)
            raw = 3.0 + 1.5 * affinity / affinity.std() + rng.normal(0, 0.5, users.size)
            rating = np.clip(np.rint(raw), 1, 5).astype(np.float32)
        return {"all": Interactions(users.astype(np.int64), items.astype(np.int64), cfg.n_users, cfg.n_items,
                                    rating, position.astype(np.int64))}


