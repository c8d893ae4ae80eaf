"""Benchmark the vectorized simulator against the per-client loop and a centralized epoch.

Workloads (issue #7), each measured in one run on the same data and hyperparameters:

  W0  FedAvg-MF (BPR, dim 32, 1 negative, one local SGD step), ml-1m split80-20, 256 clients
  W1  FedAvg-NCF, ml-1m split80-20, 256 clients, 4 negatives per positive, 1 local epoch
  W2  FedAvg-MF (BPR), gowalla, 1,024 clients per round
  W3  as W1 with 5 local epochs and Adam
  W4  full-ranking evaluation of every test user (ml-1m, gowalla) vs a bare matmul + topk
  W5  scaling: clients per round on gowalla; catalogue size on synthetic data (PNG + table)
  W6  FedCL-NCF with FedCL's Table 3 settings (ml-1m LOO, 16 clients, LDP embeddings, 10 local + 20
      semi-hard negatives): the FedSGD fast path against per-client copies, same draws
  W7  FedCL's server reclustering (Ward into 25 clusters) of ε = 4 LDP uploads at the user counts
      of ml-1m, Beauty, Yelp and Sports: faiss k-means pre-aggregation vs scikit-learn k-means++
  W8  NeuMF full ranking (FedCL's NCF: dim 64, tower 128-64-32) of every user at ml-1m and Beauty
      sizes: the tower in cache-sized blocks vs one pass over each evaluation chunk
  W9  robust aggregation rules on one W0 round's uploads, against the mean in the same run
  W10 W0's round (general path) without and with A-hum clients at 0.1% and 5%: time and peak RSS
  W11 FedAvg on LightGCN over the clients' ego graphs (K = 2, dim 64, every neighbour sent), gowalla,
      256 clients: the bucketed round vs the same clients one per bucket (a per-client loop through the
      same code, checked to give the same update), and vs a centralized LightGCN epoch per interaction
  W12 one centralized LightGCN epoch (K = 3, dim 64, batch 2,048), gowalla: the graph product's backward
      through the prebuilt transpose (``GraphProduct``) vs autograd's own ``sparse.mm`` backward, which
      transposes the CSR matrix at every call; both epochs must end at the same tables
  W13 PerFedRec++ rounds at Table 4's setting (yelp-perfedrec, 256 clients): the ego graphs propagated as
      CSR products in edge order vs the segment sums (``index_add``) they replaced; same item tables

Paths of a training workload:
  - fedrun:  the simulator as a run uses it (``sim.fast_path=auto``: FedSGD fast path when exact)
  - general: per-client copies, bucketed (``sim.fast_path=off``), when it differs from the above
  - loop:    the plain per-client loop with a deepcopy of the model per client (fedrun/testing),
             checked to compute the same update as the general path before it is timed
  - central: one centralized epoch over the same interactions, same backbone, batch 1,024

The workloads live by family beside this entry point: ``training.py`` (W0–W3, W6, W10, W11, W13),
``evaluation.py`` (W4, W8), ``scaling.py`` (W5), ``kernels.py`` (W7, W9, W12); ``common.py`` holds the recorded
settings and how a workload is built, timed and checked.

Each workload runs in its own process so that its peak RSS is its own (``--tiny``, a smoke test: all in one
process). Writes Markdown + CSV (and W5 PNGs) to ``--out`` and prints the tables.

    python scripts/bench/bench.py [--workloads w0,w1,w2,w3,w4,w5] [--rounds 20] [--loop-rounds 3] [--tiny]
                            [--device cpu|cuda]

On a GPU (``--device cuda``) every timed step ends with ``torch.cuda.synchronize`` and the
captions add the device's peak allocated memory; ``scripts/checks/device_check.py`` checks that the
device computes what the CPU computes.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from common import ROOT, without_workloads
from evaluation import bench_w4, bench_w8
from kernels import bench_w7, bench_w9, bench_w12
from scaling import bench_w5
from training import TRAIN, bench_train, bench_w6, bench_w10, bench_w11, bench_w13


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default="w0,w1,w2,w3,w4,w5,w6,w7,w8,w9,w10,w11,w12,w13",
                        help="comma-separated: w0 … w13")
    parser.add_argument("--case", type=int, default=None, help=argparse.SUPPRESS)  # W10: one case, in-process
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--loop-rounds", type=int, default=3)
    parser.add_argument("--out", default="outputs/bench")
    parser.add_argument("--tiny", action="store_true", help="every workload on small synthetic data (smoke test)")
    parser.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N (sim.device of every workload)")
    args = parser.parse_args()
    os.environ.setdefault("FEDRUN_DATA_DIR", str(ROOT.parent / "shared" / "datasets"))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    workloads = args.workloads.split(",")
    others = {"w4": bench_w4, "w5": bench_w5, "w6": bench_w6, "w7": bench_w7, "w8": bench_w8, "w9": bench_w9,
              "w10": bench_w10, "w11": bench_w11, "w12": bench_w12, "w13": bench_w13}
    unknown = sorted(set(workloads) - {*TRAIN, *others})
    if unknown:
        parser.error(f"--workloads: unknown {', '.join(unknown)}; allowed: {', '.join([*TRAIN, *others])}")
    if len(workloads) > 1 and not args.tiny:  # one process per workload: each peak RSS is its own
        for name in workloads:
            command = [sys.executable, __file__, *without_workloads(sys.argv[1:]), "--workloads", name]
            if subprocess.run(command, check=False).returncode != 0:
                return 1
        return 0
    for name in workloads:  # --tiny (a smoke test): every workload in this process, peak RSS not its own
        print(bench_train(TRAIN[name], args, out) if name in TRAIN else others[name](args, out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
