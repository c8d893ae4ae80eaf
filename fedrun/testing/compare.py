"""Comparing two model states tensor by tensor (``scripts/checks/device_check.py``: a device against the CPU)."""

from __future__ import annotations

from fedrun.core.nested import tensors


def state_difference(reference: dict, other: dict) -> tuple[float, str]:
    """(largest relative max |Δ| over the tensors of two states, the tensor it occurs in)."""
    ref, oth = dict(tensors(reference)), dict(tensors(other))
    if ref.keys() != oth.keys():
        raise ValueError(f"the states hold different tensors: {sorted(ref.keys() ^ oth.keys())}")
    worst, where = 0.0, ""
    for name, a in ref.items():
        a, b = a.detach().cpu(), oth[name].detach().cpu()
        if a.shape != b.shape:
            return float("inf"), f"{name} (shape {tuple(a.shape)} vs {tuple(b.shape)})"
        if a.numel() == 0:
            continue
        if not a.is_floating_point():
            diff = float((a != b).float().mean())  # share of differing entries (ids, counters, bits)
        else:
            scale = max(float(a.abs().max()), 1e-12)
            diff = float((a.double() - b.double()).abs().max()) / scale
        if diff > worst:
            worst, where = diff, name
    return worst, where
