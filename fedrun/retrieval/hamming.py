"""Top-k search in Hamming space over packed binary codes (LightFR §3.4.2, on-device inference).

Codes in {±1}^f are packed into f/8 bytes (bit 1 for +1, most significant bit first). The
Hamming distance of two codes is popcount(x XOR y) = (f − b_uᵀd_i) / 2, so the nearest items
are the highest-scoring ones. Two engines give identical results: Faiss ``IndexBinaryFlat``
(CPU) and a torch XOR + popcount-table path (any device). Both order each query's k results by
(distance, item id), so equal distances are broken by the smaller item id; Faiss is queried
with a margin, widened until every item tied at the k-th distance is in hand.
"""

from __future__ import annotations

import numpy as np
import torch

from fedrun.errors import ConfigError
from fedrun.retrieval.search import faiss_available

_POPCOUNT = torch.tensor([bin(v).count("1") for v in range(256)], dtype=torch.int16)  # [256]
_BIT_WEIGHTS = torch.tensor([128, 64, 32, 16, 8, 4, 2, 1], dtype=torch.int32)  # MSB first (np.packbits order)


def pack_codes(codes: torch.Tensor) -> torch.Tensor:
    """codes [N, f] in {±1} (f a multiple of 8) → packed [N, f/8] uint8, bit 1 where the code is +1."""
    n, f = codes.shape
    if f % 8:
        raise ConfigError("code length", f, "a multiple of 8")
    bits = (codes > 0).to(torch.int32).view(n, f // 8, 8)
    return (bits * _BIT_WEIGHTS.to(codes.device)).sum(2).to(torch.uint8)


def hamming_distances(queries: torch.Tensor, items: torch.Tensor, chunk_bytes: int = 1 << 26) -> torch.Tensor:
    """Packed queries [Q, w], packed items [I, w] → distances [Q, I] int16 (torch path)."""
    table = _POPCOUNT.to(queries.device)
    n_items, width = items.shape
    per_chunk = max(1, chunk_bytes // max(1, queries.shape[0] * width * 2))
    out = []
    for start in range(0, n_items, per_chunk):
        block = items[start:start + per_chunk]  # [C, w]
        xor = torch.bitwise_xor(queries.unsqueeze(1), block.unsqueeze(0))  # [Q, C, w] uint8
        out.append(table[xor.long()].sum(2, dtype=torch.int16))  # [Q, C]
    return torch.cat(out, dim=1)


def top_k_hamming(queries: torch.Tensor, items: torch.Tensor, k: int,
                  engine: str = "auto") -> tuple[torch.Tensor, torch.Tensor]:
    """Packed queries [Q, w], packed items [I, w] → (distances [Q, k], item ids [Q, k]) of the k
    nearest items by (distance, id). ``engine``: auto (Faiss on CPU when installed) | faiss | torch."""
    if engine not in ("auto", "faiss", "torch"):
        raise ConfigError("engine", engine, "one of auto, faiss, torch")
    k = min(k, items.shape[0])
    if engine == "faiss" or (engine == "auto" and queries.device.type == "cpu" and faiss_available()):
        return _faiss_top_k(queries, items, k)
    distances = hamming_distances(queries, items).to(torch.int64)  # [Q, I]
    ids = torch.arange(items.shape[0], device=items.device)
    key = distances * items.shape[0] + ids  # (distance, id) as one sortable integer
    best = key.topk(k, dim=1, largest=False).values  # ascending
    return best // items.shape[0], best % items.shape[0]


def _faiss_top_k(queries: torch.Tensor, items: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    if not faiss_available():
        raise ConfigError("engine", "faiss",
                          "torch or auto: the faiss package is not installed (pip install faiss-cpu)")
    import faiss
    n_items, width = items.shape
    index = faiss.IndexBinaryFlat(width * 8)
    index.add(np.ascontiguousarray(items.cpu().numpy()))
    query = np.ascontiguousarray(queries.cpu().numpy())
    asked = min(n_items, 2 * k)
    while True:
        distances, ids = index.search(query, asked)  # [Q, asked], ascending distance
        complete = asked == n_items or bool((distances[:, -1] > distances[:, k - 1]).all())
        if complete:
            break
        asked = min(n_items, 2 * asked)  # some query has ties at the k-th distance beyond what was asked
    key = distances.astype(np.int64) * n_items + ids.astype(np.int64)
    best = np.sort(key, axis=1)[:, :k]
    best_t = torch.from_numpy(best).to(queries.device)
    return best_t // n_items, best_t % n_items
