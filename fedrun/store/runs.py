"""The runs of a tracking store: where the store is, checking it before a run, opening a client, finding
experiments, the parent runs of a sweep, and ending the runs a sweep or a dead job left open. The tags that
say why a run stopped are named here, for the tracker and the reports alike."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import sqlite3
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from fedrun.errors import ConfigError, check
from fedrun.store.calls import store_call
from fedrun.store.liveness import gone_reason

SWEEP_PARENTS = ".fedrun-parents.json"  # in a sweep's folder: its parent run per experiment
RESUMES_FILE = ".fedrun-resumes"  # in a resumed sweep's folder: the folder of the sweep it continues
MAX_BATCH = 1000  # MLflow's limit of metrics per log_batch call
MAX_PARAMS = 100  # ... and of params
CHECKPOINT_DIR = "checkpoint"
MAX_NAME = 256  # MLflow's experiment names: a 256-character column in its SQL stores
FAILURE_REASON = "fedrun.failure_reason"  # why a FAILED or KILLED run stopped
EARLIER_STOPS = "fedrun.earlier_stops"  # a resumed run's earlier stops, one per line
RESUMED_FROM = "fedrun.resumed_from"  # a continuation recorded as a new run (its params changed): the run it resumed
RESUMES = "fedrun.resumes"  # a resumed sweep's run: the folder of the sweep it continues (fedrun.sim.search)


def check_experiment_name(field: str, name: object) -> None:
    """An experiment name the store can hold (MLflow's SQL stores keep 256 characters)."""
    check(name is None or len(str(name)) <= MAX_NAME, field, name, f"a name of at most {MAX_NAME} characters")



def default_uri() -> str:
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    outputs = Path("outputs").resolve()
    outputs.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{outputs / 'mlflow.db'}"



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
        raise ConfigError(field, hide_password(uri), "a tracking URI MLflow 3 records runs in: sqlite:///<path>, "
                          f"http(s)://<server> or a database ({', '.join(s + '://...' for s in SQL_STORES)}); a "
                          "folder (the file store) is refused by MLflow 3")
    if uri.startswith(("http://", "https://")):
        bound_http_retries(uri)
        try:
            urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=PROBE_SECONDS).close()
        except (OSError, ValueError) as err:  # URLError, refused, timed out, malformed
            raise ConfigError(field, uri, f"a tracking server that answers within {PROBE_SECONDS} s (it did not: "
                              f"{getattr(err, 'reason', err)}); or unset it for the local SQLite store") from None
    elif scheme in SQL_STORES:
        check_database(uri, field)
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


def bound_http_retries(uri: str) -> None:
    """A tracking server that stops answering costs seconds, not MLflow's default of 7 retries backing off to two
    minutes each (a sweep's parent, ending its run against a dead server, waited 8 minutes). A user's own
    ``MLFLOW_HTTP_REQUEST_*`` settings win."""
    if uri.startswith(("http://", "https://")):
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")


def check_database(uri: str, field: str) -> None:
    """A database URI (MLflow's SQL store, used without a server): its driver importable, then one connection
    within ``PROBE_SECONDS``, so a missing driver, a wrong password and an unreachable host each fail in one line
    before any data is read. The password is never shown."""
    from sqlalchemy import create_engine
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError, SQLAlchemyError
    from sqlalchemy.pool import NullPool

    try:
        url = make_url(uri)
        dialect = url.get_dialect()
    except (ArgumentError, NoSuchModuleError, ValueError) as err:
        raise ConfigError(field, hide_password(uri), f"a database URI SQLAlchemy reads ({err})") from None
    shown = url.render_as_string(hide_password=True)
    try:
        dialect.import_dbapi()
    except ImportError as err:
        remedy = ("`pip install 'fedrun[tracking]'` installs psycopg, PostgreSQL's driver"
                  if url.get_backend_name() == "postgresql" else f"install the {url.get_backend_name()} driver")
        raise ConfigError(field, shown, f"a database URI whose driver is installed (no module {err.name!r}: "
                          f"{remedy})") from None
    timeout = {"connect_timeout": PROBE_SECONDS} if url.get_backend_name() in ("postgresql", "mysql") else {}
    engine = create_engine(url, connect_args=timeout, poolclass=NullPool)
    try:
        with engine.connect():
            pass
    except SQLAlchemyError as err:
        reason = " ".join(str(getattr(err, "orig", None) or err).split())  # the driver's message, on one line
        raise ConfigError(field, shown, f"a database this user can connect to within {PROBE_SECONDS} s (it did not: "
                          f"{reason})") from None
    finally:
        engine.dispose()


def hide_password(uri: str) -> str:
    """``uri`` with the password of its ``user:password@`` part replaced by ``***``."""
    import re

    return re.sub(r"(://[^/:@]*:)[^@/]*@", r"\1***@", uri)


def sweep_parents(sweep_dir: str | Path) -> list[dict[str, str]]:
    """The sweep's parent runs, one per experiment its jobs used: ``{"uri": ..., "run_id": ...}`` each."""
    import json

    registry = Path(sweep_dir) / SWEEP_PARENTS
    return list(json.loads(registry.read_text()).values()) if registry.exists() else []


def end_sweep_parents(sweep_dir: str | Path, status: str, reason: str | None = None) -> None:
    """Mark the sweep's parent runs ``status`` (the Hydra parent, at the end), with ``reason`` where given."""
    for entry in sweep_parents(sweep_dir):
        with store_call(entry["uri"], "ending the sweep's run"):
            client = open_client(entry["uri"])
            if reason is not None:
                client.set_tag(entry["run_id"], FAILURE_REASON, reason)
            client.set_terminated(entry["run_id"], status=status)


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


def end_abandoned_runs(client, experiment: str, found_by: str = "the next run in this experiment") -> list[str]:
    """Mark KILLED, with the reason, the runs of ``experiment`` (an id) still RUNNING whose process on this machine
    is gone (``fedrun.store.liveness``); the names of the runs so marked, each also logged. ``found_by``: who
    noticed, for the reason. Tidying others' runs never stops this one (a run, a report): a store that fails here
    is reported in one line and the caller goes on."""
    try:
        return _end_abandoned_runs(client, experiment, found_by)
    except Exception as err:  # MlflowException, SQL errors, an artifact store that does not answer
        logging.getLogger("fedrun").warning("Could not check this experiment's runs left RUNNING: %s",
                                            str(err).strip().splitlines()[0][:300] if str(err).strip() else
                                            type(err).__name__)
        return []


def _end_abandoned_runs(client, experiment: str, found_by: str) -> list[str]:
    ended = []
    for run in client.search_runs([experiment], "attributes.status = 'RUNNING'", max_results=1000):
        gone = gone_reason(run.data.tags)
        if gone is None:
            continue
        has_checkpoint = bool(client.list_artifacts(run.info.run_id, CHECKPOINT_DIR))
        resume = (f"resume it with sim.resume={run.info.run_id}" if has_checkpoint else
                  "it logged no checkpoint (sim.checkpoint_every) to resume from")
        reason = f"abandoned: {gone}; found by {found_by}; {resume}"
        client.set_tag(run.info.run_id, FAILURE_REASON, reason)
        client.set_terminated(run.info.run_id, status="KILLED")
        name = run.data.tags.get("mlflow.runName", run.info.run_id)
        logging.getLogger("fedrun").warning("Run %r (%s) was left RUNNING and is now marked KILLED: %s", name,
                                            run.info.run_id, reason)
        ended.append(name)
    return ended


class WithoutTraceback(logging.Filter):
    """A store library's record as one line: fedrun names a failing store itself (``TrackingError``), so the
    library's traceback of the same failure is not printed at the user."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        return True


def quiet_store_libraries() -> None:
    """MLflow at WARNING and without tracebacks (after its import-time setup: the filter sits on its handlers, which
    its child loggers' records reach); SQLAlchemy and Alembic, which printed a full disk's tracebacks through the
    root's handlers, silenced: every store failure reaches the user as fedrun's one ``TrackingError`` line."""
    for name, level in (("mlflow", logging.WARNING), ("sqlalchemy", logging.CRITICAL), ("alembic", logging.CRITICAL)):
        library = logging.getLogger(name)
        library.setLevel(level)
        for target in (library, *library.handlers):
            if not any(isinstance(f, WithoutTraceback) for f in target.filters):
                target.addFilter(WithoutTraceback())


def open_client(uri: str):
    """An ``MlflowClient`` on ``uri``; a SQLite store is opened under an exclusive lock beside it.

    Opening a store that does not exist yet creates its schema; two processes doing it at once
    (two runs started together, a joblib sweep on a fresh ``outputs/``) both migrate and one
    fails with ``duplicate column name``. Other URIs (a tracking server) need no lock.
    """
    from mlflow.tracking import MlflowClient

    quiet_store_libraries()
    bound_http_retries(uri)
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


# MLflow 3's UI opens an experiment of unknown kind on its GenAI view (traces, evaluations); this experiment tag,
# which its own "experiment type" selector writes, opens it on the runs table with their metrics and charts
EXPERIMENT_KIND = {"mlflow.experimentKind": "custom_model_development"}


def experiment_id(client, name: str) -> str:
    """The id of experiment ``name``, created (with artifacts under outputs/, and marked a model-training experiment
    so that MLflow's UI opens it on its runs: ``EXPERIMENT_KIND``) if missing."""
    from mlflow.exceptions import MlflowException

    existing = client.get_experiment_by_name(name)
    if existing is not None and existing.lifecycle_stage == "deleted":  # MLflow keeps the name, refuses new runs
        raise ConfigError("experiment_name", name, f"an experiment name that is not deleted in "
                          f"{hide_password(client.tracking_uri)}: restore it (`mlflow experiments restore "
                          f"--experiment-id {existing.experiment_id}` with MLFLOW_TRACKING_URI set to the store) or "
                          "choose another name")
    if existing is not None:
        return existing.experiment_id
    location = None
    if client.tracking_uri.startswith("sqlite:///"):
        root = Path(client.tracking_uri[len("sqlite:///"):]).parent / "mlartifacts" / name
        location = root.resolve().as_uri()
    try:
        return client.create_experiment(name, artifact_location=location, tags=EXPERIMENT_KIND)
    except MlflowException:  # created meanwhile by a parallel sweep job, or the store refused it
        created = client.get_experiment_by_name(name)
        if created is None:
            raise
        return created.experiment_id
