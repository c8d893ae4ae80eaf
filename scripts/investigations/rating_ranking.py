"""Why rating-trained methods score 0 under full ranking on the leaderboard (issues #34, #35): do their
highest predicted ratings go to items few users rated?

For each ``--methods`` entry, trains the leaderboard's run (``+experiment=leaderboard method=<m>``,
ml-100k leave-one-out, full ranking) and reads, over every test user:

  - how many training ratings the items of each user's top 20 have (median, and the share with at
    most ``--rare`` ratings), beside the same for the held-out test items;
  - NDCG@10 / HR@20 of the ranking as trained, and of the same scores with the items rated fewer than
    ``--min-count`` times in training left out of the ranking (scored −inf), through the run's own
    evaluator — if the rare items are what pushes the test item down, this lifts the metrics.

    python scripts/investigations/rating_ranking.py --methods fedrec,fedmf,svdpp --out docs/results/rating-ranking

Writes ``rating-ranking.md`` / ``.csv``. Needs no MLflow (``track=none``).
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]

from fedrun.app.compose import compose  # noqa: E402
from fedrun.app.plan import build_run  # noqa: E402
from fedrun.report.table import markdown  # noqa: E402
from fedrun.sim.loop import total_rounds  # noqa: E402


class WithoutRareItems:
    """A trained method whose rankings leave out the items outside ``allowed`` [I] (scored −inf)."""

    def __init__(self, method, allowed: torch.Tensor):
        self.method, self.allowed = method, allowed

    def score_users(self, users: torch.Tensor, history=()) -> torch.Tensor:
        scores = self.method.score_users(users, history)  # [U, I]
        scores[:, ~self.allowed] = float("-inf")
        return scores

    def __getattr__(self, name: str):
        return getattr(self.method, name)


def train(built) -> None:
    for round_index in range(total_rounds(built.trainer, built.plan.sim)):
        built.trainer.train_round(round_index)


def top_item_counts(built, counts: torch.Tensor, k: int = 20) -> torch.Tensor:
    """[U, k] the training-rating counts of each test user's top-k items (train and validation masked)."""
    evaluator = built.evaluator
    users = torch.nonzero(evaluator.stores["test"].sizes() > 0).squeeze(1)
    scores = built.method.score_users(users, evaluator.history("test"))  # [U, I]
    for store in evaluator.masks("test"):
        rows, _, items, _ = store.flat(users)
        scores[rows, items] = float("-inf")
    return counts[scores.topk(k, dim=1).indices]


def measure(method: str, seed: int, rare: int, min_count: int, overrides: list[str]) -> list[str]:
    built = build_run(compose(["+experiment=leaderboard", f"method={method}", f"sim.seed={seed}", "track=none",
                               "sim.progress=false", "sim.eval_every=0", "sim.keep_best=false", *overrides]))
    train(built)
    env = built.env
    _, _, items, _ = env.train.flat(torch.arange(env.n_users))
    counts = torch.bincount(items, minlength=env.n_items)  # [I] training ratings per item
    top = top_item_counts(built, counts).double()  # [U, 20]
    _, _, test_items, _ = built.evaluator.stores["test"].flat(torch.arange(env.n_users))
    test_counts = counts[test_items].double()
    plain = built.evaluator.evaluate(built.method, "test")
    kept = built.evaluator.evaluate(WithoutRareItems(built.method, counts >= min_count), "test")
    return [method, f"{top.median():.0f}", f"{(top <= rare).double().mean():.2f}", f"{test_counts.median():.0f}",
            f"{(test_counts <= rare).double().mean():.2f}", f"{plain['ndcg_at_10']:.4f}", f"{plain['hr_at_20']:.4f}",
            f"{kept['ndcg_at_10']:.4f}", f"{kept['hr_at_20']:.4f}"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", default="fedrec,fedmf,svdpp")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rare", type=int, default=5, help="an item with at most this many ratings counts as rare")
    parser.add_argument("--min-count", type=int, default=20, help="the restricted ranking keeps items rated this often")
    parser.add_argument("--out", default="outputs/rating-ranking")
    parser.add_argument("overrides", nargs="*", help="more Hydra overrides for every run (e.g. sim.threads=1)")
    args = parser.parse_args()
    rows = []
    for method in args.methods.split(","):  # a line per method as it ends
        rows.append(measure(method, args.seed, args.rare, args.min_count, args.overrides))
        print(" | ".join(rows[-1]), flush=True)
    header = ["method", "top-20: median ratings", f"top-20: share ≤ {args.rare}", "test item: median ratings",
              f"test item: share ≤ {args.rare}", "NDCG@10", "HR@20", f"NDCG@10, items ≥ {args.min_count}",
              f"HR@20, items ≥ {args.min_count}"]
    caption = (f"The leaderboard's runs (ml-100k, leave-one-out, full ranking, seed {args.seed}): how often the "
               f"items ranked first were rated in training, and the metrics without the items rated fewer than "
               f"{args.min_count} times")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    text = f"{caption}\n\n{markdown(header, rows)}\n"
    (out / "rating-ranking.md").write_text(text)
    with (out / "rating-ranking.csv").open("w", newline="") as handle:
        csv.writer(handle).writerows([header, *rows])
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
