"""MLflow tracking with an embedded SQLite store under ``outputs/`` by default.

``MLFLOW_TRACKING_URI`` (or ``track.uri``) points at a team server instead. Per-round
metrics are buffered and sent with ``log_batch`` (each SQLite call costs milliseconds);
names never contain ``@`` (``ndcg_at_10``). A failed or interrupted run ends FAILED or
KILLED with the reason in the ``fedrun.failure_reason`` tag; resuming it moves that reason to
``fedrun.earlier_stops`` (oldest first), so a run that then finishes carries no failure reason.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import logging
import os
import shutil
import sqlite3
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedrun.core.interrupts import interrupts_deferred
from fedrun.errors import ConfigError, FedrunError, check
from fedrun.track.base import Tracker
from fedrun.track.liveness import SWEEP_OWNER, gone_reason, owner_tags

SWEEP_PARENTS = ".fedrun-parents.json"  # in a sweep's folder: its parent run per experiment
MAX_BATCH = 1000  # MLflow's limit of metrics per log_batch call
MAX_PARAMS = 100  # ... and of params
CHECKPOINT_DIR = "checkpoint"
MAX_NAME = 256  # MLflow's experiment names: a 256-character column in its SQL stores
FAILURE_REASON = "fedrun.failure_reason"  # why a FAILED or KILLED run stopped
EARLIER_STOPS = "fedrun.earlier_stops"  # a resumed run's earlier stops, one per line


@dataclass
class MlflowConfig:
    uri: str | None = None  # tracking URI; default $MLFLOW_TRACKING_URI or sqlite:///outputs/mlflow.db
    experiment: str | None = None  # default: the experiment preset's name, else the dataset's
    flush_every: int = 200  # buffered metric values before a log_batch call

    def __post_init__(self) -> None:
        check(self.flush_every >= 1, "flush_every", self.flush_every, "an integer >= 1")
        check_experiment_name("track.experiment", self.experiment)


def check_experiment_name(field: str, name: object) -> None:
    """An experiment name the store can hold (MLflow's SQL stores keep 256 characters)."""
    check(name is None or len(str(name)) <= MAX_NAME, field, name, f"a name of at most {MAX_NAME} characters")


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


def default_uri() -> str:
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    outputs = Path("outputs").resolve()
    outputs.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{outputs / 'mlflow.db'}"


class Mlflow(Tracker):
    Config = MlflowConfig

    def __init__(self, config: MlflowConfig):
        super().__init__(config)
        self.uri = config.uri or default_uri()
        check_store(self.uri, "track.uri" if config.uri else "MLFLOW_TRACKING_URI")  # before any data is read
        self.client = None
        self._run_id: str | None = None
        self.experiment_id: str | None = None
        self._buffer: list[Any] = []

    def start(self, experiment: str, run_name: str, params: dict[str, Any], tags: dict[str, str]) -> None:
        from mlflow.entities import Param

        with store_call(self.uri, "creating the run", hint="Nothing was trained."):
            self.client = self._client()
            self.experiment_id = experiment_id(self.client, experiment)
            end_abandoned_runs(self.client, self.experiment_id)
            run = self.client.create_run(self.experiment_id, run_name=run_name,
                                         tags={"mlflow.runName": run_name, **tags, **owner_tags()})
            self._run_id = run.info.run_id
            items = [Param(k, str(v)[:6000]) for k, v in params.items()]
            for start in range(0, len(items), MAX_PARAMS):
                self.client.log_batch(self._run_id, params=items[start:start + MAX_PARAMS])

    def sweep_parent(self, experiment: str, sweep_dir: str, overrides: list[str]) -> str | None:
        """One parent run per (sweep folder, experiment), its id kept in ``<sweep>/.fedrun-parents.json`` under a
        lock (parallel jobs start together). The parent holds the sweep's overrides; ``StopOnSignal`` ends it."""
        import json

        registry = Path(sweep_dir) / SWEEP_PARENTS
        registry.parent.mkdir(parents=True, exist_ok=True)
        with open(registry.with_suffix(".lock"), "w") as lock, store_call(self.uri, "creating the sweep's run"):
            fcntl.flock(lock, fcntl.LOCK_EX)
            known = json.loads(registry.read_text()) if registry.exists() else {}
            if experiment not in known:
                client = self._client()
                name = f"sweep {Path(sweep_dir).name}"
                owner = Path(sweep_dir) / SWEEP_OWNER  # the Hydra parent, which outlives every job
                run = client.create_run(experiment_id(client, experiment), run_name=name,
                                        tags={"mlflow.runName": name, "fedrun.kind": "sweep",
                                              "fedrun.sweep": str(sweep_dir),
                                              **(json.loads(owner.read_text()) if owner.exists() else {})})
                client.log_param(run.info.run_id, "overrides", " ".join(overrides)[:6000])
                known[experiment] = {"run_id": run.info.run_id, "uri": self.uri}
                registry.write_text(json.dumps(known))
            return known[experiment]["run_id"]

    @property
    def run_id(self) -> str | None:
        return self._run_id

    def _client(self):
        if self.client is None:
            self.client = open_client(self.uri)
        return self.client

    def resume(self, run_id: str) -> bool:
        from mlflow.exceptions import MlflowException

        with store_call(self.uri, "reopening the run to resume it", hint=REOPEN_HINT):
            client = self._client()
            try:
                run = client.get_run(run_id)
            except MlflowException as err:
                if err.error_code != "RESOURCE_DOES_NOT_EXIST":
                    raise  # a store that fails is not a run that is gone
                return False
            if run.info.status == "FINISHED":
                return False  # never reopened: its results stay as recorded, the continuation is a new run
            client.update_run(run_id, status="RUNNING")
            tags = {"fedrun.resumed": "true", **owner_tags()}
            stop = run.data.tags.get(FAILURE_REASON)
            if stop:  # it runs again: the stop is history, not the reason a finished run failed
                earlier = run.data.tags.get(EARLIER_STOPS)
                tags[EARLIER_STOPS] = (stop if not earlier else f"{earlier}\n{stop}")[-5000:]
                client.delete_tag(run_id, FAILURE_REASON)
            for key, value in tags.items():
                client.set_tag(run_id, key, value)
        self._run_id, self.experiment_id = run_id, run.info.experiment_id
        return True

    def fetch_checkpoint(self, run_id: str) -> Path:
        import tempfile

        from mlflow.exceptions import MlflowException

        from fedrun.errors import ConfigError

        try:
            local = self._client().download_artifacts(run_id, f"{CHECKPOINT_DIR}/checkpoint.pt",
                                                      tempfile.mkdtemp(prefix="fedrun-resume-"))
        except (MlflowException, OSError):
            raise ConfigError("sim.resume", run_id, f"a checkpoint path, or the id of an MLflow run in {self.uri} "
                              "that logged a checkpoint") from None
        return Path(local)

    def log_checkpoint(self, path: Path) -> None:
        if self.client is not None and self._run_id is not None:
            with store_call(self.uri, "storing the checkpoint"):
                self.client.log_artifact(self._run_id, str(path), CHECKPOINT_DIR)

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self._buffer.extend(Metric(k, float(v), now, step) for k, v in metrics.items())
        if len(self._buffer) >= self.config.flush_every:
            self.flush()

    def flush(self) -> None:
        if self._run_id is None or not self._buffer:
            return
        with store_call(self.uri, "logging metrics"):
            for start in range(0, len(self._buffer), MAX_BATCH):
                self.client.log_batch(self._run_id, metrics=self._buffer[start:start + MAX_BATCH])
        self._buffer = []

    def log_artifact(self, path: Path) -> None:
        if self._run_id is not None:
            with store_call(self.uri, f"storing {path.name}"):
                self.client.log_artifact(self._run_id, str(path))

    def set_tags(self, tags: dict[str, str]) -> None:
        with store_call(self.uri, "setting tags"):
            for key, value in tags.items() if self._run_id is not None else ():
                self.client.set_tag(self._run_id, key, value)

    def metric_history(self, keys: list[str]) -> dict[str, list[tuple[int, float]]]:
        if self._run_id is None:
            return {}
        self.flush()
        with store_call(self.uri, "reading the metric history"):
            logged = self.client.get_run(self._run_id).data.metrics
            return {key: [(m.step, m.value) for m in sorted(self.client.get_metric_history(self._run_id, key),
                                                            key=lambda m: m.step)]
                    for key in keys if key in logged}

    def log_dataset(self, name: str, digest: str, source: str, profile: dict[str, Any]) -> None:
        if self._run_id is None:
            return
        import json

        from mlflow.entities import Dataset, DatasetInput, InputTag

        dataset = Dataset(name=name, digest=digest[:36], source_type="local", source=json.dumps({"uri": source}),
                          profile=json.dumps(profile))
        with store_call(self.uri, "recording the dataset"):
            self.client.log_inputs(self._run_id, datasets=[
                DatasetInput(dataset, tags=[InputTag(key="mlflow.data.context", value="training")])])

    def log_table(self, columns: dict[str, list], name: str) -> None:
        if self._run_id is None:
            return
        import pandas as pd

        with store_call(self.uri, f"storing the table {name}"):
            self.client.log_table(self._run_id, data=pd.DataFrame(columns), artifact_file=name)

    def finish(self, status: str, reason: str | None = None) -> None:
        if self._run_id is None:
            return
        if status != "FINISHED" and self.uri.startswith("sqlite:"):
            close_reads_cut_short()
        self.flush()
        with store_call(self.uri, f"marking the run {status}"):
            if reason:
                self.client.set_tag(self._run_id, FAILURE_REASON, reason[:5000])
            self.client.set_terminated(self._run_id, status=status)

    def link(self) -> str | None:
        if self._run_id is None:
            return None
        return (f"MLflow run {self._run_id}: `mlflow ui --backend-store-uri {self.uri}`, then the runs table at "
                f"http://127.0.0.1:5000/#/experiments/{self.experiment_id}/runs")


PROBE_SECONDS = 5  # a tracking server must answer its health check within this


SQL_STORES = ("postgresql", "mysql", "mssql")  # SQLAlchemy URIs MLflow takes, with an optional +driver
MIN_FREE_BYTES = 1 << 20  # a SQLite store's disk must have this much room for a run's records


def check_store(uri: str, field: str) -> None:
    """Fail fast, in one line naming the URI, when the tracking store cannot take a run: a scheme MLflow cannot
    track to, a server that does not answer within ``PROBE_SECONDS`` (MLflow's own client would retry for
    minutes), a SQLite file that is not writable, not a database or on a full disk. A server that answers gets
    MLflow's HTTP retries bounded."""
    scheme = uri.split("://", 1)[0].split("+", 1)[0] if "://" in uri else ""
    if scheme not in ("http", "https", "sqlite", *SQL_STORES):
        raise ConfigError(field, uri, "a tracking URI MLflow 3 records runs in: sqlite:///<path>, http(s)://<server> "
                          f"or a database ({', '.join(s + '://...' for s in SQL_STORES)}); a folder (the file "
                          "store) is refused by MLflow 3")
    if uri.startswith(("http://", "https://")):
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")
        try:
            urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=PROBE_SECONDS).close()
        except (OSError, ValueError) as err:  # URLError, refused, timed out, malformed
            raise ConfigError(field, uri, f"a tracking server that answers within {PROBE_SECONDS} s (it did not: "
                              f"{getattr(err, 'reason', err)}); or unset it for the local SQLite store") from None
    elif uri.startswith("sqlite:///"):
        database = Path(uri[len("sqlite:///"):])
        if database.parent.is_dir() and shutil.disk_usage(database.parent).free < MIN_FREE_BYTES:
            free = shutil.disk_usage(database.parent).free
            raise ConfigError(field, uri, f"a SQLite store on a disk with room for the run's records (its disk has "
                              f"{free} bytes free; at least {MIN_FREE_BYTES} needed)")
        if database.exists():
            if not os.access(database, os.W_OK):
                raise ConfigError(field, uri, "a SQLite store this user can write (the file is read-only)")
            try:
                with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=5)) as db:
                    db.execute("PRAGMA schema_version").fetchone()
            except sqlite3.DatabaseError as err:
                raise ConfigError(field, uri, f"an MLflow SQLite store (this file is not one: {err})") from None
        else:
            try:
                database.parent.mkdir(parents=True, exist_ok=True)  # where the store will be created anyway
            except OSError as err:
                raise ConfigError(field, uri, f"a SQLite store in a folder this user can create ({err})") from None


def sweep_parents(sweep_dir: str | Path) -> list[dict[str, str]]:
    """The sweep's parent runs, one per experiment its jobs used: ``{"uri": ..., "run_id": ...}`` each."""
    import json

    registry = Path(sweep_dir) / SWEEP_PARENTS
    return list(json.loads(registry.read_text()).values()) if registry.exists() else []


def end_sweep_parents(sweep_dir: str | Path, status: str) -> None:
    """Mark the sweep's parent runs ``status`` (the Hydra parent, at the end)."""
    for entry in sweep_parents(sweep_dir):
        with store_call(entry["uri"], "ending the sweep's run"):
            open_client(entry["uri"]).set_terminated(entry["run_id"], status=status)


def end_orphaned_jobs(sweep_dir: str | Path, reason: str) -> int:
    """Mark KILLED, with ``reason``, every run of the sweep still RUNNING after its launcher gave up on it (a
    job process killed before it could record its end); the number of runs so marked."""
    ended = 0
    for entry in sweep_parents(sweep_dir):
        with store_call(entry["uri"], "ending the sweep's unfinished runs"):
            client = open_client(entry["uri"])
            parent = client.get_run(entry["run_id"])
            children = client.search_runs([parent.info.experiment_id],
                                          f"tags.mlflow.parentRunId = '{entry['run_id']}' and attributes.status = "
                                          "'RUNNING'")
            for run in children:
                client.set_tag(run.info.run_id, FAILURE_REASON, reason)
                client.set_terminated(run.info.run_id, status="KILLED")
                ended += 1
    return ended


def end_abandoned_runs(client, experiment: str) -> list[str]:
    """Mark KILLED, with the reason, the runs of ``experiment`` still RUNNING whose process on this machine is
    gone (``fedrun.track.liveness``); the names of the runs so marked, each also logged. Tidying others' runs
    never stops this one: a store that fails here is reported in one line and the run goes on."""
    try:
        return _end_abandoned_runs(client, experiment)
    except Exception as err:  # MlflowException, SQL errors, an artifact store that does not answer
        logging.getLogger("fedrun").warning("Could not check this experiment's runs left RUNNING: %s",
                                            str(err).strip().splitlines()[0][:300] if str(err).strip() else
                                            type(err).__name__)
        return []


def _end_abandoned_runs(client, experiment: str) -> list[str]:
    ended = []
    for run in client.search_runs([experiment], "attributes.status = 'RUNNING'", max_results=1000):
        gone = gone_reason(run.data.tags)
        if gone is None:
            continue
        has_checkpoint = bool(client.list_artifacts(run.info.run_id, CHECKPOINT_DIR))
        resume = (f"resume it with sim.resume={run.info.run_id}" if has_checkpoint else
                  "it logged no checkpoint (sim.checkpoint_every) to resume from")
        reason = f"abandoned: {gone}; found by the next run in this experiment; {resume}"
        client.set_tag(run.info.run_id, FAILURE_REASON, reason)
        client.set_terminated(run.info.run_id, status="KILLED")
        name = run.data.tags.get("mlflow.runName", run.info.run_id)
        logging.getLogger("fedrun").warning("Run %r (%s) was left RUNNING and is now marked KILLED: %s", name,
                                            run.info.run_id, reason)
        ended.append(name)
    return ended


def open_client(uri: str):
    """An ``MlflowClient`` on ``uri``; a SQLite store is opened under an exclusive lock beside it.

    Opening a store that does not exist yet creates its schema; two processes doing it at once
    (two runs started together, a joblib sweep on a fresh ``outputs/``) both migrate and one
    fails with ``duplicate column name``. Other URIs (a tracking server) need no lock.
    """
    from mlflow.tracking import MlflowClient

    logging.getLogger("mlflow").setLevel(logging.WARNING)  # after mlflow's import-time setup: no chatter
    with store_lock(uri):
        return MlflowClient(uri)  # opens the store: creates and migrates a new SQLite file


@contextlib.contextmanager
def store_lock(uri: str) -> Iterator[None]:
    """Exclusive lock on ``<database>.lock`` beside a SQLite store; no lock for other URIs."""
    if not uri.startswith("sqlite:///"):
        yield
        return
    database = Path(uri[len("sqlite:///"):])
    database.parent.mkdir(parents=True, exist_ok=True)
    with open(database.with_name(database.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        yield


def experiment_id(client, name: str) -> str:
    """The id of experiment ``name``, created (with artifacts under outputs/) if missing."""
    from mlflow.exceptions import MlflowException

    existing = client.get_experiment_by_name(name)
    if existing is not None:
        return existing.experiment_id
    location = None
    if client.tracking_uri.startswith("sqlite:///"):
        root = Path(client.tracking_uri[len("sqlite:///"):]).parent / "mlartifacts" / name
        location = root.resolve().as_uri()
    try:
        return client.create_experiment(name, artifact_location=location)
    except MlflowException:  # created meanwhile by a parallel sweep job, or the store refused it
        created = client.get_experiment_by_name(name)
        if created is None:
            raise
        return created.experiment_id
