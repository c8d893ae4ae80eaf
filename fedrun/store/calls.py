"""Calls into a tracking store: any failure becomes one ``TrackingError`` line naming the store and the
step, and an abort (Ctrl-C, SIGTERM) never leaves a SQLite store locked."""

from __future__ import annotations

import contextlib
import gc
import sqlite3
import sys
from collections.abc import Iterator

from fedrun.core.interrupts import interrupts_deferred
from fedrun.errors import FedrunError


class TrackingError(FedrunError):
    """The tracking store failed during a run (read-only or full SQLite file, a server that went away)."""


REOPEN_HINT = "Nothing was trained and the checkpoint is unchanged: resume again once the store works."
RESUME_HINT = ("The run's last periodic checkpoint (sim.checkpoint_every) can be resumed with sim.resume=<its path> "
               "once the store works again.")


@contextlib.contextmanager
def store_call(uri: str, what: str, hint: str = RESUME_HINT) -> Iterator[None]:
    """Translate any failure of the store into one ``TrackingError`` line naming the store and the step
    (``hint``: what the user can do; by default, resume from the last checkpoint).

    An abort (a second Ctrl-C / SIGTERM, a ``KeyboardInterrupt``) that lands inside the store's call can leave
    a different error behind as the library cleans up (an ``OSError`` "Bad file descriptor" from a copy it cut
    short). That error is the abort's echo, not a failing store: the abort itself goes on, so the run is still
    marked KILLED and the process exits with the signal's code. An abort the caller is already handling (the
    write that marks the run KILLED) is not this call's: a failure there is the store's.

    On a SQLite store a signal waits for the call to end (``interrupts_deferred``): an abort inside a read
    left the store locked against the write that records the run's end."""
    handled = sys.exc_info()[1]
    try:
        with interrupts_deferred() if uri.startswith("sqlite:") else contextlib.nullcontext():
            yield  # a local store's call is short; a server's may wait out a timeout, so Ctrl-C is not held
    except FedrunError:
        raise
    except Exception as err:  # MlflowException, sqlite3 / SQLAlchemy errors, OSError, HTTP errors
        abort = _abort_behind(err, handled)
        if abort is not None:
            raise abort from None
        cause = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise TrackingError(f"The tracking store {uri} failed while {what}: {cause[:300]}." + (f" {hint}" if hint else
                                                                                              "")) from None


def _abort_behind(err: BaseException, handled: BaseException | None) -> KeyboardInterrupt | None:
    """The ``KeyboardInterrupt`` that ``err`` was raised while handling, if any (its implicit context chain),
    short of ``handled``: the exception being handled when the store's call began."""
    seen: set[int] = set()
    cause = err.__context__
    while cause is not None and cause is not handled and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return cause
        seen.add(id(cause))
        cause = cause.__context__
    return None


def close_reads_cut_short() -> None:
    """Close every SQLite cursor still open in this process, before the writes that record a stopped run.

    A second Ctrl-C that lands while MLflow reads the store (SQLAlchemy processing a run's rows) leaves that
    read's cursor open: SQLAlchemy's row-processing closures keep it. A pending SQLite read holds the database's
    shared lock, so the write marking the run KILLED waited out MLflow's 20 s busy timeout and failed with
    "database is locked", leaving the run RUNNING (seen under load, about 1 double Ctrl-C in 30). Once a run
    is aborted or has failed, no read of this process is still in flight (the run loop is single-threaded), and
    each write opens its own cursor."""
    for obj in gc.get_objects():
        if issubclass(type(obj), sqlite3.Cursor):  # type(): isinstance reads __class__, which warns on some objects
            try:
                obj.close()
            except sqlite3.ProgrammingError:  # made in another thread: not a read this run cut short
                pass
