"""Why does the coordinate median cost a federated recommender so much accuracy (issues #31, #35)?

Two readings: (a) an item row's uploaders are mostly clients that drew it as a negative, and the
per-coordinate median follows them, dropping the minority that holds it as a positive; (b) the clients that
hold it as a positive pull it toward their own, different user embeddings, and the coordinate median of
such diverse directions is not their mean's direction. The script measures where the median departs from
the mean.

Runs a matrix preset's setting with no attack and the plain mean (``--preset``, default
``robustness/matrix_fedcl``) for ``--rounds`` rounds and, every round, for each item row uploaded by at
least ``--min-uploaders`` clients:

  - the share of its uploaders that hold the item in their training data (a positive), the rest having
    it as a negative (sampled, or sent by the server);
  - the median estimate against the mean over the same uploads: their cosine, and the median's norm over
    the mean's, each split by whether the positives are the minority of the row's uploaders.

This reads the simulation's own bookkeeping (which client sent which row, and the clients' training data)
as an analysis; no server-side code sees it.

    python scripts/investigations/median_rows.py --rounds 24 --out docs/reproductions/attacks/median-rows

Writes ``median-rows.csv`` (one line per round and class of row) and ``median-rows.md`` (the summary).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]

from fedrun.app.compose import compose  # noqa: E402
from fedrun.app.plan import build_run  # noqa: E402
from fedrun.defense.diagnostics import median_rows_record  # noqa: E402
from fedrun.report.table import markdown  # noqa: E402
from fedrun.types import Uploads  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="robustness/matrix_fedcl")
    parser.add_argument("--rounds", type=int, default=24)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--min-uploaders", type=int, default=3, help="rows with fewer uploaders: median = mean")
    parser.add_argument("--out", default="outputs/median-rows")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    if args.rounds < 1 or args.min_uploaders < 3:
        parser.error(f"--rounds {args.rounds} --min-uploaders {args.min_uploaders}: at least 1 and 3")
    built = build_run(compose([f"+experiment={args.preset}", "row=robustness/none", "defense=mean",
                               "sim.fast_path=off",  # the per-client uploads, which the FedSGD shortcut skips
                               f"sim.seed={args.seed}", "track=none", "sim.progress=false", *args.overrides]))
    rounds, train = built.trainer, built.env.train
    train_keys, n_items = train.sorted_keys(), train.n_items
    aggregate, records = rounds.aggregate, []

    def recording(uploads: Uploads, senders: torch.Tensor, ctx):
        for line in median_rows_record(uploads, senders, train_keys, n_items, args.min_uploaders):
            records.append({"round": ctx.round, **line})
        return aggregate(uploads, senders, ctx)

    rounds.aggregate = recording
    for round_index in range(args.rounds):
        rounds.train_round(round_index)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    keys = ["round", "class", "rows", "positive share", "cos(median, mean)", "|median| / |mean|"]
    lines = [",".join(keys)] + [",".join(str(r[k]) if k == "class" else f"{r[k]:.6g}" for k in keys) for r in records]
    (out / "median-rows.csv").write_text("\n".join(lines) + "\n")
    summary = []
    for name in dict.fromkeys(r["class"] for r in records):
        mine = [r for r in records if r["class"] == name]
        summary.append([name, f"{sum(r['rows'] for r in mine) / len(mine):.0f}",
                        *(f"{torch.tensor([r[k] for r in mine]).median():.3f}"
                          for k in ("positive share", "cos(median, mean)", "|median| / |mean|"))])
    caption = (f"Item rows with at least {args.min_uploaders} uploaders on the setting of +experiment={args.preset} "
               f"(no attack, the mean, seed {args.seed}), rounds 0–{args.rounds - 1}: rows per round, then the "
               "median over rounds of each class's mean positive share, mean cos(median, mean) and median norm ratio")
    header = ["rows", "per round", "positive share", "cos(median, mean)", "|median| / |mean|"]
    text = f"{caption}\n\n{markdown(header, summary)}\n"
    (out / "median-rows.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
