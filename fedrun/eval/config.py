"""The ``eval`` group's settings (``eval=full`` → ``FullConfig``, ``eval=sampled`` → ``SampledConfig``). Torch-free
at import: ``fedrun.app.preflight`` refuses a bad value before torch loads. The evaluators are in
``fedrun/eval/<option>.py``."""

from __future__ import annotations

from dataclasses import dataclass, field

from fedrun.errors import check, check_choice, check_seed

RANKING_METRICS = ("hr", "recall", "precision", "ndcg", "mrr")


@dataclass
class EvalConfig:
    ks: list[int] = field(default_factory=lambda: [5, 10, 20])  # cut-offs K
    metrics: list[str] = field(default_factory=lambda: ["hr", "recall", "ndcg", "mrr"])  # ranking metrics
    mask_history: bool = True  # remove the user's training (and, at test, validation) items from the ranking
    kind: str = "auto"  # auto (rating metrics for mse backbones) | ranking | rating
    monitor: str = "auto"  # the metric the progress bar, the floor verdict and sim.patience / keep_best read
    # (auto: rmse for ratings, else ndcg — or the first metric — at K = 10, or at the first K without a 10)
    clip_ratings: bool = True  # rating metrics: clip predictions to the training ratings' range
    er_ks: list[int] = field(default_factory=lambda: [5, 10, 20, 30])  # ER@K cut-offs (runs with an attack)
    watch: str = "attack"  # whose ER@K is reported: attack (the attack's targets, when there is an attack) |
    # least_popular (the item the attacks target by default, also without an attack: the no-attack baseline)

    def __post_init__(self) -> None:
        check(len(self.ks) >= 1 and all(k >= 1 for k in self.ks), "ks", self.ks, "a non-empty list of integers >= 1")
        bad = [m for m in self.metrics if m not in RANKING_METRICS]
        check(not bad and len(self.metrics) >= 1, "metrics", self.metrics,
              "a non-empty list drawn from " + ", ".join(RANKING_METRICS))
        check(self.kind in ("auto", "ranking", "rating"), "kind", self.kind, "one of auto, ranking, rating")
        check(len(self.er_ks) >= 1 and all(k >= 1 for k in self.er_ks), "er_ks", self.er_ks,
              "a non-empty list of integers >= 1")
        check(self.watch in ("attack", "least_popular"), "watch", self.watch, "one of attack, least_popular")


@dataclass
class FullConfig(EvalConfig):
    memory_mb: int = 256  # budget for one chunk of scores and intermediates

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.memory_mb >= 1, "memory_mb", self.memory_mb, "an integer >= 1")


@dataclass
class SampledConfig(EvalConfig):
    num_negatives: int = 99  # negatives per user
    ties: str = "pessimistic"  # pessimistic | random
    seed: int = 0  # fixes the negatives and the random tie-breaks
    resample: bool = False  # draw the negatives afresh at every evaluation (the FedRecAttack code) | fixed once
    negatives: str = "auto"  # auto: split where the split's files list negatives, else drawn | drawn | split

    def __post_init__(self) -> None:
        super().__post_init__()
        check(self.num_negatives >= 1, "num_negatives", self.num_negatives, "an integer >= 1")
        check_seed("seed", self.seed)
        hits = {"hr", "recall"} & set(self.metrics)  # MRR and NDCG stay meaningful over every candidate
        check(not hits or max(self.ks, default=1) <= self.num_negatives, "ks", self.ks,
              f"cut-offs up to num_negatives = {self.num_negatives} with {'/'.join(sorted(hits))} (a cut-off of all "
              f"{self.num_negatives + 1} ranked candidates makes every hit 1)")
        check_choice("ties", self.ties, ("pessimistic", "random"))
        check_choice("negatives", self.negatives, ("auto", "drawn", "split"))
        check(not (self.resample and self.negatives == "split"), "resample", self.resample,
              "false with negatives=split (the split lists one set of negatives)")
