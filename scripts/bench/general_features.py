"""What each feature that needs the general round costs over the general round alone (issue #67's target: each
≤ 1.3×), on W0, beside the FedSGD fast path it leaves.

    OMP_NUM_THREADS=1 python scripts/bench/general_features.py [--repeats 6] [--rounds 4] [--device cuda]

One process, one thread: every setting is built first, then timed in interleaved blocks of ``--rounds`` rounds,
``--repeats`` times; medians (ranges) in ms per round and their ratio to the general round alone. The settings:
W0 (FedAvg-MF BPR, ml-1m ``split80-20``, 256 clients) with ``sim.fast_path=off``, and each of item-row LDP (the
Laplace mechanism on every uploaded row), the coordinate-wise median, Krum, A-hum at the reference code's
attacker share and ``sim.local_epochs=2`` on it.

For the three features whose work is a separate call on the round's uploads (item-row LDP's ``privacy.apply``
on each bucket's uploads, the median's and Krum's ``defense.aggregate``), a second table times that call alone on
one captured round's uploads (beside the sum it replaces, for the rules) and LDP's bare arithmetic (a uniform draw,
the Laplace inversion and an L1 clip in the fewest passes): what the feature adds to the round against what its
own work costs, i.e. whether any of the excess is the round's and not the feature's.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import COMMON, MF, ML1M_8020, time_rounds  # noqa: E402

from fedrun.app.compose import compose  # noqa: E402
from fedrun.app.plan import build_run  # noqa: E402
from fedrun.core.seeding import generator  # noqa: E402
from fedrun.privacy.ldp import noise_scale  # noqa: E402
from fedrun.testing.measure import sync  # noqa: E402

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
    parser.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N (sim.device of every setting)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    base = ML1M_8020 + COMMON + MF + ["sim.clients_per_round=256", f"sim.device={args.device}"]
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
    print_own_work(trainers, {name: statistics.median(ms) - alone for name, ms in times.items()}, args.rounds + 2)


def captured_round(trainer, round_index: int) -> tuple[list, object, object]:
    """Run one more round of ``trainer``, keeping what its privacy mechanism was handed (each bucket's uploads) and
    what its defense aggregated (the round's uploads and context)."""
    buckets, seen = [], {}
    apply, aggregate = trainer.privacy.apply, trainer.aggregate
    trainer.privacy.apply = lambda uploads, gen: (buckets.append(uploads), apply(uploads, gen))[1]
    trainer.aggregate = lambda uploads, senders, ctx: (seen.update(uploads=uploads, ctx=ctx),
                                                       aggregate(uploads, senders, ctx))[1]
    try:
        trainer.train_round(round_index)
    finally:
        del trainer.privacy.apply, trainer.aggregate  # the instance attributes: the class's methods again
    return buckets, seen["uploads"], seen["ctx"]


def best_ms(call, device: torch.device, repeats: int = 20) -> float:
    best = float("inf")
    for _ in range(repeats):
        sync(device)
        started = time.perf_counter()
        call()
        sync(device)
        best = min(best, time.perf_counter() - started)
    return best * 1e3


def bare_laplace_clip(rows: torch.Tensor, clip: float, scale: float, gen: torch.Generator) -> torch.Tensor:
    """rows [N, d] → L1-clipped rows plus Laplace noise in the fewest passes (the arithmetic's floor, not its bits)."""
    uniform = torch.rand(rows.shape, generator=gen, device=rows.device).sub_(0.5)  # [N, d]
    noise = uniform.sign().mul_(-scale).mul_(uniform.abs_().mul_(-2).log1p_())
    return noise.addcmul_(rows, (clip / rows.abs().sum(1, keepdim=True).clamp_min_(1e-30)).clamp_max_(1.0))


def rule_over_sum(trainer, plain, round_index: int) -> float:
    """ms the robust rule of ``trainer`` takes over the sum (``plain``) on one round's uploads, best of 20 each."""
    _, uploads, ctx = captured_round(trainer, round_index)
    device = uploads.row_delta.device
    return (best_ms(lambda: trainer.defense.aggregate(uploads, ctx), device)
            - best_ms(lambda: plain.aggregate(uploads, ctx), device))


def print_own_work(trainers: dict, excess: dict[str, float], round_index: int) -> None:
    """The second table (module docstring): each feature's own call on one captured round, best of 20."""
    ldp = trainers["item-row LDP"]
    buckets, _, _ = captured_round(ldp, round_index)
    rows = torch.cat([uploads.row_delta for uploads in buckets])  # [R, d]
    gen = generator(0, "bench", 0, rows.device)
    ldp_call = best_ms(lambda: [ldp.privacy.apply(uploads, gen) for uploads in buckets], rows.device)
    config = ldp.privacy.config
    bare = best_ms(lambda: bare_laplace_clip(rows, config.clip, noise_scale(config, rows.shape[1]), gen), rows.device)
    print(f"\nOne round's uploads ({rows.shape[0]:,} rows of {rows.shape[1]}), each feature's own work alone "
          "(ms, best of 20):\n\n| feature | excess over the general round | its own call alone | "
          "the call's bare arithmetic |\n|---|---|---|---|")
    print(f"| item-row LDP | {excess['item-row LDP']:.1f} | {ldp_call:.1f} | {bare:.1f} |")
    plain = trainers["general round alone"].defense
    for name in ("median", "Krum"):
        rule = rule_over_sum(trainers[name], plain, round_index)
        print(f"| {name} | {excess[name]:.1f} | {rule:.1f} (over the sum it replaces) | |")


if __name__ == "__main__":
    main()
