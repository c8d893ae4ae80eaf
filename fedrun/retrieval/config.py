"""The settings of federated hard-negative retrieval (``HardNegativeConfig``, a field of the retrieval methods'
configs) and the names of its clustering methods and search engines. Torch-free at import:
``fedrun.app.preflight`` refuses a bad value before torch loads."""

from __future__ import annotations

from dataclasses import dataclass

from fedrun.errors import check, check_choice, check_fraction

METHODS = ("ward", "kmeans", "none")
ENGINES = ("auto", "faiss", "torch")


@dataclass
class HardNegativeConfig:
    semi_hard: int = 20  # T, semi-hard negatives per client per round
    hard_ratio: float = 0.25  # R, the share of the catalogue forming each centroid's hard set
    hardest: bool = False  # the T most relevant items instead of T random ones from the hard set
    clustering: str = "ward"  # ward | kmeans | none
    n_clusters: int = 25  # C
    recluster_every: int = 100  # rounds between clusterings of the cached embeddings
    ward_max_points: int = 10000  # above this, Ward runs on a k-means pre-aggregation
    pre_clusters: int = 1000  # mini-centroids of that pre-aggregation
    search: str = "auto"  # auto | faiss | torch (inner-product backbones; others always score in torch)

    def __post_init__(self) -> None:
        check(self.semi_hard >= 0, "semi_hard", self.semi_hard, "an integer >= 0")
        check_fraction("hard_ratio", self.hard_ratio, closed_low=False, closed_high=True)
        check_choice("clustering", self.clustering, METHODS)
        check(self.n_clusters >= 1, "n_clusters", self.n_clusters, "an integer >= 1")
        check(self.recluster_every >= 1, "recluster_every", self.recluster_every, "an integer >= 1")
        check(self.pre_clusters >= self.n_clusters, "pre_clusters", self.pre_clusters,
              f"an integer >= n_clusters ({self.n_clusters})")
        check(self.ward_max_points >= self.pre_clusters, "ward_max_points", self.ward_max_points,
              f"an integer >= pre_clusters ({self.pre_clusters})")
        check_choice("search", self.search, ENGINES)
