"""Stop at a round boundary on SIGINT / SIGTERM; a second Ctrl-C stops at once."""

from __future__ import annotations

import signal
import sys
import threading
from contextlib import contextmanager
from typing import Iterator


class StopRequest:
    def __init__(self) -> None:
        self.signal: str | None = None

    @property
    def requested(self) -> bool:
        return self.signal is not None


@contextmanager
def graceful_stop() -> Iterator[StopRequest]:
    """Within the block, the first SIGINT/SIGTERM only sets ``request.signal``."""
    request = StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield request
        return

    def handler(signum, frame):
        request.signal = signal.Signals(signum).name
        print(f"\nfedrun: {request.signal} received: stopping after this round and writing a checkpoint "
              "(press Ctrl-C again to abort now).", file=sys.stderr, flush=True)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield request
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


@contextmanager
def interrupts_ignored() -> Iterator[None]:
    """Within the block, SIGINT is ignored: recording a run's final status must not be cut
    short by a further Ctrl-C (that left stopped runs RUNNING in MLflow)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
