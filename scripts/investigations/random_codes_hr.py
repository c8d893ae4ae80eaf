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

import numpy as np
from scipy.stats import binom


def random_codes_hr(bits: int, negatives: int, k: int) -> dict[str, float]:
    similarity = np.arange(bits + 1)
    p_sim = binom.pmf(similarity, bits, 0.5)  # [f + 1]
    p_above = np.array([p_sim[similarity > s].sum() for s in similarity])
    hr = {"pessimistic": 0.0, "random": 0.0, "optimistic": 0.0}
    for s, weight in zip(similarity, p_sim):
        hr["pessimistic"] += weight * binom.cdf(k - 1, negatives, p_above[s] + p_sim[s])
        hr["optimistic"] += weight * binom.cdf(k - 1, negatives, p_above[s])
        # random: a negatives above, t tied; the test item lands at a uniform place among t + 1
        above = np.arange(negatives + 1)
        for a in above[above < k]:
            rest = negatives - a
            tied = np.arange(rest + 1)
            p_counts = (binom.pmf(a, negatives, p_above[s]) *
                        binom.pmf(tied, rest, p_sim[s] / (1 - p_above[s]) if p_above[s] < 1 else 0.0))
            hr["random"] += weight * float((p_counts * np.minimum(1.0, (k - a) / (tied + 1))).sum())
    return hr


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
