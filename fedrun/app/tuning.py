"""The tuned leaderboard's searches, summarised: for each ``+experiment=tune/<method>`` preset, the trials its MLflow
experiment holds, the best one by validation (the sweep's objective: ``best_valid_<monitor>``, the monitor at the
epoch whose model is tested), its setting beside the method's defaults, and the command that runs that setting for
the board's three seeds (``+experiment=leaderboard/tuned``, or ``leaderboard/tuned_rating`` for ``tune/rating/…``),
with what the search's command line fixed beside its space (``fixed_settings``: ``backbone.neighbors=20``, say).

    python -m fedrun.app.tuning tune/fedavg tune/rating/fedrec … [--uri URI] [--out docs/leaderboard/tuned]
        [--dataset ml-1m]

``--dataset``: the same searches on another dataset than the board's (ml-100k), under the board's protocol on it:
each search ran as ``fedrun -m +experiment=tune/<method> dataset=<d> experiment_name=tune-<method>-<d>``, and each
best setting's command runs on that dataset into ``leaderboard-tuned-<d>`` (``…-rating-<d>``).

A search is one sweep: the latest finished sweep of its experiment in the store (an earlier one, say over an older
space, or one stopped midway, is set aside), with the sweeps it resumed where it spanned sessions
(``fedrun.sim.search``), else the ledger an earlier session committed. A search whose last sweep did not finish
leaves its record in ``<out>/sweeps/<experiment>`` to resume from on any machine; resumed from it, the search's
trials are the committed ledger's and the store's together. Writes
``<out>/searches.md`` and ``<out>/searches.csv`` (one row per search; the searches an earlier summary listed there
and this one was not given keep their rows) and each search's trials to
``<out>/<experiment>-trials.csv`` (trials, not results: the below-floor list reads ``*-runs.csv`` only). A best
value at the edge of its space is flagged: the space should grow before the setting is trusted. Nothing here reads
a test metric: the choice is validation's alone.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from omegaconf import OmegaConf

from fedrun.app.compose import compose
from fedrun.core.choices import option_file, options
from fedrun.errors import ConfigError
from fedrun.report import ledger
from fedrun.report.table import markdown


@dataclass(frozen=True)
class Search:
    """What a ``tune/<method>`` (or ``tune/rating/<method>``) preset declares: its MLflow experiment, the method, the
    board it is judged on (``ranking`` or ``rating``: its eval kind), the monitored metric, the direction, the
    searched keys with their spaces and the method's defaults for them."""

    preset: str
    experiment: str
    method: str
    backbone: str
    board: str
    monitor: str
    maximize: bool
    space: dict[str, str]
    defaults: dict[str, str]
    dataset: str | None = None  # another dataset than the board's (``--dataset``): named in every experiment
    config: dict[str, str] = field(default_factory=dict)  # the preset's composed config as MLflow params


def declared_space(preset: str) -> dict[str, str]:
    """The space an experiment preset declares for its sweeper (``hydra.sweeper.params``), read from its file."""
    declared = OmegaConf.load(option_file("experiment", preset))
    return {str(k): str(v) for k, v in (OmegaConf.select(declared, "hydra.sweeper.params") or {}).items()}


def search_presets() -> list[str]:
    """Every search: a preset under ``tune/`` that declares a space (``tune/common``, ``tune/budget`` … only share)."""
    return [o for o in options("experiment") if o.startswith("tune/") and declared_space(o)]


BOARD_PRESETS = {"ranking": "leaderboard/tuned", "rating": "leaderboard/tuned_rating"}  # where a best setting runs


def read_search(preset: str, dataset: str | None = None) -> Search:
    """The search ``+experiment=<preset>`` runs, from its file (the space) and its composed config (the rest); with
    ``dataset``, the same search on that dataset, its experiment named ``<the preset's>-<dataset>``."""
    from fedrun.app.experiment import config_params

    space = declared_space(preset) if preset.startswith("tune/") and preset in options("experiment") else {}
    if not space:
        raise ConfigError("search", preset, f"a search preset: one of {', '.join(search_presets())}")
    if dataset is not None and dataset not in options("dataset"):
        raise ConfigError("--dataset", dataset, f"a dataset option: one of {', '.join(options('dataset'))}")
    cfg = compose([f"+experiment={preset}"] + ([f"dataset={dataset}"] if dataset else []), keep_hydra=True)
    direction = str(cfg.hydra.sweeper.direction).rsplit(".", 1)[-1]  # "minimize", or the enum Direction.minimize
    board = "rating" if cfg.eval.kind == "rating" else "ranking"
    experiment = f"{cfg.experiment_name}-{dataset}" if dataset else str(cfg.experiment_name)
    run_config = OmegaConf.masked_copy(cfg, [str(k) for k in cfg if k != "hydra"])  # what a run logs: no hydra
    config = {k: str(v) for k, v in config_params(run_config, resolve=True).items()}
    return Search(preset, experiment, str(cfg.choices.method), str(cfg.choices.backbone), board,
                  str(cfg.eval.monitor), direction != "minimize", space,
                  {k: str(OmegaConf.select(cfg, k)) for k in space}, dataset, config)


def best_trial(search: Search, trials: pd.DataFrame) -> pd.Series | None:
    """The finished trial with the best objective (``best_valid_<monitor>``), or None if none finished."""
    objective = f"metric:best_valid_{search.monitor}"
    done = trials[(trials["status"] == "FINISHED")] if len(trials) else trials
    if objective not in done or done[objective].isna().all():
        return None
    scores = done[objective].astype(float)
    return done.loc[scores.idxmax() if search.maximize else scores.idxmin()]


def setting(search: Search, trial: pd.Series) -> dict[str, str]:
    """The searched keys' values in ``trial``, as the run logged them (exact: the board reruns this setting)."""
    return {key: str(trial[f"param:{key}"]) for key in search.space if f"param:{key}" in trial}


def at_edge(space: str, value: str) -> bool:
    """Whether ``value`` lies at the edge of ``space`` (Optuna's override syntax): within 5 % of an interval's width
    from either end (of its logarithm's, for ``tag(log, ...)``), or a numeric choice's smallest or largest option."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra_plugins.hydra_optuna_sweeper._impl import create_optuna_distribution_from_override
    from optuna.distributions import CategoricalDistribution, LogUniformDistribution

    distribution = create_optuna_distribution_from_override(OverridesParser.create().parse_override(f"x={space}"))
    try:
        number = float(value)
    except ValueError:
        return False
    if isinstance(distribution, CategoricalDistribution):
        numbers = [c for c in distribution.choices if isinstance(c, (int, float)) and not isinstance(c, bool)]
        return len(numbers) > 2 and number in (min(numbers), max(numbers))
    low, high = float(distribution.low), float(distribution.high)
    if isinstance(distribution, LogUniformDistribution):
        low, high, number = math.log(low), math.log(high), math.log(number)
    margin = 0.05 * (high - low)
    return number <= low + margin or number >= high - margin


# Settings a search's command line may change that change no result (``sim.threads``: bit for bit at any count) or
# that the board sets itself: never carried from a trial to the board's command.
NEUTRAL = ("experiment_name", "sim.threads", "sim.progress", "sim.seed", "choices.", "track.")


def fixed_settings(search: Search, trial: pd.Series) -> dict[str, str]:
    """What the search's command line fixed beside its space, read from ``trial``'s params where they differ from
    the preset's config (say ``backbone.neighbors=20``, a declared setting for graphs on ml-1m): the board's command
    runs the best setting with them, or it would test another model than the one searched."""
    fixed = {}
    for key, value in search.config.items():
        logged = trial.get(f"param:{key}")
        if key in search.space or key.startswith(NEUTRAL) or not isinstance(logged, str) or logged == "":
            continue
        if logged != value and not _same_number(logged, value):
            fixed[key] = logged
    return fixed


def _same_number(a: str, b: str) -> bool:
    try:
        return float(a) == float(b)
    except ValueError:
        return False


def command(search: Search, values: dict[str, str]) -> str:
    board = BOARD_PRESETS[search.board]
    overrides = " ".join(f"{k}={v}" for k, v in values.items())
    elsewhere = ""
    if search.dataset:  # the board on another dataset: its own experiment, named as the searches are
        name = OmegaConf.load(option_file("experiment", board)).experiment_name
        elsewhere = f" dataset={search.dataset} experiment_name={name}-{search.dataset}"
    selection = f"method={search.method} backbone={search.backbone}{elsewhere}"
    return f"fedrun -m +experiment={board} {selection} {overrides}".strip()


def summarise(search: Search, trials: pd.DataFrame) -> dict[str, object]:
    """One row of the searches' table: trials run and failed, the best validation beside its floor, the setting."""
    finished = int((trials["status"] == "FINISHED").sum()) if len(trials) else 0
    failed = int((trials["status"] == "FAILED").sum()) if len(trials) else 0
    row: dict[str, object] = {"method": search.method, "preset": search.preset, "board": search.board,
                              "experiment": search.experiment,
                              "monitor": search.monitor, "trials": finished, "failed": failed,
                              "space": "; ".join(f"{k}: {v}" for k, v in search.space.items()),
                              "defaults": " ".join(f"{k}={v}" for k, v in search.defaults.items())}
    best = best_trial(search, trials)
    if best is None:
        return {**row, "best_valid": math.nan, "valid_floor": math.nan, "best_run": "", "setting": "", "at_edge": "",
                "command": ""}
    values = setting(search, best)
    floor = best.get(f"metric:floor_valid_{search.monitor}", math.nan)
    edges = [k for k, v in values.items() if at_edge(search.space[k], v)]
    return {**row, "best_valid": float(best[f"metric:best_valid_{search.monitor}"]), "valid_floor": float(floor),
            "best_run": str(best["run_id"]), "setting": " ".join(f"{k}={v}" for k, v in values.items()),
            "at_edge": " ".join(edges), "command": command(search, {**fixed_settings(search, best), **values})}


def render(rows: pd.DataFrame) -> str:
    header = ["search", "trials (failed)", "best valid", "valid floor", "best / floor", "best setting",
              "at the edge of its space", "defaults", "space"]
    cells = []
    for row in rows.itertuples():
        ratio = row.best_valid / row.valid_floor if row.valid_floor and not math.isnan(row.best_valid) else math.nan
        cells.append([row.preset.removeprefix("tune/"), f"{row.trials} ({row.failed})", f"{row.best_valid:.4f}",
                      f"{row.valid_floor:.4f}",
                      f"{ratio:.2f}", f"`{row.setting}`" if row.setting else "", str(row.at_edge or ""),
                      f"`{row.defaults}`",
                      row.space.replace("|", "\\|")])
    monitors = ", ".join(sorted(set(rows["monitor"])))
    return (f"Each method's search: finished trials (failed), the best validation {monitors} of a trial (at the "
            "epoch whose model it tests) beside its floor on the same validation part (popularity for ranking, the "
            "user + item bias baseline for rating errors), and that trial's setting. Test metrics played no part.\n\n"
            + markdown(header, [["" if c == "nan" else c for c in r] for r in cells]) + "\n")


def latest_sweep(client, experiment: str) -> tuple[str, str] | None:
    """(experiment id, run id of its latest finished sweep's parent run — a sweep stopped midway is no search's
    record — else of its latest sweep), or None if the store has no sweep of it."""
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return None
    sweeps = "tags.`fedrun.kind` = 'sweep'"
    for where in (f"{sweeps} and attributes.status = 'FINISHED'", sweeps):
        parents = client.search_runs([found.experiment_id], filter_string=where,
                                     order_by=["attributes.start_time DESC"], max_results=1)
        if parents:
            return found.experiment_id, parents[0].info.run_id
    return None


def search_sweeps(client, experiment_id: str, last: str) -> list[str]:
    """The parent runs of one search's sweeps, the first first: ``last`` and the sweeps it resumed (a search that
    spanned sessions, ``fedrun.sim.search``: each resumed sweep's run names the folder it continued)."""
    from fedrun.store.runs import RESUMES

    chain = [last]
    continued = client.get_run(last).data.tags.get(RESUMES)
    while continued:
        quoted = continued.replace("'", "\\'")
        found = client.search_runs([experiment_id], max_results=1, order_by=["attributes.start_time DESC"],
                                   filter_string=f"tags.`fedrun.kind` = 'sweep' and tags.`fedrun.sweep` = '{quoted}'")
        if not found or found[0].info.run_id in chain:
            break
        chain.append(found[0].info.run_id)
        continued = found[0].data.tags.get(RESUMES)
    return chain[::-1]


def resumed_elsewhere(client, first: str) -> bool:
    """Whether a search's first sweep in this store (``search_sweeps``) resumed a sweep the store has no run of: a
    record saved on another machine (``fedrun.sim.search.save_record``), whose trials the committed ledger holds."""
    from fedrun.store.runs import RESUMES

    return bool(client.get_run(first).data.tags.get(RESUMES))


def keep_record(client, last: str, dest: Path) -> str | None:
    """Keep a stopped search resumable from another machine: when its last sweep (parent run ``last``) did not
    finish, save the search's record to ``dest`` (``fedrun.sim.search.save_record``); when it finished, remove a
    record an earlier stop saved there. Returns the line that says what was done, if anything."""
    import shutil

    from fedrun.sim.search import FIELD, save_record, sweep_command
    from fedrun.sim.sweep import OVERRIDES

    run = client.get_run(last)
    if run.info.status == "FINISHED":
        if not dest.exists():
            return None
        shutil.rmtree(dest)
        return f"{dest}: removed (the search finished; its trials are in the ledger)"
    folder = Path(run.data.tags.get("fedrun.sweep", ""))
    if not (folder / OVERRIDES).is_file():
        return f"{dest}: not saved: the stopped sweep's folder {folder} is not on this machine"
    saved = save_record(folder, dest, client)
    command = " ".join(sweep_command(dest))
    return f"{dest}: the stopped search's record, {saved} ended trial(s); resume it on any machine with\n" \
           f"fedrun -m {command} {FIELD}={dest}"


def with_earlier_searches(table: pd.DataFrame, path: Path) -> pd.DataFrame:
    """``table``'s searches, and after them every search ``path`` already lists that ``table`` does not (in their
    order there): summarising some searches again keeps the others' rows, so one search run again does not need
    every other search's store."""
    if not path.exists():
        return table
    earlier = pd.read_csv(path)
    text = earlier.select_dtypes(include=["object", "str"]).columns
    earlier[text] = earlier[text].fillna("")  # a search with no best trial wrote empty cells
    kept = earlier[~earlier["experiment"].isin(set(table["experiment"]))]
    order = {name: i for i, name in enumerate(earlier["experiment"])}
    merged = pd.concat([kept, table], ignore_index=True)
    rank = merged["experiment"].map(lambda name: order.get(name, len(order)))
    return merged.iloc[rank.argsort(kind="stable")].reset_index(drop=True)


def main(argv: list[str] | None = None) -> int:
    from fedrun.app.report import collect
    from fedrun.store.runs import default_uri, open_client

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("presets", nargs="+", help="search presets: tune/<method>")
    parser.add_argument("--uri", default=None, help="tracking URI (default: $MLFLOW_TRACKING_URI or outputs/mlflow.db)")
    parser.add_argument("--out", type=Path, default=Path("docs/leaderboard/tuned"))
    parser.add_argument("--dataset", default=None, help="the searches on this dataset instead of the board's")
    args = parser.parse_args(argv)
    try:
        searches = [read_search(preset, args.dataset) for preset in args.presets]
    except ConfigError as err:
        parser.error(str(err))
    client = open_client(args.uri or default_uri())
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for search in searches:
        path = args.out / f"{search.experiment}-trials.csv"
        sweep = latest_sweep(client, search.experiment)
        if sweep is None:  # not in this store: the search an earlier session committed
            trials = ledger.read(path)
        else:
            chain = search_sweeps(client, *sweep)
            trials = pd.concat([collect(client, sweep[0], parent=p) for p in chain], ignore_index=True)
            if resumed_elsewhere(client, chain[0]) and path.exists():  # its first trials: the committed ledger
                trials = ledger.merge(ledger.read(path), trials)
            ledger.write(trials, path)
            said = keep_record(client, sweep[1], args.out / "sweeps" / search.experiment)
            if said:
                print(said)
        rows.append(summarise(search, trials))
    table = with_earlier_searches(pd.DataFrame(rows), args.out / "searches.csv")
    table.to_csv(args.out / "searches.csv", index=False)
    text = render(table)
    (args.out / "searches.md").write_text(text)
    print(text)
    for row in table.itertuples():
        if row.command:
            print(row.command)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
