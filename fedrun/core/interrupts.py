"""Hold SIGINT / SIGTERM for the length of a short call that must not be cut in half."""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Iterator

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def _stop_signals_handled_by(handler) -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM go to ``handler``; the previous handlers come back as it ends.
    Off the main thread (where Python cannot set handlers) the block runs unchanged."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, handler) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


@contextmanager
def interrupts_ignored() -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM are ignored: recording a run's final status must not be cut
    short by a further signal (that left stopped runs RUNNING in MLflow)."""
    with _stop_signals_handled_by(signal.SIG_IGN):
        yield


@contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Within the block, a SIGINT or SIGTERM waits: it is delivered again, to the handler in place before the
    block, as the block ends. An abort that landed inside a SQLite read left its statement pending, and the
    store's lock with it, so the write marking the run KILLED failed with "database is locked"."""
    arrived: list[int] = []
    try:
        with _stop_signals_handled_by(lambda signum, frame: arrived.append(signum)):
            yield
    finally:
        for signum in arrived:
            signal.raise_signal(signum)
