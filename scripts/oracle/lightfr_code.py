"""Run the LightFR authors' code (github.com/hongleizhang/LightFR, commit b169092) as an oracle beside fedrun.

Nothing of that code enters this repository: clone it anywhere and point ``--code`` at it. The code reads its own
FilmTrust split (``data/filmtrust/``), byte-identical to ``$FEDRUN_DATA_DIR/filmtrust/lightfr_split/``.

    git clone https://github.com/hongleizhang/LightFR /tmp/LightFR
    python scripts/oracle/lightfr_code.py --code /tmp/LightFR --seed 0 --rounds 10
    python scripts/oracle/lightfr_code.py --code /tmp/LightFR --seed 0 --rounds 10 --ties max --train all

What this script changes, and nothing else:
- pandas 3 no longer turns a one-element Series into an int; ``Metrics`` relies on it, so ``int(series)`` is
  given back its old meaning;
- ``np.random`` is seeded (the code draws its clients and initial codes unseeded);
- ``--rounds`` sets how many rounds run: the code runs ``global_rounds - 40`` (10 with its ``Configs``);
- ``--ties max`` ranks the test item last among equal scores (fedrun's pessimistic rule) where the code ranks it
  first (``rank(method='first')`` with the test item listed first);
- ``--train all`` lets every training rating enter the fit where the code keeps only ratings whose integer target
  ``int(2f·r − f)`` is positive (``rating_matrix > 0``): fedrun's ``method.targets=scaled`` against ``code``;
- ``--stay trained`` weighs the user's stay term 2λ|Ω_u|·b_uk by the ratings that train (fedrun's
  ``method.stay_count=trained``), ``--stay rated`` by every training rating (``stay_count=rated``), where the code
  counts every row the user has in the three files (``len(u_i_r[u])``: its training ratings and the 50 + 50
  validation and test rows, listed negatives included).
It prints the code's own per-round log and its final ``test HR@10 = …, NGCD@10 = …`` line.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter

import numpy as np
import pandas as pd


def patch(ties: str, train: str, stay: str) -> None:
    """The changes listed in the module docstring (the code must be importable: ``sys.path`` holds it)."""
    pd.Series.__int__ = lambda series: int(series.iloc[0])  # type: ignore[method-assign,assignment]
    if ties != "first":
        rank = pd.Series.rank
        pd.Series.rank = lambda self, *a, **k: rank(self, *a, **{**k, "method": ties})  # type: ignore[method-assign]
    if train == "all":
        import Base  # the authors' module

        matrix_of = Base.Base.get_rating_matrix

        def every_rating(self):
            matrix, _, mean = matrix_of(self)
            observed = np.zeros_like(matrix, dtype=int)
            for user, item, _rating in self.trainSet():
                observed[self.user[user], self.item[item]] = 1
            return matrix, observed, mean

        Base.Base.get_rating_matrix = every_rating
    if stay != "code":
        import main as lightfr_main  # the authors' module

        client_of = lightfr_main.LightFR.get_client_data

        train_rows: Counter = Counter()  # each user's training ratings, low ones included

        def counted(self, client_id):
            client = client_of(self, client_id)
            if stay == "trained":
                client.data_len_u = int(client.data_bin_u.sum())
            else:
                if not train_rows:
                    train_rows.update(self.user[user] for user, _item, _rating in self.trainSet())
                client.data_len_u = train_rows[client_id]
            return client

        lightfr_main.LightFR.get_client_data = counted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--code", required=True, help="a checkout of hongleizhang/LightFR")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=10, help="rounds to run (the code's own setting runs 10)")
    parser.add_argument("--ties", choices=["first", "max"], default="first")
    parser.add_argument("--train", choices=["positive", "all"], default="positive")
    parser.add_argument("--stay", choices=["code", "trained", "rated"], default="code")
    args = parser.parse_args()
    sys.path.insert(0, os.path.abspath(args.code))
    os.chdir(args.code)  # the code opens data/filmtrust/... relative to its folder
    patch(args.ties, args.train, args.stay)
    import main as lightfr_main  # the authors' main.py

    np.random.seed(args.seed)
    model = lightfr_main.LightFR()
    model.configs.global_rounds = args.rounds + 40
    start = time.time()
    model.main()
    print(f"seed {args.seed} rounds {args.rounds} ties {args.ties} train {args.train} stay {args.stay} "
          f"seconds {time.time() - start:.0f}", flush=True)


if __name__ == "__main__":
    main()
