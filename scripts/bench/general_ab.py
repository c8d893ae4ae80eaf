"""W0's general round against its fast path and its kernel floor, for A/B runs of two checkouts (issue #67).

    python scripts/bench/general_ab.py [--rounds 10]     # from each checkout in turn, interleaved

One process per checkout and repetition (``PYTHONPATH`` picks the checkout): 256 clients of ml-1m ``split80-20``,
FedAvg-MF BPR (W0), one thread; ms per round of the general path (``sim.fast_path=off``), the fast path and the
kernel floor (``fedrun.testing.kernel_floor``), each after two warm-up rounds, and their ratios.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import COMMON, MF, ML1M_8020, build_method, time_rounds  # noqa: E402
from training import time_kernel_floor  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    torch.set_num_threads(1)
    overrides = ML1M_8020 + COMMON + MF + ["sim.clients_per_round=256"]
    general, env = build_method(overrides + ["sim.fast_path=off"])
    fast, _ = build_method(overrides)
    g, f = time_rounds(general, args.rounds), time_rounds(fast, args.rounds)
    floor, _ = time_kernel_floor(env, 256, args.rounds)
    print(f"general {g * 1e3:.1f} ms, fast {f * 1e3:.1f} ms, floor {floor * 1e3:.1f} ms; "
          f"general / floor {g / floor:.2f}, fast / floor {f / floor:.2f}, general / fast {g / f:.2f}")


if __name__ == "__main__":
    main()
