"""Evaluation protocols. Evaluation runs "on the clients": each user scores the catalogue with
its private parameters and the public model; the simulator only averages the metrics."""

from __future__ import annotations

from contextlib import contextmanager
from typing import ClassVar, Iterator, cast

import numpy as np
import torch

from fedrun.core.world import SINGLE
from fedrun.data.client_store import ClientStore
from fedrun.data.splits import Split
from fedrun.errors import check
from fedrun.eval.config import EvalConfig
from fedrun.eval.exposure import exposure
from fedrun.eval.metrics import RATING_METRICS, rating_errors
from fedrun.method.base import Method


class Evaluator:
    Config: ClassVar[type] = EvalConfig

    def __init__(self, config: EvalConfig, split: Split, device: torch.device, rating: bool,
                 bytes_per_pair: int = 4):
        self.config, self.split, self.device = config, split, device
        self.rating = rating if config.kind == "auto" else config.kind == "rating"
        self.bytes_per_pair = bytes_per_pair
        self.stores = {name: ClientStore.from_interactions(part, device)
                       for name, part in (("train", split.train), ("valid", split.valid), ("test", split.test))
                       if part is not None}
        self.targets: torch.Tensor | None = None  # attack targets: ER@K is reported beside the metrics
        self.world = SINGLE  # a sharded run's processes: each ranks its share of the users (``Full``)
        check(config.kind != "rating" or rating, "eval.kind", "rating",
              "ranking or auto for this backbone: it ranks items, its scores are not ratings (an RMSE of them "
              "would be reported as a rating error)")

    def watch_targets(self, targets: torch.Tensor) -> None:
        """Report the exposure of these items (ER@K, target NDCG@K) with every evaluation."""
        n_items = self.split.n_items
        check(max(self.config.er_ks) < n_items, "eval.er_ks", list(self.config.er_ks),
              f"cut-offs below the catalogue's {n_items} items (a cut-off of every item exposes every target)")
        self.targets = targets

    @contextmanager
    def aside(self) -> Iterator[None]:
        """Evaluations inside leave the evaluator as they found it, so the run's own evaluations do not depend on
        them (the floor's, which may come from a cache or not). Stateless protocols have nothing to restore."""
        yield

    def history(self, part: str) -> list[ClientStore]:
        """The user's history when ``part`` is predicted: train, then validation at test time."""
        return [self.stores["train"]] + ([self.stores["valid"]] if part == "test" and "valid" in self.stores else [])

    def masks(self, part: str) -> list[ClientStore]:
        if not self.config.mask_history:
            return []
        return self.history(part)

    @torch.no_grad()
    def evaluate(self, method: Method, part: str) -> dict[str, float]:
        """Metrics of ``method`` on ``part`` (valid | test), prefixed by nothing; with attack targets,
        their exposure beside them (the same whichever part: ``fedrun.eval.exposure``)."""
        metrics = self.evaluate_part(method, part)
        if self.targets is not None:
            metrics.update(exposure(method, self.stores, self.history("test"), self.targets, self.config.er_ks,
                                    getattr(self.config, "memory_mb", 256), self.bytes_per_pair))
        return metrics

    def evaluate_part(self, method: Method, part: str) -> dict[str, float]:
        if self.rating:
            data = getattr(self.split, part)
            users = torch.as_tensor(data.user, device=self.device)
            items = torch.as_tensor(data.item, device=self.device)
            predicted = torch.cat([method.score_pairs(u, i, self.history(part)) for u, i in
                                   zip(torch.split(users, 1 << 16), torch.split(items, 1 << 16))])
            if self.config.clip_ratings:
                train = cast(np.ndarray, self.split.train.rating)  # (a rating evaluation: the ratings are there)
                predicted = predicted.clamp(float(train.min()), float(train.max()))
            return rating_errors(predicted, torch.as_tensor(data.rating, device=self.device))
        return self.evaluate_ranking(method, part)

    def evaluate_ranking(self, method: Method, part: str) -> dict[str, float]:
        raise NotImplementedError

    @torch.no_grad()
    def collapsed(self, method: Method, sample: int = 64) -> bool:
        """Whether the model ranks by ties alone: each of the first ``sample`` test users scores every item
        the same (dead ReLUs, an all-zero tower). Its ranking metrics are then 0 under the pessimistic tie
        rule, which reads like a model that learned nothing rather than one that broke."""
        if self.rating:
            return False
        users = torch.nonzero(self.stores["test"].sizes() > 0).squeeze(1)[:sample]
        try:
            scores = method.score_users(users, self.history("test"))  # [U, I]
        except NotImplementedError:
            return False
        spread = scores.max(1).values - scores.min(1).values  # [U]
        return bool((spread <= 1e-6 * (1 + scores.abs().max(1).values)).all())

    @property
    def monitor(self) -> str:
        """``eval.monitor`` with ``auto`` resolved for this protocol."""
        if self.config.monitor != "auto":
            return self.config.monitor
        if self.rating:
            return "rmse"
        name = "ndcg" if "ndcg" in self.config.metrics else self.config.metrics[0]
        return f"{name}_at_{10 if 10 in self.config.ks else self.config.ks[0]}"

    def metric_names(self) -> list[str]:
        """The names ``evaluate`` returns."""
        if self.rating:
            return list(RATING_METRICS)
        return [f"{name}_at_{k}" for k in self.config.ks for name in self.config.metrics]

    @staticmethod
    def improves(value: float, best: float | None, metric: str) -> bool:
        """Whether ``value`` of ``metric`` is better than ``best`` (errors fall, ranking metrics rise)."""
        if best is None:
            return True
        return value < best if metric in RATING_METRICS else value > best

    def describe(self) -> dict[str, object]:
        described = {"protocol": type(self).__name__, "mask_history": self.config.mask_history}
        if self.rating:
            described["clip_ratings"] = self.config.clip_ratings
        return described
