"""Seeded random streams. Every draw comes from a generator derived from (seed, stream, step),
so a round's randomness does not depend on what ran before it (reproducible, resumable)."""

from __future__ import annotations

import zlib

import numpy as np
import torch


def derive_seed(seed: int, stream: str, step: int = 0) -> int:
    entropy = [seed & 0xFFFFFFFF, zlib.crc32(stream.encode()), step & 0xFFFFFFFF]
    return int(np.random.SeedSequence(entropy).generate_state(1, dtype=np.uint64)[0] >> 1)


def generator(seed: int, stream: str, step: int = 0, device: torch.device | str = "cpu") -> torch.Generator:
    return torch.Generator(device=device).manual_seed(derive_seed(seed, stream, step))
