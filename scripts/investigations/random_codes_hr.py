"""HR@K of uniformly random binary codes under the sampled protocol, exactly, for each tie rule.

The test item and each of N negatives get independent uniform f-bit codes, so each one's
similarity to the user's code is Binomial(f, ½) and independent of the others given none.
For a test similarity s, the number of negatives strictly closer is Binomial(N, P(X > s)) and
the number at least as close is Binomial(N, P(X ≥ s)):

  pessimistic (ties against the test item)  P(#{X_j ≥ s} < K)
  optimistic  (ties for it: the authors' `rank(method='first')`, test item first)  P(#{X_j > s} < K)
  random      (uniform position among its ties)  averaged over the tie count

    python scripts/investigations/random_codes_hr.py [--bits 64] [--negatives 49] [--k 10]
"""

from __future__ import annotations

import argparse

from fedrun.eval.random_codes import random_codes_hr


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bits", type=int, default=64)
    parser.add_argument("--negatives", type=int, default=49)
    parser.add_argument("--k", type=int, default=10)
    args = parser.parse_args()
    for rule, value in random_codes_hr(args.bits, args.negatives, args.k).items():
        print(f"{rule:12s} HR@{args.k} = {value:.4f}")


if __name__ == "__main__":
    main()
