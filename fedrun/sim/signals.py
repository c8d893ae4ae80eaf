"""Stop at a round boundary on SIGINT / SIGTERM; a second signal of either kind stops at once, as a
KeyboardInterrupt, so the run is still recorded KILLED and a half-written checkpoint is removed."""

from __future__ import annotations

import signal
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from fedrun.errors import FedrunError
from fedrun.sim.sweep import stop_requested


class AbortedBeforeStart(KeyboardInterrupt):
    """Ctrl-C while the data was loading or the method was being built: no run was recorded."""


class Interrupted(FedrunError):
    """The run stopped at a round boundary on a signal, after writing a checkpoint."""

    def __init__(self, signal_name: str, rounds_done: int, checkpoint: Path | None):
        self.signal_name = signal_name
        resume = f"; resume with sim.resume={checkpoint}" if checkpoint else ""
        super().__init__(f"stopped by {signal_name} after round {rounds_done}{resume}")


class StopRequest:
    def __init__(self, stop_file: Path | None = None) -> None:
        self.signal: str | None = None
        self.stop_file = stop_file  # a sweep's stop marker (``fedrun.sim.sweep``), checked like a signal

    @property
    def requested(self) -> bool:
        if self.signal is None and self.stop_file is not None:
            self.signal = stop_requested(self.stop_file)
        return self.signal is not None


@contextmanager
def graceful_stop(stop_file: Path | None = None) -> Iterator[StopRequest]:
    """Within the block, the first SIGINT/SIGTERM only sets ``request.signal``; so does a stop of the
    sweep this run belongs to (``stop_file``), seen at the next round boundary."""
    request = StopRequest(stop_file)
    if threading.current_thread() is not threading.main_thread():
        yield request
        return

    def handler(signum, frame):
        request.signal = signal.Signals(signum).name
        print(f"\nfedrun: {request.signal} received: stopping after this round and writing a checkpoint "
              "(press Ctrl-C again to abort now).", file=sys.stderr, flush=True)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, _interrupt_now)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield request
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _interrupt_now(signum, frame):
    raise KeyboardInterrupt(f"second {signal.Signals(signum).name}")
