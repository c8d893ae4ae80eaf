"""MLflow's client in a second process, started by the command line before torch loads (issue #66).

``import mlflow`` takes about 2 s on this machine (its GenAI, data and gateway modules load eagerly, pandas with
them) and its SQL store's modules another 1.5 s: all on one core, before a run could record anything, and no
switch of MLflow's turns it off. What may be a single run of ``fedrun`` therefore starts this process (``prestart``)
before Hydra loads (``fedrun.app.entry``); the app ends it unused if the composed config does not record from a
process (``fedrun.app.cli``). The process imports MLflow on another core while the main one composes, imports
torch and loads the data, and the run's ``track=mlflow`` tracker then lives in it:
``Remote`` forwards each call and raises, in the main process and at the same call, every error the store raises.

- Metrics are buffered on the main side and sent in the tracker's own batches (``track.flush_every`` values), each
  with the time it was logged, so a round costs no message and the store keeps the same timestamps.
- The process ignores the signals the run handles (Ctrl-C, SIGTERM): a stopped run is still marked KILLED by the
  main process's tracker. It ends when the main process closes its end of the socket (``close``, at exit, or when
  that process dies).
- Where nothing prestarted it (the Python API, tests, sweep jobs, ranks other than 0) the tracker records in its own
  process, as before; sweep jobs pay MLflow's import once per worker anyway.
"""

from __future__ import annotations

import atexit
import dataclasses
import os
import pickle
import signal
import socket
import subprocess
import sys
import time
import traceback
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from fedrun.core.interrupts import interrupts_deferred
from fedrun.errors import FedrunError
from fedrun.store.calls import TrackingError
from fedrun.track.base import Tracker

IGNORED_SIGNALS = (signal.SIGINT, signal.SIGTERM)  # the run's own (fedrun.sim.signals): the main process handles them
EXIT_WAIT_SECONDS = 30  # at exit, for the process to finish the last call and end


class RecorderGone(TrackingError):
    """The recorder process ended before the run did (killed, or MLflow failed to import: its error is above)."""


class Recorder:
    """The main process's end: one recorder process, any number of trackers in it (by key)."""

    def __init__(self) -> None:
        parent_end, child_end = socket.socketpair()
        package_root = str(Path(__file__).resolve().parents[2])  # the fedrun this process runs, for the child
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_root,
                                                                        os.environ.get("PYTHONPATH")]))}
        self.process = subprocess.Popen([sys.executable, "-m", "fedrun.track.recorder", str(child_end.fileno())],
                                        pass_fds=(child_end.fileno(),), stdin=subprocess.DEVNULL, env=env)
        child_end.close()
        self.connection = Connection(parent_end.detach())
        self.keys = 0
        self.sequence = 0  # of the last call sent
        self.run_ids: dict[int, str | None] = {}  # each tracker's run, as of the last answer
        self.used = False

    def call(self, key: int, name: str, *args: Any) -> Any:
        """``name(*args)`` of tracker ``key`` in the recorder process; its result, or its error raised here.

        A message is sent and read whole (signals wait: ``interrupts_deferred``), but the wait for the answer can be
        cut short by Ctrl-C: the recorder still finishes that call (it ignores the signal), and its answer, numbered,
        is skipped by the next call, which reads on to its own."""
        self.used = True
        self.sequence += 1
        try:
            with interrupts_deferred():
                self.connection.send((self.sequence, key, name, args))
            while True:
                self.connection.poll(None)  # the wait a Ctrl-C may end
                with interrupts_deferred():
                    answered, outcome, value, run_id = self.connection.recv()
                if answered == self.sequence:
                    break
        except (EOFError, OSError):
            code = self.process.poll()
            raise RecorderGone(f"the MLflow recorder process ended (exit status {code}) during '{name}'; its own "
                               "error, if any, is above. track=mlflow records nothing more for this run.") from None
        self.run_ids[key] = run_id
        if outcome == "error":
            raise value
        return value

    def tracker(self, config: Any) -> "Remote":
        self.keys += 1
        return Remote(self, self.keys, config)

    def close(self) -> None:
        """End the process: at once if no run used it (a run refused late), else once it has answered every call."""
        if self.process.poll() is None and not self.used:
            self.process.kill()
        self.connection.close()
        try:
            self.process.wait(timeout=EXIT_WAIT_SECONDS)
        except subprocess.TimeoutExpired:
            self.process.kill()


class Remote(Tracker):
    """A ``track=mlflow`` tracker whose MLflow client lives in the recorder process."""

    Config = type(None)

    def __init__(self, recorder: Recorder, key: int, config: Any):
        super().__init__(config)
        self.recorder, self.key = recorder, key
        self._buffer: list[tuple[dict[str, float], int, int]] = []  # (metrics, step, time logged in ms)
        self._values = 0
        self._opened = False

    def _call(self, name: str, *args: Any) -> Any:
        if not self._opened:  # at its first call, not when built: the data loads while MLflow imports
            self.recorder.call(self.key, "open", self.config)
            self._opened = True
        return self.recorder.call(self.key, name, *args)

    @property
    def run_id(self) -> str | None:
        return self.recorder.run_ids.get(self.key)

    def start(self, experiment: str, run_name: str, params: dict[str, Any], tags: dict[str, str]) -> None:
        self._call("start", experiment, run_name, params, tags)

    def sweep_parent(self, experiment: str, sweep_dir: str, overrides: list[str]) -> str | None:
        return self._call("sweep_parent", experiment, str(Path(sweep_dir).resolve()), overrides)

    def resume(self, run_id: str) -> bool:
        return self._call("resume", run_id)

    def fetch_checkpoint(self, run_id: str) -> Path:
        return self._call("fetch_checkpoint", run_id)

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self._buffer.append(({k: float(v) for k, v in metrics.items()}, step, int(time.time() * 1000)))
        self._values += len(metrics)
        if self._values >= self.config.flush_every:
            self.flush()

    def flush(self) -> None:
        if self._buffer:  # the recorder's tracker owns them from here (a failed send keeps them there, as in-process)
            logged, self._buffer, self._values = self._buffer, [], 0
            self._call("log_logged", logged)
        else:
            self._call("flush")

    def log_artifact(self, path: Path) -> None:
        self._call("log_artifact", Path(path).resolve())

    def set_tags(self, tags: dict[str, str]) -> None:
        self._call("set_tags", tags)

    def metric_history(self, keys: list[str]) -> dict[str, list[tuple[int, float]]]:
        self.flush()
        return self._call("metric_history", keys)

    def log_dataset(self, name: str, digest: str, source: str, profile: dict[str, Any]) -> None:
        self._call("log_dataset", name, digest, source, profile)

    def log_table(self, columns: dict[str, list], name: str) -> None:
        self._call("log_table", columns, name)

    def log_checkpoint(self, path: Path) -> None:
        self._call("log_checkpoint", Path(path).resolve())

    def finish(self, status: str, reason: str | None = None) -> None:
        self.flush()
        self._call("finish", status, reason)

    def link(self) -> str | None:
        return self._call("link")


_recorder: Recorder | None = None


def prestart() -> None:
    """Start this process's recorder (once): the command line calls it for what may be a single run recording to
    MLflow (``fedrun.app.entry``, before Hydra loads), and the app once its config says so."""
    global _recorder
    if _recorder is None:
        _recorder = Recorder()
        atexit.register(_recorder.close)


def end() -> None:
    """End this process's recorder, used or not: its run is over (``fedrun.app.cli``)."""
    global _recorder
    if _recorder is not None:
        _recorder.close()
        atexit.unregister(_recorder.close)
        _recorder = None


def discard() -> None:
    """End this process's recorder if no run has used it (the config turned out not to record from a process)."""
    if _recorder is not None and not _recorder.used:
        end()


def remote_or_local(tracker: Tracker) -> Tracker:
    """``tracker`` moved into the prestarted recorder process where there is one and it is MLflow's, else itself."""
    from fedrun.track.mlflow import Mlflow

    if _recorder is None or type(tracker) is not Mlflow:
        return tracker
    return _recorder.tracker(dataclasses.replace(tracker.config, uri=tracker.uri))  # the URI resolved here


# ---------------------------------------------------------------------------------------------- the recorder process

def portable(err: BaseException) -> BaseException:
    """``err`` if it survives pickling both ways, else the same message as an error of the main side's kind."""
    try:
        pickle.loads(pickle.dumps(err))
        return err
    except Exception:
        if isinstance(err, FedrunError):
            return TrackingError(str(err))
        trace = "".join(traceback.format_exception(type(err), err, err.__traceback__)).strip()  # err's, not pickle's
        return RuntimeError(f"the MLflow recorder process failed:\n{trace}")


def serve(connection: Connection) -> None:
    """Answer calls until the main process closes its end: each a (number, tracker key, method, arguments), each
    answer a (the call's number, outcome, value, the tracker's run id)."""
    import mlflow.store.tracking.sqlalchemy_store  # noqa: F401  (MLflow and its SQL store: while torch loads there)

    from fedrun.track.mlflow import Mlflow

    trackers: dict[int, Mlflow] = {}
    while True:
        try:
            sequence, key, name, args = connection.recv()
        except EOFError:
            return
        try:
            if name == "open":
                trackers[key] = Mlflow(*args)
                result = None
            else:
                result = getattr(trackers[key], name)(*args)
            reply = ("ok", result)
        except BaseException as err:  # every error goes back to the call that caused it
            reply = ("error", portable(err))
        connection.send((sequence, *reply, trackers[key].run_id if key in trackers else None))


def main() -> None:
    for sig in IGNORED_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    serve(Connection(int(sys.argv[1])))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # every call is answered and every write committed: skip unloading MLflow's modules (~1.5 s)


if __name__ == "__main__":
    main()
