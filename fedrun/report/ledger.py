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
# what names a run's experiment rather than what it computes: a borrowed run takes its host's values
NAMING_PARAMS = ["param:choices.experiment", "param:experiment_name", "param:track.experiment"]


def normalize(frame: pd.DataFrame) -> pd.DataFrame:
    """One spelling of "not set" for parameters (NaN, never the empty string), so that a run
    read back from the ledger groups with the same run read from the store."""
    params = [c for c in frame.columns if c.startswith("param:")]
    frame = frame.copy()
    frame[params] = frame[params].replace("", float("nan"))
    return frame


def read(path: Path) -> pd.DataFrame:
    """The ledger's runs, typed as :func:`fedrun.app.report.collect` returns them; empty if the
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


def borrow(host: pd.DataFrame, path: Path, filters: list[str], relabel: bool = True) -> pd.DataFrame:
    """The finished runs of another experiment's ledger ``path`` that match every ``KEY=VALUE`` filter, labelled
    as runs of ``host``'s experiment, with their origin in a ``borrowed_from`` column.

    A paper's tables share rows (rCL4FedRec's CL4FedRec row is its Table 2, 3 and 4 row alike), and so may a
    reproduction: a run recorded under one preset counts in another preset's report when its setting is the
    same. Only the experiment's name and preset are relabelled; every parameter that still differs from the
    host's runs of the same row shows in the report as a variant, as it would for the host's own runs.
    ``row=NAME`` matches the row option by its last part (``rcl4fedrec/cl4fedrec`` → ``cl4fedrec``); any other
    key is a parameter, matched as text or, where both sides are numbers, by value. ``relabel=False`` keeps the
    runs' own experiment and preset (a figure that groups runs by method and setting, not by preset)."""
    if not path.exists():
        raise ValueError(f"--borrow: no ledger at {path}")
    runs = read(path)
    runs = runs[runs["status"] == "FINISHED"]
    for spec in filters:
        key, sep, value = spec.partition("=")
        if not sep or not key:
            raise ValueError(f"--borrow: {spec!r} is not a filter; write KEY=VALUE, e.g. row=cl4fedrec")
        column = "param:choices.row" if key == "row" else f"param:{key}"
        if column not in runs:
            raise ValueError(f"--borrow: the ledger {path} has no parameter {key!r}")
        cells = runs[column].astype(str).str.split("/").str[-1] if key == "row" else runs[column]
        runs = runs[cells.map(lambda cell, wanted=value: _same_value(cell, wanted))]
    if runs.empty:
        raise ValueError(f"--borrow: no finished run of {path} matches {' '.join(filters) or 'every run'}")
    runs = runs[~runs["run_id"].isin(host["run_id"])].copy() if "run_id" in host else runs.copy()
    if not relabel:
        return runs.assign(borrowed_from=str(path))
    presets = host["param:choices.experiment"].dropna().unique() if "param:choices.experiment" in host else []
    if len(presets) > 1:
        raise ValueError("--borrow: the experiment's own runs come from several presets "
                         f"({', '.join(map(str, presets))}); borrowed runs would join none of them")
    for column in NAMING_PARAMS:
        known = host[column].dropna().unique() if column in host else []
        runs[column] = known[0] if len(known) else float("nan")
    return runs.assign(borrowed_from=str(path))


def with_borrowed(frame: pd.DataFrame, specs: list[list[str]], relabel: bool = True) -> pd.DataFrame:
    """``frame`` plus the runs each ``[ledger, KEY=VALUE, …]`` of ``specs`` lends (:func:`borrow`)."""
    for source, *filters in specs:
        frame = pd.concat([frame, borrow(frame, Path(source), filters, relabel)], ignore_index=True)
    return frame


def _same_value(cell, value: str) -> bool:
    if str(cell) == value:
        return True
    try:
        return float(cell) == float(value)
    except (TypeError, ValueError):
        return False
