"""What random binary codes score under a sampled ranking protocol (LightFR's notes): the level a trained
model's HR@K is read against, exact under each tie rule."""

from __future__ import annotations

import numpy as np
from scipy.stats import binom


def random_codes_hr(bits: int, negatives: int, k: int) -> dict[str, float]:
    """HR@``k`` of a test item ranked against ``negatives`` sampled items when every code is uniformly random
    (``bits`` per code, so a similarity is Binomial(bits, ½)), under each tie rule: ``pessimistic`` (ties rank
    above the test item), ``optimistic`` (below) and ``random`` (a uniform place among its ties)."""
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
