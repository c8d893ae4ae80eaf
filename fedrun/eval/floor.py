"""The floor beside every result: what the simplest recommender that learns nothing scores on the same
split and protocol — item popularity for ranking, the user + item bias baseline for ratings. A run at or
below it has learned nothing a count could not; the run says so (REFERENCE.md: "a run below the
popularity floor is a bug or a bad default, never a result").

The floor is computed once per (split, protocol, part) and cached beside the parse cache, keyed by a
digest of the split's arrays and the evaluation config. Validation has a floor of its own: a validation
part carved from the training data is easier than a predefined test part (amazon-music: popularity
Recall@20 .0154 on valid, .0119 on test), so a validation curve is read against the validation floor.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np
import torch

from fedrun.core.paths import cache_dir
from fedrun.data.splits import Split
from fedrun.eval.base import Evaluator
from fedrun.eval.metrics import RATING_METRICS
from fedrun.kernels.env import RunEnv
from fedrun.method.base import Method
from fedrun.method.config import PopConfig
from fedrun.method.pop import Pop

BIAS_DAMPING = 10.0  # shrinkage of the bias means toward 0 (Koren 2010's baseline predictor, λ ≈ 10–25)


class BiasBaseline(Method):
    """r̂_ui = μ + b_u + b_i: b_i = Σ_u (r_ui − μ) / (λ + n_i), then b_u = Σ_i (r_ui − μ − b_i) / (λ + n_u)
    over the training ratings (Koren, TKDD 2010, §2.1)."""

    def __init__(self, env: RunEnv, damping: float = BIAS_DAMPING):
        super().__init__(None, env)
        train = env.split.train
        users, items = torch.as_tensor(train.user), torch.as_tensor(train.item)
        ratings = torch.as_tensor(train.rating, dtype=torch.float64)
        self.mean = float(ratings.mean())
        residual = ratings - self.mean
        self.item_bias = _damped_means(items, residual, env.n_items, damping)  # [I]
        self.user_bias = _damped_means(users, residual - self.item_bias[items], env.n_users, damping)  # [U]

    @torch.no_grad()
    def score_pairs(self, users: torch.Tensor, items: torch.Tensor, history=()) -> torch.Tensor:
        u, i = users.cpu(), items.cpu()
        return (self.mean + self.user_bias[u] + self.item_bias[i]).to(torch.float32).to(users.device)


def _damped_means(index: torch.Tensor, values: torch.Tensor, size: int, damping: float) -> torch.Tensor:
    """Σ values per index / (damping + count per index)."""
    counts = torch.bincount(index, minlength=size).to(torch.float64)
    return torch.zeros(size, dtype=torch.float64).index_add_(0, index, values) / (damping + counts)


def floor_key(split: Split, evaluator: Evaluator) -> str:
    """A digest of the split's arrays and the evaluation protocol (what the floor depends on)."""
    digest = hashlib.sha256(f"{type(evaluator).__name__}|{evaluator.config!r}|{evaluator.rating}".encode())
    for part in (split.train, split.valid, split.test):
        for array in (() if part is None else (part.user, part.item, part.rating)):
            if array is not None:
                digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()[:24]


def floor_metrics(evaluator: Evaluator, env: RunEnv, part: str = "test") -> dict[str, float]:
    """The floor's metrics on ``part`` (test | valid) under ``evaluator``'s protocol (no attack exposure), from
    the cache if there."""
    path = cache_dir() / f"floor-{floor_key(env.split, evaluator)}-{part}.json"
    if path.exists():
        try:
            return {k: float(v) for k, v in json.loads(path.read_text()).items()}
        except (OSError, ValueError, AttributeError):
            pass  # an unreadable cache entry is recomputed
    method = BiasBaseline(env) if evaluator.rating else Pop(PopConfig(), env)
    with evaluator.aside():  # the run's own evaluations are the same with or without a cached floor
        metrics = evaluator.evaluate_part(method, part)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(metrics))
    except OSError:
        pass  # a cache that cannot be written only costs a recomputation
    return metrics


def at_or_below(test: dict[str, float], floor: dict[str, float], metric: str) -> bool:
    """Ranking metrics must rise above the floor; error metrics (RMSE, MAE) must fall below it."""
    if metric in RATING_METRICS:
        return test[metric] >= floor[metric]
    return test[metric] <= floor[metric]
