"""fedrun from Python, as in a notebook: two methods over two seeds, the final metrics beside the popularity
floor, and the learning curves from the per-round history. CI runs it (tests/test_api.py) on the synthetic data;
on real data, e.g. ``python scripts/examples/python_api.py dataset=ml-100k sim.epochs=10``.

    python scripts/examples/python_api.py [override ...]
"""

from __future__ import annotations

import sys

import pandas as pd

import fedrun


def main(extra: list[str]) -> pd.DataFrame:
    rows, curves = [], {}
    for method in ("central", "fedavg"):
        for seed in (1, 2):
            result = fedrun.run(f"method={method}", "backbone=mf", "dataset=synthetic", "sim.epochs=3",
                                "sim.eval_every=1", f"sim.seed={seed}", "track=none", *extra)
            rows.append({"method": method, "seed": seed, "ndcg_at_10": result.test["ndcg_at_10"],
                         "floor": result.floor["ndcg_at_10"], "rounds": result.rounds})
            curves[method, seed] = result.history.set_index("step")["valid_ndcg_at_10"].dropna()
    table = pd.DataFrame(rows)
    print(table.groupby("method")[["ndcg_at_10", "floor"]].agg(["mean", "std"]).round(4))
    print(pd.DataFrame(curves).round(4))  # validation NDCG@10 per evaluation step, one column per (method, seed)
    return table


if __name__ == "__main__":
    main(sys.argv[1:])
