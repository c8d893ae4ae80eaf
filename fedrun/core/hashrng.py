"""Counter-based random integers: a draw is a pure function of its key (SplitMix64 mixing).

Used where the *identity* of a draw must not depend on how work is batched: a client's
negatives depend on (seed, round, user, position, attempt) only — not on the bucket it
landed in, the bucket count, the chunk size or the device (CPU and CUDA give the same
integers, since int64 arithmetic wraps identically on both).
"""

from __future__ import annotations

import torch

_M1 = 0xBF58476D1CE4E5B9 - (1 << 64)  # SplitMix64 constants as signed int64
_M2 = 0x94D049BB133111EB - (1 << 64)
_GOLDEN = 0x9E3779B97F4A7C15 - (1 << 64)


def _shr(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Logical right shift of int64 (torch's >> is arithmetic)."""
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def mix(x: torch.Tensor) -> torch.Tensor:
    """SplitMix64 finalizer on int64 tensors (wrapping arithmetic)."""
    x = x + _GOLDEN
    x = (x ^ _shr(x, 30)) * _M1
    x = (x ^ _shr(x, 27)) * _M2
    return x ^ _shr(x, 31)


def randint(seed: int, keys: list[torch.Tensor], high: int | torch.Tensor) -> torch.Tensor:
    """Integers in [0, high), one per element of the broadcast ``keys`` (each int64)."""
    x = torch.full_like(keys[0], seed & ((1 << 63) - 1))
    for key in keys:
        x = mix(x ^ key)
    return _shr(x, 1) % high
