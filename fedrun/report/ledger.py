"""A run ledger: an experiment's runs as a CSV file that outlives the MLflow store.

The SQLite store lives under ``outputs/``, which git ignores: a reproduction that spans
sessions or machines loses the earlier runs with it. ``fedrun-report <exp> --ledger runs.csv``
merges the ledger's runs with the store's (a run id in both: the store's copy counts),
tabulates them all, and writes the merged ledger back. One row per run: its id, status,
start time and failure reason, every parameter, and the last value of every metric.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

RUN_COLUMNS = ["run_id", "status", "start_time", "reason"]


def normalize(frame: pd.DataFrame) -> pd.DataFrame:
    """One spelling of "not set" for parameters (NaN, never the empty string), so that a run
    read back from the ledger groups with the same run read from the store."""
    params = [c for c in frame.columns if c.startswith("param:")]
    frame = frame.copy()
    frame[params] = frame[params].replace("", float("nan"))
    return frame


def read(path: Path) -> pd.DataFrame:
    """The ledger's runs, typed as :func:`fedrun.report.cli.collect` returns them; empty if the
    file does not exist yet."""
    if not path.exists():
        return pd.DataFrame()
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    missing = [c for c in RUN_COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"ledger {path} lacks the column(s) {', '.join(missing)}; "
                         f"a ledger has {', '.join(RUN_COLUMNS)}, param:* and metric:* columns")
    for column in [c for c in frame.columns if c.startswith("metric:")] + ["start_time"]:
        try:
            values = frame[column].replace("", float("nan")).astype(float)
        except ValueError as error:
            raise ValueError(f"ledger {path}: column {column!r} must hold numbers ({error})") from None
        frame[column] = values.astype("int64") if column == "start_time" else values
    return normalize(frame)


def merge(ledger: pd.DataFrame, store: pd.DataFrame) -> pd.DataFrame:
    """All runs of both, once each; a run id in both keeps the store's (newer) record."""
    if store.empty:
        return ledger
    store = normalize(store)
    if ledger.empty:
        return store
    return pd.concat([ledger[~ledger["run_id"].isin(store["run_id"])], store], ignore_index=True)


def write(frame: pd.DataFrame, path: Path) -> None:
    """Runs in start order; columns: the run's own, then parameters, then metrics, each sorted.

    Runs still in flight are left out: they hold no result yet, and a row written RUNNING would
    read RUNNING for ever if the machine died under the run. The report after it ends records it."""
    frame = frame[frame["status"] != "RUNNING"]
    params = sorted(c for c in frame.columns if c.startswith("param:"))
    metrics = sorted(c for c in frame.columns if c.startswith("metric:"))
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.sort_values(["start_time", "run_id"])[RUN_COLUMNS + params + metrics].to_csv(
        path, index=False, na_rep="")  # floats as repr: they read back exactly
