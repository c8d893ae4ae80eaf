"""On-device inference cost, binary vs real-valued (LightFR Fig. 1 and Fig. 3, third panel).

One client ranks the whole catalogue and keeps its top k: LightFR scores f-bit codes by
Hamming distance (Faiss ``IndexBinaryFlat`` and fedrun's torch XOR + popcount path), the
real-valued federated MF baselines by inner products of d-dim float32 vectors (matmul + topk,
and Faiss ``IndexFlatIP``). Catalogue sizes from 10³ up; Ciao's 105,114 items among them.
Each cell is the median over ``--repeats`` single-client queries (after a warm-up), in one
process and thread count, so the ratios compare like with like. Writes Markdown + CSV.

    python scripts/bench/bench_hamming.py [--items 1e3,1e4,105114,1e6,1e7] [--bits 64] [--dim 32] [--k 10]
"""

from __future__ import annotations

import argparse
import csv
import platform
import statistics
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]

from fedrun.retrieval.hamming import pack_codes, top_k_hamming  # noqa: E402
from fedrun.retrieval.search import faiss_available  # noqa: E402


def median_seconds(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def measure(n_items: int, bits: int, dim: int, k: int, repeats: int) -> dict[str, float]:
    gen = torch.Generator().manual_seed(n_items)
    codes = pack_codes(torch.randn(n_items, bits, generator=gen).sign())  # [m, f/8] uint8
    query_code = pack_codes(torch.randn(1, bits, generator=gen).sign())
    vectors = torch.randn(n_items, dim, generator=gen)  # [m, d] float32
    query = torch.randn(1, dim, generator=gen)
    row = {"items": n_items, "binary_bytes": codes.numel(), "float_bytes": vectors.numel() * 4,
           "inner_product_torch_ms": 1e3 * median_seconds(lambda: (query @ vectors.T).topk(k, dim=1), repeats),
           "hamming_torch_ms": 1e3 * median_seconds(lambda: top_k_hamming(query_code, codes, k, "torch"), repeats)}
    if faiss_available():
        import faiss
        binary = faiss.IndexBinaryFlat(bits)
        binary.add(codes.numpy())
        flat = faiss.IndexFlatIP(dim)
        flat.add(vectors.numpy())
        q_code, q_vec = query_code.numpy(), np.ascontiguousarray(query.numpy())
        row["hamming_faiss_ms"] = 1e3 * median_seconds(lambda: binary.search(q_code, k), repeats)
        row["inner_product_faiss_ms"] = 1e3 * median_seconds(lambda: flat.search(q_vec, k), repeats)
        row["speedup_faiss"] = row["inner_product_faiss_ms"] / row["hamming_faiss_ms"]
    row["speedup_torch"] = row["inner_product_torch_ms"] / row["hamming_torch_ms"]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", default="1e3,1e4,105114,1e6")
    parser.add_argument("--bits", type=int, default=64)
    parser.add_argument("--dim", type=int, default=32)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--out", default=str(ROOT / "outputs" / "bench" / "hamming"))
    args = parser.parse_args()
    rows = [measure(int(float(m)), args.bits, args.dim, args.k, args.repeats) for m in args.items.split(",")]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    header = list(rows[-1].keys())
    with open(out / "hamming.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, header)
        writer.writeheader()
        writer.writerows(rows)
    lines = [f"One query, top-{args.k}: {args.bits}-bit codes vs {args.dim}-dim float32 vectors; median of "
             f"{args.repeats}; {platform.processor() or platform.machine()}, torch {torch.__version__}, "
             f"{torch.get_num_threads()} threads.", "", "| " + " | ".join(header) + " |",
             "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(f"{row.get(h, float('nan')):.3g}" if isinstance(row.get(h), float)
                                else str(row.get(h, "")) for h in header) + " |" for row in rows]
    text = "\n".join(lines) + "\n"
    (out / "hamming.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
