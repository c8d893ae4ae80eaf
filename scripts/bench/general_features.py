"""What each feature that needs the general round costs over the general round alone (issue #67's target: each
≤ 1.3×), on W0, beside the FedSGD fast path it leaves.

    OMP_NUM_THREADS=1 python scripts/bench/general_features.py [--repeats 6] [--rounds 4]

One process, one thread: every setting is built first, then timed in interleaved blocks of ``--rounds`` rounds,
``--repeats`` times; medians (ranges) in ms per round and their ratio to the general round alone. The settings:
W0 (FedAvg-MF BPR, ml-1m ``split80-20``, 256 clients) with ``sim.fast_path=off``, and each of item-row LDP (the
Laplace mechanism on every uploaded row), the coordinate-wise median, Krum, A-hum at the reference code's
attacker share and ``sim.local_epochs=2`` on it.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import COMMON, MF, ML1M_8020, time_rounds  # noqa: E402

from fedrun.app.compose import compose  # noqa: E402
from fedrun.app.plan import build_run  # noqa: E402

GENERAL = ["sim.fast_path=off"]
FEATURES = {
    "FedSGD fast path": [],
    "general round alone": GENERAL,
    "item-row LDP": GENERAL + ["privacy=ldp", "privacy.targets=[item_rows]"],
    "median": GENERAL + ["defense=median"],
    "Krum": GENERAL + ["defense=krum"],
    "A-hum": GENERAL + ["attack=a_hum"],
    "local_epochs=2": GENERAL + ["sim.local_epochs=2"],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    torch.set_num_threads(1)
    base = ML1M_8020 + COMMON + MF + ["sim.clients_per_round=256"]
    trainers = {name: build_run(compose(base + extra)).trainer for name, extra in FEATURES.items()}  # attacks set up
    for trainer in trainers.values():
        time_rounds(trainer, 2)
    times: dict[str, list[float]] = {name: [] for name in trainers}
    for _ in range(args.repeats):
        for name, trainer in trainers.items():
            times[name].append(time_rounds(trainer, args.rounds, warmup=0) * 1e3)
    alone = statistics.median(times["general round alone"])
    print("| W0, one thread, 256 clients | ms / round | × general round alone |\n|---|---|---|")
    for name, ms in times.items():
        print(f"| {name} | {statistics.median(ms):.1f} ({min(ms):.1f}–{max(ms):.1f}) | "
              f"{statistics.median(ms) / alone:.2f} |")


if __name__ == "__main__":
    main()
