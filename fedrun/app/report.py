"""``fedrun-report <experiment>``: an experiment's runs → mean ± std table over seeds.

Runs are grouped by method, backbone, dataset and every other parameter that differs
between runs, except the training seed. Failed and killed runs are listed with their
reason, never dropped silently. Writes CSV + Markdown under ``outputs/reports/<name>/``
and logs both to MLflow in a run tagged ``fedrun.kind=report``. With ``--ledger runs.csv`` the
runs also come from, and go back to, a CSV file kept with the results (:mod:`fedrun.report.ledger`).
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from fedrun.core.paths import config_dir
from fedrun.errors import ConfigError
from fedrun.eval.floor import at_or_below
from fedrun.eval.metrics import RATING_METRICS
from fedrun.method.pop import Pop
from fedrun.report import ledger, matrix
from fedrun.report.paper import ALPHA, ROW_KEYS, beside_paper, claim_tests, order_claims, preset_paper
from fedrun.report.table import latex, latex_escape, markdown, mean_std, natural_key
from fedrun.store import metric_names
from fedrun.store.runs import FAILURE_REASON, RESUMED_FROM, default_uri, end_abandoned_runs, experiment_id, open_client

if TYPE_CHECKING:
    from mlflow.entities import Run
    from mlflow.tracking import MlflowClient

# averaged over, not grouped by: training seeds, data-split seeds and folds, and settings that say
# how a run executes rather than what it computes (threads, progress bar, device, checkpoints, how a round's clients
# are bucketed: a client's numbers do not depend on its bucket beyond float rounding)
SEED_PARAMS = {"sim.seed", "sim.progress", "sim.device", "device", "dataset.split.seed", "dataset.split.fold",
               "sim.threads", "sim.checkpoint_dir", "sim.checkpoint_every", "sim.resume",
               "sim.buckets", "sim.padding", "sim.min_bucket_clients", "sim.max_slots",
               # per-run measurements logged as params: the first CL4FedRec runs' synthetic-item share, FedMF's
               # measured Paillier time per value
               "run.synthetic_popularity_share", "run.paillier_ms_per_value"}
PRESENTATION_PARAMS = ("figure.",)  # how a preset draws its figure (x axis, reference), not what a run computes
# what an audit looks at (``audit.attacks``, ``audit.k``): it changes no training number (tested), so runs that differ
# only in it are replicates of one row; an attack a run did not include leaves its metrics out of the mean
AUDIT_PARAMS = ("audit.",)
TRACKING_PARAMS = ("track.",)  # where a run is recorded (a tracking URI, a flush size) changes none of its numbers
REPLICATE_PARAMS = ("sim.seed", "dataset.split.seed", "dataset.split.fold")  # what makes two runs replicates
SEEDLESS_SPLITS = ("loo", "temporal_ratio")  # protocols whose split the data-split seed does not draw
DEFAULT_METRICS = ["test_hr_at_10", "test_ndcg_at_10", "test_recall_at_20", "test_ndcg_at_20", "test_mae", "test_rmse"]


EXPOSURE = re.compile(r"test_er_at_\d+")  # a run's exposure of the attack's targets (mean over targets)


def exposure_over_run(client, run) -> dict[str, float]:
    """For each ER@K the run logged, its peak over the run's test evaluations (``_peak``) and their mean
    (``_mean``): an attack can expose its target in the middle of training and fade by the end, which the
    final value hides. A run tested only at its end has the final value in both."""
    out = {}
    for name in sorted(metric_names.run_metrics(run)):
        if EXPOSURE.fullmatch(name):
            values = [m.value for m in metric_names.history(client, run, name)]
            out[f"metric:{name}_peak"], out[f"metric:{name}_mean"] = max(values), sum(values) / len(values)
    return out


def collect(client, exp_id: str, parent: str | None = None) -> pd.DataFrame:
    """The experiment's runs (or only the child runs of sweep ``parent``), one row each, with the exposure
    metrics' peak and mean over the run (``exposure_over_run``). A run left RUNNING by a process on this machine
    that is gone is first marked KILLED with its reason (``fedrun.store.liveness``), so the report lists it as
    unfinished and says why instead of counting it in flight."""
    end_abandoned_runs(client, exp_id, found_by="fedrun-report")
    rows = []
    children = f"tags.mlflow.parentRunId = '{parent}'" if parent else ""
    for run in client.search_runs([exp_id], filter_string=children, max_results=50000):
        if run.data.tags.get("fedrun.kind") in ("report", "sweep"):  # a report's or a sweep's own record
            continue
        rows.append({"run_id": run.info.run_id, "status": run.info.status, "start_time": run.info.start_time,
                     "reason": run.data.tags.get(FAILURE_REASON, ""),
                     "resumed_from": run.data.tags.get(RESUMED_FROM, ""),
                     **{f"param:{k}": v for k, v in run.data.params.items()},
                     **{f"metric:{k}": v for k, v in metric_names.run_metrics(run).items()},
                     **exposure_over_run(client, run)})
    return pd.DataFrame(rows)


def as_text(frame: pd.DataFrame) -> pd.DataFrame:
    """Every cell as text, a missing one as "nan" (pandas 3's ``astype(str)`` keeps it missing, which ``nunique``
    and ``groupby`` then skip: a parameter some runs never logged would not count as varying)."""
    return frame.astype(str).fillna("nan")


def group_columns(frame: pd.DataFrame) -> list[str]:
    """The chosen options, plus every other parameter that varies — except seeds, how a preset draws its
    figure (a figure's point borrowed from a table's run is the same run), and parameters the chosen options
    already determine (an option's own defaults)."""
    text = as_text(frame)
    choices = [c for c in frame.columns if c.startswith("param:choices.") and not c.startswith("param:choices.hydra/")
               and text[c].nunique() > 1]  # Hydra's own choices (the launcher) are how a run executes
    fixed = [c for c in (f"param:choices.{g}" for g in ("method", "backbone", "dataset")) if c in frame.columns]
    keys = list(dict.fromkeys(fixed + choices))
    varying = [c for c in frame.columns if c.startswith("param:") and c not in keys
               and not c.startswith("param:choices.hydra/")
               and c[len("param:"):] not in SEED_PARAMS
               and not c[len("param:"):].startswith(PRESENTATION_PARAMS + AUDIT_PARAMS + TRACKING_PARAMS)
               and text[c].nunique() > 1
               and (text.groupby(keys)[c].nunique() > 1).any()]
    return keys + varying


def drop_reruns(frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A finished run repeated with the same options and seeds is a rerun: the latest one counts,
    the earlier ones are returned to be listed (a seed counted twice would bias mean, std and the
    paired tests). Under ``loo`` and ``temporal_ratio`` the data-split seed draws nothing, so runs that
    differ only in it are reruns too."""
    done = frame[frame["status"] == "FINISHED"]
    if done.empty:
        return frame, done
    replicate = [c for c in (f"param:{p}" for p in REPLICATE_PARAMS) if c in done.columns]
    keys = group_columns(done) + replicate
    ordered = done.sort_values("start_time")
    text = as_text(ordered)
    if {"param:dataset.split.protocol", "param:dataset.split.seed"} <= set(text.columns):
        seedless = text["param:dataset.split.protocol"].isin(SEEDLESS_SPLITS)  # such runs share one split:
        text.loc[seedless, "param:dataset.split.seed"] = "-"  # a different split seed is not a replicate
    superseded = ordered[text.duplicated(keys, keep="last")]
    return frame.drop(superseded.index), superseded


@dataclass(frozen=True)
class Stat:
    """One metric of one report row, over the row's finished runs."""

    mean: float
    std: float  # sample std over the runs; NaN for a single run (no spread was measured)
    n: int  # runs that logged the metric
    floor: float  # the popularity floor of the row's split and protocol; NaN where none was logged
    at_floor: bool  # at or below the floor (error metrics: at or above)


@dataclass(frozen=True)
class Row:
    keys: list[str]  # the values of the grouping columns
    runs: int
    stats: dict[str, Stat]  # metric → its statistics (metrics no run of the row logged are absent)


def rows_of(frame: pd.DataFrame, metrics: list[str]) -> tuple[list[str], list[str], list[Row]]:
    """The finished runs of ``frame`` grouped into report rows (``group_columns``), in natural order: the grouping
    columns' names, the metrics any run logged, and the rows."""
    done = frame[frame["status"] == "FINISHED"]
    keys = group_columns(done) if len(done) else []
    metrics = [m for m in metrics if f"metric:{m}" in done.columns]
    groups = sorted(done.groupby(keys, dropna=False, sort=False), key=lambda item: natural_key(item[0])) \
        if keys else [((), done)]
    rows = []
    for values, group in groups:
        values = values if isinstance(values, tuple) else (values,)
        stats = {}
        for m in metrics:
            col = group[f"metric:{m}"].dropna()
            if col.empty:
                continue
            floor = floor_value(group, m, col, peers=done)
            stats[m] = Stat(float(col.mean()), float(col.std(ddof=1)) if len(col) > 1 else float("nan"), len(col),
                            float("nan") if floor is None else floor,
                            floor is not None and learned_nothing(m, float(col.mean()), floor))
        rows.append(Row([str(v) for v in values], len(group), stats))
    return [k.split(":", 1)[1].replace("choices.", "") for k in keys], metrics, rows


def summarize(frame: pd.DataFrame, metrics: list[str]) -> tuple[list[str], list[list[str]]]:
    """The report table as text: a row's grouping values, its run count, and per metric ``mean ± std`` (one run:
    ``v (n = 1)``) with the floor mark ``(≤ floor x)`` where the row is at or below its floor."""
    keys, metrics, rows = rows_of(frame, metrics)
    return keys + ["runs"] + metrics, [row.keys + [str(row.runs)] + [_text_cell(row.stats.get(m), m) for m in metrics]
                                       for row in rows]


def _text_cell(stat: Stat | None, metric: str) -> str:
    if stat is None:
        return ""
    return mean_std(stat.mean, stat.std, stat.n) + (mark(metric, stat.floor) if stat.at_floor else "")


def numeric_table(frame: pd.DataFrame, metrics: list[str]) -> pd.DataFrame:
    """The report table as numbers, for a plotting or statistics script: the grouping columns, ``runs``, and per
    metric its mean (``<metric>``), ``_std`` (empty for one run), ``_n``, the ``_floor`` of the row's split and
    protocol, and ``_to_floor`` (mean / floor)."""
    keys, metrics, rows = rows_of(frame, metrics)
    records = []
    for row in rows:
        record: dict[str, object] = dict(zip(keys, row.keys)) | {"runs": row.runs}
        for m in metrics:
            stat = row.stats.get(m)
            nan = float("nan")
            record |= {m: stat.mean if stat else nan, f"{m}_std": stat.std if stat else nan,
                       f"{m}_n": stat.n if stat else 0, f"{m}_floor": stat.floor if stat else nan,
                       f"{m}_to_floor": stat.mean / stat.floor if stat and stat.floor > 0 else nan}
        records.append(record)
    return pd.DataFrame(records, columns=[*keys, "runs", *(f"{m}{suffix}" for m in metrics for suffix in
                                                           ("", "_std", "_n", "_floor", "_to_floor"))])


def latex_table(frame: pd.DataFrame, metrics: list[str], title: str) -> str:
    r"""The report table as a booktabs LaTeX table: ``mean $\pm$ std`` (one run: the value alone, the runs column
    says 1), rows at or below their floor marked with a dagger explained under the table."""
    keys, metrics, rows = rows_of(frame, metrics)
    lines = []
    for row in rows:
        cells = [latex_escape(v) for v in row.keys] + [str(row.runs)]
        for m in metrics:
            stat = row.stats.get(m)
            cell = "" if stat is None else (f"{stat.mean:.4f}" if stat.n == 1 else
                                            f"{stat.mean:.4f} $\\pm$ {stat.std:.4f}")
            cells.append(cell + ("$^\\dagger$" if stat is not None and stat.at_floor else ""))
        lines.append(cells)
    marked = any(stat.at_floor for row in rows for stat in row.stats.values())
    note = (r"$^\dagger$ at or below the popularity floor of the row's split and protocol (errors: at or above the "
            r"user + item bias baseline)." if marked else "")
    header = [latex_escape(name) for name in keys + ["runs"] + [metric_label(m) for m in metrics]]
    return latex(header, lines, caption=f"{latex_escape(title)}: mean $\\pm$ std over seeds", note=note)


def metric_name(metric: str) -> str:
    """``test_recall_at_20`` → ``recall_at_20``; ``best_valid_mae`` → ``mae`` (the metric without its part)."""
    prefix = next((p for p, _ in FLOOR_OF if metric.startswith(p)), "")
    return metric[len(prefix):]


def metric_label(metric: str) -> str:
    """A column title for a paper: ``test_recall_at_20`` → ``Recall@20``, ``test_rmse`` → ``RMSE``."""
    name = metric_name(metric)
    base, _, k = name.partition("_at_")
    pretty = {"hr": "HR", "ndcg": "NDCG", "mae": "MAE", "rmse": "RMSE", "mrr": "MRR", "auc": "AUC"}.get(
        base, base.replace("_", " ").capitalize())
    return f"{pretty}@{k}" if k else pretty


FLOOR_OF = (("test_", "floor_"), ("best_valid_", "floor_valid_"), ("valid_", "floor_valid_"))  # metric → its floor

SPLIT_PARAMS = ("param:dataset.", "param:eval.")  # what a popularity floor depends on: data, split, protocol


def floor_value(group: pd.DataFrame, metric: str, values: pd.Series, peers: pd.DataFrame | None = None) -> float | None:
    """The floor ``metric``'s runs logged for their split and protocol (test metrics: ``floor_*``; validation
    metrics: ``floor_valid_*``), or None. Runs from before the floor was logged take it from ``peers`` (the
    report's other finished runs) on the same dataset, split and evaluation, so an old row is judged as well."""
    prefix, floor_prefix = next(((p, f) for p, f in FLOOR_OF if metric.startswith(p)), (None, None))
    if prefix is None or values.empty:
        return None
    column = f"metric:{floor_prefix}{metric[len(prefix):]}"
    logged = group[column].dropna() if column in group else pd.Series(dtype=float)
    if logged.empty and peers is not None and column in peers and not is_the_floor(group):
        logged = same_split(peers, group)[column].dropna()
    return None if logged.empty else float(logged.mean())


def floor_mark(group: pd.DataFrame, metric: str, values: pd.Series, peers: pd.DataFrame | None = None) -> str:
    """The suffix " (≤ floor .0183)" when the mean of ``metric`` is at or below its floor (``floor_value``; error
    metrics: " (≥ floor …)" at or above), else ""."""
    floor = floor_value(group, metric, values, peers)
    return mark(metric, floor) if floor is not None and learned_nothing(metric, float(values.mean()), floor) else ""


def learned_nothing(metric: str, mean: float, floor: float) -> bool:
    """Whether ``mean`` is at or below the floor (error metrics: at or above it): ``fedrun.eval.floor.at_or_below``
    on the metric's name without its part."""
    name = metric_name(metric)
    return at_or_below({name: mean}, {name: floor}, name)


def mark(metric: str, floor: float) -> str:
    """" (≤ floor 0.0183)", or " (≥ floor …)" for an error metric."""
    return f" ({'≥' if metric_name(metric) in RATING_METRICS else '≤'} floor {floor:.4f})"


def is_the_floor(group: pd.DataFrame) -> bool:
    """Whether the group's runs are the floor itself (``method=pop``), which logs no floor to be judged by."""
    column = "param:method._target_"
    return column in group and (group[column].astype(str) == f"{Pop.__module__}.{Pop.__qualname__}").all()


def same_split(peers: pd.DataFrame, group: pd.DataFrame) -> pd.DataFrame:
    """The runs of ``peers`` on the dataset, split and evaluation protocol of ``group``: each ``dataset.*`` and
    ``eval.*`` parameter the group logged takes one of the group's values (a parameter added after the group's
    runs, missing there, is not compared)."""
    mine, theirs = as_text(group), as_text(peers)
    same = pd.Series(True, index=peers.index)
    for column in (c for c in group.columns if c.startswith(SPLIT_PARAMS) and c in theirs):
        values = set(mine[column]) - {"nan"}
        if values:
            same &= theirs[column].isin(values)
    return peers[same]


def variant_columns(done: pd.DataFrame) -> list[str]:
    """What tells runs of one row apart: every grouping parameter but the row keys themselves, group choices
    included (one row run under two attacks is two variants, not one row with each seed twice)."""
    return [c for c in group_columns(done) if c not in ROW_KEYS and c != "param:choices.experiment"]


def paper_sections(done: pd.DataFrame, paper: dict, preset: str, out: Path, files: list[Path]) -> str:
    """The report's sections on the preset's paper: its numbers beside fedrun's, its "best row"
    claim and its ordering claims tested over seeds. Each table is also written as CSV (added to ``files``)."""
    varying = variant_columns(done)
    sections = [
        (f"Beside the paper ({preset})", "paper.csv", beside_paper(done, paper, varying)),
        (f"Is {paper.get('best_row')} best? Difference to each other row, paired t-test over seeds", "claims.csv",
         claim_tests(done, paper, varying)),
        (f"The paper's claims one by one, paired t-test over seeds (verdict at p < {ALPHA})", "order_claims.csv",
         order_claims(done, paper, varying)),
    ]
    text = ""
    for k, (title, name, (header, rows)) in enumerate(sections):
        if rows or k == 0:  # the paper's numbers always; a claim table only where it has rows
            text += f"\n## {title}\n\n{markdown(header, rows)}\n"
            pd.DataFrame(rows, columns=header).to_csv(out / name, index=False)
            files.append(out / name)
    return text


# config keys added with a non-null default that keeps the old behaviour: a run recorded before the key existed
# ran with that value (keys added with a null default need no entry)
ADDED_WITH_DEFAULT = {
    "param:eval.watch": "attack",  # ER@K of the attack's targets, as every run before the key
    "param:method.duplicate_rows": "sum",  # a row's gradient summed over its uses, as every run before the key
}


def absent_as_null(frame: pd.DataFrame) -> pd.DataFrame:
    """A param a run lacks reads as "None", or as the default it was added with (``ADDED_WITH_DEFAULT``): a config
    key added after the run keeps the old behaviour at its default, so the run and newer runs of its setting stay
    one row."""
    params = [c for c in frame.columns if c.startswith("param:")]
    absent = {c: ADDED_WITH_DEFAULT.get(c, "None") for c in params}
    filled = pd.DataFrame({c: frame[c].astype(object).where(frame[c].notna(), absent[c]) for c in params},
                          index=frame.index)
    return pd.concat([frame.drop(columns=params), filled], axis=1)[list(frame.columns)]  # one block, not one per column


def render(frame: pd.DataFrame, title: str, metrics: list[str], out: Path) -> tuple[str, list[Path]]:
    """The report of ``frame``'s runs: its Markdown text, and the files written under ``out`` (the table as
    CSV and Markdown; with one preset, its paper sections and figures)."""
    frame, superseded = drop_reruns(absent_as_null(frame))
    header, rows = summarize(frame, metrics)
    table = markdown(header, rows)
    failed = frame[frame["status"] != "FINISHED"]
    failed_lines = unfinished_lines(continued_reasons(failed, frame))
    text = f"# {title}: mean ± std over seeds\n\n{table}\n"
    if "floor " in table:
        text += ("\n(≤ floor x): at or below the popularity floor of the row's split and protocol (for errors: "
                 "at or above the user + item bias baseline) — the row learned nothing a count could not.\n")
    out.mkdir(parents=True, exist_ok=True)
    numeric_table(frame, metrics).to_csv(out / "report.csv", index=False)
    (out / "report.tex").write_text(latex_table(frame, metrics, title))
    files = [out / "report.csv", out / "report.md", out / "report.tex"]
    # the preset the finished runs ran (a run refused before training logged no params, and has none)
    finished = frame[frame["status"] == "FINISHED"]
    presets = finished["param:choices.experiment"].dropna().unique() if "param:choices.experiment" in frame else []
    paper = preset_paper(str(presets[0]), Path(config_dir())) if len(presets) == 1 else None
    if paper is not None:
        text += paper_sections(finished, paper, str(presets[0]), out, files)
    if len(presets) == 1 and str(presets[0]).startswith("robustness/"):
        section, made = matrix.render(finished, str(presets[0]), Path(config_dir()), out, matrix_refusals)
        text, files = text + section, files + made
    text += audit_section(frame)
    if len(superseded):
        lines = [f"- {r.run_id}" for r in superseded.itertuples()]
        text += (f"\n## Reruns superseded by a later run of the same options and seeds ({len(lines)})\n\n"
                 + "\n".join(lines) + "\n")
    if "borrowed_from" in frame:
        lent = frame[frame["borrowed_from"].notna()]
        lines = [f"- {run_id}: row {row}, seed {seed}, from {source}" for run_id, row, seed, source in zip(
            lent["run_id"], lent.get("param:choices.row", "?"), lent.get("param:sim.seed", "?"), lent["borrowed_from"])]
        text += (f"\n## Runs borrowed from other experiments' ledgers ({len(lines)})\n\n" + "\n".join(lines) + "\n")
    if failed_lines:
        text += f"\n## Runs that did not finish ({len(failed)})\n\n" + "\n".join(failed_lines) + "\n"
    (out / "report.md").write_text(text)
    return text, files


# the audit's headline numbers (``audit=server``), each beside its baseline
AUDIT_METRICS = ["audit_round_precision", "audit_intersect_precision", "audit_base_rate", "audit_auc",
                 "audit_shared_recall_at_20", "audit_shared_popularity_recall_at_20",
                 "audit_shared_heldout_recall_at_20", "audit_shared_heldout_popularity_recall_at_20",
                 "audit_rating_mae", "audit_rating_mean_mae", "audit_rating_coverage", "audit_sign_precision",
                 "audit_sign_auc", "epsilon_spent_max", "epsilon_item_rows_spent_max", "dp_epsilon_spent_max"]


def audit_section(frame: pd.DataFrame) -> str:
    """The audited runs' leakage, mean ± std over seeds (``audit=server``; empty when no run was audited)."""
    if "param:choices.audit" not in frame:
        return ""
    audited = frame[(frame["param:choices.audit"].astype(str) == "server") & (frame["status"] == "FINISHED")]
    if audited.empty or not any(f"metric:{m}" in audited.columns for m in AUDIT_METRICS):
        return ""
    header, rows = summarize(audited, AUDIT_METRICS)
    return ("\n## Measured privacy: an honest-but-curious server's attacks (audit=server; docs/privacy.md)\n\n"
            + markdown(header, rows) + "\n")


def continued_reasons(failed: pd.DataFrame, frame: pd.DataFrame) -> pd.DataFrame:
    """``failed`` with the reason of each run a later run resumed (``fedrun.resumed_from``) saying so: a run stopped
    and continued under new params (more epochs) is one run in two records, not a failure beside a result."""
    if "resumed_from" not in frame or failed.empty:
        return failed
    later = {str(earlier): run_id for earlier, run_id in zip(frame["resumed_from"], frame["run_id"])
             if isinstance(earlier, str) and earlier}
    resumed = failed["run_id"].isin(later.keys())
    if not resumed.any():
        return failed
    failed = failed.copy()
    failed.loc[resumed, "reason"] = [f"stopped, then resumed as run {later[run_id]}, which carries its results"
                                     for run_id in failed.loc[resumed, "run_id"]]
    return failed


def unfinished_lines(failed: pd.DataFrame) -> list[str]:
    """One line per distinct (status, reason) among the runs that did not finish, in order of first appearance:
    a sweep's refused combinations share one reason, and 28 copies of it hid the one run that died."""
    groups: dict[tuple[str, str], list[str]] = {}
    for run in failed.itertuples():
        reason = run.reason if isinstance(run.reason, str) and run.reason else "no reason recorded"  # None, NaN, ""
        groups.setdefault((run.status, reason), []).append(run.run_id)
    return [f"- {ids[0]} {status}: {reason}" if len(ids) == 1 else
            f"- {len(ids)} runs {status}: {reason} ({', '.join(ids)})" for (status, reason), ids in groups.items()]


def add_borrow_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--borrow", nargs="+", action="append", default=[], metavar=("LEDGER", "KEY=VALUE"),
                        help="count with this experiment's runs the finished runs of another experiment's ledger "
                             "that match every KEY=VALUE (a row two presets share, e.g. `--borrow runs.csv "
                             "row=cl4fedrec method.lambda_item=0.0`); repeatable; never written to --ledger")


def script_runs(description: str, experiment: str, out: Path, argv: list[str] | None) -> tuple[pd.DataFrame, Path]:
    """The command line of a figure script (``--experiment``, ``--uri``, ``--ledger``, ``--out``): the runs of
    the experiment, merged with the ledger's (which is rewritten with them all), and the output folder."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--experiment", default=experiment)
    parser.add_argument("--uri", default=None, help="tracking URI (default: $MLFLOW_TRACKING_URI or outputs/mlflow.db)")
    parser.add_argument("--ledger", type=Path, default=None, help="CSV of earlier runs, merged and rewritten")
    parser.add_argument("--out", type=Path, default=out)
    add_borrow_argument(parser)
    args = parser.parse_args(argv)
    client = open_client(args.uri or default_uri())
    found = client.get_experiment_by_name(args.experiment)
    frame = collect(client, found.experiment_id) if found else pd.DataFrame()
    if args.ledger:
        frame = ledger.merge(ledger.read(args.ledger), frame)
        ledger.write(frame, args.ledger)
    try:
        frame = ledger.with_borrowed(frame, args.borrow, relabel=False)  # a figure groups by setting, not preset
    except ValueError as error:
        raise SystemExit(f"{parser.prog}: {error}") from None
    if frame.empty:
        raise SystemExit(f"experiment {args.experiment!r} has no runs (the commands are in its preset, "
                         "conf/experiment/)")
    args.out.mkdir(parents=True, exist_ok=True)
    return frame, args.out


def report_sweep(uri: str, parent_run_id: str, out: Path) -> str | None:
    """A sweep's own report (its child runs only), written under ``out`` and logged on its parent run under
    ``report/``; the Markdown text, or None when the sweep recorded no run."""
    client = open_client(uri)
    parent = client.get_run(parent_run_id)
    frame = collect(client, parent.info.experiment_id, parent=parent_run_id)
    if frame.empty:
        return None
    name = client.get_experiment(parent.info.experiment_id).name
    text, files = render(frame, f"{name}, sweep {parent.info.run_name}", DEFAULT_METRICS, out)
    for path in files:
        client.log_artifact(parent_run_id, str(path), artifact_path="report")
    log_children_datasets(client, parent)
    return text


def log_children_datasets(client: MlflowClient, parent: Run) -> None:
    """The datasets the sweep's runs trained on, logged as the parent's own inputs: the runs table shows a sweep
    as its parent's row (children folded under it), whose Dataset column is otherwise empty."""
    runs = client.search_runs([parent.info.experiment_id], f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    inputs = {(item.dataset.name, item.dataset.digest): item for run in runs if run.inputs is not None
              for item in run.inputs.dataset_inputs}
    if inputs:
        client.log_inputs(parent.info.run_id, datasets=list(inputs.values()))


def report_folder(sweep_dir: Path) -> int:
    from fedrun.app.sweep_folder import folder_report

    if not sweep_dir.is_dir():
        print(f"fedrun-report: --folder: {sweep_dir} is not a folder", file=sys.stderr)
        return 2
    try:
        print(folder_report(sweep_dir, DEFAULT_METRICS))
    except ValueError as error:
        print(f"fedrun-report: --folder: {error}", file=sys.stderr)
        return 2
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fedrun-report", description=__doc__.splitlines()[0])
    parser.add_argument("experiment", nargs="?",
                        help="MLflow experiment name (e.g. the dataset name, or a preset's name)")
    parser.add_argument("--folder", type=Path, default=None,
                        help="a sweep's folder (hydra.sweep.dir): each job's outcome read from it alone, no store")
    parser.add_argument("--uri", default=None, help="tracking URI (default: $MLFLOW_TRACKING_URI or outputs/mlflow.db)")
    parser.add_argument("--metrics", nargs="+", default=DEFAULT_METRICS, help="final metrics to tabulate")
    parser.add_argument("--out", default="outputs/reports", help="folder for the CSV and Markdown files")
    parser.add_argument("--ledger", type=Path, default=None,
                        help="CSV file of earlier runs: merged with the store's runs, then rewritten with all of them")
    add_borrow_argument(parser)
    args = parser.parse_args(argv)
    if args.folder is not None:
        return report_folder(args.folder)
    if args.experiment is None:
        parser.error("name an experiment, or a sweep's folder with --folder")

    client = open_client(args.uri or default_uri())
    try:
        earlier = ledger.read(args.ledger) if args.ledger else pd.DataFrame()
    except ValueError as error:  # pandas' parser errors are ValueErrors too
        print(f"fedrun-report: --ledger: {error}", file=sys.stderr)
        return 2
    experiment = client.get_experiment_by_name(args.experiment)
    if experiment is None and earlier.empty:
        names = ", ".join(sorted(e.name for e in client.search_experiments())) or "none"
        print(f"fedrun-report: no experiment named {args.experiment!r}; available: {names}", file=sys.stderr)
        return 2
    frame = ledger.merge(earlier, collect(client, experiment.experiment_id) if experiment else pd.DataFrame())
    if frame.empty:
        print(f"fedrun-report: experiment {args.experiment!r} has no runs", file=sys.stderr)
        return 2
    if args.ledger:
        ledger.write(frame, args.ledger)
    try:
        frame = ledger.with_borrowed(frame, args.borrow)
    except ValueError as error:
        print(f"fedrun-report: {error}", file=sys.stderr)
        return 2
    try:
        text, files = render(frame, args.experiment, args.metrics, Path(args.out) / args.experiment)
    except ConfigError as error:  # a preset's report setting (matrix.utility) its runs cannot answer
        print(f"fedrun-report: {error}", file=sys.stderr)
        return 2
    run = client.create_run(experiment_id(client, args.experiment), run_name="report",
                            tags={"fedrun.kind": "report", "mlflow.runName": "report"})
    for path in files:
        client.log_artifact(run.info.run_id, str(path))
    client.set_terminated(run.info.run_id)
    print(text)
    print("written: " + ", ".join(str(path) for path in files + ([args.ledger] if args.ledger else [])))
    return 0


def matrix_refusals(preset: str, axes: matrix.Axes) -> dict[tuple[str, str], str]:
    """(row, defense) → the one-line reason the capabilities refuse it (checked without any data)."""
    from fedrun.app.compose import compose
    from fedrun.app.plan import plan

    refused = {}
    for row in axes.rows:
        for column in axes.columns:
            try:
                plan(compose([f"+experiment={preset}", f"row={row}", f"defense={column}", "track=none"]))
            except ConfigError as error:
                refused[row, column] = str(error)
    return refused


if __name__ == "__main__":
    sys.exit(main())
