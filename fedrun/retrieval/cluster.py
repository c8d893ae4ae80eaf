"""Clustering the users' uploaded (perturbed) embeddings into C interest groups (FedCL §3.1).

FedCL clusters the N perturbed user embeddings with Ward into C clusters; a centroid is the
element-wise mean of its members and replaces each member's embedding for negative
retrieval (the zero-mean LDP noise averages out). Variants (FedCL Fig. 4): ``none`` (each
user is its own centroid), ``kmeans``, ``ward``.

Open point (REFERENCE §1): Ward needs O(N²) memory (40k points: 12 GB, 260 s). Above
``ward_max_points`` the points are first reduced by k-means to ``pre_clusters``
mini-centroids and Ward runs on those (unweighted); final centroids are still the means of
the member users. That k-means is faiss's Lloyd (random seeding, 20 iterations): at Beauty's
22k uploads × 1,000 mini-centroids a reclustering takes 2.3 s against 10.5 s with
scikit-learn's k-means++ (most of it its seeding), for an inertia within 1% (noise-dominated
ε = 4 uploads; docs/benchmarks.md W7). The ``kmeans`` variant of Fig. 4 keeps scikit-learn's k-means++.
Fewer points than clusters (the first rounds): each point is a cluster.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from fedrun.errors import FedrunError
from fedrun.retrieval.search import faiss_available


@dataclass(frozen=True)
class Clusters:
    assign: torch.Tensor  # [N] cluster of each point
    centroids: torch.Tensor  # [C', d] mean of each cluster's points (C' ≤ C)


def cluster(points: torch.Tensor, method: str, n_clusters: int, seed: int, ward_max_points: int = 10000,
            pre_clusters: int = 1000) -> Clusters:
    """points [N, d] → Clusters. Deterministic for a fixed seed (any int; scikit-learn takes 32 bits)."""
    n = points.shape[0]
    seed %= 2**32
    if method == "none" or n <= n_clusters:
        return Clusters(torch.arange(n, device=points.device), points.clone())
    data = points.detach().cpu().numpy().astype(np.float64)
    if method == "kmeans":
        labels = _kmeans(data, n_clusters, seed)
    elif n > ward_max_points:
        check_preaggregation(n, ward_max_points)
        coarse = _faiss_kmeans(data, min(pre_clusters, n), seed)
        mini = _means(data, coarse, int(coarse.max()) + 1)
        labels = _ward(mini, n_clusters)[coarse]
    else:
        labels = _ward(data, n_clusters)
    assign = torch.from_numpy(labels.astype(np.int64)).to(points.device)
    return Clusters(assign, _centroids(points, assign))


def _ward(data: np.ndarray, n_clusters: int) -> np.ndarray:
    from sklearn.cluster import AgglomerativeClustering
    return AgglomerativeClustering(n_clusters=min(n_clusters, len(data)), linkage="ward").fit_predict(data)


def _kmeans(data: np.ndarray, n_clusters: int, seed: int) -> np.ndarray:
    from sklearn.cluster import KMeans
    labels = KMeans(n_clusters=n_clusters, n_init=1, random_state=seed).fit_predict(data)
    return np.unique(labels, return_inverse=True)[1]  # dense ids even if a cluster came out empty


def check_preaggregation(n_points: int, ward_max_points: int) -> None:
    """More points than ``ward_max_points`` need faiss for the k-means pre-aggregation: a named
    error (the server calls this when it is built, before any round)."""
    if n_points > ward_max_points and not faiss_available():
        raise FedrunError(f"method.ward_max_points: {ward_max_points} is below the {n_points} users whose "
                          "uploads are clustered, and Ward's k-means pre-aggregation needs the faiss package "
                          "(pip install faiss-cpu); or raise method.ward_max_points (exact Ward: O(N²) memory)")


def _faiss_kmeans(data: np.ndarray, n_clusters: int, seed: int, iterations: int = 20) -> np.ndarray:
    """Lloyd's k-means by faiss on every point (no subsampling): labels [N]. Deterministic for a
    seed, and the same for any number of OpenMP threads (tested)."""
    import faiss
    points = np.ascontiguousarray(data, dtype=np.float32)
    kmeans = faiss.Kmeans(points.shape[1], n_clusters, niter=iterations, seed=seed % 2**31,
                          min_points_per_centroid=1, max_points_per_centroid=len(points))
    kmeans.train(points)
    _, labels = kmeans.index.search(points, 1)
    return np.unique(labels.ravel(), return_inverse=True)[1]  # dense ids even if a cluster came out empty


def _means(data: np.ndarray, labels: np.ndarray, k: int) -> np.ndarray:
    sums = np.zeros((k, data.shape[1]))
    np.add.at(sums, labels, data)
    return sums / np.bincount(labels, minlength=k)[:, None]


def _centroids(points: torch.Tensor, assign: torch.Tensor) -> torch.Tensor:
    k = int(assign.max()) + 1
    sums = torch.zeros(k, points.shape[1], dtype=points.dtype, device=points.device).index_add_(0, assign, points)
    counts = torch.bincount(assign, minlength=k).clamp_min(1).to(points.dtype)
    return sums / counts[:, None]  # [C', d]
