"""Seeded random streams. Every draw comes from a generator derived from (seed, stream, step),
so a round's randomness does not depend on what ran before it (reproducible, resumable)."""

from __future__ import annotations

import sys
import zlib

import numpy as np
import torch
import torch.utils.deterministic


def derive_seed(seed: int, stream: str, step: int = 0) -> int:
    entropy = [seed & 0xFFFFFFFF, zlib.crc32(stream.encode()), step & 0xFFFFFFFF]
    return int(np.random.SeedSequence(entropy).generate_state(1, dtype=np.uint64)[0] >> 1)


def generator(seed: int, stream: str, step: int = 0, device: torch.device | str = "cpu") -> torch.Generator:
    return torch.Generator(device=device).manual_seed(derive_seed(seed, stream, step))


def reproducible_on(device: torch.device) -> None:
    """Same config and seeds → the same numbers on the CPU, at any thread count.

    With more than one thread, torch's CPU index backward (``index_put_`` with accumulate, behind every
    ``table[rows]`` a loss uses) adds the rows' gradients in whatever order the threads reach them: two
    centralized MF epochs on ml-100k with 2 threads ended at tables that differ in the 7th digit. Torch's
    deterministic algorithms sort instead; on one thread they give the same numbers as before, bit for bit.
    CUDA keeps its fast atomics: there runs agree with the CPU in their metrics, not to the bit
    (``scripts/checks/device_check.py``), and the switch is turned off again for a CUDA run in the same process.
    The mode's debugging aid, filling every new uninitialised tensor with NaN, stays off: it changes no result
    and cost 4 % of a SimGCL batch (profiled: 3,632 fills per 10 batches instead of 685)."""
    deterministic_algorithms(device.type == "cpu")
    torch.utils.deterministic.fill_uninitialized_memory = False  # type: ignore[attr-defined]  # (absent from stubs)


def deterministic_algorithms(mode: bool) -> None:
    """``torch.use_deterministic_algorithms(mode)`` without importing the compiler it also configures.

    Torch's switch is one flag in its core plus ``torch._inductor.config.deterministic``, whose import pulls in
    the whole compiler stack (1.1 s of a quick run, measured with ``python -X importtime``). fedrun never
    compiles: the core flag is what its kernels read, and the compiler's setting follows when something else
    has already loaded it."""
    set_core_flag = getattr(torch._C, "_set_deterministic_algorithms", None)
    if set_core_flag is None:  # a torch without the private switch: the public one, import and all
        torch.use_deterministic_algorithms(mode)
        return
    set_core_flag(mode, warn_only=False)
    compiler = sys.modules.get("torch._inductor.config")
    if compiler is not None:
        compiler.deterministic = mode  # type: ignore[attr-defined]  # the config module declares its settings dynamically
