"""The converged LightGCN anchor (issue #33): centralized LightGCN on LightGCN's own Gowalla files and
protocol, trained epoch after epoch with the test Recall@20 / NDCG@20 read every ``--eval-every``
epochs, until ``--epochs`` or ``--budget-s`` seconds — a curve to set beside the published .1830 / .1554
(REFERENCE sanity anchors). LightGCN's files have no validation split, and its code reads the test set
during training as this script does; the table gives every reading, the last one and the best.

    python scripts/investigations/lightgcn_anchor.py --device cuda --budget-s 300 --out outputs/lightgcn-anchor

Writes ``anchor.csv`` (one row per reading, flushed as it goes, so a run stopped by a time limit keeps
what it measured) and ``anchor.md``. Needs no MLflow (``track=none``).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

from fedrun.app.compose import compose  # noqa: E402
from fedrun.app.plan import build_run  # noqa: E402
from fedrun.report.table import markdown  # noqa: E402
from fedrun.testing.measure import machine, sync  # noqa: E402

# LightGCN's Gowalla setting: K = 3, dim 64, Adam 1e-3, batch 2,048, L2 1e-4 (the presets' backbone values)
ANCHOR = ["method=central", "backbone=lightgcn", "dataset=gowalla", "eval=full", "eval.ks=[20]",
          "eval.metrics=[recall,ndcg]", "eval.monitor=recall_at_20", "method.batch_size=2048",
          "backbone.layers=3", "sim.eval_every=0", "sim.keep_best=false", "track=none", "sim.progress=false"]
PUBLISHED = {"recall_at_20": 0.1830, "ndcg_at_20": 0.1554}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--epochs", type=int, default=1000)
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--budget-s", type=float, default=float("inf"), help="stop after the first reading past this")
    parser.add_argument("--out", default="outputs/lightgcn-anchor")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides (e.g. dataset=ml-100k for a smoke run)")
    args = parser.parse_args()
    if args.epochs < 1 or args.eval_every < 1:
        parser.error(f"--epochs {args.epochs} / --eval-every {args.eval_every}: both at least 1")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    built = build_run(compose(ANCHOR + args.overrides + [f"sim.device={args.device}", f"sim.epochs={args.epochs}"]))
    device = built.env.device
    header = ["epoch", "train s", "recall_at_20", "ndcg_at_20"]
    rows: list[list[str]] = []
    csv = (out / "anchor.csv").open("w")
    csv.write(",".join(header) + "\n")
    started, trained = time.perf_counter(), 0.0
    for epoch in range(1, args.epochs + 1):
        sync(device)
        epoch_started = time.perf_counter()
        built.trainer.train_round(epoch - 1)
        sync(device)
        trained += time.perf_counter() - epoch_started
        if epoch % args.eval_every and epoch != args.epochs:
            continue
        metrics = built.evaluator.evaluate(built.method, "test")
        row = [str(epoch), f"{trained:.1f}", f"{metrics['recall_at_20']:.4f}", f"{metrics['ndcg_at_20']:.4f}"]
        rows.append(row)
        csv.write(",".join(row) + "\n")
        csv.flush()
        print(" ".join(f"{h}={v}" for h, v in zip(header, row)), flush=True)
        if time.perf_counter() - started > args.budget_s:
            break
    csv.close()
    best = max(rows, key=lambda row: float(row[2]))
    caption = (f"Centralized LightGCN ({' '.join(ANCHOR[:3] + args.overrides)}), {machine(args.device)}: "
               f"{rows[-1][0]} epochs in {trained:.0f} s of training ({trained / int(rows[-1][0]):.2f} s / epoch). "
               f"Last: Recall@20 {rows[-1][2]}, NDCG@20 {rows[-1][3]}; best Recall@20 {best[2]} at epoch {best[0]}. "
               f"Published (converged): {PUBLISHED['recall_at_20']} / {PUBLISHED['ndcg_at_20']}.")
    (out / "anchor.md").write_text(f"{caption}\n\n{markdown(header, rows)}\n")
    print(caption)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
