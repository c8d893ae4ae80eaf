"""Hold SIGINT / SIGTERM for the length of a short call that must not be cut in half."""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Within the block, a SIGINT or SIGTERM waits: it is delivered again, to the handler in place before the
    block, as the block ends. An abort that landed inside a SQLite read left its statement pending, and the
    store's lock with it, so the write marking the run KILLED failed with "database is locked"."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived: list[int] = []

    def remember(signum, frame):
        arrived.append(signum)

    previous = {s: signal.signal(s, remember) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
        for signum in arrived:
            signal.raise_signal(signum)
