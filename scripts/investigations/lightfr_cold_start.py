"""LightFR's cold start (§3.3.3) measured. ``--kind clients`` (Eq. 18–19): a fraction of the clients
never trains; after T rounds each fits its code to its own training ratings against the final D.
``--kind items`` (Eq. 20–21): a fraction of the rated items never enters training; after T rounds
their raters' uploads give them codes. Test HR@10 / NDCG@10 (the preset's sampled protocol) on the
test rows of the cold clients / items with their Eq. 19 / 21 codes, the same rows with the random
initial codes, and the other test rows — per seed, then mean ± std.

    python scripts/investigations/lightfr_cold_start.py [--setup lightfr/filmtrust] [--kind clients|items] [--cold 0.2]
                                         [--seeds 1 2 3] [--rounds T]
"""

from __future__ import annotations

import argparse
import copy
import statistics
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]

from fedrun.app.compose import compose  # noqa: E402
from fedrun.app.plan import build_run  # noqa: E402
from fedrun.eval.base import Evaluator  # noqa: E402


def restricted(evaluator: Evaluator, keep_rows: np.ndarray) -> Evaluator:
    """The evaluator with its test targets limited to the rows ``keep_rows`` [N] bool (same negatives:
    they are drawn per user)."""
    split = replace(evaluator.split, test=evaluator.split.test.take(np.nonzero(keep_rows)[0]))
    return type(evaluator)(evaluator.config, split, evaluator.device, evaluator.rating, evaluator.bytes_per_pair)


def measure(setup: str, kind: str, cold: float, seed: int, rounds: int | None) -> dict[str, dict[str, float]]:
    extra = [] if rounds is None else [f"sim.max_rounds={rounds}"]
    cfg = compose(["+experiment=lightfr/table5", f"setup={setup}", "row=lightfr/lightfr", "track=none",
                   "sim.progress=false", f"sim.seed={seed}", f"method.cold_{'users' if kind == 'clients' else 'items'}"
                   f"={cold}", *extra])
    built = build_run(cfg)
    method, sim, test = built.method, built.plan.sim, built.evaluator.split.test
    for round_index in range(sim.max_rounds):
        built.trainer.train_round(round_index)
    flags = (method.cold if kind == "clients" else method.cold_item).cpu().numpy()
    is_cold = flags[test.user if kind == "clients" else test.item]  # [N] test rows of cold clients / items
    on_cold, on_warm = restricted(built.evaluator, is_cold), restricted(built.evaluator, ~is_cold)
    random_codes = copy.deepcopy(method)
    random_codes.prepared_for = random_codes.server_steps  # skip Eq. 19 / 21: rank with the initial random codes
    rule = "Eq. 19" if kind == "clients" else "Eq. 21"
    return {f"cold {kind}, {rule} codes": on_cold.evaluate(method, "test"),
            f"cold {kind}, random codes": on_cold.evaluate(random_codes, "test"),
            f"trained {kind}": on_warm.evaluate(method, "test")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--setup", default="lightfr/filmtrust")
    parser.add_argument("--kind", choices=["clients", "items"], default="clients",
                        help="cold-start clients (Eq. 18-19) or cold-start items (Eq. 20-21)")
    parser.add_argument("--cold", type=float, default=0.2, help="fraction of the clients / rated items held out")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--rounds", type=int, default=None, help="default: the preset's T = 50")
    args = parser.parse_args()
    runs = [measure(args.setup, args.kind, args.cold, seed, args.rounds) for seed in args.seeds]
    groups = list(runs[0])
    metrics = list(runs[0][groups[0]])
    print(f"LightFR cold-start {args.kind} on {args.setup}: {args.cold:.0%} of the {args.kind} never train; "
          f"seeds {args.seeds}; `python scripts/investigations/lightfr_cold_start.py --setup {args.setup} "
          f"--kind {args.kind} "
          f"--cold {args.cold}`\n")
    print("| test rows of | " + " | ".join(metrics) + " |\n|---|" + "---|" * len(metrics))
    for group in groups:
        cells = []
        for metric in metrics:
            values = [r[group][metric] for r in runs]
            spread = statistics.stdev(values) if len(values) > 1 else 0.0
            cells.append(f"{statistics.mean(values):.4f} ± {spread:.4f}")
        print(f"| {group} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
