"""The process heap: keep freed memory for the next round instead of handing it back to the OS.

A round allocates and frees the same large temporaries every time (a bucket's local item table is
megabytes). glibc's malloc serves blocks above its mmap threshold (128 KiB, rising adaptively to at most
32 MiB) with fresh ``mmap``s and returns the heap's free top to the OS past its trim threshold, so each
round faults the same pages in again: on W0 that was a quarter of the general round and a fifth of the
fast path (docs/benchmarks.md, "The general round at the fast path's heels"). ``keep_freed_memory``
raises both thresholds once per process (``mallopt``), so freed blocks are reused; peak memory is
unchanged, the heap just does not shrink between rounds. Results do not depend on it (allocation never
changes a value).

``FEDRUN_HEAP=release`` keeps glibc's own behaviour (e.g. many parallel jobs that each peak briefly).
Elsewhere than glibc (macOS, musl) it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h
MMAP_THRESHOLD_MAX = 32 << 20  # glibc's ceiling on 64-bit: larger blocks are always mmapped
TRIM_THRESHOLD = 1 << 30  # free heap top kept before any is returned

_done = False


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds once per process; whether they are now raised."""
    global _done
    if _done:
        return True
    if os.environ.get("FEDRUN_HEAP", "keep") == "release":
        return False
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        libc = None
    mallopt = getattr(libc, "mallopt", None) if libc is not None else None
    if mallopt is None or not hasattr(libc, "gnu_get_libc_version"):
        return False
    _done = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    return _done
