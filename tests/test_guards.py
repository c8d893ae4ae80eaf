"""The finite-value guard at a round's phase boundaries: one pass over the values, the same verdicts."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fedrun.kernels.guards import DIVERGED, NumericalError, check_finite


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(1, 40), width=st.integers(1, 9), at=st.integers(0, 10_000),
       bad=st.sampled_from([None, float("nan"), float("inf"), -float("inf"), 3 * DIVERGED, -3 * DIVERGED, DIVERGED]),
       dtype=st.sampled_from([torch.float32, torch.float64]))
def test_a_tensor_passes_exactly_when_every_value_is_finite_and_within_the_bound(rows, width, at, bad, dtype):
    values = torch.randn(rows, width, dtype=dtype) * 1e3
    if bad is not None:
        values.view(-1)[at % values.numel()] = bad
    finite = bool(torch.isfinite(values).all())
    passes = finite and float(values.abs().max()) <= DIVERGED  # the guard's rule, written the slow way
    if passes:
        check_finite(values, "the client step", 3)
        return
    expected = (r"produced 1 non-finite value\(s\) in round 3" if not finite else
                r"produced values of magnitude .* in round 3, past 1e\+15: the model has diverged")
    with pytest.raises(NumericalError, match=expected):
        check_finite(values, "the client step", 3)


def test_the_error_counts_the_non_finite_values_and_names_the_peak():
    values = torch.zeros(5)
    values[1], values[3] = float("nan"), float("inf")
    with pytest.raises(NumericalError, match="produced 2 non-finite value"):
        check_finite(values, "x", 0)
    with pytest.raises(NumericalError, match="magnitude 2e\\+15"):
        check_finite(torch.tensor([0.0, -2e15, 1.0]), "x", 0)
    check_finite(torch.tensor([], dtype=torch.float32), "x", 0)  # nothing to check
    check_finite(torch.tensor([10 ** 17]), "x", 0)  # an integer tensor holds ids or counts

