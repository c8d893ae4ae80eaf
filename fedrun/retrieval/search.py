"""Top-k item retrieval per query vector: Faiss inner-product search or an exact torch path.

Both return each query's k highest-scoring items as a set, sorted by item id, so that a
later random draw of positions in the set picks the same items whichever path ran (the
order *within* top-k from two BLAS implementations may differ in the last float bits; the
sets agree except for exact near-ties at the k-th score).
"""

from __future__ import annotations

import logging

import numpy as np
import torch

from fedrun.backbone.base import Backbone, PublicParams
from fedrun.errors import FedrunError


def faiss_available() -> bool:
    logging.getLogger("faiss.loader").setLevel(logging.WARNING)  # its INFO lines list missing CPU builds
    try:
        import faiss  # noqa: F401
    except ImportError:
        return False
    return True


def top_k_inner_product(queries: torch.Tensor, items: torch.Tensor, k: int, engine: str = "auto") -> torch.Tensor:
    """queries [Q, d], items [I, d] → [Q, k] item ids of the k largest ⟨q, v⟩, sorted by id."""
    if engine == "faiss" or (engine == "auto" and queries.device.type == "cpu" and faiss_available()):
        found = _faiss_search(queries, items, k)
    else:
        found = (queries @ items.T).topk(k, dim=1).indices
    return found.sort(dim=1).values


def top_k_relevant(backbone: Backbone, queries: torch.Tensor, public: PublicParams, k: int,
                   engine: str = "auto") -> torch.Tensor:
    """queries [Q, du] → [Q, k] the k items of highest score under ``backbone`` and the public model, sorted by id:
    an inner-product search when the backbone's score is one (``query_vectors``), its full score otherwise."""
    vectors = backbone.query_vectors(queries, public.net)
    if vectors is not None:
        return top_k_inner_product(vectors, public.item, k, engine)
    return top_k_scores(backbone.score_full(queries, public.item, public.net), k)


def top_k_scores(scores: torch.Tensor, k: int) -> torch.Tensor:
    """scores [Q, I] (any scoring function) → [Q, k] item ids of the k largest, sorted by id."""
    return scores.topk(k, dim=1).indices.sort(dim=1).values


def _faiss_search(queries: torch.Tensor, items: torch.Tensor, k: int) -> torch.Tensor:
    if not faiss_available():
        raise FedrunError("method.search=faiss needs the faiss package (pip install faiss-cpu); "
                          "search=torch gives the same result")
    import faiss
    index = faiss.IndexFlatIP(items.shape[1])
    index.add(np.ascontiguousarray(items.detach().cpu().numpy(), dtype=np.float32))
    _, found = index.search(np.ascontiguousarray(queries.detach().cpu().numpy(), dtype=np.float32), k)
    return torch.from_numpy(found).to(device=queries.device, dtype=torch.int64)
